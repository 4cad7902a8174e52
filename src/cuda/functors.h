// The reduction functors of the CUDA kernels (src/cuda/kernels.cu, nvcc, device code), also
// compiled by g++ for the host tests: the per-element arithmetic itself (element formats, the
// ops, the 16-bit conversions) is reduce/arith.h, the one definition the host kernels
// (src/reduce/reduce.cc) use too, so CI checks on the host exactly the arithmetic the GPU runs.
// What this file adds is the shape the kernels need: a two-input functor and the n-input fold
// of the direct IPC AllReduce.
//
// Semantics: those of reduce/arith.h (integers wrap, float16 / bfloat16 computed in float32 and
// rounded once to nearest even, max / min as std::max / std::min, avg: divisor 0 an
// intermediate sum, > 0 the final divide). The 16-bit conversions differ only in how they are
// computed: on the host the branch-free forms of base/half.h, on the device the hardware cvt.rn
// instructions; both round to nearest even without flushing subnormals, so results agree for
// every non-NaN input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/chorus.h"
#include "reduce/arith.h"
#include "reduce/type_dispatch.h"

// The element formats, RedOp, RedKind, withElem and withKind are chorus:: names (reduce/).
namespace chorus::cuda {

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
      return E::store(n > DivisorOf<C>(1) ? divideBy(acc, n) : acc);
    } else {
      return E::store(acc);
    }
  }
};

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
