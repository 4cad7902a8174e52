// The CUDA backend's host-side logic, run in CI without a GPU: the element functors the kernels
// use (src/cuda/functors.h) against an independent reference and against the host engine, the
// staging plan of device communicators, and the error paths when no GPU (or no CUDA) is there.
#include <chorus/chorus.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "cuda/backend.h"
#include "cuda/functors.h"
#ifdef CHORUS_HAVE_CUDA_IPC
#include "cuda/ipc.h"
#include "cuda/ipc_direct.h"
#endif
#include "cuda/staging.h"
#include "reduce/reduce.h"
#include "run_command.h"

namespace {

constexpr chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,  chorusInt32,   chorusUint32,
                                       chorusInt64,   chorusUint64, chorusFloat16, chorusBfloat16,
                                       chorusFloat32, chorusFloat64};
constexpr chorusRedOp_t kOps[] = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};

// ---- An independent reference: wide integers, float16 from its definition (ldexp) with
// nearest-candidate rounding (_Float16 is not available in clang 14 on x86), nearest-candidate
// bfloat16. ----

float f16ToF(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0x1f)
    v = m == 0 ? HUGE_VAL : std::nan("");
  else if (e == 0)
    v = std::ldexp(double(m), -24);
  else
    v = std::ldexp(double(m + 1024), e - 25);
  return float((h & 0x8000u) ? -v : v);
}
// Round to nearest float16, ties to even: the largest pattern not above |f| (by binary search
// over the ordered positive patterns) against the next one.
uint16_t fToF16(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xfe00 : 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  uint32_t lo = 0, hi = 0x7c00;  // value(lo) <= a < value(hi), value(0x7c00) standing for 2^16
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (double(f16ToF(uint16_t(mid))) <= a)
      lo = mid;
    else
      hi = mid;
  }
  if (a >= 65536.0) return sign | 0x7c00;
  const double vlo = double(f16ToF(uint16_t(lo)));
  const double vhi = hi == 0x7c00 ? 65536.0 : double(f16ToF(uint16_t(hi)));
  const double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi) return uint16_t(sign | lo);
  if (dhi < dlo) return uint16_t(sign | hi);
  return uint16_t(sign | ((lo & 1u) ? hi : lo));
}
float bf16ToF(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}
// Round to nearest bfloat16, ties to even, by comparing the two neighbours in double.
uint16_t fToBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t lo = uint16_t(x >> 16);
  if ((x & 0xffffu) == 0) return lo;
  const uint16_t hi = uint16_t(lo + 1);  // away from zero (same sign)
  const double vlo = double(bf16ToF(lo));
  // One step past the largest finite bfloat16 is Inf; as a value it stands for 2^128.
  const double vhi = (hi & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), double(f))
                                               : double(bf16ToF(hi));
  const double dlo = std::fabs(double(f) - vlo), dhi = std::fabs(double(f) - vhi);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

template <class T>
T fromBits(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reference for integers: arithmetic in 128 bits, then the low bits (two's complement).
template <class T>
T intRef(chorusRedOp_t op, T a, T b, int divisor) {
  using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
  auto low = [](W v) { return static_cast<T>(static_cast<uint64_t>(v)); };
  switch (op) {
    case chorusSum:
      return low(W(a) + W(b));
    case chorusProd:
      return low(W(a) * W(b));
    case chorusMax:
      return a < b ? b : a;
    case chorusMin:
      return b < a ? b : a;
    case chorusAvg: {
      const T s = low(W(a) + W(b));
      return divisor > 0 ? static_cast<T>(W(s) / W(divisor)) : s;
    }
    default:
      return 0;
  }
}

template <class F>
F floatOp(chorusRedOp_t op, F a, F b, int divisor) {
  switch (op) {
    case chorusSum:
      return a + b;
    case chorusProd:
      return a * b;
    case chorusMax:
      return a < b ? b : a;
    case chorusMin:
      return b < a ? b : a;
    case chorusAvg:
      return divisor > 0 ? (a + b) / F(divisor) : a + b;
    default:
      return 0;
  }
}

// Writes the reference of a OP b to out (element bytes); returns false when the result is NaN
// (unspecified payload: only NaN-ness is compared).
bool reference(chorusDataType_t t, chorusRedOp_t op, int div, const void* a, const void* b,
               void* out) {
  auto put = [&](auto v) { std::memcpy(out, &v, sizeof v); };
  switch (t) {
    case chorusInt8:
      put(intRef<int8_t>(op, fromBits<int8_t>(a), fromBits<int8_t>(b), div));
      return true;
    case chorusUint8:
      put(intRef<uint8_t>(op, fromBits<uint8_t>(a), fromBits<uint8_t>(b), div));
      return true;
    case chorusInt32:
      put(intRef<int32_t>(op, fromBits<int32_t>(a), fromBits<int32_t>(b), div));
      return true;
    case chorusUint32:
      put(intRef<uint32_t>(op, fromBits<uint32_t>(a), fromBits<uint32_t>(b), div));
      return true;
    case chorusInt64:
      put(intRef<int64_t>(op, fromBits<int64_t>(a), fromBits<int64_t>(b), div));
      return true;
    case chorusUint64:
      put(intRef<uint64_t>(op, fromBits<uint64_t>(a), fromBits<uint64_t>(b), div));
      return true;
    case chorusFloat16: {
      const float r =
          floatOp(op, f16ToF(fromBits<uint16_t>(a)), f16ToF(fromBits<uint16_t>(b)), div);
      put(fToF16(r));
      return !std::isnan(r);
    }
    case chorusBfloat16: {
      const float r =
          floatOp(op, bf16ToF(fromBits<uint16_t>(a)), bf16ToF(fromBits<uint16_t>(b)), div);
      put(fToBf16(r));
      return !std::isnan(r);
    }
    case chorusFloat32: {
      const float r = floatOp(op, fromBits<float>(a), fromBits<float>(b), div);
      put(r);
      return !std::isnan(r);
    }
    case chorusFloat64: {
      const double r = floatOp(op, fromBits<double>(a), fromBits<double>(b), div);
      put(r);
      return !std::isnan(r);
    }
    default:
      return false;
  }
}

bool isNanBits(chorusDataType_t t, const void* p) {
  switch (t) {
    case chorusFloat16:
      return (fromBits<uint16_t>(p) & 0x7fffu) > 0x7c00u;
    case chorusBfloat16:
      return (fromBits<uint16_t>(p) & 0x7fffu) > 0x7f80u;
    case chorusFloat32:
      return std::isnan(fromBits<float>(p));
    case chorusFloat64:
      return std::isnan(fromBits<double>(p));
    default:
      return false;
  }
}

std::string hex(const void* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = n; i-- > 0;) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<const unsigned char*>(p)[i]);
    s += buf;
  }
  return s;
}

