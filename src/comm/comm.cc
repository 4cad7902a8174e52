// The communicator's own functions: the registry of live communicators, marking one failed,
// the last-error text, and the one-thread-per-call guard.
#include "comm/comm.h"

#include <atomic>
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

void registerComm(chorusComm* comm) {
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

// Guards an API call on a communicator: it must be live, and no other thread may be inside a
// call on it at the same time (NCCL's rule: one thread drives a communicator).
ApiGuard::ApiGuard(chorusComm_t comm, const char* fn) : comm_(nullptr) {
  if (comm == nullptr) fail(chorusInvalidArgument, "%s: comm is NULL", fn);
  if (!isLiveComm(comm))
    fail(chorusInvalidArgument, "%s: comm is not a live communicator (destroyed or never created)",
         fn);
  uint64_t me = threadToken(), expected = 0;
  if (!comm->apiOwner.compare_exchange_strong(expected, me) && expected != me)
    fail(chorusInvalidUsage,
         "%s (rank %d): called from a second thread while another thread is inside a call on "
         "this communicator (a communicator must be driven by one thread at a time)",
         fn, comm->rank);
  owned_ = expected == 0;
  comm_ = comm;
}

ApiGuard::~ApiGuard() {
  // A release store (a plain move on x86), not a sequentially consistent one (a locked exchange):
  // the next owner's compare-exchange acquires it.
  if (comm_ && owned_) comm_->apiOwner.store(0, std::memory_order_release);
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
