#include "comm/wait.h"

#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/cpu_relax.h"
#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/control.h"
#include "comm/op.h"
#include "comm/status.h"
#include "transport/doorbell.h"

namespace chorus {

namespace {
constexpr auto kYieldPhase = std::chrono::microseconds(500);
// A sleep on a doorbell lasts at most this (an abort is noticed within it; peer health and the
// timeout are checked every kCheckEvery as before).
constexpr long kBellSleepNs = 10'000'000;
constexpr uint32_t kPollClockEvery = 64;  // spin-polls between two clock reads (a power of 2)
constexpr auto kCheckEvery = std::chrono::milliseconds(50);
}  // namespace

// A process that is gone, or dead but not yet reaped by its parent (a zombie: kill() still
// succeeds on it), is not alive.
bool processAlive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  FILE* f = fopen(path, "r");
  if (f == nullptr) return errno != ENOENT;
  char buf[512];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* close = strrchr(buf, ')');  // "pid (comm) S ..."; comm may contain spaces
  return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

void Waiter::pause() {
  ++iter_;
  const uint32_t spinIters = comm_->spinIters;
  if (iter_ < spinIters) {
    cpuRelax();
    if ((iter_ & 31) == 0 && comm_->abortFlag.load(std::memory_order_relaxed)) check(Clock::now());
    return;
  }
  if (spinPolling_ && (iter_ & (kPollClockEvery - 1)) != 0) {
    // Spin-polling (a pinned rank's poll phase): the clock is read every kPollClockEvery polls
    // only, the abort flag every poll.
    cpuRelax();
    if (comm_->abortFlag.load(std::memory_order_relaxed)) check(Clock::now());
    return;
  }
  spinPolling_ = false;
  auto now = Clock::now();
  if (alive_ != nullptr) alive_->store(steadyNs(now), std::memory_order_relaxed);
  if (iter_ == spinIters) {
    // Peer liveness (a /proc read) and timeouts are looked at every kCheckEvery only: most
    // waits end long before, and an abort is noticed through the cheap flag test below.
    start_ = now;
    nextCheck_ = now + kCheckEvery;
    publish(now);  // for status reports: what this rank waits for
  }
  if (comm_->abortFlag.load(std::memory_order_relaxed)) check(now);
  if (now >= nextCheck_) {
    check(now);
    nextCheck_ = now + kCheckEvery;
  }
  if (bell_ != nullptr && now - start_ < comm_->pollPhase) {
    // Keep polling a while before sleeping: waking a sleeper costs the waker a system call and
    // the sleeper tens of microseconds on a VM (an idle vCPU must be woken), and a wait that
    // sleeps makes the peer's next wait longer, so a too-early sleep feeds on itself. Yield
    // instead of spinning when the peer may need this core (more ranks than cores, or a rank
    // the scheduler may move next to its peer); only a pinned rank spins.
    if (comm_->moreRanksThanCpus || !comm_->pinned) {
      sched_yield();
    } else {
      spinPolling_ = true;
      cpuRelax();
    }
    return;
  }
  if (bell_ != nullptr) {
    if (!armed_) {
      // Announce the sleep and read the bell, then return: the caller re-checks its condition
      // before the next pause sleeps, so a post that came first is never slept through.
      armDoorbell(bell_, &bellValue_, !everArmed_);
      armed_ = everArmed_ = true;
      return;
    }
    sleepOnDoorbell(bell_, bellValue_, kBellSleepNs);
    armed_ = false;
    return;
  }
  if (now - start_ < kYieldPhase) {
    sched_yield();
  } else {
    // Sleep a little longer the longer we wait, up to 200 us.
    auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - start_).count();
    long us = waited < 5000 ? 20 : waited < 50000 ? 50 : 200;
    timespec ts{0, us * 1000};
    nanosleep(&ts, nullptr);
  }
}

Waiter::Waiter(chorusComm* comm, int peer, const char* what, bool fifoWait)
    : comm_(comm),
      peer_(peer),
      what_(what),
      bell_(fifoWait && comm->mySegment.base() != nullptr ? &comm->mySegment.header()->bell
                                                          : nullptr) {}