// Inputs of one type: edge values of its format plus random bit patterns.
std::vector<unsigned char> inputs(chorusDataType_t t, size_t randomCount, uint64_t seed) {
  const size_t esz = chorusTypeSize(t);
  std::vector<uint64_t> special;
  switch (t) {
    case chorusInt8:
    case chorusUint8:
      special = {0, 1, 2, 3, 0x7f, 0x80, 0x81, 0xfe, 0xff, 0x40, 0x10};
      break;
    case chorusInt32:
    case chorusUint32:
      special = {0, 1, 2, 3, 0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff, 0x10000};
      break;
    case chorusInt64:
    case chorusUint64:
      special = {0,
                 1,
                 2,
                 3,
                 0x7fffffffffffffffull,
                 0x8000000000000000ull,
                 0xffffffffffffffffull,
                 0x100000000ull,
                 0xfffffffffffffffeull};
      break;
    case chorusFloat16:  // zeros, subnormals, 1, max, Inf, NaN, values that round on add
      special = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0xbc00, 0x7bff,
                 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x1400, 0x5bff, 0x6800, 0x0200};
      break;
    case chorusBfloat16:
      special = {0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0xbf80,
                 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x4b80, 0x3b80, 0x4380};
      break;
    case chorusFloat32:
      special = {0x00000000, 0x80000000, 0x00000001, 0x007fffff, 0x3f800000, 0x3f800001,
                 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x4b800000};
      break;
    case chorusFloat64:
      special = {0,
                 0x8000000000000000ull,
                 1,
                 0x3ff0000000000000ull,
                 0x3ff0000000000001ull,
                 0x7fefffffffffffffull,
                 0x7ff0000000000000ull,
                 0xfff0000000000000ull,
                 0x7ff8000000000000ull};
      break;
    default:
      break;
  }
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> out((special.size() + randomCount) * esz);
  size_t i = 0;
  for (uint64_t v : special) std::memcpy(&out[esz * i++], &v, esz);
  for (size_t k = 0; k < randomCount; ++k) {
    uint64_t v = rng();
    // Half the random float values near 1 so that sums and products round, not just overflow.
    if (k % 2 == 0 && t == chorusFloat32) v = 0x3f000000u | (v & 0x00ffffffu);
    if (k % 2 == 0 && t == chorusFloat64) v = 0x3fe0000000000000ull | (v & 0x001fffffffffffffull);
    if (k % 2 == 0 && t == chorusFloat16) v = 0x3800u | (v & 0x07ffu);
    if (k % 2 == 0 && t == chorusBfloat16) v = 0x3f00u | (v & 0x00ffu);
    std::memcpy(&out[esz * i++], &v, esz);
  }
  return out;
}

std::string typeStr(chorusDataType_t t) {
  return std::to_string(int(t));
}

// Every pair of inputs, every op (avg with several divisors): functor == reference.
TEST(CudaFunctors, MatchIndependentReference) {
  for (chorusDataType_t t : kTypes) {
    const size_t esz = chorusTypeSize(t);
    const auto in = inputs(t, 120, 7 + uint64_t(t));
    const size_t n = in.size() / esz;
    for (chorusRedOp_t op : kOps) {
      for (int div : op == chorusAvg ? std::vector<int>{0, 1, 2, 3, 7, 200} : std::vector<int>{0}) {
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          for (size_t j = 0; j < n; ++j) {
            unsigned char got[8] = {}, want[8] = {};
            ASSERT_TRUE(
                chorus::cuda::reduceElementHost(t, op, div, &in[i * esz], &in[j * esz], got));
            const bool finite = reference(t, op, div, &in[i * esz], &in[j * esz], want);
            const bool ok = finite ? std::memcmp(got, want, esz) == 0 : isNanBits(t, got);
            if (!ok && bad++ < 3) {
              ADD_FAILURE() << "type " << typeStr(t) << " op " << int(op) << " divisor " << div
                            << ": " << hex(&in[i * esz], esz) << " , " << hex(&in[j * esz], esz)
                            << " -> " << hex(got, esz) << ", reference " << hex(want, esz);
            }
          }
        }
        EXPECT_EQ(bad, 0u) << "type " << typeStr(t) << " op " << int(op) << " divisor " << div;
      }
    }
  }
}

// Every 16-bit pattern against a set of partners: halves are computed in float32 and rounded
// once, so e.g. 2048 + 1 (float16) is 2048 and 1 + 2^-11 ties to even.
TEST(CudaFunctors, HalfTypesExhaustiveAgainstReference) {
  for (chorusDataType_t t : {chorusFloat16, chorusBfloat16}) {
    const auto partners = inputs(t, 24, 99);
    for (chorusRedOp_t op : kOps) {
      const int div = op == chorusAvg ? 3 : 0;
      size_t bad = 0;
      for (uint32_t a = 0; a < 0x10000u; ++a) {
        // 8-byte buffers: the reference's other branches read wider types (-Warray-bounds).
        uint64_t x = a;
        for (size_t j = 0; j < partners.size(); j += 2) {
          uint64_t y = 0, got = 0, want = 0;
          std::memcpy(&y, &partners[j], 2);
          chorus::cuda::reduceElementHost(t, op, div, &x, &y, &got);
          const bool finite = reference(t, op, div, &x, &y, &want);
          if (finite ? got != want : !isNanBits(t, &got)) ++bad;
        }
      }
      EXPECT_EQ(bad, 0u) << "type " << typeStr(t) << " op " << int(op);
    }
  }
  // Spot checks written out by hand.
  const uint64_t h2048 = 0x6800, h1 = 0x3c00;  // float16 2048 and 1
  uint64_t r = 0;
  chorus::cuda::reduceElementHost(chorusFloat16, chorusSum, 0, &h2048, &h1, &r);
  EXPECT_EQ(r, 0x6800u);                       // 2049 is not a half: ties to even (2048)
  const uint64_t b1 = 0x3f80, bTiny = 0x3b80;  // bfloat16 1 and 2^-8: 1 + 2^-8 ties to 1
  chorus::cuda::reduceElementHost(chorusBfloat16, chorusSum, 0, &b1, &bTiny, &r);
  EXPECT_EQ(r, 0x3f80u);
}

