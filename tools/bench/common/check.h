// Input generation and result checking.
//
// Every input element is a function of (seed, rank, index), so the expected output of any
// collective can be computed on any rank from the generators of all ranks, independently of the
// library. Values are chosen so the exact result is known whatever order the library reduces in:
//   sum, avg  small integers; at most maxExact/|v| ranks contribute to an element, so every
//             partial sum is an exactly representable integer (half: 2^11, bfloat16: 2^8,
//             int8: 127, ...); avg inputs are non-negative
//   prod      +-1 or +-2 with at most two 2s per element: products are +-1, +-2, +-4
//   max, min  any value of the type (floats: non-zero multiples of 1/256 below 4096, so no
//   and copies NaN, no infinity and no -0 / +0 tie)
// Results are compared bit for bit, except float avg (within 2 ULP: the library may divide
// before or after summing).
#ifndef CHORUS_BENCH_CHECK_H_
#define CHORUS_BENCH_CHECK_H_

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>

namespace chorus_bench {

// What one checked run's data looks like.
struct DataSpec {
  chorusDataType_t type = chorusFloat32;
  int op = -1;  // chorusRedOp_t, or kNoOp for collectives that only move data
  int nranks = 1;
  uint64_t seed = 0;
};

// The byte every output buffer is filled with before a checked run.
constexpr unsigned char kPoison = 0xA5;

// Writes rank `rank`'s input elements [first, first + n) to dst (n elements).
void fillInput(const DataSpec& spec, int rank, size_t first, size_t n, void* dst);

// Writes, for each element in [first, first + n), the reduction by spec.op over the inputs of all
// ranks to dst (n elements).
void reduceInputs(const DataSpec& spec, size_t first, size_t n, void* dst);

// The number of elements of got that differ from expected.
size_t countWrong(const DataSpec& spec, const void* got, const void* expected, size_t n);

// Units in the last place between two values of a floating type given as bits (tests use it).
uint64_t ulpDistance(chorusDataType_t type, const void* a, const void* b);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_CHECK_H_
