// chorusCommShrink: the ranks of a communicator that call it agree on who is gone and build a new
// communicator without them (docs/reliability.md, "Shrink").
//
// After init no rank listens, and the bootstrap root (in rank 0's process, usually) may be the
// rank that died, so the agreement runs over the parent's own channels: a mailbox in every rank's
// segment header for same-node peers (transport/segment.h, ShrinkBox; readable even after its
// owner died) and kShrink notices on the TCP control connections for peers on other nodes
// (net/tcp.h). The messages are those of core/shrink_wire.h.
//
//   1. Every caller publishes a view: the exclude list, plus the ranks it knows are gone (their
//      process died, they destroyed or aborted the parent, their control connection closed).
//   2. The leader is the lowest rank that is in nobody's view; every caller computes it from its
//      own view. The leader waits for the view of every rank it does not hold for gone (bounded:
//      CHORUS_SHRINK_TIMEOUT), takes the union, starts a fresh bootstrap root (new address, new
//      secret) and publishes the decision: the union and the root's unique id.
//   3. A follower waits for its leader's decision. If the leader dies, leaves or stays silent
//      past twice the bound (it may itself wait a whole bound for a silent rank's view), the
//      follower adds it to its view, republishes it and follows the next lowest rank; a
//      follower whose own view differs from the decision adopts the decision.
//   4. Everyone in the decision's survivors (in parent rank order) runs the normal init with the
//      new id; a caller the decision excludes gets chorusRemoteError and no communicator.
// The root is the ordinary bootstrap root: it stops listening once every survivor joined, and
// its thread ends when they all disconnect. The parent stays valid until the caller destroys it.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "core/shrink_wire.h"

namespace chorus {

namespace {

using shrinkwire::Kind;
using shrinkwire::Message;

double shrinkTimeout() {
  return double(std::max<int64_t>(1, envInt("CHORUS_SHRINK_TIMEOUT", 30)));
}

// The owner's side of its mailbox: a seqlock around the message bytes.
void writeBox(ShrinkBox* box, const std::string& bytes) {
  const uint32_t v = box->version.load(std::memory_order_relaxed);
  box->version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  memcpy(box->data, bytes.data(), bytes.size());
  box->bytes = uint32_t(bytes.size());
  box->version.store(v + 2, std::memory_order_release);
}

// A peer's mailbox: false while it is empty or being written.
bool readBox(const ShrinkBox* box, std::string* out) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint32_t v = box->version.load(std::memory_order_acquire);
    if (v == 0) return false;
    if (v & 1) continue;
    const size_t n = std::min<size_t>(box->bytes, sizeof(box->data));
    out->assign(box->data, n);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (box->version.load(std::memory_order_relaxed) == v) return true;
  }
  return false;
}

class Agreement {
 public:
  Agreement(chorusComm* c, std::vector<int32_t> explicitList)
      : c_(c), explicit_(std::move(explicitList)), seq_(++c->shrinkSeq) {
    gone_.assign(size_t(c->nranks), false);
    for (int r : explicit_) gone_[size_t(r)] = true;
  }

  // Returns the decision (throws on timeout).
  Message run() {
    const double bound = shrinkTimeout();
    refreshGone(true);
    publishView();
    int leader = -1;
    Clock::time_point leaderSince{};
    auto nextRefresh = Clock::now();
    while (true) {
      const auto now = Clock::now();
      if (now >= nextRefresh) {
        if (refreshGone(false)) publishView();
        nextRefresh = now + std::chrono::milliseconds(5);
      }
      const int l = lowestPresent();
      if (l != leader) leader = l, leaderSince = now;
      if (leader == c_->rank) return lead(bound);
      Message m;
      if (latest(leader, &m) && m.kind == Kind::kDecision) return m;
      // A live leader may legitimately wait up to `bound` for a silent rank's view before it
      // decides: only twice that (and a second) means the leader itself is silent.
      if (std::chrono::duration<double>(now - leaderSince).count() > 2 * bound + 1) {
        CHORUS_WARN(c_->rank,
                    "chorusCommShrink: no decision from rank %d (the leader) within %.0f s "
                    "(2 x CHORUS_SHRINK_TIMEOUT + 1): holding it for gone",
                    leader, 2 * bound + 1);
        gone_[size_t(leader)] = true;
        silent_.insert(leader);
        publishView();
        continue;
      }
      nap();
    }
  }