TEST(CudaFunctors, IntegerWrapAndTruncatingAverage) {
  int8_t a = 127, b = 1, r = 0;
  chorus::cuda::reduceElementHost(chorusInt8, chorusSum, 0, &a, &b, &r);
  EXPECT_EQ(r, -128);
  a = -100, b = -100;
  chorus::cuda::reduceElementHost(chorusInt8, chorusAvg, 2, &a, &b, &r);
  EXPECT_EQ(r, 28);  // wrapped sum 56, / 2
  a = -3, b = 0;
  chorus::cuda::reduceElementHost(chorusInt8, chorusAvg, 2, &a, &b, &r);
  EXPECT_EQ(r, -1);  // truncation toward zero
  uint32_t x = 0xffffffffu, y = 2, z = 0;
  chorus::cuda::reduceElementHost(chorusUint32, chorusProd, 0, &x, &y, &z);
  EXPECT_EQ(z, 0xfffffffeu);
  int64_t p = INT64_MAX, q = INT64_MAX, s = 0;
  chorus::cuda::reduceElementHost(chorusInt64, chorusSum, 0, &p, &q, &s);
  EXPECT_EQ(s, -2);
  uint8_t u = 200, v = 100, w = 0;
  chorus::cuda::reduceElementHost(chorusUint8, chorusAvg, 200, &u, &v, &w);
  EXPECT_EQ(w, 0);  // (300 mod 256 = 44) / 200; the divisor is not truncated to 8 bits
}

// The functors give what the host engine gives (chorus::reduceKernel), element for element, for
// every type, op and avg step, so device and host ranks agree bit for bit.
TEST(CudaFunctors, MatchHostEngine) {
  for (chorusDataType_t t : kTypes) {
    const size_t esz = chorusTypeSize(t);
    const auto a = inputs(t, 3000, 1000 + uint64_t(t));
    const auto bRaw = inputs(t, 3000, 2000 + uint64_t(t));
    // Pair every special value with every other by rotating b.
    std::vector<unsigned char> b(bRaw.size());
    const size_t n = a.size() / esz;
    for (size_t i = 0; i < n; ++i) std::memcpy(&b[i * esz], &bRaw[((i * 7) % n) * esz], esz);
    for (chorusRedOp_t op : kOps) {
      for (int div : op == chorusAvg ? std::vector<int>{0, 1, 4, 5} : std::vector<int>{0}) {
        std::vector<unsigned char> engine(a.size());
        chorus::reduceKernel(t, op, n, a.data(), b.data(), engine.data(), nullptr, div);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          unsigned char got[8] = {};
          chorus::cuda::reduceElementHost(t, op, div, &a[i * esz], &b[i * esz], got);
          const bool nan = isNanBits(t, &engine[i * esz]);
          if (nan ? !isNanBits(t, got) : std::memcmp(got, &engine[i * esz], esz) != 0) ++bad;
        }
        EXPECT_EQ(bad, 0u) << "type " << typeStr(t) << " op " << int(op) << " divisor " << div;
      }
    }
  }
}

// The direct IPC AllReduce's n-input step (ReduceManyFunctor) against a fold in rank order in
// an independent reference: integers wrap (128-bit arithmetic), avg truncates the wrapped sum;
// floats accumulate in float32 / float64 and float16 / bfloat16 are rounded once at the end.
TEST(CudaFunctors, ReduceManyMatchesRankOrderFold) {
  std::mt19937_64 rng(11);
  for (chorusDataType_t t : kTypes) {
    const size_t esz = chorusTypeSize(t);
    for (chorusRedOp_t op : kOps) {
      for (int n = 1; n <= 8; ++n) {
        for (int trial = 0; trial < 200; ++trial) {
          unsigned char in[8][8] = {}, got[8] = {}, want[8] = {};
          const void* ptrs[8];
          double vals[8];
          for (int p = 0; p < n; ++p) {
            ptrs[p] = in[p];
            const uint64_t bits = rng();
            vals[p] = double(int(bits % 201) - 100) / 16.0;  // exact in every float format
            if (t == chorusFloat32) {
              const float f = float(vals[p]);
              std::memcpy(in[p], &f, 4);
            } else if (t == chorusFloat64) {
              std::memcpy(in[p], &vals[p], 8);
            } else if (t == chorusFloat16) {
              const uint16_t h = fToF16(float(vals[p]));
              std::memcpy(in[p], &h, 2);
            } else if (t == chorusBfloat16) {
              const uint16_t h = fToBf16(float(vals[p]));
              std::memcpy(in[p], &h, 2);
            } else {
              std::memcpy(in[p], &bits, esz);  // any bit pattern: wraparound
            }
          }
          ASSERT_TRUE(chorus::cuda::reduceManyElementHost(t, op, n, ptrs, got));
          auto foldInt = [&]<class T>(T*) {
            T acc = fromBits<T>(in[0]);
            for (int p = 1; p < n; ++p)
              acc = intRef<T>(op == chorusAvg ? chorusSum : op, acc, fromBits<T>(in[p]), 0);
            if (op == chorusAvg) {
              using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
              acc = static_cast<T>(W(acc) / W(n));
            }
            std::memcpy(want, &acc, sizeof acc);
          };
          auto foldFloat = [&]<class F>(F first, auto next) {
            F acc = first;
            for (int p = 1; p < n; ++p)
              acc = floatOp<F>(op == chorusAvg ? chorusSum : op, acc, next(p), 0);
            if (op == chorusAvg) acc = acc / F(n);
            return acc;
          };
          switch (t) {
            case chorusInt8:
              foldInt((int8_t*)nullptr);
              break;
            case chorusUint8:
              foldInt((uint8_t*)nullptr);
              break;
            case chorusInt32:
              foldInt((int32_t*)nullptr);
              break;
            case chorusUint32:
              foldInt((uint32_t*)nullptr);
              break;
            case chorusInt64:
              foldInt((int64_t*)nullptr);
              break;
            case chorusUint64:
              foldInt((uint64_t*)nullptr);
              break;
            case chorusFloat32: {
              const float r =
                  foldFloat(fromBits<float>(in[0]), [&](int p) { return fromBits<float>(in[p]); });
              std::memcpy(want, &r, 4);
              break;
            }
            case chorusFloat64: {
              const double r = foldFloat(fromBits<double>(in[0]),
                                         [&](int p) { return fromBits<double>(in[p]); });
              std::memcpy(want, &r, 8);
              break;
            }
            case chorusFloat16: {
              const uint16_t r = fToF16(foldFloat(f16ToF(fromBits<uint16_t>(in[0])), [&](int p) {
                return f16ToF(fromBits<uint16_t>(in[p]));
              }));
              std::memcpy(want, &r, 2);
              break;
            }
            case chorusBfloat16: {
              const uint16_t r = fToBf16(foldFloat(bf16ToF(fromBits<uint16_t>(in[0])), [&](int p) {
                return bf16ToF(fromBits<uint16_t>(in[p]));
              }));
              std::memcpy(want, &r, 2);
              break;
            }
            default:
              break;
          }
          ASSERT_EQ(std::memcmp(got, want, esz), 0)
              << "type " << typeStr(t) << " op " << int(op) << " n " << n << " trial " << trial;
        }
      }
    }
  }
  // Rejected arguments.
  const unsigned char x[8] = {};
  const void* one[1] = {x};
  unsigned char out[8];
  EXPECT_FALSE(chorus::cuda::reduceManyElementHost(chorusFloat32, chorusSum, 0, one, out));
  EXPECT_FALSE(chorus::cuda::reduceManyElementHost(chorusNumTypes, chorusSum, 1, one, out));
}

