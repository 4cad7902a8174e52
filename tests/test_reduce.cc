// Tests for the reduction/scale/copy kernels (src/reduce) and the 16-bit float conversions.
//
// Every kernel result is checked element by element, bit for bit, against a scalar reference
// written here independently of the kernels (float16/bfloat16 references go through float and
// the half.h conversions, which are themselves checked exhaustively below). Each instruction-set
// build the CPU supports is tested, as is the default entry point.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reduce/copy_kernel.h"
#include "reduce/half.h"
#include "reduce/reduce.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace chorus {
namespace {

// ---------------------------------------------------------------------------------------------
// half.h

// Independent decoding of a binary16 value: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals
// m * 2^-24, computed in double.
double decodeHalf(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  }
  return s ? -v : v;
}

bool isHalfNan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool isBf16Nan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

TEST(Half, AllValuesDecodeExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = halfToFloat(h);
    const double want = decodeHalf(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // -0 stays -0
    }
  }
}

TEST(Half, AllValuesRoundTrip) {
  int nans = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const uint16_t back = floatToHalf(halfToFloat(h));
    if (isHalfNan(h)) {
      ++nans;
      ASSERT_TRUE(isHalfNan(back)) << std::hex << h << " -> " << back;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
      if (h & 0x200) {
        ASSERT_EQ(back, h) << "quiet NaN payload kept";
      }
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
}

// For every pair of adjacent finite halves (both signs): the midpoint rounds to the even one,
// one float ulp either side of it rounds to the nearer one, and the values themselves are exact.
TEST(Half, RoundsToNearestEven) {
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint32_t m = 0; m < 0x7c00; ++m) {
      const uint16_t lo = static_cast<uint16_t>(sign | m);
      const uint16_t hi = static_cast<uint16_t>(sign | (m + 1));  // m + 1 == 0x7c00: infinity
      const float flo = halfToFloat(lo);
      // The value above the largest finite half (65504) would be 65536 in an unbounded format.
      const float fhi = m + 1 == 0x7c00 ? (sign ? -65536.0f : 65536.0f) : halfToFloat(hi);
      const float mid = (flo + fhi) * 0.5f;  // exact: one more bit than a half has
      ASSERT_EQ(static_cast<double>(mid), (decodeHalf(lo) + static_cast<double>(fhi)) / 2);
      ASSERT_EQ(floatToHalf(flo), lo);
      ASSERT_EQ(floatToHalf(mid), (m & 1) ? hi : lo) << std::hex << lo;
      ASSERT_EQ(floatToHalf(std::nextafter(mid, flo)), lo) << std::hex << lo;
      ASSERT_EQ(floatToHalf(std::nextafter(mid, fhi)), hi) << std::hex << lo;
    }
  }
}

TEST(Half, SpecialFloats) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToHalf(inf), 0x7c00);
  EXPECT_EQ(floatToHalf(-inf), 0xfc00);
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::min()), 0x8000);
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);                        // tie -> even (0)
  EXPECT_EQ(floatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);  // above the tie
  EXPECT_EQ(floatToHalf(0x1.8p-24f), 0x0002);                      // tie 1.5 -> 2
  EXPECT_EQ(floatToHalf(0x1p-14f), 0x0400);                        // smallest normal
  EXPECT_EQ(floatToHalf(std::nextafter(0x1p-14f, 0.0f)), 0x0400);  // carries up
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);                 // tie -> even
  EXPECT_EQ(floatToHalf(1.0f + 0x1.8p-10f), 0x3c02);               // tie -> even (up)
  // NaNs stay NaN, whatever payload (a payload only in the low bits must not become Inf).
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0xffffffffu}) {
    const uint16_t h = floatToHalf(std::bit_cast<float>(bits));
    EXPECT_TRUE(isHalfNan(h)) << std::hex << bits << " -> " << h;
    EXPECT_EQ((h & 0x8000) != 0, (bits & 0x80000000u) != 0);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

__attribute__((target("f16c"))) uint16_t hardwareFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) float hardwareHalfToFloat(uint16_t h) {
  return _cvtsh_ss(h);
}

// A second, independent oracle: the CPU's own conversion instructions, over many floats spread
// across the whole bit space (every 251st bit pattern: all exponents, signs and NaNs).
TEST(Half, MatchesF16cInstructions) {
  if (!cpuHasF16c()) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float want = hardwareHalfToFloat(h), got = halfToFloat(h);
    if (isHalfNan(h)) {
      ASSERT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << h;
    }
  }
  uint64_t checked = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 251) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    const uint16_t want = hardwareFloatToHalf(f), got = floatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(isHalfNan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(got, want) << std::hex << bits;
    }
    ++checked;
  }
  EXPECT_GT(checked, 17000000u);
}
#endif

