// Private to the support library: per-type templates for the generator and the reference.
#pragma once

#include <chorus/chorus.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "test_types.h"
#include "values.h"

namespace ctest::detail {

// Calls fn.template operator()<T>() with the storage type of `type`. Returns false for an
// unknown type.
template <class Fn>
bool withType(chorusDataType_t type, Fn&& fn) {
  switch (type) {
    case chorusInt8:
      fn.template operator()<int8_t>();
      return true;
    case chorusUint8:
      fn.template operator()<uint8_t>();
      return true;
    case chorusInt32:
      fn.template operator()<int32_t>();
      return true;
    case chorusUint32:
      fn.template operator()<uint32_t>();
      return true;
    case chorusInt64:
      fn.template operator()<int64_t>();
      return true;
    case chorusUint64:
      fn.template operator()<uint64_t>();
      return true;
    case chorusFloat16:
      fn.template operator()<Half>();
      return true;
    case chorusBfloat16:
      fn.template operator()<Bf16>();
      return true;
    case chorusFloat32:
      fn.template operator()<float>();
      return true;
    case chorusFloat64:
      fn.template operator()<double>();
      return true;
    default:
      return false;
  }
}

template <class T>
inline constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, Bf16>;

// Float types: conversion to and from the wide type the reference computes in (exact for the
// generated inputs). `Acc` is the type the average is computed in: float32, float64 for double.
template <class T>
struct FloatTraits;
template <>
struct FloatTraits<float> {
  using Acc = float;
  static double toDouble(float v) { return v; }
  static float fromDouble(double d) { return static_cast<float>(d); }
  static float fromAcc(float a) { return a; }
};
template <>
struct FloatTraits<double> {
  using Acc = double;
  static double toDouble(double v) { return v; }
  static double fromDouble(double d) { return d; }
  static double fromAcc(double a) { return a; }
};
template <>
struct FloatTraits<Half> {
  using Acc = float;
  static double toDouble(Half v) { return halfToFloat(v.bits); }
  static Half fromDouble(double d) { return Half{floatToHalf(static_cast<float>(d))}; }
  static Half fromAcc(float a) { return Half{floatToHalf(a)}; }
};
template <>
struct FloatTraits<Bf16> {
  using Acc = float;
  static double toDouble(Bf16 v) { return bf16ToFloat(v.bits); }
  static Bf16 fromDouble(double d) { return Bf16{floatToBf16(static_cast<float>(d))}; }
  static Bf16 fromAcc(float a) { return Bf16{floatToBf16(a)}; }
};

// Uniform integer in [lo, hi] from the high bits of a hash (multiply-shift, no division).
inline int64_t uniform(uint64_t h, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>((static_cast<unsigned __int128>(h) * span) >> 64);
}

template <class T>
T fromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));  // little endian: the low bytes
  return v;
}

// The sum/avg ranges below keep every partial sum exact (and signed integers from overflowing)
// with up to 8 ranks; with more (setValueRanks) they shrink by ceil(ranks / 8).
int64_t sumRangeDivisor();

// The exact value (as a double) of a float input for a reducing op; every value is representable
// in T, so T's encoding of it converts back to the same double.
template <class T>
double floatValue(chorusRedOp_t op, uint64_t h) {
  const int64_t s = sumRangeDivisor();
  switch (op) {
    case chorusSum:
    case chorusAvg:
      if constexpr (std::is_same_v<T, Bf16>) return double(uniform(h, -32 / s, 32 / s));
      if constexpr (std::is_same_v<T, Half>) return double(uniform(h, -128 / s, 128 / s)) / 2.0;
      if constexpr (std::is_same_v<T, float>)
        return double(uniform(h, -65536 / s, 65536 / s)) / 16.0;
      return double(uniform(h, -(int64_t{1} << 30) / s, (int64_t{1} << 30) / s)) / 1024.0;
    case chorusProd: {
      static constexpr double kMag[8] = {0.5, 1.0, 1.0, 2.0, -0.5, -1.0, -1.0, -2.0};
      return kMag[h & 7];
    }
    default: {  // min, max
      static constexpr double kPow2[9] = {1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1, 2, 4, 8, 16};
      return double(uniform(h, -127, 127)) * kPow2[uniform(h << 24, 0, 8)];
    }
  }
}

// Element `h` (a hash) as a generated value of type T for op.
template <class T>
T generate(chorusRedOp_t op, uint64_t h) {
  if constexpr (kIsFloat<T>) {
    if (op >= chorusSum && op <= chorusAvg) return FloatTraits<T>::fromDouble(floatValue<T>(op, h));
    // Data movement: any finite bit pattern (the top exponent bit cleared).
    constexpr uint64_t kTopExp = sizeof(T) == 2   ? 0x4000u
                                 : sizeof(T) == 4 ? 0x40000000u
                                                  : 0x4000000000000000u;
    return fromBits<T>(h & ~kTopExp);
  } else {
    if (op == chorusSum || op == chorusAvg) {
      const int64_t s = sumRangeDivisor();
      if constexpr (std::is_same_v<T, int32_t>)
        return static_cast<T>(uniform(h, -(1 << 27) / s, (1 << 27) / s - 1));
      if constexpr (std::is_same_v<T, int64_t>)
        return static_cast<T>(uniform(h, -(int64_t{1} << 59) / s, (int64_t{1} << 59) / s - 1));
    }
    if (op == chorusProd && std::is_signed_v<T>) {
      const int64_t m = uniform(h, 1, 3);
      return static_cast<T>((h & (uint64_t{1} << 40)) ? -m : m);
    }
    if (op == chorusProd && sizeof(T) == 1) return static_cast<T>(uniform(h, 1, 3));
    return fromBits<T>(h);
  }
}

// Rank `rank`'s inputs for (type, op, seed) are the splitmix64 sequence started at streamBase:
// element i hashes base + i * golden. The base is computed once per rank and call.
inline uint64_t streamBase(chorusDataType_t type, chorusRedOp_t op, uint64_t seed, int rank) {
  return mix(seed * 131 + static_cast<uint64_t>(type) * 7 + static_cast<uint64_t>(op),
             static_cast<uint64_t>(rank), 0x5eed);
}

inline uint64_t elementHash(uint64_t base, uint64_t index) {
  uint64_t z = base + index * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
T genAt(chorusRedOp_t op, uint64_t base, uint64_t index) {
  return generate<T>(op, elementHash(base, index));
}

}  // namespace ctest::detail
