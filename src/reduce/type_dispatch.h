// From the API's enums to the compile-time element formats and ops of reduce/arith.h: the one
// switch on the datatype and the one rule for avg's steps, shared by the host reduction kernels
// (reduce.cc) and the CUDA kernels' launcher and functors (cuda/kernels.cu, cuda/functors.h).
// Host code only; compiles under nvcc.
#pragma once

#include <cstdint>

#include "chorus/chorus.h"
#include "reduce/arith.h"

namespace chorus {

// Calls fn.template operator()<E>() with the element format of `type`: PlainElem<T> for the
// integer and IEEE types, HalfElem for float16, Bf16Elem for bfloat16; R{} for an unknown type.
template <class R, class Fn>
R withElem(chorusDataType_t type, Fn&& fn) {
  switch (type) {
    case chorusInt8:
      return fn.template operator()<PlainElem<int8_t>>();
    case chorusUint8:
      return fn.template operator()<PlainElem<uint8_t>>();
    case chorusInt32:
      return fn.template operator()<PlainElem<int32_t>>();
    case chorusUint32:
      return fn.template operator()<PlainElem<uint32_t>>();
    case chorusInt64:
      return fn.template operator()<PlainElem<int64_t>>();
    case chorusUint64:
      return fn.template operator()<PlainElem<uint64_t>>();
    case chorusFloat16:
      return fn.template operator()<HalfElem>();
    case chorusFloat32:
      return fn.template operator()<PlainElem<float>>();
    case chorusFloat64:
      return fn.template operator()<PlainElem<double>>();
    case chorusBfloat16:
      return fn.template operator()<Bf16Elem>();
    default:
      return R{};
  }
}

// The op kind of `op`: avg with avgDivisor > 0 is the final step (kAvg, a divide), avg with
// avgDivisor <= 0 an intermediate step (kSum). False for an unknown op.
constexpr bool toRedKind(chorusRedOp_t op, int avgDivisor, RedKind* kind) {
  switch (op) {
    case chorusSum:
      *kind = RedKind::kSum;
      return true;
    case chorusProd:
      *kind = RedKind::kProd;
      return true;
    case chorusMax:
      *kind = RedKind::kMax;
      return true;
    case chorusMin:
      *kind = RedKind::kMin;
      return true;
    case chorusAvg:
      *kind = avgDivisor > 0 ? RedKind::kAvg : RedKind::kSum;
      return true;
    default:
      return false;
  }
}

// Calls fn.template operator()<K>() with K = the kind toRedKind gives; R{} for an unknown op.
template <class R, class Fn>
R withKind(chorusRedOp_t op, int avgDivisor, Fn&& fn) {
  RedKind kind = RedKind::kSum;
  if (!toRedKind(op, avgDivisor, &kind)) return R{};
  switch (kind) {
    case RedKind::kSum:
      return fn.template operator()<RedKind::kSum>();
    case RedKind::kProd:
      return fn.template operator()<RedKind::kProd>();
    case RedKind::kMax:
      return fn.template operator()<RedKind::kMax>();
    case RedKind::kMin:
      return fn.template operator()<RedKind::kMin>();
    case RedKind::kAvg:
      return fn.template operator()<RedKind::kAvg>();
  }
  return R{};
}

}  // namespace chorus
