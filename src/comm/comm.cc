// The communicator's own functions: the registry of live communicators, marking one failed,
// the last-error text, and the one-thread-per-call guard.
#include "comm/comm.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

#include "base/debug.h"
#include "base/error.h"

namespace chorus {

namespace {
std::mutex gCommsMu;
std::unordered_set<chorusComm*> gComms;

uint64_t threadToken() {
  static thread_local char tag;
  return reinterpret_cast<uint64_t>(&tag);
}
}  // namespace

// The registry changes rarely (init, destroy); every call checks its handle. A thread remembers
// the last handle it found live and the registry's generation then; unregistering bumps the
// generation, so the remembered answer holds exactly while nothing was unregistered, and the
// common check (the same communicator again) takes no lock.
namespace {
std::atomic<uint64_t> gCommsGeneration{1};
thread_local chorusComm* tLiveComm = nullptr;
thread_local uint64_t tLiveGeneration = 0;
}  // namespace

namespace {
// At exit (std::exit, a return from main, a Python interpreter's end; not _exit nor a crash):
// every communicator this process made that is still live and idle leaves as a destroy would,
// without being freed. Without it a rank that ends without chorusCommDestroy loses what its TCP
// proxy had not yet written to its sockets, and its peers on other nodes, still finishing their
// last calls, fail naming it (tests/test_departure.cc, LeaversWithoutDestroy). A communicator
// inherited through fork is its parent's: left alone.
// The registry's lock is held throughout, so that a thread still running cannot free one
// meanwhile (its chorusCommDestroy waits in unregisterComm).
void leaveAtExit() {
  std::lock_guard<std::mutex> l(gCommsMu);
  for (chorusComm* c : gComms)
    if (c->control != nullptr && c->state.load() == CommState::kReady && c->executing.load() == 0 &&
        c->pending.load() == 0 && size_t(c->rank) < c->peers.size() &&
        c->peers[size_t(c->rank)].pid == getpid()) {
      CHORUS_INFO(c->rank, "exit without chorusCommDestroy: leaving as a destroy would");
      c->control->depart();
    }
}
}  // namespace

void registerComm(chorusComm* comm) {
  static std::once_flag atExit;
  std::call_once(atExit, [] { std::atexit(leaveAtExit); });
  std::lock_guard<std::mutex> l(gCommsMu);
  gComms.insert(comm);
}
void unregisterComm(chorusComm* comm) {
  std::lock_guard<std::mutex> l(gCommsMu);
  gComms.erase(comm);
  gCommsGeneration.fetch_add(1, std::memory_order_acq_rel);
}
bool isLiveComm(chorusComm* comm) {
  if (comm == tLiveComm && tLiveGeneration == gCommsGeneration.load(std::memory_order_acquire))
    return true;
  std::lock_guard<std::mutex> l(gCommsMu);
  if (gComms.count(comm) == 0) return false;
  tLiveComm = comm;
  tLiveGeneration = gCommsGeneration.load(std::memory_order_relaxed);  // stable under the lock
  return true;
}

bool liveCommOrRefuse(chorusComm* comm, const char* fn) {
  if (comm != nullptr && isLiveComm(comm)) return true;
  setThreadLastError(format("%s: comm is NULL or not a live communicator", fn));
  return false;
}

const char* unusableReason(const chorusComm* comm) {
  switch (comm->state.load()) {
    case CommState::kInitializing:
      return "the communicator is still initializing";
    case CommState::kFailed:
      return "the communicator failed earlier; only chorusCommAbort or chorusCommDestroy are "
             "allowed";
    case CommState::kFinalized:
      return "the communicator was finalized";
    case CommState::kAborted:
      return "the communicator was aborted";
    case CommState::kReady:
      break;
  }
  return comm->abortFlag.load() ? "the communicator was aborted" : nullptr;
}

void withLiveComms(const std::function<void(std::vector<chorusComm*>&)>& fn) {
  std::lock_guard<std::mutex> l(gCommsMu);
  std::vector<chorusComm*> comms(gComms.begin(), gComms.end());
  fn(comms);
}

void markFailed(chorusComm* comm, chorusResult_t code, const std::string& message, int cause) {
  // The cause is made readable by every peer before anything else: before the state says
  // failed (a sibling channel that stops on that state must find the cause, not record itself),
  // and before the caller's call returns (the application may exit at once, and its peers must
  // then read the real cause instead of concluding that this rank died).
  if (comm->mySegment.base()) {
    // The first cause sticks: later failures (a sibling channel stopping) must not hide it.
    int32_t none = 0;
    comm->mySegment.header()->failed.compare_exchange_strong(none,
                                                             (cause >= 0 ? cause : comm->rank) + 1);
  }
  // Peers on other nodes: a notice on the TCP control connections, written to the sockets
  // before this returns (first cause sticks too).
  if (comm->control) comm->control->notifyFailure(cause >= 0 ? cause : comm->rank, message);
  int noCause = -1;
  if (cause >= 0 && cause < comm->nranks) comm->failedRank.compare_exchange_strong(noCause, cause);
  int expected = chorusSuccess;
  comm->asyncError.compare_exchange_strong(expected, code);
  comm->state.store(CommState::kFailed);
  CHORUS_WARN(comm->rank, "communicator failed: %s", message.c_str());
}

void setLastError(chorusComm_t comm, const std::string& message) noexcept {
  setThreadLastError(message);
  try {  // called in catch blocks of the error boundary: must not throw itself
    if (comm && isLiveComm(comm)) {
      std::lock_guard<std::mutex> l(comm->errMutex);
      comm->lastError = message;
    }
  } catch (...) {
  }
}

// ApiGuard (comm/comm.h): one thread inside a call on a communicator at a time (NCCL's rule: one
// thread drives a communicator), checked on every call.
//
// The biased thread T enters by storing apiBusy = 1, then re-reading apiBias. Another thread U
// revokes the bias by changing apiBias, then running membarrier (every running thread of the
// process passes a full barrier; a descheduled one passed one when it was switched out), then
// reading apiBusy. Either T's store was made before T's barrier, and U reads it (T is inside:
// U is refused), or T's re-read comes after T's barrier and sees the revocation (T backs off,
// clearing its own flag, and takes the lock word). apiBusy has one writer, T, so no store of
// one thread overwrites another's. The barrier costs microseconds, once per communicator.
namespace {
constexpr uint64_t kApiRevoking = 1, kApiLocked = 2;  // apiBias's values besides a thread token

// Whether this process may use membarrier's private expedited barrier (Linux 4.14 on, unless a
// seccomp filter refuses it); registered once per process.
bool processBarrierReady() {
  static const bool ready =
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return ready;
}

// Every thread of this process passes a full memory barrier before this returns.
void processBarrier() {
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    usleep(1000);  // (registered, so not expected) a store waiting in a core drains long before
}

[[noreturn]] void refuseSecondThread(const char* fn, int rank) {
  fail(chorusInvalidUsage,
       "%s (rank %d): called from a second thread while another thread is inside a call on this "
       "communicator (a communicator must be driven by one thread at a time)",
       fn, rank);
}

// Ends the bias, once: returns true once apiBias is kApiLocked, false when another thread is
// revoking it right now.
bool revokeBias(chorusComm* comm, uint64_t b) {
  while (b != kApiLocked) {
    if (b == kApiRevoking) return false;
    if (comm->apiBias.compare_exchange_strong(b, kApiRevoking)) {
      processBarrier();
      comm->apiBias.store(kApiLocked, std::memory_order_release);
      return true;
    }
  }
  return true;
}
}  // namespace

bool ApiGuard::enterBiased(chorusComm_t comm, uint64_t me) {
  if (comm->apiBusy.load(std::memory_order_relaxed) != 0) {  // this thread is inside already
    comm_ = comm;
    return true;
  }
  comm->apiBusy.store(1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the store, then the re-read (above)
  if (comm->apiBias.load(std::memory_order_relaxed) == me) {
    comm_ = comm, owned_ = true, biased_ = true;
    return true;
  }
  comm->apiBusy.store(0, std::memory_order_release);  // revoked meanwhile
  return false;
}

void ApiGuard::enterLocked(chorusComm_t comm, uint64_t me, const char* fn) {
  uint64_t b = comm->apiBias.load(std::memory_order_acquire);
  while (b != kApiLocked) {
    if (b == 0) {  // the first call on this communicator
      const uint64_t to = processBarrierReady() ? me : kApiLocked;
      if (comm->apiBias.compare_exchange_strong(b, to)) {
        if (to == me) comm->apiBiasedTo.store(me, std::memory_order_relaxed);
        b = to;
      }
    } else if (b == me) {
      if (enterBiased(comm, me)) return;
      b = comm->apiBias.load(std::memory_order_acquire);
    } else if (!revokeBias(comm, b)) {
      refuseSecondThread(fn, comm->rank);  // another thread is entering a call right now
    } else {
      b = kApiLocked;
    }
  }
  uint64_t expected = 0;
  if (!comm->apiOwner.compare_exchange_strong(expected, me) && expected != me)
    refuseSecondThread(fn, comm->rank);
  comm_ = comm, owned_ = expected == 0;
  // The thread the communicator was biased to may still be inside a call it entered by the bias.
  if (comm->apiBusy.load(std::memory_order_acquire) != 0 &&
      comm->apiBiasedTo.load(std::memory_order_relaxed) != me) {
    if (owned_) comm->apiOwner.store(0, std::memory_order_release);
    comm_ = nullptr;
    refuseSecondThread(fn, comm->rank);
  }
}

ApiGuard::ApiGuard(chorusComm_t comm, const char* fn) : comm_(nullptr) {
  if (comm == nullptr) fail(chorusInvalidArgument, "%s: comm is NULL", fn);
  if (!isLiveComm(comm))
    fail(chorusInvalidArgument, "%s: comm is not a live communicator (destroyed or never created)",
         fn);
  const uint64_t me = threadToken();
  if (comm->apiBias.load(std::memory_order_relaxed) == me && enterBiased(comm, me)) return;
  enterLocked(comm, me, fn);
}

ApiGuard::~ApiGuard() {
  // Release stores (plain moves on x86), not sequentially consistent ones (locked exchanges):
  // the next entry acquires them.
  if (!comm_ || !owned_) return;
  if (biased_)
    comm_->apiBusy.store(0, std::memory_order_release);
  else
    comm_->apiOwner.store(0, std::memory_order_release);
}

void lockApi(chorusComm_t comm) {
  while (!revokeBias(comm, comm->apiBias.load(std::memory_order_acquire))) usleep(100);
}

}  // namespace chorus

using namespace chorus;

const char* chorusGetLastError(chorusComm_t comm) {
  try {
    if (comm != nullptr && isLiveComm(comm)) {
      std::lock_guard<std::mutex> l(comm->errMutex);
      if (!comm->lastError.empty()) {
        thread_local std::string copy;
        copy = comm->lastError;
        return copy.c_str();
      }
    }
  } catch (...) {  // no memory for the copy
    return "out of memory while reading the last error";
  }
  return threadLastError();
}
