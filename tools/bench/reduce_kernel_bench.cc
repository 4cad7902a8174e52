// reduce_kernel_bench: throughput of the host reduction kernels, per instruction-set build,
// type, op and size. Prints one tab-separated line per measurement:
//   isa  type  op  bytes  GB/s
// where bytes is the size of each of the three buffers (a, b, dst) and GB/s counts all three
// (two reads and one write per element). Each figure is the best of --reps timed repetitions,
// each repetition running the kernel enough times to last --ms milliseconds.
//
//   reduce_kernel_bench [--sizes 32768,67108864] [--isa portable,avx2,avx512,default]
//                       [--reps 3] [--ms 20]
//                       [--offset 0] [--types float32,...] [--ops sum,...]
// Buffers start on a 4 KiB boundary plus --offset bytes (e.g. 16 for malloc-like alignment).
//
// Uses only reduceKernel/reduceKernelIsa/kernelIsaSupported, so the same source builds against
// older versions of the kernels (for before/after comparisons).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reduce/reduce.h"

namespace {

struct TypeInfo {
  chorusDataType_t type;
  const char* name;
  size_t size;
};
constexpr TypeInfo kTypes[] = {
    {chorusInt8, "int8", 1},         {chorusUint8, "uint8", 1},     {chorusInt32, "int32", 4},
    {chorusUint32, "uint32", 4},     {chorusInt64, "int64", 8},     {chorusUint64, "uint64", 8},
    {chorusFloat16, "float16", 2},   {chorusFloat32, "float32", 4}, {chorusFloat64, "float64", 8},
    {chorusBfloat16, "bfloat16", 2},
};
struct OpInfo {
  chorusRedOp_t op;
  const char* name;
  int divisor;
};
constexpr OpInfo kOps[] = {{chorusSum, "sum", 0},
                           {chorusProd, "prod", 0},
                           {chorusMax, "max", 0},
                           {chorusMin, "min", 0},
                           {chorusAvg, "avg", 3}};
// "default" is reduceKernel itself: the build the library picks for each type and op.
const char* kIsaNames[] = {"portable", "avx2", "avx512", "default"};

std::vector<std::string> splitList(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += *p;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Inputs that keep every type finite and away from special cases (small positive values), so
// float timings are not those of subnormal or NaN handling.
// `bytes` bytes at a 4 KiB boundary plus `offset`.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset)
      : bytes_(bytes),
        base_(static_cast<unsigned char*>(
            std::aligned_alloc(4096, (bytes + offset + 4095) & ~size_t{4095}))),
        data_(base_ + offset) {}
  ~Buffer() { std::free(base_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  unsigned char* data() { return data_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  unsigned char* base_;
  unsigned char* data_;
};

void fill(const TypeInfo& t, Buffer& buf, unsigned seed) {
  const size_t n = buf.size() / t.size;
  for (size_t i = 0; i < n; ++i) {
    const unsigned v = 1 + (i * 7 + seed) % 3;
    unsigned char* p = buf.data() + i * t.size;
    switch (t.type) {
      case chorusFloat16: {
        const uint16_t h = static_cast<uint16_t>(0x3c00 + (v << 6));  // 1.0 .. 1.19
        std::memcpy(p, &h, 2);
        break;
      }
      case chorusBfloat16: {
        const uint16_t h = static_cast<uint16_t>(0x3f80 + v);  // ~1.0
        std::memcpy(p, &h, 2);
        break;
      }
      case chorusFloat32: {
        const float f = 1.0f + static_cast<float>(v) / 64;
        std::memcpy(p, &f, 4);
        break;
      }
      case chorusFloat64: {
        const double d = 1.0 + static_cast<double>(v) / 64;
        std::memcpy(p, &d, 8);
        break;
      }
      default:
        std::memset(p, 0, t.size);
        p[0] = static_cast<unsigned char>(v);
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {32 * 1024, 64 * 1024 * 1024};
  std::vector<std::string> isas = {"portable", "avx2", "avx512", "default"};
  int reps = 3;
  double ms = 20;
  size_t offset = 0;
  std::vector<std::string> types, ops;  // empty: all
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "reduce_kernel_bench: %s needs a value\n", arg.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (arg == "--sizes") {
      sizes.clear();
      for (const std::string& s : splitList(v))
        sizes.push_back(std::strtoull(s.c_str(), nullptr, 0));
    } else if (arg == "--isa") {
      isas = splitList(v);
    } else if (arg == "--reps") {
      reps = std::max(1, std::atoi(v));
    } else if (arg == "--offset") {
      offset = std::strtoull(v, nullptr, 0);
    } else if (arg == "--types") {
      types = splitList(v);
    } else if (arg == "--ops") {
      ops = splitList(v);
    } else if (arg == "--ms") {
      ms = std::max(1.0, std::atof(v));
    } else {
      std::fprintf(stderr,
                   "usage: reduce_kernel_bench [--sizes B,B] [--isa portable,avx2,avx512] "
                   "[--reps N] [--ms T] [--offset B] [--types T,T] [--ops O,O]\n");
      return 2;
    }
  }
  using Clock = std::chrono::steady_clock;
  auto chosen = [](const std::vector<std::string>& list, const char* name) {
    return list.empty() || std::find(list.begin(), list.end(), name) != list.end();
  };
  std::printf("isa\ttype\top\tbytes\tGB/s\t(offset %zu)\n", offset);
  for (size_t bytes : sizes) {
    Buffer a(bytes, offset), b(bytes, offset), d(bytes, offset);
    for (const TypeInfo& t : kTypes) {
      if (!chosen(types, t.name)) continue;
      fill(t, a, 1);
      fill(t, b, 2);
      const size_t count = bytes / t.size;
      for (const OpInfo& o : kOps) {
        if (!chosen(ops, o.name)) continue;
        for (int isaIdx = 0; isaIdx < 4; ++isaIdx) {
          if (std::find(isas.begin(), isas.end(), kIsaNames[isaIdx]) == isas.end()) continue;
          const bool library = isaIdx == 3;
          const auto isa = static_cast<chorus::KernelIsa>(library ? 0 : isaIdx);
          if (!chorus::kernelIsaSupported(isa)) continue;
          auto run = [&] {
            if (library) {
              chorus::reduceKernel(t.type, o.op, count, a.data(), b.data(), d.data(), nullptr,
                                   o.divisor);
            } else {
              chorus::reduceKernelIsa(isa, t.type, o.op, count, a.data(), b.data(), d.data(),
                                      nullptr, o.divisor);
            }
          };
          run();  // warm-up (page faults, cache)
          // Iterations per repetition, from one timed call.
          const auto t0 = Clock::now();
          run();
          const double once = std::chrono::duration<double>(Clock::now() - t0).count();
          const long iters = std::max(1L, static_cast<long>(ms / 1e3 / std::max(once, 1e-9)));
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            const auto s = Clock::now();
            for (long k = 0; k < iters; ++k) run();
            best = std::min(best, std::chrono::duration<double>(Clock::now() - s).count() / iters);
          }
          std::printf("%s\t%s\t%s\t%zu\t%.2f\n", kIsaNames[isaIdx], t.name, o.name, bytes,
                      3.0 * static_cast<double>(bytes) / best / 1e9);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