// A wait past its spin phase tells the status report (comm/status.h) what it waits for: a few
// relaxed stores, on the slow path only (the clock was just read).
void Waiter::publish(Clock::time_point now) {
  OpTrace& t = comm_->trace;
  t.waitPeer.store(peer_, std::memory_order_relaxed);
  t.waitWhat.store(what_, std::memory_order_relaxed);
  t.waitSinceNs.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
      std::memory_order_relaxed);
  t.waiter.store(this, std::memory_order_release);
  if (comm_->mySegment.base() != nullptr) {
    SegmentHeader* h = comm_->mySegment.header();
    alive_ = &h->aliveNs;
    alive_->store(steadyNs(now), std::memory_order_relaxed);
    uint32_t op = 0;
    if (t.inFlight.load(std::memory_order_relaxed)) {
      const uint64_t c = t.completed.load(std::memory_order_relaxed);
      op = uint32_t(t.ring[c % kTraceEntries].desc.load(std::memory_order_relaxed) & 0xff) + 1;
    }
    h->waitSeq.store(comm_->opCount, std::memory_order_relaxed);
    h->waitOp.store(op, std::memory_order_relaxed);
    h->waitingFor.store(peer_ + 1, std::memory_order_relaxed);
  }
  published_ = true;
}

PeerStatus segmentStatus(const chorusComm* c, int p, int64_t nowNs) {
  const SegmentHeader* h = c->peerHeader(p);
  PeerStatus st;
  const int32_t f = h->failed.load(std::memory_order_acquire);
  st.failed = f > 0 && f <= c->nranks ? f : 0;
  const int32_t w = h->waitingFor.load(std::memory_order_relaxed);
  st.waitingFor = w > 0 && w <= c->nranks ? w : 0;
  const int64_t alive = h->aliveNs.load(std::memory_order_relaxed);
  st.aliveAgeMs = alive > 0 ? std::max<int64_t>(0, (nowNs - alive) / 1'000'000) : -1;
  st.seq = h->waitSeq.load(std::memory_order_relaxed);
  const uint32_t op = h->waitOp.load(std::memory_order_relaxed);
  st.op = op <= 255 ? op : 0;
  return st;
}