TEST(Bf16, AllValuesRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = bf16ToFloat(b);
    // bfloat16 is the top half of a float32.
    ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    const uint16_t back = floatToBf16(f);
    if (isBf16Nan(b)) {
      ASSERT_TRUE(isBf16Nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000, b & 0x8000);
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint32_t m = 0; m < 0x7f80; ++m) {
      const uint16_t lo = static_cast<uint16_t>(sign | m);
      const uint16_t hi = static_cast<uint16_t>(sign | (m + 1));
      // Midpoint and its neighbours, built from bits: lo's bits followed by 0x8000 / 0x7fff /
      // 0x8001 in the low half (for m + 1 == 0x7f80 the upper neighbour is infinity).
      const uint32_t base = static_cast<uint32_t>(lo) << 16;
      const float mid = std::bit_cast<float>(base | 0x8000u);
      ASSERT_EQ(floatToBf16(std::bit_cast<float>(base)), lo);
      ASSERT_EQ(floatToBf16(mid), (m & 1) ? hi : lo) << std::hex << lo;
      ASSERT_EQ(floatToBf16(std::bit_cast<float>(base | 0x7fffu)), lo) << std::hex << lo;
      ASSERT_EQ(floatToBf16(std::bit_cast<float>(base | 0x8001u)), hi) << std::hex << lo;
      ASSERT_EQ(floatToBf16(std::bit_cast<float>(base | 0x0001u)), lo) << std::hex << lo;
      // And the same via arithmetic, as an independent check of the bit construction.
      const double dlo = bf16ToFloat(lo);
      const double dnext = m + 1 == 0x7f80 ? std::ldexp(sign ? -1.0 : 1.0, 128)
                                           : static_cast<double>(bf16ToFloat(hi));
      ASSERT_EQ(static_cast<double>(mid), (dlo + dnext) / 2) << std::hex << lo;
    }
  }
}

