// One rank of a benchmark process (RankRunner, one per thread) and what the ranks of the process
// share (Process). RankRunner's work is spread by job: rank_runner.cc (set-up, the sweep, the
// timed and checked iterations), calibration.cc (--calibrate), preamble_footer.cc (what rank 0
// prints around the table).
#ifndef CHORUS_BENCH_RANK_RUNNER_H_
#define CHORUS_BENCH_RANK_RUNNER_H_

#include <chorus/chorus.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "harness.h"
#include "host_buffer.h"
#include "json.h"
#include "report.h"
#include "timeout_watchdog.h"

namespace chorus_bench {

// A failed library call ends the process: the other ranks see a dead peer (or time out), as
// with nccl-tests' NCCLCHECK.
void failCall(const char* what, chorusResult_t r, chorusComm_t comm, int rank);

// What every rank (thread) of this process shares.
struct Process {
  const CollDesc* desc = nullptr;
  Options opts;
  chorusUniqueId id{};
  int procRank = 0;
  int nprocs = 1;
  int nranks = 1;
  int nnodes = 1;
  int ndevices = 0;  // --device: CUDA devices of this process
  RunInfo run;       // filled by global rank 0
  Watchdog watchdog;
  std::atomic<int> exitCode{0};
};

// The fixed-size record each rank contributes to the "Using devices" lines.
struct WireDevice {
  int32_t rank;
  int32_t pid;
  int32_t thread;
  int32_t reserved;
  char host[64];
};

// One rank: its communicator, stream, buffers and the sweep.
class RankRunner {
 public:
  RankRunner(Process* p, int thread)
      : p_(p),
        d_(*p->desc),
        o_(p->opts),
        thread_(thread),
        rank_(p->procRank * p->opts.nThreads + thread),
        nranks_(p->nranks),
        printer_(rank_ == 0),
        intraBw_(p->opts.intraBw),
        interBw_(p->opts.interBw) {}

  int run();

 private:
  void check(chorusResult_t r, const char* what) const {
    if (r != chorusSuccess) failCall(what, r, comm_, rank_);
  }
  void init();
  void gatherDevices();
  void calibrate();
  double exchangeBandwidth(int a, int b);
  TableStyle tableStyle() const;
  void printPreamble();
  void barrier();
  double combineTime(double v);
  std::vector<double> combineTimes(std::vector<double> v);
  int64_t sumAcrossRanks(int64_t v);
  RowResult runSize(chorusDataType_t type, int op, int root, size_t count);
  // nccl-tests' warm-up before a sweep: -w calls at COUNT, out of place, then a barrier.
  void warmUp(chorusDataType_t type, int op, int root, size_t count);
  // Fills *spec and the buffers for one placement (prepare) and returns the call's arguments.
  CallArgs prepareCall(const Layout& l, bool inPlace, chorusDataType_t type, int op, int root,
                       size_t count, uint64_t seed, DataSpec* spec);
  // The -w untimed calls, then a barrier.
  void warmUpCalls(const CallArgs& a);
  PlacementResult runPlacement(const Layout& l, bool inPlace, chorusDataType_t type, int op,
                               int root, size_t count, uint64_t seed);
  // Fills the send data and poisons the output; sets send_ / recv_.
  void prepare(const Layout& l, bool inPlace, const DataSpec& spec);
  void launchIteration(const CallArgs& a, int nops);
  void printFooter();

  Process* p_;
  const CollDesc& d_;
  const Options& o_;
  int thread_;
  int rank_;
  int nranks_;
  bool printer_;
  chorusComm_t comm_ = nullptr;
  chorusStream_t stream_ = nullptr;
  // --device: the measured collective runs on devComm_ (bound to device_) with device copies of
  // sendBuf_ / recvBuf_; comm_ stays a host communicator for the harness's own exchanges.
  chorusComm_t devComm_ = nullptr;
  int device_ = -1;
  void* devSend_ = nullptr;
  void* devRecv_ = nullptr;
  chorusComm_t collComm() const { return devComm_ != nullptr ? devComm_ : comm_; }
  // The device address of a host-mirror address inside sendBuf_ / recvBuf_ (itself without
  // --device).
  void* onDevice(const unsigned char* p) const;
  Buffer sendBuf_, recvBuf_, expBuf_;
  void* sendHandle_ = nullptr;  // -R: the buffers' registrations
  void* recvHandle_ = nullptr;
  size_t capBytes_ = 0;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  static constexpr size_t kGuardBytes = 64;
  // Totals (meaningful on every rank: wrong counts are summed across ranks).
  int64_t wrongTotal_ = 0;
  double busBwSum_ = 0.0;
  int64_t busBwEntries_ = 0;
  // The bandwidths behind the ideal column (flags, else --calibrate) and the ideal itself.
  double intraBw_ = 0.0;
  double interBw_ = 0.0;
  double ideal_ = 0.0;
  std::vector<std::string> calibrationNotes_;  // printed by rank 0 in the preamble
  std::string idealNote_;
};

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_RANK_RUNNER_H_