// The rank a timed-out wait is really behind: from the peer this rank waits for, follow the
// ranks' published waits to the first rank that is not waiting inside Chorus (it hangs
// elsewhere, or has not called), that stopped making progress while it waits (its sign of life,
// SegmentHeader::aliveNs, is stale: stopped by a signal or a debugger, swapping, frozen), that
// failed already, or around a cycle of live ranks back to this rank (they wait for each other:
// calls in a different order). Same-node ranks are read in their segments; a rank on another
// node is asked over its control connection (a process that does not answer is stopped).
// `chain` gets the path, e.g. "0 -> 1 -> 2".
namespace {
enum class Behind { kNotWaiting, kRemote, kCycle, kStopped, kFailed };
struct BehindInfo {
  Behind why = Behind::kNotWaiting;
  int culprit = -1;
  std::string chain;
  bool crossesNodes = false;  // a rank of the chain is on another node than this rank
  double stoppedFor = -1;     // kStopped: seconds since its last sign of life (-1: no answer)
  uint64_t seq = 0;           // kStopped: the operation it stopped in
  uint32_t op = 0;
  int reporter = -1;  // kFailed: the rank on the chain that failed (culprit: its cause)
};

// A live waiting rank refreshes its sign of life at every pause (at least every 10 ms);
// one silent for this long has stopped.
double staleAfter(const chorusComm* c) {
  return c->timeoutSec > 0 ? std::clamp(c->timeoutSec / 2, 0.5, 2.0) : 2.0;
}

std::string opWords(uint32_t op, uint64_t seq) {
  if (op == 0) return "a call";
  const uint32_t kind = op - 1;
  const char* name = kind == kTraceP2PGroup         ? "a Send/Recv group"
                     : kind < uint32_t(kNumOpKinds) ? opKindName(OpKind(kind))
                                                    : "an operation";
  return format("%s seq %llu", name, (unsigned long long)seq);
}

// The ranks of `node`, as "2-3" (contiguous) or "0, 2, 5".
std::string nodeRanks(const chorusComm* c, int node) {
  std::vector<int> r;
  for (int p = 0; p < c->nranks; ++p)
    if (c->nodeOf[size_t(p)] == node) r.push_back(p);
  if (r.empty()) return "none";
  if (r.size() == 1) return std::to_string(r[0]);
  if (r.back() - r.front() + 1 == int(r.size()))
    return std::to_string(r.front()) + "-" + std::to_string(r.back());
  std::string s;
  for (int p : r) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

// A network failure as this rank sees it (an error path, once a wait stalled or a peer reported
// a failure): "network failure: node N (ranks a-b, host H) unreachable from rank r: <evidence>"
// naming every node this rank cannot reach (PeerControl::probeNetwork), *culprit the first rank
// of the first one; empty when the network to the other nodes looks fine. `suspect`: a rank on
// another node that the wait found silent or failed (-1: none); `asked`: it was just sent a
// status query that went unanswered (its connection shows whether that query got through).
std::string networkFailure(chorusComm* c, int suspect, bool asked, int* culprit,
                           std::string* recovered = nullptr) {
  if (c->control == nullptr || c->nnodes < 2) return "";
  const bool remoteSuspect = suspect >= 0 && suspect < c->nranks && c->isRemote(suspect);
  const int node = remoteSuspect ? c->nodeOf[size_t(suspect)] : -1;
  const NetVerdict v = c->control->probeNetwork(std::clamp(c->timeoutSec / 4, 0.3, 1.0), node,
                                                remoteSuspect && !asked);
  if (!v.unreachable()) {
    for (size_t i = 0; recovered != nullptr && i < v.recovered.size(); ++i)
      *recovered += (i == 0 ? "" : ", ") + std::to_string(v.recovered[i]);
    return "";
  }
  std::string nodes, evidence;
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    const int n = v.nodes[i];
    const std::string rs = nodeRanks(c, n);
    nodes += format("%s%d (rank%s %s%s%s)",
                    i == 0                    ? ""
                    : i + 1 == v.nodes.size() ? " and "
                                              : ", ",
                    n, rs.find_first_of("-,") != std::string::npos ? "s" : "", rs.c_str(),
                    v.hosts[i].empty() ? "" : ", host ", v.hosts[i].c_str());
    evidence += (i == 0 ? "" : "; ") +
                (v.nodes.size() > 1 ? format("node %d: ", n) : std::string()) + v.evidence[i];
  }
  for (int p = 0; p < c->nranks && culprit != nullptr; ++p)
    if (c->nodeOf[size_t(p)] == v.nodes[0]) {
      *culprit = p;
      break;
    }
  return format("network failure: node%s %s unreachable from rank %d: %s",
                v.nodes.size() > 1 ? "s" : "", nodes.c_str(), c->rank, evidence.c_str());
}

// A failure whose cause is a rank on another node, not known dead: when this rank cannot reach
// that node either, the network failed, not the rank; throws that (`first`: who reported it).
void throwIfUnreachable(chorusComm* c, const char* what, int cause, const std::string& first) {
  if (cause < 0 || cause >= c->nranks || !c->isRemote(cause) || c->control == nullptr ||
      c->control->seenDead(cause))
    return;
  int culprit = cause;
  const std::string net = networkFailure(c, cause, false, &culprit);
  if (!net.empty())
    throw Failure{chorusRemoteError,
                  format("rank %d: %s: %s (%s)", c->rank, what, net.c_str(), first.c_str()),
                  culprit};
}

// One rank's state: read in its segment (same node), or asked over its control connection
// (another node; false: no answer, the process is stopped or its link failed). aliveAgeMs is
// -1 between calls (the sign of life is negated there).
bool readStatus(chorusComm* c, int p, int64_t nowNs, PeerStatus* st) {
  if (c->isRemote(p))
    return c->control != nullptr &&
           c->control->queryStatus(p, std::clamp(c->timeoutSec / 4, 0.3, 1.0), st);
  *st = segmentStatus(c, p, nowNs);
  return true;
}

// The verdict on rank p's state: it failed (the culprit is its cause), or it stopped inside a
// call (its sign of life is older than `stale`, waiting or not; the operation is known if it
// waits). False: neither.
bool judge(const PeerStatus& st, int p, double stale, BehindInfo* b) {
  if (st.failed > 0) {
    b->why = Behind::kFailed, b->culprit = st.failed - 1, b->reporter = p;
    return true;
  }
  if (st.aliveAgeMs >= 0 && double(st.aliveAgeMs) / 1e3 > stale) {
    b->why = Behind::kStopped, b->culprit = p, b->stoppedFor = double(st.aliveAgeMs) / 1e3;
    if (st.waitingFor > 0) b->seq = st.seq, b->op = st.op;
    return true;
  }
  return false;
}

// A remote rank that did not answer: stopped, unless its link failed meanwhile.
void noAnswer(chorusComm* c, int p, BehindInfo* b) {
  b->why = c->control != nullptr && c->control->peerFailed(p) ? Behind::kRemote : Behind::kStopped;
  b->culprit = p;
}

// Every other rank, same-node ones first: the first that failed (its cause), stopped inside a
// call (a stale sign of life) or, on another node, does not answer. kNotWaiting: none.
BehindInfo findStopped(chorusComm* c, double stale, int64_t nowNs) {
  BehindInfo b;
  for (int remote = 0; remote < 2; ++remote)
    for (int p = 0; p < c->nranks; ++p) {
      if (p == c->rank || c->isRemote(p) != (remote == 1)) continue;
      if (remote && c->control == nullptr) return b;
      if (remote && c->control->peerFailed(p)) {
        b.why = Behind::kFailed, b.culprit = c->control->failureCause(p), b.reporter = p;
        return b;
      }
      PeerStatus st;
      if (!readStatus(c, p, nowNs, &st)) {
        noAnswer(c, p, &b);
        return b;
      }
      if (judge(st, p, stale, &b)) return b;
    }
  return b;
}

BehindInfo findBehind(chorusComm* c, int peer) {
  BehindInfo b;
  b.chain = std::to_string(c->rank) + " -> " + std::to_string(peer);
  b.crossesNodes = c->isRemote(peer);
  const double stale = staleAfter(c);
  const int64_t nowNs = steadyNs(Clock::now());
  int p = peer;
  bool inCall = false;  // p is inside a call (not between two)
  for (int steps = 0; steps < c->nranks; ++steps) {
    if (c->isRemote(p) && (c->control == nullptr || c->control->peerFailed(p))) {
      b.why = Behind::kRemote;  // its own failure notice names the cause (Waiter::check)
      b.culprit = p;
      return b;
    }
    PeerStatus st;
    if (!readStatus(c, p, nowNs, &st)) {
      noAnswer(c, p, &b);
      return b;
    }
    if (judge(st, p, stale, &b)) return b;
    const int w = st.waitingFor;
    inCall = st.aliveAgeMs >= 0;
    const int next = w - 1;
    if (w <= 0 || next >= c->nranks || next == p) break;
    b.chain += " -> " + std::to_string(next);
    b.crossesNodes = b.crossesNodes || c->isRemote(next);
    if (next == c->rank) {
      // A cycle of live ranks, as far as the chain shows. A wait on several peers (a tree's)
      // publishes one of them at a time, so the chain may go round while the real culprit is
      // off it: look at every rank before blaming the order of calls.
      BehindInfo any = findStopped(c, stale, nowNs);
      if (any.why != Behind::kNotWaiting) {
        any.chain = b.chain;
        return any;
      }
      b.why = Behind::kCycle;
      b.culprit = p;
      return b;
    }
    p = next;
  }
  // p does not wait. Between calls, it has not made this one (it hangs elsewhere). Inside one
  // and alive, it is busy, or between two waits of the call (a wait on several peers, or
  // several channels, publishes one at a time): a rank that stopped may be off the chain.
  if (inCall) {
    BehindInfo any = findStopped(c, stale, nowNs);
    if (any.why != Behind::kNotWaiting) {
      any.chain = b.chain;
      return any;
    }
  }
  b.why = Behind::kNotWaiting;
  b.culprit = p;
  return b;
}
}  // namespace

