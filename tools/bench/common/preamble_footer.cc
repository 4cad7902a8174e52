// What rank 0 prints around the table (RankRunner, rank_runner.h): the preamble (version, flags,
// calibration and ideal notes, the devices, the header) and the footer (wrong values, average
// bus bandwidth and efficiency).
#include <algorithm>
#include <cstdio>
#include <string>

#include "ideal.h"
#include "rank_runner.h"

namespace chorus_bench {

TableStyle RankRunner::tableStyle() const {
  TableStyle style;
  style.cpuTime = o_.cpuTime != 0;
  style.perIter = o_.perIterTiming != 0;
  style.ideal = intraBw_ > 0.0 || interBw_ > 0.0;
  return style;
}

void RankRunner::printPreamble() {
  const Options& o = o_;
  int version = 0;
  chorusGetVersion(&version);
  std::printf("# chorus-tests version %d.%d.%d chorus-headers=%d chorus-library=%d\n",
              version / 10000, (version / 100) % 100, version % 100, CHORUS_VERSION_CODE, version);
  std::printf("# Collective test starting: %s\n", d_.name);
  const bool factor = o.stepFactor > 1;
  std::printf(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: %d\n",
      o.nThreads, o.nGpus, o.minBytes, o.maxBytes, factor ? o.stepFactor : o.stepBytes,
      factor ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check, o.graph);
  if (o.blocking) {
    std::printf("# Blocking Enabled: wait for completion after each collective\n");
  }
  for (const std::string& note : o.notes) std::printf("%s\n", note.c_str());
  for (const std::string& note : calibrationNotes_) std::printf("%s\n", note.c_str());
  if (!idealNote_.empty()) std::printf("%s\n", idealNote_.c_str());
  std::printf("#\n# Using devices\n");
  for (const DeviceInfo& dev : p_->run.devices) {
    if (o_.device) {
      std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cuda]\n", dev.rank, 0, dev.pid,
                  dev.hostname.c_str(), dev.rank % std::max(1, p_->ndevices));
      continue;
    }
    std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu]\n", dev.rank, 0, dev.pid,
                dev.hostname.c_str(), dev.thread);
  }
  std::printf("#\n");
  std::fputs(formatHeader(tableStyle()).c_str(), stdout);
  std::fflush(stdout);
}

void RankRunner::printFooter() {
  const double avgBw = busBwEntries_ > 0 ? busBwSum_ / static_cast<double>(busBwEntries_) : 0.0;
  std::printf("# Out of bounds values : %ld %s\n", static_cast<long>(wrongTotal_),
              wrongTotal_ == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n", avgBw);
  RunInfo& run = p_->run;
  run.outOfBounds = wrongTotal_;
  run.avgBusBw = avgBw;
  if (ideal_ > 0.0) {
    run.avgEfficiency = efficiencyPercent(avgBw, ideal_);
    std::printf("# Avg efficiency       : %.2f%%\n", run.avgEfficiency);
  }
  std::printf("#\n");
  std::printf("# Collective test concluded: %s\n", d_.name);
  std::fflush(stdout);
}

}  // namespace chorus_bench
