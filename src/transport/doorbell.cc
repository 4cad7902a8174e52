// Doorbells (fifo.h): futex wake and wait on a word of a FIFO's control block, and the TCP
// proxy's eventfd wake-up. The word may live
// in shared memory mapped by several processes, so the futexes are not process-private.
#include "transport/doorbell.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>

namespace chorus {

void ringDoorbell(Doorbell* d) {
  d->bell.fetch_add(1, std::memory_order_acq_rel);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d->bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

namespace {
std::atomic<bool> gHeavyBarrier{false};
}  // namespace

bool heavyBarrierRegistered() {
  return gHeavyBarrier.load(std::memory_order_relaxed);
}

bool registerHeavyBarrier() {
  static const bool ok = [] {
    const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    const bool done = cmds >= 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
                      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
    gHeavyBarrier.store(done, std::memory_order_relaxed);
    return done;
  }();
  return ok;
}

void armDoorbell(Doorbell* d, uint32_t* bellValue, bool first) {
  if (first) {
    d->sleeping.fetch_add(1, std::memory_order_relaxed);
    // Publishers that skip their fence (fifo.h postFence) pass a full barrier now, so that
    // their publications are visible to the caller's re-check or they see it armed. (Were the
    // call to fail, the bounded sleep below still ends the wait.)
    if (d->heavyArm.load(std::memory_order_relaxed) != 0)
      syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *bellValue = d->bell.load(std::memory_order_acquire);
}

void sleepOnDoorbell(Doorbell* d, uint32_t bellValue, long timeoutNs) {
  timespec ts{timeoutNs / 1000000000L, timeoutNs % 1000000000L};
  // Returns at once when the bell has rung since it was read (EAGAIN), on a wake, a signal or
  // the timeout; the caller re-checks its condition in every case.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d->bell), FUTEX_WAIT, bellValue, &ts, nullptr, 0);
}

void disarmDoorbell(Doorbell* d) {
  d->sleeping.fetch_sub(1, std::memory_order_relaxed);
}

// The proxy's wake-up (net/tcp_proxy.cc): one write to its eventfd.
void SendConn::wakeProxy() const {
  uint64_t one = 1;
  ssize_t n = write(wakeFd, &one, sizeof(one));
  (void)n;  // a full eventfd counter already means "wake up"
}

}  // namespace chorus