Waiter::~Waiter() {
  if (published_) {
    OpTrace& t = comm_->trace;
    // A long wait ended by a failure (a peer timed out or failed first): this rank reports too,
    // so that every rank of a hang says what it was doing (once per operation; not on abort).
    if (std::uncaught_exceptions() > 0 && !comm_->abortFlag.load(std::memory_order_relaxed)) {
      const double waited = std::chrono::duration<double>(Clock::now() - start_).count();
      const double longWait = comm_->timeoutSec > 0 ? std::min(1.0, comm_->timeoutSec / 2) : 1.0;
      if (waited >= longWait && t.timeoutReported.exchange(comm_->opCount) != comm_->opCount) {
        const std::string reason =
            format("a wait of %.1f s ended in a failure (see the error)", waited);
        printStatus(comm_, reason.c_str(), peer_, what_);
      }
    }
    if (t.waiter.load(std::memory_order_relaxed) == this)
      t.waiter.store(nullptr, std::memory_order_relaxed);
    // A wait that ended in a failure stays published: ranks that time out beside this one
    // follow it to the rank that is behind.
    if (comm_->mySegment.base() != nullptr && std::uncaught_exceptions() == 0)
      comm_->mySegment.header()->waitingFor.store(0, std::memory_order_relaxed);
  }
  if (everArmed_) disarmDoorbell(bell_);
}