// The CUDA IPC code is built with -DCHORUS_CUDA_IPC=ON only (docs/cuda.md); its pure parts are
// tested in every such build, with or without CUDA.
#ifdef CHORUS_HAVE_CUDA_IPC

// ---- Direct IPC AllReduce: block plan, key table, registration cache. ----

TEST(CudaIpcDirect, BlockPlanCoversAlignsAndBalances) {
  const size_t counts[] = {0, 1, 2, 3, 5, 7, 15, 16, 17, 31, 33, 1000, 1001, 1048579};
  for (size_t esz : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    const size_t lanes = 16 / esz;
    for (int n = 1; n <= 8; ++n) {
      for (size_t count : counts) {
        const size_t per = chorus::ipcBlockElems(count, esz, n);
        const size_t ceilDiv = (count + size_t(n) - 1) / size_t(n);
        EXPECT_EQ(per % lanes, 0u);
        EXPECT_GE(per, ceilDiv);
        EXPECT_LT(per, ceilDiv + lanes);
        size_t next = 0;
        for (int r = 0; r < n; ++r) {
          const chorus::IpcBlock b = chorus::ipcBlock(count, esz, n, r);
          SCOPED_TRACE(testing::Message()
                       << "esz " << esz << " n " << n << " count " << count << " rank " << r);
          EXPECT_EQ(b.first, next);  // in rank order, no gap, no overlap
          EXPECT_LE(b.count, per);
          if (b.count > 0) {
            EXPECT_EQ(b.first * esz % chorus::kIpcBlockAlign, 0u);
          }
          // Only the last non-empty block may be short.
          if (b.first + b.count < count) {
            EXPECT_EQ(b.count, per);
          }
          next = b.first + b.count;
        }
        EXPECT_EQ(next, count);
      }
    }
  }
  // Hand-checked cases.
  EXPECT_EQ(chorus::ipcBlock(0, 4, 4, 0).count, 0u);
  EXPECT_EQ(chorus::ipcBlock(1, 4, 4, 0).count, 1u);
  EXPECT_EQ(chorus::ipcBlock(1, 4, 4, 1).count, 0u);
  EXPECT_EQ(chorus::ipcBlock(1, 4, 4, 3).first, 1u);
  // float32, 1000 over 4 ranks: 250 rounded up to 252 (16 bytes = 4 floats).
  EXPECT_EQ(chorus::ipcBlock(1000, 4, 4, 1).first, 252u);
  EXPECT_EQ(chorus::ipcBlock(1000, 4, 4, 3).count, 1000u - 3 * 252);
  // 1048579 float32 over 2 ranks: 524290 -> 524292.
  EXPECT_EQ(chorus::ipcBlock(1048579, 4, 2, 0).count, 524292u);
  EXPECT_EQ(chorus::ipcBlock(1048579, 4, 2, 1).count, 1048579u - 524292);
  // Out of range ranks get nothing.
  EXPECT_EQ(chorus::ipcBlock(100, 4, 4, 4).count, 0u);
  EXPECT_EQ(chorus::ipcBlock(100, 4, 4, -1).count, 0u);
}

chorus::IpcCallKey callKey(int rank, int pid, uint64_t base, uint64_t id, uint64_t bytes,
                           bool inPlace = true) {
  chorus::IpcCallKey k;
  k.magic = chorus::kIpcCallMagic;
  k.rank = rank;
  k.ok = 1;
  k.pid = pid;
  k.device = 0;
  k.bytes = bytes;
  k.buf[0] = {base, id, 1 << 20, 256};
  k.buf[1] = inPlace ? k.buf[0] : chorus::IpcBufKey{base + (2 << 20), id + 1000, 1 << 20, 0};
  return k;
}

