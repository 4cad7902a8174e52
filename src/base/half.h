// Scalar conversions between float32 and the two 16-bit floating-point formats Chorus reduces:
// IEEE 754 binary16 ("half", chorusFloat16) and bfloat16 (chorusBfloat16).
//
// Every narrowing conversion rounds to nearest, ties to even, and never flushes subnormals.
// NaNs stay NaNs (quietened, sign and the top payload bits kept). The one copy of these
// conversions: the reduction kernels (src/reduce/half.h forwards here), the benchmark tools'
// checkers (tools/bench/common/check.cc) and the tests' reference computations (tests/support)
// all use it, so it is written for clarity first; the kernels have vector paths that produce
// identical results for every non-NaN value. tests/test_half.cc checks it exhaustively against an
// independent reference (nearest representable value found by searching the value table in
// double precision).
#pragma once

#include <bit>
#include <cstdint>

namespace chorus {

// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  uint32_t bits;
  if (em >= 0x7c00u) {
    // Inf (mantissa 0) or NaN (payload moved to the top of the float mantissa).
    bits = 0x7f800000u | ((em & 0x3ffu) << 13);
  } else if (em >= 0x0400u) {
    // Normal: shift into place and rebias the exponent by 127 - 15 = 112.
    bits = (em << 13) + (112u << 23);
  } else {
    // Zero or subnormal: em * 2^-24, exact in float (and a normal float unless zero).
    bits = std::bit_cast<uint32_t>(static_cast<float>(em) * 0x1p-24f);
  }
  return std::bit_cast<float>(bits | sign);
}

inline uint16_t floatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    // Inf stays Inf; a NaN keeps its top payload bits and gets the quiet bit (so it stays NaN).
    const uint32_t nan = ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u;
    return static_cast<uint16_t>(sign | 0x7c00u | nan);
  }
  if (ax >= 0x477ff000u) {
    // >= 65520 = 65504 + half an ulp: rounds (ties to even, 65504's mantissa is odd) to Inf.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  uint32_t mant;  // the (unrounded, truncated) half bits
  uint32_t rem;   // the bits shifted out
  uint32_t halfway;
  if (ax >= 0x38800000u) {
    // Result is a normal half (>= 2^-14): rebias, then drop 13 mantissa bits.
    const uint32_t rebased = ax - (112u << 23);
    mant = rebased >> 13;
    rem = rebased & 0x1fffu;
    halfway = 0x1000u;
  } else {
    // Result is subnormal or zero: value / 2^-24 = significand * 2^(e - 126).
    const uint32_t e = ax >> 23;
    const uint32_t shift = 126u - e;  // >= 14 here
    if (shift > 24u) return sign;     // < 2^-25: rounds to (signed) zero
    const uint32_t significand = (ax & 0x7fffffu) | 0x800000u;
    mant = significand >> shift;
    rem = significand & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  }
  // Round to nearest, ties to even. A carry out of the mantissa correctly bumps the exponent
  // (largest subnormal -> smallest normal, 65504 cannot carry here because of the check above).
  if (rem > halfway || (rem == halfway && (mant & 1u))) ++mant;
  return static_cast<uint16_t>(sign | mant);
}

// bfloat16: the top 16 bits of a float32.
inline float bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN: keep sign/payload top, set quiet bit
  }
  // Adding 0x7fff (+1 when the kept part is odd) carries into bit 16 exactly when the dropped
  // half is above the halfway point, or at it with an odd kept part. Overflow gives Inf.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace chorus
