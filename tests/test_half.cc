// The one float16 / bfloat16 conversion (src/base/half.h), used by the library's kernels, the
// benchmark tools' checkers and the tests' references, against a reference written differently:
// values come from the format's definition (sign, exponent, fraction -> ldexp in double), and
// rounding finds the nearest representable value by binary search in the table of every finite
// value, ties to the even bit pattern. Widening is checked for all 65536 patterns of each format;
// narrowing for every float that is a halfway point between two neighbours (and the floats just
// above and below it), every representable value, and a sweep of all float bit patterns with a
// prime stride.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/half.h"
#include "reduce/half.h"  // the kernels' forwarding header gives the same functions

namespace {

struct Format {
  const char* name;
  int expBits, fracBits, bias;
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
};

const Format kHalf{"float16", 5, 10, 15, chorus::floatToHalf, chorus::halfToFloat};
const Format kBf16{"bfloat16", 8, 7, 127, chorus::floatToBf16, chorus::bf16ToFloat};

// The value of a bit pattern from the definition; NaN for NaN, +-inf for infinity.
double RefValue(const Format& f, uint16_t bits) {
  const bool neg = (bits >> (f.expBits + f.fracBits)) & 1u;
  const int e = (bits >> f.fracBits) & ((1 << f.expBits) - 1);
  const int m = bits & ((1 << f.fracBits) - 1);
  double v;
  if (e == (1 << f.expBits) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.fracBits);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << f.fracBits)), e - f.bias - f.fracBits);
  }
  return neg ? -v : v;
}

// The positive finite values in increasing order (pattern i is table[i]), and the value one step
// past the largest, which stands for infinity when rounding (the next power of two).
struct Table {
  std::vector<double> values;
  double pastMax;
  uint16_t infBits;
};

Table MakeTable(const Format& f) {
  Table t;
  t.infBits = static_cast<uint16_t>(((1 << f.expBits) - 1) << f.fracBits);
  for (uint32_t b = 0; b < t.infBits; ++b)
    t.values.push_back(RefValue(f, static_cast<uint16_t>(b)));
  t.pastMax = std::ldexp(1.0, (1 << f.expBits) - 1 - f.bias);
  return t;
}

// Round x (finite or not) to the nearest pattern, ties to the even pattern.
uint16_t RefNarrow(const Format& f, const Table& t, float x) {
  const uint16_t sign = std::signbit(x) ? static_cast<uint16_t>(1u << (f.expBits + f.fracBits)) : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return sign | t.infBits;
  // The largest table entry <= a.
  const auto it = std::upper_bound(t.values.begin(), t.values.end(), a);
  const size_t lo = static_cast<size_t>(it - t.values.begin()) - 1;
  const double vlo = t.values[lo];
  const double vhi = lo + 1 < t.values.size() ? t.values[lo + 1] : t.pastMax;
  const uint16_t blo = static_cast<uint16_t>(lo), bhi = static_cast<uint16_t>(lo + 1);
  uint16_t pick;
  if (a - vlo < vhi - a) {
    pick = blo;
  } else if (vhi - a < a - vlo) {
    pick = bhi;
  } else {
    pick = (blo & 1u) ? bhi : blo;
  }
  return sign | pick;  // bhi == infBits past the largest finite value: infinity
}

void CheckWiden(const Format& f) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double want = RefValue(f, static_cast<uint16_t>(b));
    const float got = f.widen(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << f.name << " 0x" << std::hex << b;
      // A NaN narrows back to a NaN of the same sign.
      const uint16_t back = f.narrow(got);
      ASSERT_TRUE(std::isnan(RefValue(f, back))) << f.name << " 0x" << std::hex << b;
      ASSERT_EQ(back >> 15, b >> 15) << f.name << " 0x" << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << f.name << " 0x" << std::hex << b;
      ASSERT_EQ(std::signbit(got), (b >> 15) != 0) << f.name << " 0x" << std::hex << b;
    }
  }
}

void CheckNarrow(const Format& f, float x, const Table& t) {
  const uint16_t want = RefNarrow(f, t, x);
  const uint16_t got = f.narrow(x);
  ASSERT_EQ(got, want) << f.name << " of " << x << " (float bits 0x" << std::hex
                       << std::bit_cast<uint32_t>(x) << ")";
}

void CheckNarrowAll(const Format& f) {
  const Table t = MakeTable(f);
  // Every value, every halfway point between neighbours (exact in float: one bit more than the
  // format), and the floats next to them, both signs.
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double next = i + 1 < t.values.size() ? t.values[i + 1] : t.pastMax;
    for (const double v : {t.values[i], 0.5 * (t.values[i] + next)}) {
      const float x = static_cast<float>(v);
      ASSERT_EQ(static_cast<double>(x), v);
      for (const float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
        CheckNarrow(f, y, t);
        CheckNarrow(f, -y, t);
      }
    }
  }
  // A sweep of every float bit pattern with a prime stride (about 16.7 million floats).
  for (uint64_t b = 0; b <= 0xffffffffull; b += 257) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(RefValue(f, f.narrow(x)))) << f.name << " 0x" << std::hex << b;
      continue;
    }
    CheckNarrow(f, x, t);
  }
  // The extremes of float: the largest finite, the smallest normal and subnormal, infinities.
  for (const float x : {std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                        std::numeric_limits<float>::denorm_min(), INFINITY, 0.0f}) {
    CheckNarrow(f, x, t);
    CheckNarrow(f, -x, t);
  }
}

TEST(Half, Float16WidensExactlyForAllPatterns) {
  CheckWiden(kHalf);
}
TEST(Half, Bfloat16WidensExactlyForAllPatterns) {
  CheckWiden(kBf16);
}
TEST(Half, Float16NarrowsToNearestEven) {
  CheckNarrowAll(kHalf);
}
TEST(Half, Bfloat16NarrowsToNearestEven) {
  CheckNarrowAll(kBf16);
}

TEST(Half, KnownValues) {
  EXPECT_EQ(chorus::floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(chorus::floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(chorus::floatToHalf(65520.0f), 0x7c00);               // halfway to 65536: to infinity
  EXPECT_EQ(chorus::floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // halfway to 2^-24: to even 0
  EXPECT_EQ(chorus::floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 * 2^-24: to even 2
  EXPECT_EQ(chorus::floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(chorus::floatToBf16(1.00390625f), 0x3f80);                        // tie, to even
  EXPECT_EQ(chorus::floatToBf16(1.01171875f), 0x3f82);                        // tie, to even
  EXPECT_EQ(chorus::floatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(chorus::bf16ToFloat(0x4049), 3.140625f);
}

}  // namespace
