// The -J document: nccl-tests' structure (version, start_time, args, env, config, devices,
// results, out_of_bounds, average_bus_bandwidth, errors, end_time), written with nlohmann-json
// (Debian's nlohmann-json3-dev, header-only) in nccl-tests' key order.
#ifndef CHORUS_BENCH_JSON_H_
#define CHORUS_BENCH_JSON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "report.h"

namespace chorus_bench {

struct DeviceInfo {
  int rank = 0;
  int pid = 0;
  int thread = 0;  // the rank's thread within its process ("device")
  std::string hostname;
};

struct RunInfo {
  std::string collective;  // "all_reduce_perf"
  std::string version;     // "0.1.0"
  int versionCode = 0;
  std::string startTime, endTime;  // ISO 8601, UTC
  const Options* options = nullptr;
  std::vector<std::pair<std::string, std::string>> env;  // CHORUS_* variables
  int nranks = 0, nprocs = 0, nnodes = 1;
  // The bandwidths behind the ideal column (flags, else --calibrate), GB/s; 0: unknown.
  double intraBw = 0.0, interBw = 0.0;
  // --calibrate: what was measured (negative: not measured) and how.
  bool calibrated = false;
  double calibratedIntraBw = -1.0, calibratedInterBw = -1.0;
  size_t calibrationBytes = 0;
  int calibrationIters = 0;
  std::vector<DeviceInfo> devices;
  std::vector<RowResult> results;
  int64_t outOfBounds = 0;  // wrong values in all
  double avgBusBw = 0.0;
  double avgEfficiency = 0.0;  // percent, 0: unknown
  std::vector<std::string> errors;
};

std::string buildJson(const RunInfo& run);
// Writes buildJson(run) to path; false (and errno) on failure.
bool writeJsonFile(const std::string& path, const RunInfo& run);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_JSON_H_