TEST(CudaIpcDirect, CallKeysAreChecked) {
  const uint64_t bytes = 4000;
  std::vector<chorus::IpcCallKey> t = {callKey(0, 10, 1 << 30, 1, bytes),
                                       callKey(1, 10, 2ull << 30, 2, bytes, false),
                                       callKey(2, 11, 1 << 30, 3, bytes)};
  EXPECT_EQ(chorus::checkIpcCallKeys(t, bytes), "");
  EXPECT_TRUE(chorus::ipcCallAllOk(t));
  auto expectBad = [&](auto mutate, const std::string& what) {
    auto u = t;
    mutate(u[2]);
    const std::string err = chorus::checkIpcCallKeys(u, bytes);
    EXPECT_NE(err.find("rank 2"), std::string::npos) << err;
    EXPECT_NE(err.find(what), std::string::npos) << err;
  };
  expectBad([](chorus::IpcCallKey& k) { k.magic = 0; }, "magic");
  expectBad([](chorus::IpcCallKey& k) { k.rank = 0; }, "claims rank 0");
  expectBad([](chorus::IpcCallKey& k) { k.bytes = 8; }, "count or type differ");
  expectBad([](chorus::IpcCallKey& k) { k.buf[0].offset = (1 << 20) - 100; }, "sendbuff at offset");
  expectBad([](chorus::IpcCallKey& k) { k.buf[1].offset = (1 << 20) + 1; }, "recvbuff at offset");
  expectBad(
      [](chorus::IpcCallKey& k) {
        k.buf[1] = k.buf[0];
        k.buf[1].offset += 4;  // overlapping, not equal
      },
      "overlap");
  // A rank that cannot take the path: only magic / rank / bytes are checked, all ranks stage.
  auto u = t;
  u[1].ok = 0;
  u[1].buf[0] = {};
  u[1].buf[1] = {};
  EXPECT_EQ(chorus::checkIpcCallKeys(u, bytes), "");
  EXPECT_FALSE(chorus::ipcCallAllOk(u));
  // Exchange needed only when a missing rank's process is not every rank's process.
  EXPECT_FALSE(chorus::ipcNeedsExchange(t, {}));
  EXPECT_TRUE(chorus::ipcNeedsExchange(t, {0}));  // rank 2 lives in another process
  EXPECT_TRUE(chorus::ipcNeedsExchange(t, {2}));
  std::vector<chorus::IpcCallKey> threads = {callKey(0, 10, 1 << 30, 1, bytes),
                                             callKey(1, 10, 2ull << 30, 2, bytes)};
  EXPECT_FALSE(chorus::ipcNeedsExchange(threads, {0, 1}));
}

// One call's lookups as the backend makes them: slot 0 (sendbuff) then slot 1 (recvbuff), every
// rank in order, misses inserted (with `mapped` standing for the mapping). Returns the misses.
std::vector<std::pair<int, int>> simulateCall(chorus::IpcRegCache& cache,
                                              const std::vector<chorus::IpcCallKey>& table,
                                              std::vector<chorus::IpcRegEntry>* removed) {
  std::vector<std::pair<int, int>> misses;
  cache.beginCall();
  for (int s = 0; s < 2; ++s) {
    std::vector<int> missing;
    for (int p = 0; p < int(table.size()); ++p) {
      const auto& k = table[size_t(p)].buf[s];
      if (cache.find({p, k.base, k.id}) == nullptr) missing.push_back(p);
    }
    for (int p : missing) {
      const auto& k = table[size_t(p)].buf[s];
      chorus::IpcRegEntry e;
      e.key = {p, k.base, k.id};
      e.size = k.size;
      e.mapped = reinterpret_cast<void*>(uintptr_t(k.base));
      e.opened = true;
      for (const auto& r : cache.insert(e)) removed->push_back(r);
      misses.emplace_back(p, s);
    }
  }
  return misses;
}

TEST(CudaIpcDirect, RegistrationCacheHitsMissesEvictions) {
  const int n = 4;
  const uint64_t bytes = 4096;
  chorus::IpcRegCache cache(0, n);  // raised to 2n: one call's entries always fit
  EXPECT_EQ(cache.capacity(), 8u);
  std::vector<chorus::IpcCallKey> t;
  for (int r = 0; r < n; ++r) t.push_back(callKey(r, 100 + r, uint64_t(r + 1) << 32, 1, bytes));
  std::vector<chorus::IpcRegEntry> removed;
  // First in-place call: every rank's allocation misses once (recvbuff = the same allocation).
  auto m = simulateCall(cache, t, &removed);
  EXPECT_EQ(m.size(), size_t(n));
  for (const auto& [p, s] : m) EXPECT_EQ(s, 0);
  // The same buffers again, also at another offset inside the allocations: all hits.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(simulateCall(cache, t, &removed).empty());
  t[1].buf[0].offset = t[1].buf[1].offset = 4096;
  EXPECT_TRUE(simulateCall(cache, t, &removed).empty());
  EXPECT_TRUE(removed.empty());
  // Out of place on every rank: the recv allocations miss once.
  for (int r = 0; r < n; ++r)
    t[size_t(r)] = callKey(r, 100 + r, uint64_t(r + 1) << 32, 1, bytes, false);
  m = simulateCall(cache, t, &removed);
  EXPECT_EQ(m.size(), size_t(n));
  for (const auto& [p, s] : m) EXPECT_EQ(s, 1);
  EXPECT_EQ(cache.size(), 8u);
  EXPECT_TRUE(removed.empty());
  // Rank 2 freed its sendbuff and got a new allocation at the same address (new buffer id): a
  // miss, and the stale entry is removed at once.
  t[2].buf[0].id = 77;
  m = simulateCall(cache, t, &removed);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], std::make_pair(2, 0));
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].key, (chorus::IpcRegKey{2, uint64_t(3) << 32, 1}));
  removed.clear();
  // A new recvbuff on rank 0: the cache is full, the least recently used entry not used by this
  // call goes. Every entry was used by the previous call, so first make rank 3's recv entry old:
  // a call where rank 3 runs in place.
  auto t2 = t;
  t2[3].buf[1] = t2[3].buf[0];
  EXPECT_TRUE(simulateCall(cache, t2, &removed).empty());
  t2[0].buf[1] = {uint64_t(9) << 32, 9, 1 << 20, 0};
  m = simulateCall(cache, t2, &removed);
  ASSERT_EQ(m.size(), 1u);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].key.peer, 3);  // rank 3's recv allocation, unused for the longest
  EXPECT_EQ(removed[0].key.base, t[3].buf[1].base);
  EXPECT_TRUE(removed[0].opened);
  EXPECT_EQ(cache.size(), 8u);
  // Entries of the current call are never evicted, even when a call needs every slot.
  removed.clear();
  std::vector<chorus::IpcCallKey> fresh;
  for (int r = 0; r < n; ++r)
    fresh.push_back(callKey(r, 100 + r, uint64_t(r + 20) << 32, 5, bytes, false));
  m = simulateCall(cache, fresh, &removed);
  EXPECT_EQ(m.size(), size_t(2 * n));
  EXPECT_EQ(removed.size(), 8u);
  for (int p = 0; p < n; ++p)
    for (int s = 0; s < 2; ++s) {
      const auto& k = fresh[size_t(p)].buf[s];
      EXPECT_NE(cache.find({p, k.base, k.id}), nullptr);
    }
  // clear() hands everything back for unmapping.
  EXPECT_EQ(cache.clear().size(), 8u);
  EXPECT_EQ(cache.size(), 0u);
}

