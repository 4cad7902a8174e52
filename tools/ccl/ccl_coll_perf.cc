// ccl_coll_perf: oneCCL's allreduce, allgather, reduce_scatter or broadcast (float32, sum) on
// host buffers, measured the way tools/mpi/mpi_coll_perf.c and Chorus's *_perf measure theirs
// and printed in the same nccl-tests table, so that the comparison scripts read all of them
// with one parser.
//
// -C / --coll allreduce (default) | allgather | reducescatter | broadcast; -r / --root (0).
// Sizes as nccl-tests: the size column is the larger of the send and receive buffers (AllGather:
// all n blocks; ReduceScatter: the n-block input), the count column the elements per rank
// (AllGather, ReduceScatter) or of the buffer. busbw = algbw * 2(n-1)/n (AllReduce), (n-1)/n
// (AllGather, ReduceScatter), 1 (Broadcast).
//
// Per size, out of place then in place: fill the input, poison the output, `-w` warm-up calls,
// a barrier, then wall clock (steady_clock) around `-n` calls (each waited for) divided by `-n`,
// averaged across ranks. Then `-c` checked calls with fresh inputs: small integers whose sums
// are exact in float32, compared bit for bit with the result every rank computes on its own;
// out of place, 64 bytes past the receive buffer must stay untouched. In place follows NCCL:
// AllGather's own block sits at rank * count of the receive buffer, ReduceScatter's input is
// the receive buffer's n blocks and the result lands at rank * count. Broadcast has one buffer.
//
// Launch: one process per rank under a PMI launcher (Intel MPI's mpiexec from the impi-rt
// wheel), which sets PMI_RANK and PMI_SIZE. Rank 0 creates oneCCL's main key-value store and
// writes its address to a file that the other ranks poll (bounded: 60 s): --kvs FILE, default
// /tmp/ccl_coll_perf.<launcher's pid>.kvs (every rank of one node shares the parent proxy).
//
// Flags as nccl-tests (same defaults): -b -e -i -f -n -w -c -r (long forms too), -h.
// Build (scripts/compare_common.sh, build_ccl_perf): g++ -O2 -std=c++17 -I$V/include
//   ccl_coll_perf.cc -L$V/lib -Wl,--disable-new-dtags,-rpath,$V/lib -lccl, V a virtualenv with
//   oneccl-cpu, oneccl-cpu-devel and impi-rt.
#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <oneapi/ccl.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr unsigned char kPoison = 0xA5;
constexpr size_t kGuardBytes = 64;

struct Options {
  size_t minBytes = 32u << 20, maxBytes = 32u << 20, stepBytes = 1u << 20, stepFactor = 1;
  int iters = 20, warmup = 1, check = 1;
  int smallIters = 0;  // --small_iters: timed calls at sizes up to kSmallItersBytes (0: -n)
  std::string kvsFile;
};
// As the Chorus tools (tools/bench/common/args.h): the same calls at the same sizes.
constexpr size_t kSmallItersBytes = size_t(64) << 10;

enum Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast };
const char* const kCollNames[] = {"allreduce", "allgather", "reducescatter", "broadcast"};
const char* const kProgNames[] = {"ccl_allreduce_perf", "ccl_allgather_perf",
                                  "ccl_reducescatter_perf", "ccl_broadcast_perf"};
Coll coll = kAllReduce;
int root = 0, rank = 0, nranks = 1;
std::string kvsFileWritten;  // rank 0's address file until every rank has joined

double wallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "8", "64K", "32M", "1G" (binary multiples).
bool parseSize(const char* s, size_t* out) {
  if (s == nullptr || *s == '\0' || *s == '-') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10, ++end;
      break;
    case 'm':
    case 'M':
      shift = 20, ++end;
      break;
    case 'g':
    case 'G':
      shift = 30, ++end;
      break;
    default:
      return false;
  }
  if (*end != '\0' || (shift != 0 && v > (static_cast<unsigned long long>(LLONG_MAX) >> shift)))
    return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