TEST(Bf16, SpecialFloats) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToBf16(inf), 0x7f80);
  EXPECT_EQ(floatToBf16(-inf), 0xff80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to Inf
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(floatToBf16(1.0f + 0x1p-8f), 0x3f80);  // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + 0x3p-8f), 0x3f82);  // tie -> even (up)
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu, 0xffffffffu}) {
    const uint16_t b = floatToBf16(std::bit_cast<float>(bits));
    EXPECT_TRUE(isBf16Nan(b)) << std::hex << bits << " -> " << b;
    EXPECT_EQ((b & 0x8000) != 0, (bits & 0x80000000u) != 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels

enum class Fmt { kInt, kFloat, kHalf, kBf16 };

const char* typeName(chorusDataType_t t) {
  switch (t) {
    case chorusInt8:
      return "int8";
    case chorusUint8:
      return "uint8";
    case chorusInt32:
      return "int32";
    case chorusUint32:
      return "uint32";
    case chorusInt64:
      return "int64";
    case chorusUint64:
      return "uint64";
    case chorusFloat16:
      return "float16";
    case chorusFloat32:
      return "float32";
    case chorusFloat64:
      return "float64";
    case chorusBfloat16:
      return "bfloat16";
    default:
      return "?";
  }
}

const char* opName(chorusRedOp_t op) {
  switch (op) {
    case chorusSum:
      return "sum";
    case chorusProd:
      return "prod";
    case chorusMax:
      return "max";
    case chorusMin:
      return "min";
    case chorusAvg:
      return "avg";
    default:
      return "?";
  }
}

std::vector<KernelIsa> isasToTest() {
  std::vector<KernelIsa> isas{KernelIsa::kPortable};
  if (kernelIsaSupported(KernelIsa::kAvx2)) isas.push_back(KernelIsa::kAvx2);
  if (kernelIsaSupported(KernelIsa::kAvx512)) isas.push_back(KernelIsa::kAvx512);
  return isas;
}

const char* isaName(KernelIsa isa) {
  return kernelIsaName(isa);
}

// The scalar reference for one element.
template <class S, Fmt F>
S refReduce(chorusRedOp_t op, S a, S b, int divisor) {
  if constexpr (F == Fmt::kInt) {
    // Two's-complement bits widened to 64, arithmetic mod 2^64, truncated back (mod 2^width).
    using U = std::make_unsigned_t<S>;
    const uint64_t ua = static_cast<U>(a), ub = static_cast<U>(b);
    const S sum = static_cast<S>(static_cast<U>(ua + ub));
    switch (op) {
      case chorusSum:
        return sum;
      case chorusProd:
        return static_cast<S>(static_cast<U>(ua * ub));
      case chorusMax:
        return std::max(a, b);
      case chorusMin:
        return std::min(a, b);
      default:
        if (divisor <= 0) return sum;
        if constexpr (std::is_signed_v<S>) {
          return static_cast<S>(static_cast<int64_t>(sum) / divisor);
        } else {
          return static_cast<S>(static_cast<uint64_t>(sum) / static_cast<uint64_t>(divisor));
        }
    }
  } else if constexpr (F == Fmt::kFloat) {
    switch (op) {
      case chorusSum:
        return a + b;
      case chorusProd:
        return a * b;
      case chorusMax:
        return std::max(a, b);
      case chorusMin:
        return std::min(a, b);
      default:
        return divisor <= 0 ? a + b : (a + b) / static_cast<S>(divisor);
    }
  } else {
    const auto toF = [](uint16_t v) { return F == Fmt::kHalf ? halfToFloat(v) : bf16ToFloat(v); };
    const auto fromF = [](float v) { return F == Fmt::kHalf ? floatToHalf(v) : floatToBf16(v); };
    return fromF(refReduce<float, Fmt::kFloat>(op, toF(a), toF(b), divisor));
  }
}

template <class S, Fmt F>
S refScale(S v, int divisor) {
  if (divisor <= 1) return v;
  if constexpr (F == Fmt::kInt) {
    if constexpr (std::is_signed_v<S>) {
      return static_cast<S>(static_cast<int64_t>(v) / divisor);
    } else {
      return static_cast<S>(static_cast<uint64_t>(v) / static_cast<uint64_t>(divisor));
    }
  } else if constexpr (F == Fmt::kFloat) {
    return v / static_cast<S>(divisor);
  } else if constexpr (F == Fmt::kHalf) {
    return floatToHalf(halfToFloat(v) / static_cast<float>(divisor));
  } else {
    return floatToBf16(bf16ToFloat(v) / static_cast<float>(divisor));
  }
}

// Equal bits, or both NaN (NaN payloads are not specified).
template <class S, Fmt F>
bool sameValue(S x, S y) {
  if constexpr (F == Fmt::kFloat) {
    if (std::isnan(x) && std::isnan(y)) return true;
  } else if constexpr (F == Fmt::kHalf) {
    if (isHalfNan(x) && isHalfNan(y)) return true;
  } else if constexpr (F == Fmt::kBf16) {
    if (isBf16Nan(x) && isBf16Nan(y)) return true;
  }
  return std::memcmp(&x, &y, sizeof(S)) == 0;
}

template <class S>
std::string show(S v) {
  if constexpr (std::is_same_v<S, uint16_t>) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%04x", v);
    return buf;
  } else if constexpr (sizeof(S) == 1) {
    return std::to_string(static_cast<int>(v));
  } else {
    return std::to_string(v);
  }
}

// Random inputs without NaNs; a mix of arbitrary bit patterns (extremes, subnormals, Inf,
// wrap-around) and values of similar magnitude (so sums round non-trivially).
template <class S, Fmt F>
std::vector<S> randomValues(std::mt19937_64& rng, size_t n) {
  std::vector<S> v(n);
  std::uniform_real_distribution<float> near(-4.0f, 4.0f);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const bool arbitrary = (bits & 3) == 0;
    if constexpr (F == Fmt::kInt) {
      // Arbitrary bits, or small values of either sign (so max/min/avg see near ties).
      v[i] = arbitrary || (bits & 4) ? static_cast<S>(rng())
                                     : static_cast<S>(static_cast<int64_t>((bits >> 8) % 64) - 32);
    } else if constexpr (F == Fmt::kFloat) {
      if (arbitrary) {
        // Any finite or infinite value of the type.
        if constexpr (sizeof(S) == 4) {
          uint32_t b32 = static_cast<uint32_t>(bits >> 32);
          if ((b32 & 0x7f800000u) == 0x7f800000u) b32 &= 0xff800000u;  // NaN -> Inf
          v[i] = std::bit_cast<S>(b32);
        } else {
          uint64_t b64 = rng();
          if ((b64 & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) b64 &= 0xfff0000000000000ull;
          v[i] = std::bit_cast<S>(b64);
        }
      } else {
        v[i] = static_cast<S>(near(rng)) * static_cast<S>(1 + (bits >> 40) % 1000);
      }
    } else {
      uint16_t h = static_cast<uint16_t>(bits >> 16);
      if (F == Fmt::kHalf ? isHalfNan(h) : isBf16Nan(h)) h &= (F == Fmt::kHalf ? 0xfc00 : 0xff80);
      if (!arbitrary) h = F == Fmt::kHalf ? floatToHalf(near(rng)) : floatToBf16(near(rng));
      v[i] = h;
    }
  }
  return v;
}

constexpr size_t kCounts[] = {0, 1, 7, 31, 32, 33, 63, 1000, 4099};
constexpr size_t kGuard = 16;  // elements past the end that must stay untouched

// Where the destinations point.
enum class Layout { kSeparate, kDual, kDst0IsA, kDst0IsB, kDst0IsADual, kDst1IsB, kBothAlias };
constexpr Layout kLayouts[] = {Layout::kSeparate, Layout::kDual,        Layout::kDst0IsA,
                               Layout::kDst0IsB,  Layout::kDst0IsADual, Layout::kDst1IsB,
                               Layout::kBothAlias};
const char* layoutName(Layout l) {
  switch (l) {
    case Layout::kSeparate:
      return "dst0";
    case Layout::kDual:
      return "dst0+dst1";
    case Layout::kDst0IsA:
      return "dst0==a";
    case Layout::kDst0IsB:
      return "dst0==b";
    case Layout::kDst0IsADual:
      return "dst0==a+dst1";
    case Layout::kDst1IsB:
      return "dst0+dst1==b";
    case Layout::kBothAlias:
      return "dst0==a,dst1==b";
  }
  return "?";
}

struct ReduceCase {
  chorusDataType_t type;
  chorusRedOp_t op;
};

class ReduceKernelTest : public ::testing::TestWithParam<ReduceCase> {};

// Runs one (isa, count, layout, divisor, misalignment) combination; returns false on failure.
template <class S, Fmt F>
void checkReduce(const ReduceCase& c, std::mt19937_64& rng) {
  const bool isAvg = c.op == chorusAvg;
  const std::vector<int> divisors = isAvg ? std::vector<int>{0, 1, 3, 8} : std::vector<int>{0, 5};
  const S sentinel = static_cast<S>(0x5a);
  int combos = 0;
  for (KernelIsa isa : isasToTest()) {
    for (int useDefault = 0; useDefault < 2; ++useDefault) {
      for (size_t count : kCounts) {
        for (Layout layout : kLayouts) {
          for (int divisor : divisors) {
            for (size_t offset : {size_t{0}, size_t{1}}) {  // element-misaligned starts too
              SCOPED_TRACE(testing::Message()
                           << typeName(c.type) << " " << opName(c.op) << " isa=" << isaName(isa)
                           << (useDefault ? " (default entry)" : "") << " count=" << count
                           << " layout=" << layoutName(layout) << " divisor=" << divisor
                           << " offset=" << offset);
              const size_t total = offset + count + kGuard;
              std::vector<S> a = randomValues<S, F>(rng, total);
              std::vector<S> b = randomValues<S, F>(rng, total);
              std::vector<S> o0(total, sentinel), o1(total, sentinel);
              std::vector<S> want(count);
              for (size_t i = 0; i < count; ++i) {
                want[i] = refReduce<S, F>(c.op, a[offset + i], b[offset + i], divisor);
              }
              const std::vector<S> a0 = a, b0 = b;
              S* pa = a.data() + offset;
              S* pb = b.data() + offset;
              S* d0 = o0.data() + offset;
              S* d1 = nullptr;
              switch (layout) {
                case Layout::kSeparate:
                  break;
                case Layout::kDual:
                  d1 = o1.data() + offset;
                  break;
                case Layout::kDst0IsA:
                  d0 = pa;
                  break;
                case Layout::kDst0IsB:
                  d0 = pb;
                  break;
                case Layout::kDst0IsADual:
                  d0 = pa;
                  d1 = o1.data() + offset;
                  break;
                case Layout::kDst1IsB:
                  d1 = pb;
                  break;
                case Layout::kBothAlias:
                  d0 = pa;
                  d1 = pb;
                  break;
              }
              if (useDefault) {
                if (isa != kernelIsaFor(c.type, c.op)) continue;
                reduceKernel(c.type, c.op, count, pa, pb, d0, d1, divisor);
              } else {
                reduceKernelIsa(isa, c.type, c.op, count, pa, pb, d0, d1, divisor);
              }
              ++combos;
              for (S* d : {d0, d1}) {
                if (d == nullptr) continue;
                for (size_t i = 0; i < count; ++i) {
                  if (!sameValue<S, F>(d[i], want[i])) {
                    FAIL() << (d == d0 ? "dst0" : "dst1") << "[" << i << "] = " << show(d[i])
                           << ", want " << show(want[i]) << " (a=" << show(a0[offset + i])
                           << ", b=" << show(b0[offset + i]) << ")";
                  }
                }
              }
              // Nothing outside [offset, offset+count) of any buffer changed, and inputs that
              // are not destinations are untouched.
              auto unchanged = [&](const std::vector<S>& now, const std::vector<S>& before,
                                   bool isDst) {
                for (size_t i = 0; i < total; ++i) {
                  if (isDst && i >= offset && i < offset + count) continue;
                  if (std::memcmp(&now[i], &before[i], sizeof(S)) != 0) return false;
                }
                return true;
              };
              const bool aIsDst = d0 == pa || d1 == pa, bIsDst = d0 == pb || d1 == pb;
              ASSERT_TRUE(unchanged(a, a0, aIsDst)) << "a";
              ASSERT_TRUE(unchanged(b, b0, bIsDst)) << "b";
              ASSERT_TRUE(unchanged(o0, std::vector<S>(total, sentinel), d0 == o0.data() + offset))
                  << "dst0 guard";
              ASSERT_TRUE(unchanged(o1, std::vector<S>(total, sentinel), d1 == o1.data() + offset))
                  << "dst1 guard";
            }
          }
        }
      }
    }
  }
  EXPECT_GT(combos, 0);
}

template <class Fn>
void withType(chorusDataType_t type, Fn&& fn) {
  switch (type) {
    case chorusInt8:
      fn.template operator()<int8_t, Fmt::kInt>();
      break;
    case chorusUint8:
      fn.template operator()<uint8_t, Fmt::kInt>();
      break;
    case chorusInt32:
      fn.template operator()<int32_t, Fmt::kInt>();
      break;
    case chorusUint32:
      fn.template operator()<uint32_t, Fmt::kInt>();
      break;
    case chorusInt64:
      fn.template operator()<int64_t, Fmt::kInt>();
      break;
    case chorusUint64:
      fn.template operator()<uint64_t, Fmt::kInt>();
      break;
    case chorusFloat16:
      fn.template operator()<uint16_t, Fmt::kHalf>();
      break;
    case chorusFloat32:
      fn.template operator()<float, Fmt::kFloat>();
      break;
    case chorusFloat64:
      fn.template operator()<double, Fmt::kFloat>();
      break;
    case chorusBfloat16:
      fn.template operator()<uint16_t, Fmt::kBf16>();
      break;
    default:
      FAIL() << "unknown type";
  }
}

TEST_P(ReduceKernelTest, MatchesScalarReference) {
  const ReduceCase c = GetParam();
  std::mt19937_64 rng(1000 + 10 * c.type + c.op);
  withType(c.type, [&]<class S, Fmt F>() { checkReduce<S, F>(c, rng); });
}

std::vector<ReduceCase> allCases() {
  std::vector<ReduceCase> cases;
  for (int t = 0; t < chorusNumTypes; ++t) {
    for (int op = 0; op < chorusNumOps; ++op) {
      cases.push_back({static_cast<chorusDataType_t>(t), static_cast<chorusRedOp_t>(op)});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypesOps, ReduceKernelTest, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<ReduceCase>& info) {
                           return std::string(typeName(info.param.type)) + "_" +
                                  opName(info.param.op);
                         });

// Every 16-bit pattern as `a` (NaNs included for the identity checks), through every build:
// a + (-0) and max(a, a) must give a back exactly (load/store round trip, including -0,
// subnormals, Inf); and every op against a shuffled copy must match the reference.
TEST(ReduceKernel, AllSixteenBitFloatPatterns) {
  std::mt19937_64 rng(99);
  for (chorusDataType_t type : {chorusFloat16, chorusBfloat16}) {
    const bool half = type == chorusFloat16;
    const auto isNan = [&](uint16_t v) { return half ? isHalfNan(v) : isBf16Nan(v); };
    std::vector<uint16_t> all(65536), shuffled(65536), negZero(65536, 0x8000), out(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    shuffled = all;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (KernelIsa isa : isasToTest()) {
      SCOPED_TRACE(testing::Message() << typeName(type) << " " << isaName(isa));
      reduceKernelIsa(isa, type, chorusSum, all.size(), all.data(), negZero.data(), out.data(),
                      nullptr, 0);
      for (uint32_t i = 0; i < 65536; ++i) {
        if (isNan(all[i])) {
          ASSERT_TRUE(isNan(out[i])) << i;
        } else {
          ASSERT_EQ(out[i], all[i]) << i;
        }
      }
      reduceKernelIsa(isa, type, chorusMax, all.size(), all.data(), all.data(), out.data(), nullptr,
                      0);
      for (uint32_t i = 0; i < 65536; ++i) {
        if (isNan(all[i])) {
          ASSERT_TRUE(isNan(out[i])) << i;
        } else {
          ASSERT_EQ(out[i], all[i]) << i;
        }
      }
      for (int op = 0; op < chorusNumOps; ++op) {
        for (int divisor : {0, 3}) {
          const auto ro = static_cast<chorusRedOp_t>(op);
          reduceKernelIsa(isa, type, ro, all.size(), all.data(), shuffled.data(), out.data(),
                          nullptr, divisor);
          for (uint32_t i = 0; i < 65536; ++i) {
            if (isNan(all[i]) || isNan(shuffled[i])) continue;  // NaN inputs: unspecified
            const uint16_t want =
                half ? refReduce<uint16_t, Fmt::kHalf>(ro, all[i], shuffled[i], divisor)
                     : refReduce<uint16_t, Fmt::kBf16>(ro, all[i], shuffled[i], divisor);
            const bool same = half ? sameValue<uint16_t, Fmt::kHalf>(out[i], want)
                                   : sameValue<uint16_t, Fmt::kBf16>(out[i], want);
            ASSERT_TRUE(same) << opName(ro) << " divisor " << divisor << ": " << show(all[i])
                              << ", " << show(shuffled[i]) << " -> " << show(out[i]) << ", want "
                              << show(want);
          }
        }
      }
    }
  }
}

// Hand-checked values: wrap-around and truncating division.
template <class S>
S reduceOne(chorusDataType_t type, chorusRedOp_t op, S a, S b, int divisor, KernelIsa isa) {
  S out{};
  reduceKernelIsa(isa, type, op, 1, &a, &b, &out, nullptr, divisor);
  return out;
}

TEST(ReduceKernel, IntegerWrapAroundAndTruncation) {
  for (KernelIsa isa : isasToTest()) {
    SCOPED_TRACE(isaName(isa));
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusSum, 100, 100, 0, isa), -56);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusSum, -128, -1, 0, isa), 127);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusProd, 16, 16, 0, isa), 0);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusProd, -128, -1, 0, isa), -128);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusProd, 15, 15, 0, isa), -31);  // 225 - 256
    // avg: (100 + 100) wraps to -56; -56 / 3 truncates to -18 (floor would be -19).
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusAvg, 100, 100, 3, isa), -18);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusAvg, -7, 0, 2, isa), -3);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusAvg, 100, 100, 0, isa), -56);  // 0: sum
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusAvg, 60, 60, 200, isa), 0);    // divisor > 127
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusMax, -128, 127, 0, isa), 127);
    EXPECT_EQ(reduceOne<int8_t>(chorusInt8, chorusMin, -128, 127, 0, isa), -128);
    EXPECT_EQ(reduceOne<uint8_t>(chorusUint8, chorusSum, 200, 100, 0, isa), 44);
    EXPECT_EQ(reduceOne<uint8_t>(chorusUint8, chorusProd, 255, 255, 0, isa), 1);
    EXPECT_EQ(reduceOne<uint8_t>(chorusUint8, chorusAvg, 200, 100, 3, isa), 14);  // 44 / 3
    EXPECT_EQ(reduceOne<uint8_t>(chorusUint8, chorusMax, 200, 100, 0, isa), 200);
    EXPECT_EQ(reduceOne<int32_t>(chorusInt32, chorusSum, INT32_MAX, 1, 0, isa), INT32_MIN);
    EXPECT_EQ(reduceOne<int32_t>(chorusInt32, chorusProd, 65536, 65536, 0, isa), 0);
    EXPECT_EQ(reduceOne<int32_t>(chorusInt32, chorusAvg, -10, 1, 8, isa), -1);  // -9/8
    EXPECT_EQ(reduceOne<uint32_t>(chorusUint32, chorusSum, UINT32_MAX, 2, 0, isa), 1u);
    EXPECT_EQ(reduceOne<int64_t>(chorusInt64, chorusSum, INT64_MAX, 1, 0, isa), INT64_MIN);
    EXPECT_EQ(reduceOne<int64_t>(chorusInt64, chorusProd, INT64_MIN, -1, 0, isa), INT64_MIN);
    EXPECT_EQ(reduceOne<int64_t>(chorusInt64, chorusMax, INT64_MIN, -1, 0, isa), -1);
    EXPECT_EQ(reduceOne<uint64_t>(chorusUint64, chorusSum, UINT64_MAX, 1, 0, isa), 0u);
    EXPECT_EQ(reduceOne<uint64_t>(chorusUint64, chorusMax, UINT64_MAX, 1, 0, isa), UINT64_MAX);
    EXPECT_EQ(reduceOne<uint64_t>(chorusUint64, chorusMin, UINT64_MAX, 1, 0, isa), 1u);
  }
}

