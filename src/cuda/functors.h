// Element-wise reduction functors shared by the CUDA kernels (nvcc, device code) and the host
// tests (g++): one definition of what "a OP b" means for every Chorus type, so CI checks on the
// host exactly the arithmetic the GPU runs.
//
// Semantics (identical to the host engine, src/reduce/reduce.h):
//  * integers wrap around (computed in the unsigned type of the same width, no UB);
//  * float16 / bfloat16 are widened to float32, computed there (including avg's divide) and
//    rounded once to nearest even;
//  * max(a, b) = a < b ? b : a, min(a, b) = b < a ? b : a (NaN results unspecified);
//  * avg: divisor 0 is an intermediate step (a sum); divisor > 0 is the final step,
//    (a + b) / divisor, integers truncating toward zero.
//
// The 16-bit conversions differ only in how they are computed: on the host the portable
// conversions of src/reduce/half.h, on the device the hardware cvt.rn instructions; both round
// to nearest even without flushing subnormals, so results agree for every non-NaN input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "chorus/chorus.h"
#include "reduce/type_dispatch.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define CHORUS_HD __host__ __device__ __forceinline__
#else
#define CHORUS_HD inline
#endif

#if !defined(__CUDA_ARCH__)
#include "reduce/half.h"
#endif

namespace chorus::cuda {

enum class RedKind : int { kSum, kProd, kMax, kMin, kAvg };

// ---- Storage formats: how an element is kept in memory and the type the op runs in. ----

template <class T>
struct PlainElem {
  using Storage = T;
  using Compute = T;
  static CHORUS_HD T load(T v) { return v; }
  static CHORUS_HD T store(T v) { return v; }
};

struct HalfElem {
  using Storage = uint16_t;
  using Compute = float;
  static CHORUS_HD float load(uint16_t v) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(v));
#else
    return halfToFloat(v);
#endif
  }
  static CHORUS_HD uint16_t store(float f) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(f));
#else
    return floatToHalf(f);
#endif
  }
};

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

// The divisor's type: int for integers narrower than int (so 200 ranks is not an int8), else C.
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

template <class C, RedKind K>
struct RedOp {
  DivisorOf<C> divisor;  // kAvg: 0 (or less) = an intermediate step (sum), > 0 = final divide
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
      const C s = wrapAdd(a, b);
      return divisor > DivisorOf<C>(0) ? static_cast<C>(s / divisor) : s;
    }
  }
};

// dst = a OP b on stored elements.
template <class E, RedKind K>
struct ReduceFunctor {
  using S = typename E::Storage;
  using C = typename E::Compute;
  RedOp<C, K> op;
  CHORUS_HD S operator()(S a, S b) const { return E::store(op(E::load(a), E::load(b))); }
};

// dst = x0 OP x1 OP ... OP x(n-1) in rank order, accumulated in the compute type and stored once
// (float16 / bfloat16: summed in float32, rounded once at the end); avg: the sum divided by n at
// the end (integers: the wrapped sum, truncated toward zero). The direct IPC AllReduce's kernel.
template <class E, RedKind K>
struct ReduceManyFunctor {
  using S = typename E::Storage;
  using C = typename E::Compute;
  static constexpr RedKind kStep = K == RedKind::kAvg ? RedKind::kSum : K;
  RedOp<C, kStep> step;
  DivisorOf<C> n;  // kAvg: the divisor (the number of ranks)
  CHORUS_HD C first(S x) const { return E::load(x); }
  CHORUS_HD C next(C acc, S x) const { return step(acc, E::load(x)); }
  CHORUS_HD S finish(C acc) const {
    if constexpr (K == RedKind::kAvg) {
      return E::store(n > DivisorOf<C>(1) ? static_cast<C>(acc / n) : acc);
    } else {
      return E::store(acc);
    }
  }
};

// ---- Host-side dispatch from the API's enums (the kernels' launcher and the tests use it). ----

// Calls fn.template operator()<E>() with the storage format of `type`; R{} for an unknown type.
template <class R, class Fn>
R withElem(chorusDataType_t type, Fn&& fn) {
  return dispatchType<PlainElem, HalfElem, Bf16Elem, R>(type, std::forward<Fn>(fn));
}

// Calls fn.template operator()<K>() for `op` (avg with divisor <= 0 is a sum); R{} if unknown.
template <class R, class Fn>
R withKind(chorusRedOp_t op, int avgDivisor, Fn&& fn) {
  switch (op) {
    case chorusSum:
      return fn.template operator()<RedKind::kSum>();
    case chorusProd:
      return fn.template operator()<RedKind::kProd>();
    case chorusMax:
      return fn.template operator()<RedKind::kMax>();
    case chorusMin:
      return fn.template operator()<RedKind::kMin>();
    case chorusAvg:
      return avgDivisor > 0 ? fn.template operator()<RedKind::kAvg>()
                            : fn.template operator()<RedKind::kSum>();
    default:
      return R{};
  }
}

// One element through the functors on the host: *out = a OP b (the tests' entry point).
// Returns false for an unknown type or op.
inline bool reduceElementHost(chorusDataType_t type, chorusRedOp_t op, int avgDivisor,
                              const void* a, const void* b, void* out) {
  return withElem<bool>(type, [&]<class E>() {
    return withKind<bool>(op, avgDivisor, [&]<RedKind K>() {
      using S = typename E::Storage;
      using C = typename E::Compute;
      S x, y;
      __builtin_memcpy(&x, a, sizeof(S));
      __builtin_memcpy(&y, b, sizeof(S));
      const ReduceFunctor<E, K> f{RedOp<C, K>{static_cast<DivisorOf<C>>(avgDivisor)}};
      const S r = f(x, y);
      __builtin_memcpy(out, &r, sizeof(S));
      return true;
    });
  });
}

// *out = in[0] OP ... OP in[n-1] through ReduceManyFunctor on the host (the tests' entry point);
// avg divides by n. Returns false for an unknown type or op or n < 1.
inline bool reduceManyElementHost(chorusDataType_t type, chorusRedOp_t op, int n,
                                  const void* const* in, void* out) {
  if (n < 1) return false;
  return withElem<bool>(type, [&]<class E>() {
    return withKind<bool>(op, n, [&]<RedKind K>() {
      using S = typename E::Storage;
      using C = typename E::Compute;
      const ReduceManyFunctor<E, K> f{{}, static_cast<DivisorOf<C>>(n)};
      S x;
      __builtin_memcpy(&x, in[0], sizeof(S));
      C acc = f.first(x);
      for (int p = 1; p < n; ++p) {
        __builtin_memcpy(&x, in[p], sizeof(S));
        acc = f.next(acc, x);
      }
      const S r = f.finish(acc);
      __builtin_memcpy(out, &r, sizeof(S));
      return true;
    });
  });
}

}  // namespace chorus::cuda
