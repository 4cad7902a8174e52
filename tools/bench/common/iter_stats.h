// -I: the statistics of the per-iteration times of one row (min, max, p99, coefficient of
// variation).
#ifndef CHORUS_BENCH_ITER_STATS_H_
#define CHORUS_BENCH_ITER_STATS_H_

#include <vector>

#include "report.h"

namespace chorus_bench {

// The statistics of `us`, per-iteration times in microseconds (all zero when empty).
IterStats iterStats(std::vector<double> us);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_ITER_STATS_H_