TEST(ReduceKernel, FloatingPointSpotValues) {
  for (KernelIsa isa : isasToTest()) {
    SCOPED_TRACE(isaName(isa));
    EXPECT_EQ(reduceOne<float>(chorusFloat32, chorusAvg, 1.0f, 2.0f, 3, isa), 1.0f);
    EXPECT_EQ(reduceOne<float>(chorusFloat32, chorusAvg, 1.0f, 0.0f, 3, isa), 1.0f / 3.0f);
    EXPECT_EQ(reduceOne<double>(chorusFloat64, chorusAvg, 1.0, 0.0, 3, isa), 1.0 / 3.0);
    EXPECT_EQ(reduceOne<double>(chorusFloat64, chorusProd, 1.5, -2.0, 0, isa), -3.0);
    // float16: 2048 + 1 = 2049 is not a half; ties to even gives 2048. Then (2048+3)/1 etc.
    const uint16_t h2048 = floatToHalf(2048.0f), h1 = floatToHalf(1.0f), h3 = floatToHalf(3.0f);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusSum, h2048, h1, 0, isa), h2048);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusSum, h2048, h3, 0, isa),
              floatToHalf(2052.0f));
    // Divide before rounding: (1 + 0) / 3 rounded once.
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusAvg, h1, 0, 3, isa), 0x3555);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusSum, 0x7bff, 0x7bff, 0, isa), 0x7c00);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusAvg, 0x7bff, 0x7bff, 2, isa), 0x7bff);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusSum, 0x0001, 0x0001, 0, isa), 0x0002);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusMax, 0xbc00, 0x3c00, 0, isa), 0x3c00);
    EXPECT_EQ(reduceOne<uint16_t>(chorusFloat16, chorusMin, 0xbc00, 0x3c00, 0, isa), 0xbc00);
    const uint16_t b1 = floatToBf16(1.0f);
    EXPECT_EQ(reduceOne<uint16_t>(chorusBfloat16, chorusAvg, b1, 0, 3, isa), 0x3eab);
    EXPECT_EQ(reduceOne<uint16_t>(chorusBfloat16, chorusSum, floatToBf16(256.0f), b1, 0, isa),
              floatToBf16(256.0f));  // 257 ties to even
    EXPECT_EQ(reduceOne<uint16_t>(chorusBfloat16, chorusSum, 0x7f7f, 0x7f7f, 0, isa), 0x7f80);
  }
}

