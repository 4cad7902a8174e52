// --calibrate (calibration.h): the timed exchanges between two ranks and the calibration notes of
// the preamble.
#include "calibration.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "clocks.h"
#include "host_buffer.h"
#include "rank_runner.h"

namespace chorus_bench {

// "32 MiB", "64 KiB", "1000 B".
std::string bytesText(size_t b) {
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// One bidirectional exchange of --calibrate-bytes between ranks a and b (each sends the message
// to the other and receives the other's, one chorusSend and one chorusRecv in a group), timed on
// rank a; the best of kCalibrationIters after a warm-up. Every rank calls it (the barrier keeps
// the other ranks out of the way); it returns GB/s = bytes / time on rank a and 0 elsewhere.
double RankRunner::exchangeBandwidth(int a, int b) {
  barrier();
  double best = 0.0;
  if (rank_ == a || rank_ == b) {
    const int peer = rank_ == a ? b : a;
    const size_t bytes = o_.calibrateBytes;
    Buffer sendBuf = allocate(bytes);
    Buffer recvBuf = allocate(bytes);
    for (int it = -1; it < kCalibrationIters; ++it) {
      const double t0 = wallSeconds();
      check(chorusGroupStart(), "chorusGroupStart (calibration)");
      check(chorusSend(sendBuf.get(), bytes, chorusUint8, peer, comm_, nullptr),
            "chorusSend (calibration)");
      check(chorusRecv(recvBuf.get(), bytes, chorusUint8, peer, comm_, nullptr),
            "chorusRecv (calibration)");
      check(chorusGroupEnd(), "chorusGroupEnd (calibration)");
      const double seconds = wallSeconds() - t0;
      if (it >= 0 && seconds > 0.0) {
        best = std::max(best, static_cast<double>(bytes) / seconds / 1e9);
      }
    }
  }
  return rank_ == a ? best : 0.0;
}

// --calibrate: B between ranks 0 and 1 (same node), I between rank 0 and rank P, the first rank
// of the second node (ranks are laid out node-major, P = nranks / CHORUS_NNODES per node). Flags
// given explicitly win over the measured values.
void RankRunner::calibrate() {
  const int q = p_->nnodes;
  char buf[256];
  if (nranks_ < 2) {
    calibrationNotes_.push_back("# Calibration skipped: one rank, no peer to measure against");
    return;
  }
  if (nranks_ % q != 0) {
    std::snprintf(buf, sizeof buf,
                  "# Calibration skipped: %d ranks do not split evenly over CHORUS_NNODES=%d",
                  nranks_, q);
    calibrationNotes_.push_back(buf);
    return;
  }
  const int ppn = nranks_ / q;
  double measured[2] = {-1.0, -1.0};  // B, I; negative: not measured
  if (ppn >= 2) measured[0] = exchangeBandwidth(0, 1);
  if (q >= 2) measured[1] = exchangeBandwidth(0, ppn);
  // Rank 0 timed both: make every rank agree (and wait for the measurements to end).
  double agreed[2] = {0.0, 0.0};
  check(chorusAllReduce(measured, agreed, 2, chorusFloat64, chorusMax, comm_, nullptr),
        "share calibration");
  const std::string size = bytesText(o_.calibrateBytes);
  if (agreed[0] >= 0.0) {
    std::snprintf(
        buf, sizeof buf,
        "# Calibrated intra-node bandwidth B = %.3f GB/s (ranks 0 <-> 1, %s each way, best "
        "of %d)%s",
        agreed[0], size.c_str(), kCalibrationIters,
        o_.intraBw > 0.0 ? "; --intra-bw given, using that" : "");
    if (o_.intraBw <= 0.0) intraBw_ = agreed[0];
  } else {
    std::snprintf(buf, sizeof buf,
                  "# Calibrated intra-node bandwidth B: not measured (one rank "
                  "per node)");
  }
  calibrationNotes_.push_back(buf);
  if (agreed[1] >= 0.0) {
    std::snprintf(
        buf, sizeof buf,
        "# Calibrated inter-node bandwidth I = %.3f GB/s (ranks 0 <-> %d, %s each way, best "
        "of %d)%s",
        agreed[1], ppn, size.c_str(), kCalibrationIters,
        o_.interBw > 0.0 ? "; --inter-bw given, using that" : "");
    if (o_.interBw <= 0.0) interBw_ = agreed[1];
    calibrationNotes_.push_back(buf);
  }
  if (printer_) {
    p_->run.calibratedIntraBw = agreed[0];
    p_->run.calibratedInterBw = agreed[1];
  }
}

}  // namespace chorus_bench
