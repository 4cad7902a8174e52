// From the API's datatype enum to a compile-time element format: the one switch shared by the
// host reduction kernels (reduce.cc, formats Plain/Half/Bf16) and the CUDA functors
// (cuda/functors.h, formats PlainElem/HalfElem/Bf16Elem). Host code only; compiles under nvcc.
#pragma once

#include <cstdint>
#include <utility>

#include "chorus/chorus.h"

namespace chorus {

// Calls fn.template operator()<F>() with the format of `type`: PlainT<T> for the integer and
// IEEE types, HalfT for float16, Bf16T for bfloat16; R{} for an unknown type.
template <template <class> class PlainT, class HalfT, class Bf16T, class R, class Fn>
R dispatchType(chorusDataType_t type, Fn&& fn) {
  switch (type) {
    case chorusInt8:
      return fn.template operator()<PlainT<int8_t>>();
    case chorusUint8:
      return fn.template operator()<PlainT<uint8_t>>();
    case chorusInt32:
      return fn.template operator()<PlainT<int32_t>>();
    case chorusUint32:
      return fn.template operator()<PlainT<uint32_t>>();
    case chorusInt64:
      return fn.template operator()<PlainT<int64_t>>();
    case chorusUint64:
      return fn.template operator()<PlainT<uint64_t>>();
    case chorusFloat16:
      return fn.template operator()<HalfT>();
    case chorusFloat32:
      return fn.template operator()<PlainT<float>>();
    case chorusFloat64:
      return fn.template operator()<PlainT<double>>();
    case chorusBfloat16:
      return fn.template operator()<Bf16T>();
    default:
      return R{};
  }
}

}  // namespace chorus