// Every rank runs the same lookups on the same gathered table, so all caches hold the same keys
// and all ranks see the same misses (the exchange decision needs no extra round), whatever the
// sequence of buffers.
TEST(CudaIpcDirect, CachesOfAllRanksAgree) {
  const int n = 4;
  std::mt19937_64 rng(3);
  std::vector<chorus::IpcRegCache> caches;
  for (int r = 0; r < n; ++r) caches.emplace_back(10, n);
  uint64_t nextId = 1;
  std::vector<uint64_t> ids(16, 0);
  for (auto& id : ids) id = nextId++;
  size_t totalMisses = 0;
  for (int call = 0; call < 500; ++call) {
    if (rng() % 8 == 0) ids[rng() % ids.size()] = nextId++;  // a free + malloc at the same base
    std::vector<chorus::IpcCallKey> t;
    for (int r = 0; r < n; ++r) {
      const size_t a = rng() % 4, b = rng() % 4;  // four allocations per rank
      auto k = callKey(r, 100 + r % 2, 0, 0, 64);
      k.buf[0] = {uint64_t(r * 4 + a + 1) << 32, ids[size_t(r) * 4 + a], 1 << 20, 0};
      k.buf[1] = {uint64_t(r * 4 + b + 1) << 32, ids[size_t(r) * 4 + b], 1 << 20,
                  a == b ? 0u : 4096u};
      t.push_back(k);
    }
    std::vector<std::vector<std::pair<int, int>>> misses(n);
    for (int r = 0; r < n; ++r) {
      std::vector<chorus::IpcRegEntry> removed;
      misses[size_t(r)] = simulateCall(caches[size_t(r)], t, &removed);
      EXPECT_LE(caches[size_t(r)].size(), caches[size_t(r)].capacity());
    }
    for (int r = 1; r < n; ++r) ASSERT_EQ(misses[size_t(r)], misses[0]) << "call " << call;
    totalMisses += misses[0].size();
  }
  // 16 allocations in a 10-entry cache: misses happen, but far fewer than lookups.
  EXPECT_GT(totalMisses, 0u);
  EXPECT_LT(totalMisses, 500u * 2 * n);
}

#endif  // CHORUS_HAVE_CUDA_IPC

// ---- Staging plan. ----

chorus::OpDesc desc(chorus::OpKind k, const void* s, void* r, size_t count, int root = 0) {
  return chorus::OpDesc{k, s, r, count, chorusFloat32, chorusSum, root, nullptr, nullptr};
}

TEST(CudaStaging, OutOfPlaceGetsTwoAlignedRegions) {
  alignas(256) static float send[100], recv[400];
  auto op = desc(chorus::OpKind::kAllGather, send, recv, 100);
  const auto plan = chorus::planStaging({&op}, 1, 4);
  ASSERT_EQ(plan.ops.size(), 1u);
  EXPECT_EQ(plan.ops[0].sendBytes, 400u);
  EXPECT_EQ(plan.ops[0].recvBytes, 1600u);
  EXPECT_EQ(plan.ops[0].sendOffset % chorus::kStagingAlign, 0u);
  EXPECT_EQ(plan.ops[0].recvOffset % chorus::kStagingAlign, 0u);
  EXPECT_GE(plan.ops[0].recvOffset, plan.ops[0].sendOffset + 400);
  EXPECT_GE(plan.totalBytes, plan.ops[0].recvOffset + 1600);
}

TEST(CudaStaging, InPlaceKeepsTheRelation) {
  alignas(256) static float buf[400];
  // AllGather in place on rank 2: sendbuff = recvbuff + 2*count.
  auto ag = desc(chorus::OpKind::kAllGather, buf + 200, buf, 100);
  // ReduceScatter in place on rank 2: recvbuff = sendbuff + 2*count.
  auto rs = desc(chorus::OpKind::kReduceScatter, buf, buf + 200, 100);
  auto ar = desc(chorus::OpKind::kAllReduce, buf, buf, 400);
  const auto plan = chorus::planStaging({&ag, &rs, &ar}, 2, 4);
  unsigned char* base = reinterpret_cast<unsigned char*>(uintptr_t{1} << 20);
  const auto v0 = chorus::stagedView(ag, plan.ops[0], base);
  EXPECT_EQ(static_cast<const char*>(v0.sendbuff) - static_cast<char*>(v0.recvbuff), 800);
  const auto v1 = chorus::stagedView(rs, plan.ops[1], base);
  EXPECT_EQ(static_cast<char*>(v1.recvbuff) - static_cast<const char*>(v1.sendbuff), 800);
  const auto v2 = chorus::stagedView(ar, plan.ops[2], base);
  EXPECT_EQ(v2.sendbuff, v2.recvbuff);
  EXPECT_EQ(plan.ops[2].sendBytes, 1600u);
  EXPECT_EQ(plan.ops[2].recvBytes, 1600u);
  // Regions of different operations do not overlap.
  EXPECT_GE(plan.ops[1].sendOffset, plan.ops[0].recvOffset + 1600);
  EXPECT_GE(plan.ops[2].sendOffset, plan.ops[1].sendOffset + 1600);
}

