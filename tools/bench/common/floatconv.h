// Local IEEE binary16 and bfloat16 conversions (the tools use the public API only, so they do
// not borrow the library's). Header-only so that the unit tests can pin them.
#ifndef CHORUS_BENCH_FLOATCONV_H_
#define CHORUS_BENCH_FLOATCONV_H_

#include <cstdint>
#include <cstring>

namespace chorus_bench {

// binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits.
inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t frac = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (frac << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (frac << 13);
  } else if (frac == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: normalise the fraction.
    int e = -14;
    while ((frac & 0x400u) == 0) {
      frac <<= 1;
      --e;
    }
    frac &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(e + 127) << 23) | (frac << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t absBits = bits & 0x7fffffffu;
  if (absBits >= 0x7f800000u) {  // inf / nan
    return sign | 0x7c00u | (absBits > 0x7f800000u ? 0x200u : 0u);
  }
  const int exp = static_cast<int>(absBits >> 23) - 127;
  if (exp > 15) return sign | 0x7c00u;                // overflow
  uint32_t mant = (absBits & 0x7fffffu) | 0x800000u;  // 24 significant bits
  int shift;                                          // bits to drop from mant
  uint32_t halfExp;
  if (exp >= -14) {
    shift = 13;
    halfExp = static_cast<uint32_t>(exp + 15);
  } else {
    shift = 13 + (-14 - exp);  // subnormal
    if (shift > 24) return sign;
    halfExp = 0;
  }
  uint32_t kept = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (kept & 1u))) ++kept;
  // kept includes the implicit bit for normals; adding it to the exponent field handles a
  // carry out of the fraction (and subnormal -> normal) for free.
  uint32_t result;
  if (halfExp == 0) {
    result = kept;  // subnormal (may have rounded up to the smallest normal)
  } else {
    result = (halfExp << 10) + (kept - 0x400u);
  }
  if (result >= 0x7c00u) result = 0x7c00u;
  return sign | static_cast<uint16_t>(result);
}

inline float bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_FLOATCONV_H_