 private:
  // Waits for the views of every present rank, then decides and publishes.
  Message lead(double bound) {
    const auto until = Clock::now() + std::chrono::duration<double>(bound);
    std::vector<Message> views(size_t(c_->nranks));
    std::vector<bool> have(size_t(c_->nranks), false);
    auto nextRefresh = Clock::now();
    while (true) {
      const auto now = Clock::now();
      if (now >= nextRefresh) {
        if (refreshGone(false)) publishView();
        nextRefresh = now + std::chrono::milliseconds(5);
      }
      bool all = true;
      for (int r = 0; r < c_->nranks; ++r) {
        if (r == c_->rank || gone_[size_t(r)]) continue;
        Message m;
        if (latest(r, &m) && m.kind == Kind::kView) views[size_t(r)] = m, have[size_t(r)] = true;
        all = all && have[size_t(r)];
      }
      if (all) break;
      if (now > until) {
        for (int r = 0; r < c_->nranks; ++r)
          if (r != c_->rank && !gone_[size_t(r)] && !have[size_t(r)]) {
            CHORUS_WARN(c_->rank,
                        "chorusCommShrink: rank %d sent no view within %.0f s "
                        "(CHORUS_SHRINK_TIMEOUT): excluded",
                        r, bound);
            gone_[size_t(r)] = true;
          }
        break;
      }
      nap();
    }
    std::vector<bool> out = gone_;
    for (int r = 0; r < c_->nranks; ++r)
      if (have[size_t(r)] && !gone_[size_t(r)])
        for (int x : views[size_t(r)].excl) out[size_t(x)] = true;
    Message d;
    d.kind = Kind::kDecision;
    d.seq = seq_;
    d.sender = c_->rank;
    for (int r = 0; r < c_->nranks; ++r)
      if (out[size_t(r)]) d.excl.push_back(r);
    if (d.excl.size() > shrinkwire::kMaxExclude)
      fail(chorusInvalidUsage, "chorusCommShrink (rank %d): %zu ranks to exclude (at most %u)",
           c_->rank, d.excl.size(), shrinkwire::kMaxExclude);
    uint8_t secret[16];
    fillRandom(secret, sizeof(secret));
    d.id = startRoot(pickLocalAddress(), secret);
    publish(shrinkwire::encode(d));
    return d;
  }

  int lowestPresent() const {
    for (int r = 0; r < c_->nranks; ++r)
      if (!gone_[size_t(r)]) return r;
    return c_->rank;  // unreachable: this rank is present
  }

  // Marks the ranks found gone since the last look; true if any.
  bool refreshGone(bool first) {
    bool changed = false;
    for (int r = 0; r < c_->nranks; ++r) {
      if (r == c_->rank || gone_[size_t(r)]) continue;
      bool g;
      if (c_->isRemote(r)) {
        g = c_->control && (c_->control->seenDead(r) || c_->control->controlClosed(r));
      } else {
        const pid_t pid = pid_t(c_->peers[size_t(r)].pid);
        g = c_->segmentOf(r).shrinkBox()->left.load(std::memory_order_acquire) != 0 ||
            (pid != getpid() && !processAlive(pid));
      }
      if (!g) continue;
      // A message it left before going still counts (a leader that died after deciding).
      if (!first) CHORUS_INFO(c_->rank, "chorusCommShrink: rank %d is gone", r);
      gone_[size_t(r)] = true;
      changed = true;
    }
    return changed;
  }