bool parseInt(const char* s, long lo, long hi, long* out) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

void usage(FILE* f, const char* prog) {
  std::fprintf(f,
               "USAGE: %s\n"
               "\t[-b,--minbytes <min size in bytes>] (K, M, G suffixes are binary; default 32M)\n"
               "\t[-e,--maxbytes <max size in bytes>] (default 32M)\n"
               "\t[-i,--stepbytes <increment size>] (default 1M)\n"
               "\t[-f,--stepfactor <increment factor>] (default off)\n"
               "\t[-n,--iters <iteration count>] (default 20)\n"
               "\t[--small_iters <iteration count>] timed calls at sizes up to 64 KiB (default: "
               "-n)\n"
               "\t[-w,--warmup_iters <warmup iteration count>] (default 1)\n"
               "\t[-c,--check <check iteration count>] (default 1; 0: no check)\n"
               "\t[-C,--coll allreduce|allgather|reducescatter|broadcast] (default allreduce)\n"
               "\t[-r,--root <root>] (broadcast; default 0)\n"
               "\t[-k,--kvs <file>] (rank 0 writes the key-value store's address there)\n"
               "\t[-h,--help]\n",
               prog);
}

// 0: ok, 1: help, -1: error (message printed).
int parseArgs(int argc, char** argv, Options* o) {
  static const option longopts[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"help", no_argument, nullptr, 'h'},
      {"coll", required_argument, nullptr, 'C'},
      {"root", required_argument, nullptr, 'r'},
      {"kvs", required_argument, nullptr, 'k'},
      {"small_iters", required_argument, nullptr, 'S'},
      {nullptr, 0, nullptr, 0},
  };
  opterr = rank == 0;
  int c;
  while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:C:r:k:h", longopts, nullptr)) != -1) {
    long v = 0;
    bool ok = true;
    switch (c) {
      case 'b':
        ok = parseSize(optarg, &o->minBytes);
        break;
      case 'e':
        ok = parseSize(optarg, &o->maxBytes);
        break;
      case 'i':
        ok = parseSize(optarg, &o->stepBytes);
        break;
      case 'f':
        ok = parseInt(optarg, 1, 1L << 30, &v);
        o->stepFactor = static_cast<size_t>(v);
        break;
      case 'n':
        ok = parseInt(optarg, 1, INT_MAX, &v);
        o->iters = static_cast<int>(v);
        break;
      case 'w':
        ok = parseInt(optarg, 0, INT_MAX, &v);
        o->warmup = static_cast<int>(v);
        break;
      case 'S':
        ok = parseInt(optarg, 1, INT_MAX, &v);
        o->smallIters = static_cast<int>(v);
        break;
      case 'c':
        ok = parseInt(optarg, 0, INT_MAX, &v);
        o->check = static_cast<int>(v);
        break;
      case 'r':
        ok = parseInt(optarg, 0, nranks - 1, &v);
        root = static_cast<int>(v);
        break;
      case 'k':
        o->kvsFile = optarg;
        break;
      case 'C':
        ok = false;
        for (int k = 0; k < 4; ++k)
          if (std::strcmp(optarg, kCollNames[k]) == 0) coll = static_cast<Coll>(k), ok = true;
        break;
      case 'h':
        return 1;
      default:
        return -1;
    }
    if (!ok) {
      if (rank == 0) std::fprintf(stderr, "%s: invalid value '%s' for -%c\n", argv[0], optarg, c);
      return -1;
    }
  }
  const char* err = nullptr;
  if (optind < argc)
    err = "unexpected argument";
  else if (o->maxBytes < o->minBytes)
    err = "invalid option: maxbytes < minbytes";
  else if (o->stepFactor <= 1 && o->stepBytes == 0 && o->maxBytes > o->minBytes)
    err = "invalid option: stepbytes 0 with no step factor never reaches maxbytes";
  if (err != nullptr) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", argv[0], err);
    return -1;
  }
  return 0;
}

