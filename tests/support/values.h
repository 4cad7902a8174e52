// Input generators. Every rank's input is a pure function of (type, op, seed, rank, index), so any
// rank can recompute any other rank's input, and the reference needs no communication.
//
// The values are chosen so that every reduction the tests check is exact in any order:
//  * sum/avg, floats: small multiples of a power of two whose partial sums stay exact
//    (bfloat16: integers in [-32, 32], so |sum| <= 256 with 8 ranks; float16: halves in
//    [-64, 64], |sum| <= 512 in units of 1/2; float32: sixteenths in [-4096, 4096];
//    float64: 1/1024ths in [-2^20, 2^20]);
//  * prod, floats: +-{0.5, 1, 1, 2} (powers of two: products are exact and stay in range);
//  * min/max, floats: m * 2^e, |m| <= 127, |e| <= 4 (exact in every format);
//  * int8/uint8/uint32/uint64 sum/avg/prod: any bits (wrap-around is defined, the reference
//    uses the same modular arithmetic); int32 sum/avg in [-2^27, 2^27), int64 in [-2^59, 2^59)
//    (no signed overflow with 8 ranks, and int64 values need more than a double's 53 bits);
//    signed prod: +-{1, 2, 3} (int8 products wrap, modular like the reference);
//  * min/max, integers: any bits;
//  * with more than 8 ranks (setValueRanks), the sum/avg ranges shrink by ceil(ranks / 8), so
//    the same bounds hold at any rank count;
//  * kNoOp (data movement): any bits, floats with a cleared top exponent bit (finite).
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>

namespace ctest {

// The rank count the inputs are made for (every rank of a job, and its reference, must set the
// same before generating inputs); up to 8 (the default) changes nothing.
void setValueRanks(int nranks);

// A 64-bit hash of the three inputs (splitmix64 rounds).
uint64_t mix(uint64_t seed, uint64_t rank, uint64_t index);

// Writes typeSize(type) bytes: element `index` of rank `rank`'s input.
void value(chorusDataType_t type, chorusRedOp_t op, uint64_t seed, int rank, uint64_t index,
           void* dst);
// Elements firstIndex .. firstIndex+count-1 of rank `rank`'s input, contiguous at dst.
void fillValues(chorusDataType_t type, chorusRedOp_t op, uint64_t seed, int rank,
                uint64_t firstIndex, size_t count, void* dst);

}  // namespace ctest
