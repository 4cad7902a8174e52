// The per-element reduction arithmetic: the one definition of what "a OP b" means for every
// Chorus type, shared by the host kernels (src/reduce/reduce.cc, g++) and the CUDA kernels
// (src/cuda/functors.h, kernels.cu, nvcc). Every function is marked CHORUS_HD, which is
// `__host__ __device__` (forced inline) under nvcc and a forced inline host function otherwise,
// so this header compiles as plain C++ too.
//
// Semantics (src/reduce/reduce.h documents them for the API):
//  * integers wrap around (computed in the unsigned type of the same width, no UB);
//  * float16 / bfloat16 are widened to float32, computed there (including avg's divide) and
//    rounded once to nearest even, subnormals kept;
//  * max(a, b) = a < b ? b : a, min(a, b) = b < a ? b : a (as std::max / std::min; the result
//    for NaN inputs is unspecified);
//  * avg: the final step is (a + b) / divisor with divisor > 0 (integers: the wrapped sum,
//    truncated toward zero); intermediate steps are sums (the callers select kSum for them).
//
// What stays outside: the host's hand-written AVX2 / AVX-512 paths for float16 / bfloat16
// (reduce.cc, intrinsics that give the same bits as these functions) and the device's hardware
// conversions, which are chosen here under __CUDA_ARCH__.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define CHORUS_HOST_DEVICE __host__ __device__
#define CHORUS_HD __host__ __device__ __forceinline__
#else
#define CHORUS_HOST_DEVICE
#if defined(__GNUC__)
#define CHORUS_HD __attribute__((always_inline)) inline
#else
#define CHORUS_HD inline
#endif
#endif

#if !defined(__CUDA_ARCH__)
#include <bit>

#include "base/half.h"
#endif

namespace chorus {

enum class RedKind : int { kSum, kProd, kMax, kMin, kAvg };

// ---- Element formats: how a value is stored in memory and the type the op runs in. ----

template <class T>
struct PlainElem {
  using Storage = T;
  using Compute = T;
  static CHORUS_HD T load(T v) { return v; }
  static CHORUS_HD T store(T v) { return v; }
};

// float16. Device: the hardware conversions (cvt.rn, subnormals kept). Host: the conversions of
// base/half.h rewritten without branches (every case computed, then selected with masks) so that
// the host kernels' loops vectorise; identical to halfToFloat / floatToHalf for every input
// (tests/test_reduce.cc and tests/test_cuda_host.cc run every 16-bit pattern).
struct HalfElem {
  using Storage = uint16_t;
  using Compute = float;
  static CHORUS_HD float load(uint16_t v) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(v));
#else
    const uint32_t em = v & 0x7fffu;
    const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
    const uint32_t normal = (em << 13) + (112u << 23);
    const uint32_t infNan = (em << 13) | 0x7f800000u;
    const uint32_t subnormal =
        std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
    const uint32_t isInfNan = 0u - static_cast<uint32_t>(em >= 0x7c00u);  // all ones or zero
    const uint32_t isNormal = 0u - static_cast<uint32_t>(em >= 0x0400u);
    const uint32_t bits =
        (infNan & isInfNan) | (normal & isNormal & ~isInfNan) | (subnormal & ~isNormal);
    return std::bit_cast<float>(bits | sign);
#endif
  }
  static CHORUS_HD uint16_t store(float f) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(f));
#else
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t ax = x & 0x7fffffffu;
    const uint32_t sign = (x >> 16) & 0x8000u;
    // Normal result: rebias, round to nearest even on the 13 dropped bits (a carry is fine).
    const uint32_t rebased = ax - (112u << 23);
    const uint32_t normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
    // Subnormal result: adding 0.5 puts the half's ulp (2^-24) at the float's last mantissa bit,
    // so the FPU's own round-to-nearest-even does the rounding.
    const uint32_t subnormal =
        std::bit_cast<uint32_t>(std::bit_cast<float>(ax) + 0.5f) - 0x3f000000u;
    const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
    const uint32_t isNan = 0u - static_cast<uint32_t>(ax > 0x7f800000u);
    const uint32_t isBig = 0u - static_cast<uint32_t>(ax >= 0x477ff000u);  // Inf (or NaN)
    const uint32_t isNormal = 0u - static_cast<uint32_t>(ax >= 0x38800000u);
    const uint32_t h = (nan & isNan) | (0x7c00u & isBig & ~isNan) | (normal & isNormal & ~isBig) |
                       (subnormal & ~isNormal);
    return static_cast<uint16_t>(h | sign);
#endif
  }
};

// bfloat16: the top half of a float32. Device: shift in, cvt.rn out; host: base/half.h (already
// branch-free enough to vectorise).
struct Bf16Elem {
  using Storage = uint16_t;
  using Compute = float;
  static CHORUS_HD float load(uint16_t v) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
#else
    return bf16ToFloat(v);
#endif
  }
  static CHORUS_HD uint16_t store(float f) {
#if defined(__CUDA_ARCH__)
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
    return floatToBf16(f);
#endif
  }
};

// ---- The ops on the compute type. ----

// avg's divisor type: int for integers narrower than int (so 200 ranks is not an int8), else C.
template <class C>
using DivisorOf = std::conditional_t<std::is_integral_v<C> && (sizeof(C) < sizeof(int)), int, C>;

template <class C>
CHORUS_HD C wrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class C>
CHORUS_HD C wrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    // At least unsigned int wide, so narrow types do not promote to (overflowing) signed int.
    using W = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
    return static_cast<C>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
  } else {
    return a * b;
  }
}

// s / d with d > 0: integers truncate toward zero (C++ division of the wrapped value).
template <class C>
CHORUS_HD C divideBy(C s, DivisorOf<C> d) {
  return static_cast<C>(s / d);
}

// a OP b on the compute type. kAvg is the final step: divisor must be > 0 (an intermediate avg
// step is kSum; toRedKind picks it).
template <class C, RedKind K>
struct RedOp {
  DivisorOf<C> divisor;  // kAvg only
  CHORUS_HD C operator()(C a, C b) const {
    if constexpr (K == RedKind::kSum) {
      return wrapAdd(a, b);
    } else if constexpr (K == RedKind::kProd) {
      return wrapMul(a, b);
    } else if constexpr (K == RedKind::kMax) {
      return a < b ? b : a;
    } else if constexpr (K == RedKind::kMin) {
      return b < a ? b : a;
    } else {
      return divideBy(wrapAdd(a, b), divisor);
    }
  }
};

}  // namespace chorus