// The sizes of the sweep, as nccl-tests' -b/-e/-i/-f loop: element counts, a count repeated by
// rounding kept once.
std::vector<size_t> sweepCounts(const Options& o) {
  std::vector<size_t> counts;
  size_t size = o.minBytes;
  const size_t per = coll == kAllGather || coll == kReduceScatter ? static_cast<size_t>(nranks) : 1;
  while (size <= o.maxBytes) {
    const size_t count = size / sizeof(float) / per;
    if (counts.empty() || counts.back() != count) counts.push_back(count);
    if (o.stepFactor > 1) {
      if (size == 0)
        size = 1;
      else if (size > o.maxBytes / o.stepFactor)
        break;
      else
        size *= o.stepFactor;
    } else {
      if (o.stepBytes == 0 || size > o.maxBytes - o.stepBytes) break;
      size += o.stepBytes;
    }
  }
  return counts;
}

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Input of rank r at index i: an integer in [-bound, bound], so every partial sum of nranks
// values is an integer below 2^24 and exact in float32 whatever the reduction order.
float inputValue(uint64_t seed, int r, size_t i, int64_t bound) {
  const uint64_t h = mix64(seed ^ mix64((static_cast<uint64_t>(r) << 40) ^ i));
  return static_cast<float>(static_cast<int64_t>(h % static_cast<uint64_t>(2 * bound + 1)) - bound);
}

int64_t valueBound() {
  const int64_t b = (int64_t{1} << 24) / nranks;
  return std::clamp<int64_t>(b, 1, 1000);
}

void fillInput(float* buf, size_t count, uint64_t seed, size_t offset = 0) {
  const int64_t bound = valueBound();
  for (size_t i = 0; i < count; ++i) buf[i] = inputValue(seed, rank, offset + i, bound);
}

// Elements of the receive buffer (out of place) and of the input, per collective.
size_t recvElems(size_t count) {
  return coll == kAllGather ? count * nranks : count;
}
size_t sendElems(size_t count) {
  return coll == kReduceScatter ? count * nranks : count;
}

// Element i of what this rank must hold after the call (ReduceScatter: of its block).
float expected(uint64_t seed, size_t i, size_t count, int64_t bound) {
  switch (coll) {
    case kAllGather:
      return inputValue(seed, static_cast<int>(i / count), i % count, bound);
    case kBroadcast:
      return inputValue(seed, root, i, bound);
    case kReduceScatter: {
      double sum = 0.0;
      for (int r = 0; r < nranks; ++r) sum += inputValue(seed, r, rank * count + i, bound);
      return static_cast<float>(sum);
    }
    default: {
      double sum = 0.0;
      for (int r = 0; r < nranks; ++r) sum += inputValue(seed, r, i, bound);
      return static_cast<float>(sum);
    }
  }
}

// The result's place: the receive buffer, or (in-place ReduceScatter) this rank's block of it.
const float* resultOf(const float* recvbuf, size_t count, bool inPlace) {
  return coll == kReduceScatter && inPlace ? recvbuf + rank * count : recvbuf;
}

int64_t countWrong(const float* recvbuf, size_t count, uint64_t seed, bool inPlace) {
  const int64_t bound = valueBound();
  const float* out = resultOf(recvbuf, count, inPlace);
  int64_t wrong = 0;
  for (size_t i = 0; i < recvElems(count); ++i) {
    const float want = expected(seed, i, count, bound);
    if (std::memcmp(&out[i], &want, sizeof want) != 0) ++wrong;
  }
  if (!inPlace) {  // nothing may be written past the receive buffer
    const auto* guard = reinterpret_cast<const unsigned char*>(recvbuf + recvElems(count));
    for (size_t j = 0; j < kGuardBytes; j += sizeof(float))
      for (size_t k = j; k < j + sizeof(float); ++k)
        if (guard[k] != kPoison) {
          ++wrong;
          break;
        }
  }
  return wrong;
}