// peer_ destroyed its communicator while this rank waits on it. Its departure is no failure by
// itself (a rank leaves after its last call while others finish theirs), and what it sent before
// going may have landed after this wait last looked: the first sight is only noted, and the
// caller tests its condition again before the next check. Seen again once everything it sent
// is in (drained), the wait still needs it: it will never come (the ranks' calls differ). Not
// drained (TCP: a connection from it not read to its end, e.g. this rank's FIFO from it is full
// while this rank waits to send to it): 5 s after the first sight.
void Waiter::departed(Clock::time_point now, bool drained) {
  int slot = -1;
  for (int i = 0; i < kDepartedSlots && slot < 0; ++i)
    if (departedPeer_[i] == peer_) slot = i;
  if (slot < 0) {
    int oldest = 0;
    for (int i = 1; i < kDepartedSlots; ++i)
      if (departedAt_[i] < departedAt_[oldest]) oldest = i;
    departedPeer_[oldest] = peer_;
    departedAt_[oldest] = now;
    return;
  }
  if (!drained && now - departedAt_[slot] < std::chrono::seconds(5)) return;
  throw Failure{chorusRemoteError,
                format("rank %d: %s: peer rank %d destroyed its communicator while this rank "
                       "still waits for it (do all ranks make the same calls?)",
                       comm_->rank, what_, peer_),
                peer_};
}

// Of the same-node ranks that died (gone without a failure flag or a departure; `dead` is one),
// the one whose last sign of life (SegmentHeader::aliveNs, stamped at every call's start and
// end and by long waits) is oldest: the first to die, as far as this node can tell. Ties: the
// lower rank. An error path (a /proc read per rank).
static int firstDead(chorusComm* c, int dead) {
  auto lastSign = [&](int r) {
    const int64_t a = c->peerHeader(r)->aliveNs.load(std::memory_order_relaxed);
    return a < 0 ? -a : a;
  };
  int first = dead;
  int64_t firstSign = lastSign(dead);
  for (int r = 0; r < c->nranks; ++r) {
    if (r == dead || r == c->rank || c->isRemote(r)) continue;
    const pid_t pid = c->peers[size_t(r)].pid;
    if (pid == getpid() || processAlive(pid)) continue;
    if (c->peerHeader(r)->failed.load(std::memory_order_acquire) != 0 ||
        c->peerSegments[size_t(r)].shrinkBox()->left.load(std::memory_order_acquire) != 0)
      continue;
    const int64_t sign = lastSign(r);
    if (sign < firstSign || (sign == firstSign && r < first)) first = r, firstSign = sign;
  }
  return first;
}