  void publishView() {
    Message v;
    v.kind = Kind::kView;
    v.seq = seq_;
    v.sender = c_->rank;
    for (int r = 0; r < c_->nranks; ++r)
      if (gone_[size_t(r)]) v.excl.push_back(r);
    if (v.excl.size() > shrinkwire::kMaxExclude)
      fail(chorusInvalidUsage, "chorusCommShrink (rank %d): %zu ranks to exclude (at most %u)",
           c_->rank, v.excl.size(), shrinkwire::kMaxExclude);
    publish(shrinkwire::encode(v));
  }

  void publish(const std::string& bytes) {
    writeBox(c_->mySegment.shrinkBox(), bytes);
    if (c_->control) c_->control->publishShrink(bytes);
  }

  // The latest message of rank r for this shrink call (false: none, or from another call).
  bool latest(int r, Message* m) {
    std::string bytes;
    const bool got = c_->isRemote(r) ? c_->control && c_->control->latestShrink(r, &bytes)
                                     : readBox(c_->segmentOf(r).shrinkBox(), &bytes);
    if (!got) return false;
    const shrinkwire::Status st = shrinkwire::parse(bytes.data(), bytes.size(), c_->nranks, m);
    if (st != shrinkwire::Status::kOk || m->sender != r) {
      if (!warned_.count(r))
        CHORUS_WARN(c_->rank, "chorusCommShrink: ignoring a malformed message from rank %d: %s", r,
                    st != shrinkwire::Status::kOk ? shrinkwire::statusName(st) : "wrong sender");
      warned_.insert(r);
      return false;
    }
    return m->seq == seq_;
  }