TEST(ReduceKernel, UnknownTypeOrOpWritesNothing) {
  int32_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, d[4] = {9, 9, 9, 9};
  reduceKernel(static_cast<chorusDataType_t>(chorusNumTypes), chorusSum, 4, a, b, d, nullptr, 0);
  reduceKernel(chorusInt32, static_cast<chorusRedOp_t>(chorusNumOps), 4, a, b, d, nullptr, 0);
  for (int v : d) EXPECT_EQ(v, 9);
  reduceKernel(chorusInt32, chorusSum, 4, a, b, d, nullptr, 0);
  EXPECT_EQ(d[3], 12);
}

TEST(ReduceKernel, BestIsaIsUsedWhenSupported) {
  EXPECT_TRUE(kernelIsaSupported(KernelIsa::kPortable));
  EXPECT_TRUE(kernelIsaSupported(bestKernelIsa()));
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && cpuHasF16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  EXPECT_EQ(kernelIsaSupported(KernelIsa::kAvx2), avx2);
  EXPECT_EQ(kernelIsaSupported(KernelIsa::kAvx512), avx512);
  // CHORUS_SIMD caps the choice (CI runs the suite with each value).
  const char* simd = getenv("CHORUS_SIMD");
  const std::string cap = simd != nullptr ? simd : "";
  KernelIsa want = avx512 ? KernelIsa::kAvx512 : avx2 ? KernelIsa::kAvx2 : KernelIsa::kPortable;
  if (cap == "scalar" || cap == "portable") want = KernelIsa::kPortable;
  if (cap == "avx2" && want == KernelIsa::kAvx512) want = KernelIsa::kAvx2;
  EXPECT_EQ(bestKernelIsa(), want) << "CHORUS_SIMD=" << cap;
  // Unforced, AVX-512 only where it pays; a named build everywhere.
  const bool forced = cap == "scalar" || cap == "portable" || cap == "avx2" || cap == "avx512";
  const KernelIsa plain = want == KernelIsa::kAvx512 && !forced ? KernelIsa::kAvx2 : want;
  EXPECT_EQ(kernelIsaFor(chorusFloat32, chorusSum), plain);
  EXPECT_EQ(kernelIsaFor(chorusInt8, chorusMax), plain);
  EXPECT_EQ(kernelIsaFor(chorusBfloat16, chorusSum), want);
  EXPECT_EQ(kernelIsaFor(chorusInt64, chorusProd), want);
  EXPECT_EQ(kernelIsaFor(chorusUint64, chorusMin), want);
#endif
}