void Waiter::check(Clock::time_point now) {
  ++checks_;
  chorusComm* c = comm_;
  if (published_) {  // setPeer moves it
    c->trace.waitPeer.store(peer_, std::memory_order_relaxed);
    if (c->mySegment.base() != nullptr)
      c->mySegment.header()->waitingFor.store(peer_ + 1, std::memory_order_relaxed);
  }
  if (c->abortFlag.load(std::memory_order_relaxed))
    fail(chorusInvalidUsage, "rank %d: %s: communicator aborted (chorusCommAbort)", c->rank, what_);
  if (c->state.load(std::memory_order_acquire) == CommState::kFailed) {  // another channel failed
    // Its cause is already in this rank's failure flag (markFailed records it first): keep it.
    const int32_t f = c->mySegment.base() ? c->mySegment.header()->failed.load() : 0;
    throw Failure{chorusRemoteError,
                  format("rank %d: %s: the operation failed on another channel", c->rank, what_),
                  f > 0 ? f - 1 : -1};
  }
  if (peer_ >= 0 && peer_ != c->rank && c->isRemote(peer_)) {
    // The proxy failed this peer: its connection was lost (cause: the peer), or it sent a
    // failure notice naming the rank that caused it (itself, or a rank that died).
    if (c->control && c->control->peerFailed(peer_)) {
      const int cause = c->control->failureCause(peer_);
      if (cause != peer_)
        throwIfUnreachable(c, what_, cause, format("rank %d reported it first", peer_));
      throw Failure{chorusRemoteError,
                    format("rank %d: %s: %s", c->rank, what_, c->control->failureReason(peer_)),
                    cause};
    }
    if (c->control && c->control->peerLeft(peer_)) departed(now, c->control->peerDrained(peer_));
  } else if (peer_ >= 0 && peer_ != c->rank) {
    const SegmentHeader* h = c->peerHeader(peer_);
    pid_t pid = c->peers[size_t(peer_)].pid;
    // A peer that failed because of another rank records that cause before it exits: read it
    // first (and again once the peer is found dead), so that a survivor which exits at once
    // is not blamed for the failure it only reported.
    // A peer that destroyed its communicator (then maybe exited) wrote everything it sent into
    // this rank's segment first: a departure, not a death. Its `left` flag is read before its
    // failure flag (an abort sets that one first).
    const ShrinkBox* box = c->peerSegments[size_t(peer_)].shrinkBox();
    bool left = box->left.load(std::memory_order_acquire) != 0;
    int32_t f = h->failed.load(std::memory_order_acquire);
    if (f == 0 && !left && pid != getpid() && !processAlive(pid)) {
      left = box->left.load(std::memory_order_acquire) != 0;
      f = h->failed.load(std::memory_order_acquire);
      if (f == 0 && !left) {
        // Other ranks of this node may have died too (two deaths within one check period, or a
        // launcher that ends the others on the first death): name the one that died first, by
        // the last sign of life each left, so that every survivor names the same rank.
        const int first = firstDead(c, peer_);
        if (first != peer_ && c->peers[size_t(first)].pid == pid)  // one process, both ranks
          throw Failure{chorusRemoteError,
                        format("rank %d: %s: rank %d (pid %d) died, and with it peer rank %d of "
                               "the same process",
                               c->rank, what_, first, int(pid), peer_),
                        first};
        if (first != peer_)
          throw Failure{
              chorusRemoteError,
              format("rank %d: %s: rank %d (pid %d) died first; peer rank %d (pid %d), "
                     "which this rank waits for, died after it",
                     c->rank, what_, first, int(c->peers[size_t(first)].pid), peer_, int(pid)),
              first};
        throw Failure{
            chorusRemoteError,
            format("rank %d: %s: peer rank %d (pid %d) died", c->rank, what_, peer_, int(pid)),
            peer_};
      }
    }
    if (f == 0 && left) departed(now, true);
    if (f != 0) {
      const int cause = f - 1;
      if (cause == peer_)
        throw Failure{chorusRemoteError,
                      format("rank %d: %s: peer rank %d failed or aborted", c->rank, what_, peer_),
                      cause};
      const bool valid = cause >= 0 && cause < c->nranks;
      throwIfUnreachable(c, what_, cause, format("peer rank %d failed first", peer_));
      const bool dead =
          valid && (c->isRemote(cause) ? c->control && c->control->seenDead(cause)
                                       : c->peers[size_t(cause)].pid != getpid() &&
                                             !processAlive(c->peers[size_t(cause)].pid));
      throw Failure{chorusRemoteError,
                    format("rank %d: %s: rank %d %s (reported by peer rank %d)", c->rank, what_,
                           cause, dead ? "died" : "failed", peer_),
                    cause};
    }
  }
  if (c->timeoutSec > 0 && iter_ > c->spinIters &&
      std::chrono::duration<double>(now - std::max(start_, extendedAt_)).count() > c->timeoutSec) {
    // One status report per operation (several channels may time out together) on stderr.
    if (c->trace.timeoutReported.exchange(c->opCount) != c->opCount) {
      const std::string reason = format("no progress for %.1f s (CHORUS_TIMEOUT)", c->timeoutSec);
      printStatus(c, reason.c_str(), peer_, what_);
    }
    // Name the rank that is behind, not only the peer: in a ring every rank waits for its
    // neighbour and all of them time out together.
    BehindInfo b;
    b.culprit = peer_;
    if (peer_ >= 0 && peer_ != c->rank) b = findBehind(c, peer_);
    int culprit = b.culprit;
    const std::string& chain = b.chain;
    {
      // The network to another node, before any rank is blamed: a rank there that does not
      // answer (or failed) may only be out of reach.
      const bool asked = b.why == Behind::kStopped && b.stoppedFor < 0;
      int netCulprit = culprit;
      std::string back;
      const std::string net =
          networkFailure(c, b.why == Behind::kCycle || b.why == Behind::kNotWaiting ? -1 : culprit,
                         asked, &netCulprit, &back);
      // Live ranks waiting for each other across nodes: what they wait for may be in TCP's
      // retransmission backoff on a link this rank does not use (a flap, heavy loss).
      const bool acrossNodes = b.why == Behind::kCycle && b.crossesNodes;
      std::string why;
      if (!back.empty())
        why = format("the network to node(s) %s stalled and answers again (a link flap?)",
                     back.c_str());
      else if (acrossNodes)
        why = format(
            "live ranks wait for each other across nodes (%s): data may be in TCP's "
            "retransmission backoff after a flap or heavy loss",
            chain.c_str());
      if (net.empty() && !why.empty() && netExtensions_ < kNetExtensions) {
        // What waits is in TCP's retransmission backoff and comes at its next retry: wait again.
        ++netExtensions_;
        extendedAt_ = Clock::now();
        CHORUS_WARN(c->rank, "%s: no progress for %.1f s, but %s: waiting another %.1f s", what_,
                    c->timeoutSec, why.c_str(), c->timeoutSec);
        return;
      }
      if (!net.empty())
        throw Failure{chorusRemoteError,
                      format("rank %d: %s: %s (no progress for %.1f s waiting for peer rank %d)",
                             c->rank, what_, net.c_str(), c->timeoutSec, peer_),
                      netCulprit};
    }
    const std::string base =
        format("no progress for %.1f s waiting for peer rank %d", c->timeoutSec, peer_);
    std::string msg;
    if (b.why == Behind::kStopped) {
      const std::string where =
          c->isRemote(culprit) ? format(" (node %d)", c->nodeOf[size_t(culprit)]) : "";
      if (b.stoppedFor < 0)
        msg = format(
            "rank %d: %s: rank %d%s stopped making progress: its process does not answer a "
            "status query (stopped or frozen?; waits %s): %s",
            c->rank, what_, culprit, where.c_str(), chain.c_str(), base.c_str());
      else
        msg = format(
            "rank %d: %s: rank %d%s stopped making progress %.1f s ago inside %s "
            "(waits %s): %s",
            c->rank, what_, culprit, where.c_str(), b.stoppedFor, opWords(b.op, b.seq).c_str(),
            chain.c_str(), base.c_str());
    } else if (b.why == Behind::kFailed) {
      msg =
          format("rank %d: %s: rank %d is behind (reported by rank %d, which failed; waits %s): %s",
                 c->rank, what_, culprit, b.reporter, chain.c_str(), base.c_str());
    } else if (b.why == Behind::kRemote && c->control) {
      // The ranks there timed out too, at about the same moment, and followed their own node's
      // waits: give their notice a moment to arrive (an error path; the bound is long passed).
      const auto until = Clock::now() + std::chrono::milliseconds(300);
      while (!c->control->peerFailed(culprit) && Clock::now() < until) usleep(2000);
      const int remoteCause =
          c->control->peerFailed(culprit) ? c->control->failureCause(culprit) : -1;
      if (remoteCause >= 0 && remoteCause != c->rank) {
        msg = format("rank %d: %s: rank %d is behind (reported by rank %d of node %d): %s", c->rank,
                     what_, remoteCause, culprit, c->nodeOf[size_t(culprit)], base.c_str());
        culprit = remoteCause;
      } else {
        msg = format("rank %d: %s: rank %d of node %d is behind (waits %s): %s", c->rank, what_,
                     culprit, c->nodeOf[size_t(culprit)], chain.c_str(), base.c_str());
      }
    } else if (b.why == Behind::kCycle) {
      msg = format(
          "rank %d: %s: %s; ranks wait for each other in a cycle (%s): calls in a "
          "different order?",
          c->rank, what_, base.c_str(), chain.c_str());
    } else if (culprit != peer_) {
      msg = format("rank %d: %s: rank %d is behind (it is not waiting in Chorus; waits %s): %s",
                   c->rank, what_, culprit, chain.c_str(), base.c_str());
    } else {
      msg = format("rank %d: %s: %s", c->rank, what_, base.c_str());
    }
    throw Failure{chorusTimeout, msg, b.why == Behind::kCycle || peer_ < 0 ? -1 : culprit};
  }
}

}  // namespace chorus