  void nap() {
    if (++naps_ < 64) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

  chorusComm* c_;
  std::vector<int32_t> explicit_;
  uint32_t seq_;
  std::vector<bool> gone_;
  std::set<int> silent_, warned_;
  uint32_t naps_ = 0;
};

// Stops the parent's operations in flight (their waits see the abort flag and unwind). Peers
// still waiting for this rank in a collective are told, as by chorusCommAbort (they then shrink
// too: a failed rank that calls chorusCommShrink is not dropped for it).
void stopInFlight(chorusComm* c) {
  if (c->state.load() != CommState::kFailed)
    markFailed(c, chorusInvalidUsage,
               format("rank %d: chorusCommShrink(CHORUS_SHRINK_ABORT) stopped this communicator",
                      c->rank));
  c->abortFlag.store(true);
  const auto until = Clock::now() + std::chrono::seconds(10);
  while ((c->pending.load() != 0 || c->executing.load() != 0) && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (c->pending.load() != 0 || c->executing.load() != 0)
    fail(chorusInternalError,
         "chorusCommShrink (rank %d): the parent's operations in flight did not stop within 10 s",
         c->rank);
}

void drainParent(chorusComm* c) {
  Waiter w(c, -1, "chorusCommShrink: waiting for queued operations");
  while (c->pending.load() != 0 || c->executing.load() != 0) w.pause();
}

}  // namespace

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusCommShrink(chorusComm_t comm, const int* excludeRanksList,
                                int excludeRanksCount, chorusComm_t* newcomm,
                                chorusConfig_t* config, int shrinkFlags) {
  chorusUniqueId id;
  int newRank = -1, newSize = 0;
  chorusConfig_t inherited = CHORUS_CONFIG_INITIALIZER;
  try {
    ApiGuard g(comm, "chorusCommShrink");
    const int me = comm->rank, n = comm->nranks;
    if (newcomm == nullptr)
      fail(chorusInvalidArgument, "chorusCommShrink (rank %d): newcomm is NULL", me);
    *newcomm = nullptr;
    if (shrinkFlags != CHORUS_SHRINK_DEFAULT && shrinkFlags != CHORUS_SHRINK_ABORT)
      fail(chorusInvalidArgument,
           "chorusCommShrink (rank %d): shrinkFlags %d is not CHORUS_SHRINK_DEFAULT or "
           "CHORUS_SHRINK_ABORT",
           me, shrinkFlags);
    if (excludeRanksCount < 0)
      fail(chorusInvalidArgument, "chorusCommShrink (rank %d): excludeRanksCount %d is negative",
           me, excludeRanksCount);
    if (excludeRanksCount > 0 && excludeRanksList == nullptr)
      fail(chorusInvalidArgument,
           "chorusCommShrink (rank %d): excludeRanksList is NULL with excludeRanksCount %d", me,
           excludeRanksCount);
    std::vector<int32_t> excl;
    for (int i = 0; i < excludeRanksCount; ++i) {
      const int r = excludeRanksList[i];
      if (r < 0 || r >= n)
        fail(chorusInvalidArgument,
             "chorusCommShrink (rank %d): excludeRanksList[%d] = %d is not a rank of the "
             "communicator [0, %d)",
             me, i, r, n);
      if (std::find(excl.begin(), excl.end(), r) != excl.end())
        fail(chorusInvalidArgument,
             "chorusCommShrink (rank %d): excludeRanksList[%d] = %d appears twice", me, i, r);
      excl.push_back(r);
    }
    std::sort(excl.begin(), excl.end());
    if (int(excl.size()) > int(shrinkwire::kMaxExclude))
      fail(chorusInvalidArgument, "chorusCommShrink (rank %d): %zu ranks to exclude (at most %u)",
           me, excl.size(), shrinkwire::kMaxExclude);
    if (comm->initThread.joinable() && comm->asyncError.load() == chorusInProgress)
      fail(chorusInvalidUsage, "chorusCommShrink (rank %d): communicator still initializing", me);
    if (comm->initThread.joinable()) comm->initThread.join();
    const CommState st = comm->state.load();
    if (st == CommState::kInitializing || st == CommState::kFinalized || !comm->mySegment.base())
      fail(chorusInvalidUsage,
           "chorusCommShrink (rank %d): the communicator is not ready (not initialised, or "
           "finalized)",
           me);
    if (std::binary_search(excl.begin(), excl.end(), me)) {
      CHORUS_INFO(me, "chorusCommShrink: this rank is in the exclude list: no new communicator");
      return chorusSuccess;
    }
    const bool failed = st == CommState::kFailed || comm->abortFlag.load();
    if ((shrinkFlags & CHORUS_SHRINK_ABORT) || failed)
      stopInFlight(comm);
    else
      drainParent(comm);
    const auto t0 = Clock::now();
    Agreement agreement(comm, excl);
    const Message d = agreement.run();
    const bool out = std::binary_search(d.excl.begin(), d.excl.end(), me);
    if (out)
      fail(chorusRemoteError,
           "chorusCommShrink (rank %d): the survivors' agreement (leader rank %d) excludes this "
           "rank (it was found gone or silent); no new communicator",
           me, d.sender);
    newRank = me - int(std::lower_bound(d.excl.begin(), d.excl.end(), me) - d.excl.begin());
    newSize = n - int(d.excl.size());
    id = d.id;
    std::string gone;
    for (int r : d.excl) gone += (gone.empty() ? "" : ",") + std::to_string(r);
    CHORUS_INFO(me,
                "chorusCommShrink: agreed in %.1f ms with leader rank %d: excluded {%s}; this "
                "rank becomes %d of %d",
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), d.sender,
                gone.c_str(), newRank, newSize);
    if (config == nullptr) {  // as chorusCommSplit: the parent's device and timeout
      inherited.cudaDevice = comm->cudaDevice;
      inherited.timeoutMs = int(std::min(comm->timeoutSec * 1000.0, 2e9));
      config = &inherited;
    }
  } catch (...) {
    const Failure e = caughtFailure(comm && isLiveComm(comm) ? comm->rank : -1, "chorusCommShrink");
    if (comm && isLiveComm(comm)) {
      setLastError(comm, e.message);
    } else {
      setThreadLastError(e.message);
    }
    CHORUS_WARN(comm && isLiveComm(comm) ? comm->rank : -1, "%s", e.message.c_str());
    return e.code;
  }
  return chorusCommInitRankConfig(newcomm, newSize, id, newRank, config);
}