// ---- scaleKernel

class ScaleKernelTest : public ::testing::TestWithParam<chorusDataType_t> {};

template <class S, Fmt F>
void checkScale(chorusDataType_t type, std::mt19937_64& rng) {
  int combos = 0;
  for (KernelIsa isa : isasToTest()) {
    for (size_t count : kCounts) {
      for (int divisor : {1, 2, 3, 8}) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << typeName(type) << " isa=" << isaName(isa) << " count=" << count
                       << " divisor=" << divisor << " inPlace=" << inPlace);
          const size_t total = 1 + count + kGuard;
          std::vector<S> src = randomValues<S, F>(rng, total);
          std::vector<S> dst(total, static_cast<S>(0x33));
          const std::vector<S> src0 = src, dst0 = dst;
          S* out = inPlace ? src.data() + 1 : dst.data() + 1;
          scaleKernelIsa(isa, type, count, src.data() + 1, out, divisor);
          ++combos;
          for (size_t i = 0; i < count; ++i) {
            const S want = refScale<S, F>(src0[1 + i], divisor);
            if (!sameValue<S, F>(out[i], want)) {
              FAIL() << "[" << i << "] = " << show(out[i]) << ", want " << show(want)
                     << " (src=" << show(src0[1 + i]) << ")";
            }
          }
          std::vector<S>& outBuf = inPlace ? src : dst;
          const std::vector<S>& before = inPlace ? src0 : dst0;
          for (size_t i = 0; i < total; ++i) {
            if (i >= 1 && i < 1 + count) continue;
            ASSERT_EQ(std::memcmp(&outBuf[i], &before[i], sizeof(S)), 0) << "guard " << i;
          }
          if (!inPlace) {
            ASSERT_EQ(std::memcmp(src.data(), src0.data(), total * sizeof(S)), 0);
          }
        }
      }
    }
  }
  EXPECT_GT(combos, 0);
}

