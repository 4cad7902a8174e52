#include "algo/channel_workers.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "base/cpu_relax.h"
#include "base/error.h"
#include "base/thread_name.h"
#include "comm/comm.h"

namespace chorus {

namespace {
// Process-private futexes: the words live in this process's memory only.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void futexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "a futex word must be a plain 32-bit word");
}  // namespace

ChannelWorkers::ChannelWorkers(int n, int rank) : workers_(new Worker[size_t(n)]) {
  for (int i = 0; i < n; ++i) {
    try {
      workers_[size_t(i)].thread = std::thread([this, i] { loop(workers_[size_t(i)], i + 1); });
    } catch (...) {
      stopAll();
      const std::string doing = "starting the worker thread of channel " + std::to_string(i + 1);
      throw caughtFailure(rank, doing.c_str());
    }
    ++n_;
  }
}

ChannelWorkers::~ChannelWorkers() {
  stopAll();
}

void ChannelWorkers::stopAll() {
  stop_ = true;
  for (int i = 0; i < n_; ++i) {
    Worker& w = workers_[size_t(i)];
    w.go.fetch_add(1, std::memory_order_seq_cst);
    futexWake(&w.go);  // teardown: always wake (no need to look at `sleeping`)
  }
  for (int i = 0; i < n_; ++i)
    if (workers_[size_t(i)].thread.joinable()) workers_[size_t(i)].thread.join();
  n_ = 0;
}

// A worker parks on its `go` word (announcing it in `sleeping` first, so that start() wakes it
// only when it sleeps: the caller bumps go then reads sleeping, the worker sets sleeping then
// reads go, both sequentially consistent, so one of them sees the other), runs its share, and
// counts itself out; the last one out wakes the caller if it sleeps (the same handshake on
// remaining_ / callerSleeping_).
void ChannelWorkers::loop(Worker& w, int channel) {
  char name[8];  // channel <= kMaxCommChannels
  std::snprintf(name, sizeof(name), "ch%d", channel & 0xff);
  nameThisThread(name);
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    while ((g = w.go.load(std::memory_order_acquire)) == seen) {
      w.sleeping.store(1, std::memory_order_seq_cst);
      if (w.go.load(std::memory_order_seq_cst) == seen) futexWait(&w.go, seen);
      w.sleeping.store(0, std::memory_order_relaxed);
    }
    seen = g;
    if (stop_) return;  // written before the bump that woke us
    fn_(ctx_, channel);
    if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        callerSleeping_.load(std::memory_order_seq_cst) != 0)
      futexWake(&remaining_);
  }
}

void ChannelWorkers::start(int nch, ChannelFn fn, void* ctx) {
  fn_ = fn;
  ctx_ = ctx;
  remaining_.store(uint32_t(nch - 1), std::memory_order_relaxed);
  for (int ch = 1; ch < nch; ++ch) {
    Worker& w = workers_[size_t(ch - 1)];
    w.go.fetch_add(1, std::memory_order_seq_cst);  // publishes the job (release)
    if (w.sleeping.load(std::memory_order_seq_cst) != 0) futexWake(&w.go);
  }
}

void ChannelWorkers::wait(uint32_t spinIters) {
  for (uint32_t i = 0; i < spinIters; ++i) {
    if (remaining_.load(std::memory_order_acquire) == 0) return;
    cpuRelax();
  }
  uint32_t v;
  while ((v = remaining_.load(std::memory_order_acquire)) != 0) {
    callerSleeping_.store(1, std::memory_order_seq_cst);
    v = remaining_.load(std::memory_order_seq_cst);
    if (v != 0) futexWait(&remaining_, v);
    callerSleeping_.store(0, std::memory_order_relaxed);
  }
}

ChannelWorkers& channelWorkers(chorusComm* comm) {
  if (comm->channelWorkers == nullptr)
    comm->channelWorkers = new ChannelWorkers(std::max(comm->nchannels - 1, 1), comm->rank);
  return *comm->channelWorkers;
}

void stopChannelWorkers(chorusComm* comm) {
  delete comm->channelWorkers;
  comm->channelWorkers = nullptr;
}

}  // namespace chorus