TEST(CudaStaging, UnusedBuffersAreNotCopied) {
  alignas(256) static float a[64], b[64];
  auto bcast = desc(chorus::OpKind::kBroadcast, a, b, 64, /*root=*/0);
  auto reduce = desc(chorus::OpKind::kReduce, a, b, 64, /*root=*/0);
  auto send = desc(chorus::OpKind::kSend, a, nullptr, 64, 1);
  auto recv = desc(chorus::OpKind::kRecv, nullptr, b, 0, 1);
  const auto plan = chorus::planStaging({&bcast, &reduce, &send, &recv}, 1, 2);  // not the root
  EXPECT_EQ(plan.ops[0].sendBytes, 0u);
  EXPECT_EQ(plan.ops[0].recvBytes, 256u);
  EXPECT_EQ(plan.ops[0].sendOffset, chorus::StagedOp::kUnused);
  EXPECT_EQ(plan.ops[1].sendBytes, 256u);
  EXPECT_EQ(plan.ops[1].recvBytes, 0u);
  EXPECT_EQ(chorus::stagedView(reduce, plan.ops[1], nullptr).recvbuff, nullptr);
  EXPECT_EQ(plan.ops[2].sendBytes, 256u);
  EXPECT_EQ(plan.ops[3].recvBytes, 0u);  // count 0
}

// ---- Error paths without a GPU. ----

bool gpuPresent() {
  // A device communicator of one rank succeeds only with a usable GPU.
  chorusUniqueId id;
  if (chorusGetUniqueId(&id) != chorusSuccess) return false;
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.cudaDevice = 0;
  chorusComm_t c = nullptr;
  if (chorusCommInitRankConfig(&c, 1, id, 0, &cfg) != chorusSuccess) return false;
  chorusCommDestroy(c);
  return true;
}

TEST(CudaErrors, DeviceCommunicatorWithoutGpuFailsCleanly) {
  if (gpuPresent()) GTEST_SKIP() << "a GPU is present: see test_cuda_gpu.cc";
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.cudaDevice = 0;
  chorusComm_t c = reinterpret_cast<chorusComm_t>(uintptr_t{1});
  const chorusResult_t r = chorusCommInitRankConfig(&c, 1, id, 0, &cfg);
  const std::string msg = chorusGetLastError(nullptr);
  EXPECT_EQ(c, nullptr);
  if (chorus::cudaBuilt()) {
    EXPECT_EQ(r, chorusSystemError) << msg;
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
  } else {
    EXPECT_EQ(r, chorusInvalidUsage) << msg;
    EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
  }
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaDevice = 0"), std::string::npos) << msg;
}

TEST(CudaErrors, InitAllWithDevlistWithoutGpuFailsCleanly) {
  if (gpuPresent()) GTEST_SKIP() << "a GPU is present";
  chorusComm_t comms[2] = {nullptr, nullptr};
  const int devs[2] = {0, 0};
  const chorusResult_t r = chorusCommInitAll(comms, 2, devs);
  EXPECT_NE(r, chorusSuccess);
  EXPECT_EQ(comms[0], nullptr);
  EXPECT_EQ(comms[1], nullptr);
}

TEST(CudaErrors, HostCommunicatorReportsNoDevice) {
  chorusComm_t comms[2];
  ASSERT_EQ(chorusCommInitAll(comms, 2, nullptr), chorusSuccess);
  for (chorusComm_t c : comms) {
    int dev = 7;
    EXPECT_EQ(chorusCommCuDevice(c, &dev), chorusSuccess);
    EXPECT_EQ(dev, -1);
    EXPECT_EQ(chorusCommCuDevice(c, nullptr), chorusInvalidArgument);
  }
  // Host buffers on a host communicator keep working, also after a CUDA stream was wrapped
  // (which makes host communicators classify their buffers).
  chorusStream_t cs = nullptr;
  const chorusResult_t wrapped = chorusStreamCreateFromCuda(&cs, nullptr);
  EXPECT_EQ(wrapped, chorus::cudaBuilt() ? chorusSuccess : chorusInvalidUsage)
      << chorusGetLastError(nullptr);
  std::vector<std::thread> ts;
  chorusResult_t rs[2];
  std::vector<float> in[2] = {std::vector<float>(1000, 1.0f), std::vector<float>(1000, 2.0f)};
  std::vector<float> out[2] = {std::vector<float>(1000), std::vector<float>(1000)};
  for (int i = 0; i < 2; ++i)
    ts.emplace_back([&, i] {
      rs[i] = chorusAllReduce(in[i].data(), out[i].data(), 1000, chorusFloat32, chorusSum, comms[i],
                              nullptr);
    });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rs[i], chorusSuccess) << chorusGetLastError(comms[i]);
    EXPECT_EQ(out[i][999], 3.0f);
  }
  if (wrapped == chorusSuccess) {
    void* h = reinterpret_cast<void*>(uintptr_t{5});
    EXPECT_EQ(chorusStreamGetCuda(cs, &h), chorusSuccess);
    EXPECT_EQ(h, nullptr);
    EXPECT_EQ(chorusStreamDestroy(cs), chorusSuccess);
  } else {
    EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("built without CUDA"),
              std::string::npos);
  }
  for (chorusComm_t c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
}

// The direct IPC AllReduce is built only with -DCHORUS_CUDA_IPC=ON and CUDA; otherwise its entry
// points are stand-ins: never eligible, counters zero (every device collective is staged).
TEST(CudaIpcOption, BuiltOnlyOnRequest) {
#if defined(CHORUS_HAVE_CUDA) && defined(CHORUS_HAVE_CUDA_IPC)
  EXPECT_TRUE(chorus::cudaIpcBuilt());
#else
  EXPECT_FALSE(chorus::cudaIpcBuilt());
#endif
  chorusComm_t comms[1];
  ASSERT_EQ(chorusCommInitAll(comms, 1, nullptr), chorusSuccess);
  const chorus::CudaIpcStats s = chorus::cudaIpcStats(comms[0]);  // a host communicator: zeros
  EXPECT_EQ(s.directCalls + s.fallbacks + s.hits + s.misses + s.exchanges + s.opens + s.evictions,
            0u);
  EXPECT_EQ(chorusCommDestroy(comms[0]), chorusSuccess);
}

#ifdef CHORUS_HAVE_CUDA_IPC
// ---- CUDA IPC record exchange. ----

