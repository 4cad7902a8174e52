// --calibrate: the bandwidths B (intra-node) and I (inter-node) measured by timed exchanges
// between two ranks (RankRunner::calibrate and RankRunner::exchangeBandwidth, in
// calibration.cc), for the ideal column when --intra-bw / --inter-bw are not given.
#ifndef CHORUS_BENCH_CALIBRATION_H_
#define CHORUS_BENCH_CALIBRATION_H_

#include <cstddef>
#include <string>

namespace chorus_bench {

// --calibrate: how many timed exchanges a measurement takes the best of (after one warm-up
// exchange). The message size is --calibrate-bytes (32 MiB by default).
constexpr int kCalibrationIters = 5;

// "32 MiB", "64 KiB", "1000 B".
std::string bytesText(size_t b);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_CALIBRATION_H_
