// Element types as the tests see them: names, sizes, half/bfloat16 conversions, printing and
// ULP distances. Written independently of the library (no library internals are included).
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <string>

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
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);

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