chorus::IpcRecord ipcRecord(int rank, uint64_t host, uint8_t gpu) {
  chorus::IpcRecord r{};
  r.rank = rank;
  r.device = 0;
  r.pid = 1000 + rank;
  r.hostHash = host;
  r.uuid[0] = gpu;
  for (size_t i = 0; i < sizeof r.handle; ++i) r.handle[i] = uint8_t(rank * 31 + i + 1);
  r.flags = chorus::kIpcHasBuffer | chorus::kIpcHasFlags;
  r.offset = 256;
  r.bytes = 1 << 20;
  r.flagOffset = 256 + (1 << 20) - 64;
  chorus::sealIpcRecord(&r);
  return r;
}

TEST(CudaIpc, ValidRecordsAndUsablePeers) {
  // Ranks 0-2 on node A (0 and 1 on GPU 1, 2 on GPU 2), rank 3 on node B.
  std::vector<chorus::IpcRecord> all = {ipcRecord(0, 0xa, 1), ipcRecord(1, 0xa, 1),
                                        ipcRecord(2, 0xa, 2), ipcRecord(3, 0xb, 1)};
  chorus::IpcPeers peers;
  EXPECT_EQ(chorus::validateIpcRecords(all, 1, 4096, &peers), "");
  EXPECT_EQ(peers.usable, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(peers.sameGpu, (std::vector<bool>{true, true, false, false}));
}

TEST(CudaIpc, BadRecordsAreNamed) {
  auto check = [](auto mutate, bool reseal, const std::string& expect) {
    std::vector<chorus::IpcRecord> all = {ipcRecord(0, 0xa, 1), ipcRecord(1, 0xa, 1),
                                          ipcRecord(2, 0xa, 1)};
    mutate(all[2]);
    if (reseal) all[2].checksum = chorus::ipcChecksum(all[2]);
    const std::string err = chorus::validateIpcRecords(all, 0, 4096, nullptr);
    EXPECT_NE(err.find("rank 2"), std::string::npos) << err;
    EXPECT_NE(err.find(expect), std::string::npos) << err;
  };
  check([](chorus::IpcRecord& r) { r.size = 128; }, true, "size 128");
  check([](chorus::IpcRecord& r) { r.magic = 0; }, true, "magic");
  check([](chorus::IpcRecord& r) { r.version = 9; }, true, "version 9");
  check([](chorus::IpcRecord& r) { r.handle[5] ^= 1; }, false, "checksum");
  check([](chorus::IpcRecord& r) { r.rank = 1; }, true, "claims rank 1");
  check([](chorus::IpcRecord& r) { r.device = -1; }, true, "device -1");
  check([](chorus::IpcRecord& r) { r.bytes = 100; }, true, "at least 4096");
  check([](chorus::IpcRecord& r) { r.offset = UINT64_MAX; }, true, "overflows");
  check([](chorus::IpcRecord& r) { std::memset(r.handle, 0, sizeof r.handle); }, true,
        "empty memory handle");
  check([](chorus::IpcRecord& r) { r.flagOffset = 8; }, true, "ready flags");
  check([](chorus::IpcRecord& r) { r.flagOffset += 4; }, true, "ready flags");
  check([](chorus::IpcRecord& r) { r.flags = chorus::kIpcHasFlags; }, true, "without a buffer");
  check([](chorus::IpcRecord& r) { r.flags = 0x80; }, true, "unknown flags");
}

// The exchange itself through a real communicator's bootstrap (threads, no GPU needed).
TEST(CudaIpc, ExchangeThroughBootstrap) {
  constexpr int n = 4;
  chorusComm_t comms[n];
  ASSERT_EQ(chorusCommInitAll(comms, n, nullptr), chorusSuccess);
  std::vector<std::vector<chorus::IpcRecord>> got(n);
  std::vector<chorus::IpcPeers> peers(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        got[size_t(r)] =
            chorus::exchangeIpcRecords(comms[r], ipcRecord(r, 0xa, 1), 4096, &peers[size_t(r)]);
      } catch (const chorus::Failure& f) {
        errors[size_t(r)] = f.message;
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[size_t(r)], "");
    ASSERT_EQ(got[size_t(r)].size(), size_t(n));
    for (int p = 0; p < n; ++p) {
      const chorus::IpcRecord want = ipcRecord(p, 0xa, 1);
      EXPECT_EQ(std::memcmp(&got[size_t(r)][size_t(p)], &want, sizeof want), 0);
      EXPECT_EQ(peers[size_t(r)].usable[size_t(p)], p != r);
    }
  }
  // A rank publishing a too-small buffer: every rank reports it, naming that rank.
  ts.clear();
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      chorus::IpcRecord mine = ipcRecord(r, 0xa, 1);
      if (r == 3) {
        mine.bytes = 1024;
        mine.flags = chorus::kIpcHasBuffer;
        chorus::sealIpcRecord(&mine);
      }
      errors[size_t(r)].clear();
      try {
        chorus::exchangeIpcRecords(comms[r], mine, 4096, nullptr);
      } catch (const chorus::Failure& f) {
        errors[size_t(r)] = f.message;
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(errors[size_t(r)].find("IPC record of rank 3"), std::string::npos)
        << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("rank " + std::to_string(r) + ":"), std::string::npos);
  }
  for (chorusComm_t c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
}

#endif  // CHORUS_HAVE_CUDA_IPC

// --device without a GPU (or without CUDA): a clear error and a non-zero exit, for every tool.
TEST(CudaErrors, BenchDeviceFlagWithoutGpu) {
  if (gpuPresent()) GTEST_SKIP() << "a GPU is present: --device runs";
  for (const char* tool :
       {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
        "reduce_perf", "alltoall_perf", "gather_perf", "scatter_perf", "sendrecv_perf"}) {
    const ctest::CommandResult r = ctest::runCommand(
        {std::string(BENCH_DIR) + "/" + tool, "--device", "-b", "8", "-e", "8"}, 60);
    const std::string& out = r.output;  // stdout and stderr
    ASSERT_FALSE(r.timedOut) << tool << ": " << out;
    EXPECT_EQ(r.exitCode, 2) << tool << ": " << out;
    EXPECT_NE(out.find("--device: "), std::string::npos) << tool << ": " << out;
    EXPECT_NE(out.find(chorus::cudaBuilt() ? "no CUDA device" : "built without CUDA"),
              std::string::npos)
        << tool << ": " << out;
    EXPECT_EQ(out.find("Collective test starting"), std::string::npos) << tool << ": " << out;
  }
}

}  // namespace