TEST_P(ScaleKernelTest, MatchesScalarReference) {
  const chorusDataType_t type = GetParam();
  std::mt19937_64 rng(77 + type);
  withType(type, [&]<class S, Fmt F>() { checkScale<S, F>(type, rng); });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ScaleKernelTest,
                         ::testing::Values(chorusInt8, chorusUint8, chorusInt32, chorusUint32,
                                           chorusInt64, chorusUint64, chorusFloat16, chorusFloat32,
                                           chorusFloat64, chorusBfloat16),
                         [](const ::testing::TestParamInfo<chorusDataType_t>& info) {
                           return std::string(typeName(info.param));
                         });

TEST(ScaleKernel, SpotValues) {
  int8_t i8 = -7;
  scaleKernel(chorusInt8, 1, &i8, &i8, 2);
  EXPECT_EQ(i8, -3);  // truncation toward zero
  uint64_t u64 = UINT64_MAX;
  scaleKernel(chorusUint64, 1, &u64, &u64, 3);
  EXPECT_EQ(u64, UINT64_MAX / 3);
  uint16_t h = floatToHalf(1.0f);
  scaleKernel(chorusFloat16, 1, &h, &h, 3);
  EXPECT_EQ(h, 0x3555);
  float f = 1.0f;
  scaleKernel(chorusFloat32, 1, &f, &f, 3);
  EXPECT_EQ(f, 1.0f / 3.0f);
}