struct Freer {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], Freer>;

Buffer allocate(size_t bytes) {
  constexpr size_t kAlign = 4096;
  const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) {
    std::fprintf(stderr, "ccl_coll_perf: rank %d: cannot allocate %zu bytes\n", rank, rounded);
    std::exit(1);
  }
  std::memset(p, kPoison, rounded);
  return Buffer(static_cast<float*>(p));
}

struct Placement {
  double timeUs = 0, algbw = 0, busbw = 0;
  int64_t wrong = -1;  // -1: not checked
};

// Out of place: sendbuf -> recvbuf. In place: the input is written into recvbuf (AllGather: at
// this rank's block) and the call reads it there.
void prepare(float* sendbuf, float* recvbuf, size_t count, bool inPlace, uint64_t seed) {
  const size_t total = coll == kReduceScatter ? sendElems(count) : recvElems(count);
  std::memset(recvbuf, kPoison, total * sizeof(float) + (inPlace ? 0 : kGuardBytes));
  if (coll == kBroadcast) {  // one buffer: the root's holds the input
    if (rank == root) fillInput(recvbuf, count, seed);
  } else if (!inPlace) {
    fillInput(sendbuf, sendElems(count), seed);
  } else if (coll == kAllGather) {
    fillInput(recvbuf + rank * count, count, seed);
  } else {
    fillInput(recvbuf, sendElems(count), seed);
  }
}

void call(const ccl::communicator& comm, float* sendbuf, float* recvbuf, size_t count,
          bool inPlace) {
  switch (coll) {
    case kAllGather: {
      const float* src = inPlace ? recvbuf + rank * count : sendbuf;
      ccl::allgather(src, recvbuf, count, ccl::datatype::float32, comm).wait();
      break;
    }
    case kReduceScatter: {
      const float* src = inPlace ? recvbuf : sendbuf;
      float* dst = inPlace ? recvbuf + rank * count : recvbuf;
      ccl::reduce_scatter(src, dst, count, ccl::datatype::float32, ccl::reduction::sum, comm)
          .wait();
      break;
    }
    case kBroadcast:
      ccl::broadcast(recvbuf, count, ccl::datatype::float32, root, comm).wait();
      break;
    default:
      ccl::allreduce(inPlace ? recvbuf : sendbuf, recvbuf, count, ccl::datatype::float32,
                     ccl::reduction::sum, comm)
          .wait();
  }
}

Placement runPlacement(const Options& o, const ccl::communicator& comm, float* sendbuf,
                       float* recvbuf, size_t count, bool inPlace, uint64_t seed) {
  Placement res;
  prepare(sendbuf, recvbuf, count, inPlace, seed);
  for (int i = 0; i < o.warmup; ++i) call(comm, sendbuf, recvbuf, count, inPlace);
  const size_t bytes =
      (coll == kReduceScatter ? sendElems(count) : recvElems(count)) * sizeof(float);
  const int iters = o.smallIters > 0 && bytes <= kSmallItersBytes ? o.smallIters : o.iters;
  ccl::barrier(comm);
  const double t0 = wallSeconds();
  for (int i = 0; i < iters; ++i) call(comm, sendbuf, recvbuf, count, inPlace);
  double seconds = (wallSeconds() - t0) / iters, total = 0.0;
  ccl::allreduce(&seconds, &total, 1, ccl::datatype::float64, ccl::reduction::sum, comm).wait();
  seconds = total / nranks;

  res.timeUs = seconds * 1e6;
  res.algbw = seconds > 0.0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
  res.busbw = res.algbw * (coll == kAllReduce   ? 2.0 * (nranks - 1) / nranks
                           : coll == kBroadcast ? 1.0
                                                : static_cast<double>(nranks - 1) / nranks);
  if (o.check > 0) {
    int64_t wrong = 0, sum = 0;
    for (int c = 0; c < o.check; ++c) {
      const uint64_t s = mix64(seed ^ static_cast<uint64_t>(c + 1));
      prepare(sendbuf, recvbuf, count, inPlace, s);
      call(comm, sendbuf, recvbuf, count, inPlace);
      wrong = std::max(wrong, countWrong(recvbuf, count, s, inPlace));
    }
    ccl::allreduce(&wrong, &sum, 1, ccl::datatype::int64, ccl::reduction::sum, comm).wait();
    res.wrong = sum;
  }
  return res;
}

