// What the sweep visits: the count argument of each row and the seeds of each row's data.
#ifndef CHORUS_BENCH_SWEEP_H_
#define CHORUS_BENCH_SWEEP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "args.h"
#include "harness.h"

namespace chorus_bench {

// The count argument of each row, in order: sizes from minBytes to maxBytes (times stepFactor, or
// plus stepBytes), as counts of `typeBytes` elements (divided by nranks for countPerRank
// collectives), each count once.
std::vector<size_t> sweepCounts(const Options& o, const CollDesc& d, size_t typeBytes, int nranks);

// A seed derived from two: each row, placement and checked iteration gets its own data.
uint64_t mixSeed(uint64_t a, uint64_t b);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_SWEEP_H_
