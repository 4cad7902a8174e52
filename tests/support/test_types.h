// Element types as the tests see them: names, sizes, half/bfloat16 conversions, printing and
// ULP distances. Written independently of the library, except the float16 / bfloat16
// conversions: those are the library's one copy (src/base/half.h), which tests/test_half.cc checks
// exhaustively against an independent reference.
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/half.h"

namespace ctest {

inline constexpr chorusDataType_t kAllTypes[] = {
    chorusInt8,   chorusUint8,   chorusInt32,    chorusUint32,  chorusInt64,
    chorusUint64, chorusFloat16, chorusBfloat16, chorusFloat32, chorusFloat64};
inline constexpr chorusRedOp_t kAllOps[] = {chorusSum, chorusProd, chorusMin, chorusMax, chorusAvg};

// The op used for collectives that do not reduce: inputs are arbitrary (finite) bit patterns.
inline constexpr chorusRedOp_t kNoOp = chorusNumOps;

const char* typeName(chorusDataType_t type);
const char* opName(chorusRedOp_t op);
// Size of one element from the tests' own table (0 for an unknown type).
size_t typeSize(chorusDataType_t type);
bool isFloatType(chorusDataType_t type);

// IEEE 754 binary16 and bfloat16, round to nearest even.
using chorus::bf16ToFloat;
using chorus::floatToBf16;
using chorus::floatToHalf;
using chorus::halfToFloat;

// Storage types for the two 16-bit float formats, so that templates can tell them apart.
struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

// "value (0xbits)" for the element at p.
std::string formatElement(chorusDataType_t type, const void* p);
// Distance in units in the last place between two elements of a float type (0 when equal,
// +0 and -0 are equal). For integer types: 0 when the bits are equal, otherwise UINT64_MAX.
uint64_t ulpDistance(chorusDataType_t type, const void* a, const void* b);

}  // namespace ctest