// nccl-tests number format: `decimals` (2 in nccl-tests), fewer when the number would not fit
// the width. The time gets 3 below 10 us, so that 2 decimals do not round a short call by up to
// 10% (Chorus's own figures come from its -J document).
std::string fmtNum(double v, int width, int decimals = 2) {
  char buf[64];
  for (int d = decimals; d >= 0; --d) {
    std::snprintf(buf, sizeof buf, "%.*f", d, v);
    if (static_cast<int>(std::strlen(buf)) <= width) break;
  }
  return buf;
}

void printPlacement(const Placement& p) {
  const std::string t = fmtNum(p.timeUs, 7, p.timeUs < 10 ? 3 : 2), a = fmtNum(p.algbw, 6),
                    b = fmtNum(p.busbw, 6);
  if (p.wrong < 0)
    std::printf("  %7s  %6s  %6s  %6s", t.c_str(), a.c_str(), b.c_str(), "N/A");
  else
    std::printf("  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(),
                static_cast<double>(p.wrong));
}

void printPreamble(const Options& o) {
  const ccl::library_version v = ccl::get_library_version();
  const bool factor = o.stepFactor > 1;
  std::printf("# %s: oneCCL %u.%u.%u (%s)\n", kProgNames[coll], v.major, v.minor, v.update, v.full);
  std::printf("# Collective test starting: %s\n", kProgNames[coll]);
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0\n",
      o.minBytes, o.maxBytes, factor ? o.stepFactor : o.stepBytes, factor ? "factor" : "bytes",
      o.warmup, o.iters, o.check);
  std::printf("#\n# Using devices\n");
}

void printHeader() {
  std::printf(
      "#                                                              out-of-place"
      "                       in-place\n");
  std::printf(
      "#       size         count      type   redop    root     time   algbw   busbw #wrong"
      "     time   algbw   busbw #wrong\n");
  std::printf(
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
      "            (us)  (GB/s)  (GB/s)\n");
}

// The "#  Rank ..." lines: pid and host of every rank, printed by rank 0.
void printDevices(const ccl::communicator& comm) {
  struct Who {
    int32_t pid;
    char host[60];
  } mine{};
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof mine.host - 1);
  std::vector<Who> all(nranks);
  ccl::allgather(&mine, all.data(), sizeof mine, ccl::datatype::uint8, comm).wait();
  if (rank != 0) return;
  for (int r = 0; r < nranks; ++r)
    std::printf("#  Rank %2d Group  0 Pid %6d on %10s device  0 [cpu]\n", r,
                static_cast<int>(all[r].pid), all[r].host);
  std::printf("#\n");
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  long x = 0;
  return v != nullptr && parseInt(v, 0, INT_MAX, &x) ? static_cast<int>(x) : fallback;
}

