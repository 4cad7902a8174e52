// Persistent channel workers: the threads that run a multi-channel call's extra channels
// (algo/select.cc; the calling thread runs channel 0). A communicator starts them once, on its
// first call that runs more than one channel (every communicator has at least two channels, and
// most never run a call on more than one, so starting them at init would park nchannels - 1
// threads in every communicator, split and shrunk ones included, for nothing). Between calls
// each worker sleeps on a futex word of its own; a call hands it the job with a store and, only
// when it sleeps, one FUTEX_WAKE (before, every call started and joined a thread per extra
// channel: a clone and an exit per channel per call). chorusCommDestroy / chorusCommAbort (and
// every other path through freeComm) stop and join them.
//
// Invariant: one call at a time per communicator (ApiGuard / ExecGuard), so the job fields are
// written by one thread while every worker is parked or spinning on its word.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

struct chorusComm;

namespace chorus {

// The most channels a communicator has (init clamps CHORUS_MAX_NCHANNELS to it).
constexpr int kMaxCommChannels = 64;

// One call's share for channel `channel` (1 <= channel < nch); must not throw.
using ChannelFn = void (*)(void* ctx, int channel);

class ChannelWorkers {
 public:
  // Starts `n` workers (channels 1..n), named "chorus-ch<k>"; throws Failure (system error) when
  // a thread cannot be started (the ones started are stopped first).
  ChannelWorkers(int n, int rank);
  ~ChannelWorkers();  // stops and joins every worker
  ChannelWorkers(const ChannelWorkers&) = delete;
  ChannelWorkers& operator=(const ChannelWorkers&) = delete;

  int size() const { return n_; }
  // Hands fn(ctx, ch) for ch in [1, nch) to workers 1..nch-1 (nch - 1 <= size()); returns at once.
  // No allocation, no lock; a system call (FUTEX_WAKE) only for a worker that sleeps.
  void start(int nch, ChannelFn fn, void* ctx);
  // Returns when every worker handed a job by the last start() has finished it: polls
  // `spinIters` times, then sleeps on a futex that the last worker to finish wakes.
  void wait(uint32_t spinIters);

 private:
  struct alignas(64) Worker {
    std::atomic<uint32_t> go{0};        // futex word: jobs handed to this worker so far
    std::atomic<uint32_t> sleeping{0};  // 1 while it is (about to be) in FUTEX_WAIT on go
    std::thread thread;
  };
  void loop(Worker& w, int channel);
  void stopAll();

  int n_ = 0;
  std::unique_ptr<Worker[]> workers_;
  // The current job: written by the caller before it bumps a worker's `go` (release), read by
  // the worker after it sees the bump (acquire).
  ChannelFn fn_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;
  alignas(64) std::atomic<uint32_t> remaining_{0};  // futex word: workers still on the job
  std::atomic<uint32_t> callerSleeping_{0};
};

// The communicator's workers (at least nchannels - 1), started on first use; throws Failure.
ChannelWorkers& channelWorkers(chorusComm* comm);
// Stops and joins them (freeComm: destroy, abort, a failed init); nothing if never started.
void stopChannelWorkers(chorusComm* comm);

}  // namespace chorus