// ---- copyKernel

TEST(CopyKernel, CopiesToOneOrTwoDestinations) {
  std::mt19937_64 rng(5);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{(1 << 20) + 3},
                       size_t{(9 << 20) + 5}}) {
    for (int mode = 0; mode < 3; ++mode) {  // 0: dst0, 1: dst0+dst1, 2: dst0 == src, dst1
      SCOPED_TRACE(testing::Message() << "bytes=" << bytes << " mode=" << mode);
      const size_t total = bytes + 2 * kGuard;
      std::vector<uint8_t> src(total), d0(total, 0xa5), d1(total, 0x5a);
      for (auto& v : src) v = static_cast<uint8_t>(rng());
      const std::vector<uint8_t> src0 = src, d00 = d0, d10 = d1;
      uint8_t* out0 = mode == 2 ? src.data() + kGuard : d0.data() + kGuard;
      uint8_t* out1 = mode == 0 ? nullptr : d1.data() + kGuard;
      copyKernel(out0, out1, src.data() + kGuard, bytes);
      ASSERT_EQ(src, src0);
      ASSERT_EQ(std::memcmp(out0, src0.data() + kGuard, bytes), 0);
      if (out1 != nullptr) {
        ASSERT_EQ(std::memcmp(out1, src0.data() + kGuard, bytes), 0);
      }
      // Guards on either side untouched; unused destinations untouched.
      auto guardsOk = [&](const std::vector<uint8_t>& now, const std::vector<uint8_t>& before,
                          bool used) {
        if (!used) return now == before;
        return std::memcmp(now.data(), before.data(), kGuard) == 0 &&
               std::memcmp(now.data() + kGuard + bytes, before.data() + kGuard + bytes, kGuard) ==
                   0;
      };
      ASSERT_TRUE(guardsOk(d0, d00, mode != 2));
      ASSERT_TRUE(guardsOk(d1, d10, mode != 0));
    }
  }
}

}  // namespace
}  // namespace chorus