// Rank 0 creates the main store and publishes its address (written to FILE.tmp, renamed, so a
// reader never sees half of it); the others read it, 60 s at most.
std::shared_ptr<ccl::kvs> connectKvs(const std::string& file) {
  ccl::kvs::address_type addr{};
  if (rank == 0) {
    auto kvs = ccl::create_main_kvs();
    addr = kvs->get_address();
    const std::string tmp = file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(addr.data(), addr.size());
    if (std::rename(tmp.c_str(), file.c_str()) != 0) {
      std::fprintf(stderr, "ccl_coll_perf: cannot write %s\n", file.c_str());
      std::exit(1);
    }
    kvsFileWritten = file;
    return kvs;
  }
  const double deadline = wallSeconds() + 60.0;
  for (;;) {
    std::ifstream in(file, std::ios::binary);
    if (in && in.read(addr.data(), addr.size())) break;
    if (wallSeconds() > deadline) {
      std::fprintf(stderr, "ccl_coll_perf: rank %d: no key-value store address in %s after 60 s\n",
                   rank, file.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ccl::create_kvs(addr);
}

int run(int argc, char** argv) {
  rank = envInt("PMI_RANK", 0);
  nranks = envInt("PMI_SIZE", 1);
  Options o;
  const int parsed = parseArgs(argc, argv, &o);
  if (parsed != 0) {
    if (rank == 0) usage(parsed > 0 ? stdout : stderr, argv[0]);
    return parsed > 0 ? 0 : 1;
  }
  if (o.kvsFile.empty()) o.kvsFile = "/tmp/ccl_coll_perf." + std::to_string(getppid()) + ".kvs";

  ccl::init();
  auto kvs = connectKvs(o.kvsFile);
  auto comm = ccl::create_communicator(nranks, rank, kvs);
  if (rank == 0) {  // every rank has read it: the store is joined
    std::remove(o.kvsFile.c_str());
    kvsFileWritten.clear();
  }

  const std::vector<size_t> counts = sweepCounts(o);
  Buffer sendbuf = allocate(o.maxBytes), recvbuf = allocate(o.maxBytes + kGuardBytes);
  if (rank == 0) printPreamble(o);
  printDevices(comm);
  if (rank == 0) printHeader();
  std::fflush(stdout);

  // As nccl-tests (and Chorus's tools): -w calls at the largest and then the smallest size before
  // the sweep, so that its first size does not pay the launch's first calls.
  for (const size_t count : {counts.empty() ? 0 : counts.back(), counts.empty() ? 0 : counts[0]}) {
    if (count == 0) continue;
    prepare(sendbuf.get(), recvbuf.get(), count, false, mix64(count));
    for (int i = 0; i < o.warmup; ++i) call(comm, sendbuf.get(), recvbuf.get(), count, false);
    ccl::barrier(comm);
  }

  int64_t wrongTotal = 0;
  double busbwSum = 0.0;
  int entries = 0;
  for (const size_t count : counts) {
    if (count == 0) continue;  // oneCCL's calls want at least one element
    const uint64_t seed = mix64(0xc0705u ^ mix64(count));
    const Placement oop =
        runPlacement(o, comm, sendbuf.get(), recvbuf.get(), count, false, mix64(seed ^ 1));
    const Placement ip =
        runPlacement(o, comm, sendbuf.get(), recvbuf.get(), count, true, mix64(seed ^ 2));
    for (const Placement* p : {&oop, &ip}) {
      if (p->wrong > 0) wrongTotal += p->wrong;
      busbwSum += p->busbw;
      ++entries;
    }
    if (rank == 0) {
      const size_t bytes =
          (coll == kReduceScatter ? sendElems(count) : recvElems(count)) * sizeof(float);
      std::printf("%12li  %12li  %8s  %6s  %6i", static_cast<long>(bytes), static_cast<long>(count),
                  "float", coll == kAllGather || coll == kBroadcast ? "none" : "sum",
                  coll == kBroadcast ? root : -1);
      printPlacement(oop);
      printPlacement(ip);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %ld %s\n", static_cast<long>(wrongTotal),
                wrongTotal == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n", entries > 0 ? busbwSum / entries : 0.0);
    std::printf("#\n# Collective test concluded: %s\n", kProgNames[coll]);
    std::fflush(stdout);
  }
  return wrongTotal == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ccl_coll_perf: rank %d: %s\n", rank, e.what());
    // A failed start must not leave an address behind for a later run with the same parent pid.
    if (!kvsFileWritten.empty()) std::remove(kvsFileWritten.c_str());
    return 1;
  }
}
