// The waits of the ranks (comm/wait.h): spin, yield, then sleep (on the rank's doorbell for
// FIFO events), watching the abort flag, the peer's health and CHORUS_TIMEOUT; a failure or a
// timeout throws, named by comm/hang_report.cc.
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

#include "base/cpu_relax.h"
#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/control.h"
#include "comm/hang_report.h"
#include "comm/status.h"
#include "transport/doorbell.h"

namespace chorus {

namespace {
constexpr auto kYieldPhase = std::chrono::microseconds(500);
constexpr uint32_t kPollClockEvery = 64;  // spin-polls between two clock reads (a power of 2)
constexpr auto kCheckEvery = std::chrono::milliseconds(50);
// A wait this long also reads the failure flags of the same-node ranks it does not wait for.
constexpr auto kOthersAfter = std::chrono::milliseconds(200);
// The adaptive poll phase (chorusComm::pollNs). A wait that slept on its doorbell and still
// ended within kShortWait slept through a peer that was about to deliver: its wake-up (tens to
// hundreds of microseconds on a VM, where a halted vCPU must be woken) cost more than polling
// would have, and it makes the peer's next wait long too, so two ranks can settle into sleeping
// on every hand-off (130 us a call instead of 0.3). The phase then grows to twice that wait, at
// most kPollMax. A wait that slept longer than kLongWait (the peer computes, or its core is
// taken) halves it again, down to chorusComm::pollPhase.
constexpr int64_t kShortWaitNs = 1'000'000;
constexpr int64_t kLongWaitNs = 20'000'000;
constexpr int64_t kPollMaxNs = 500'000;
// A yield that kept this rank off its CPU this long let another task run a time slice: a busy
// process on the core (or a peer rank that computed that long). Waits that would yield then
// sleep on the doorbell at once: the next kSleepFirstMin waits, twice as many after each slow
// yield in a row (the first yield after them tries again), up to kSleepFirstMax; a quick yield
// starts over. 2 ranks put on one CPU beside a busy process there took 680 us for an 8 B
// AllReduce whose waits yielded (each yield gave the busy process its slice), 41 us with this;
// 4 ranks on 2 cores beside two, 1580 against 123 us. With nothing else on the cores a yield
// hands the core straight to the peer and the rule stays out of the way (at 200 us instead of
// 1 ms, 4 ranks on the 2 cores beside one busy process took 17.5 us for an 8 B AllReduce
// against 11.2 without the rule).
constexpr int64_t kSlowYieldNs = 1'000'000;
constexpr int32_t kSleepFirstMin = 32;
constexpr int32_t kSleepFirstMax = 512;
}  // namespace

int64_t nextPollNs(int64_t cur, int64_t base, int64_t waitedNs) {
  if (waitedNs < kShortWaitNs)
    return std::max(cur, std::min(kPollMaxNs, std::max(base, 2 * waitedNs)));
  if (waitedNs > kLongWaitNs) return std::max(base, cur / 2);
  return cur;
}

// After a wait that slept: the poll phase follows how long sleeping waits last.
void Waiter::adaptPoll(Clock::time_point now) {
  const int64_t waited = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count();
  const int64_t cur = comm_->pollNs.load(std::memory_order_relaxed);
  const int64_t next = nextPollNs(cur, comm_->pollPhase.count(), waited);
  if (next != cur) comm_->pollNs.store(next, std::memory_order_relaxed);
}

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
  if (!comm_->pinned && comm_->mySegment.base() != nullptr) {
    cpu_ = sched_getcpu();  // the vDSO's, no system call
    comm_->mySegment.header()->cpu.store(cpu_, std::memory_order_relaxed);
  }
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
  const bool yield = yieldCore();
  if (iter_ == spinIters && yield && comm_->sleepFirstWaits.load(std::memory_order_relaxed) > 0)
    sleepFirst_ = comm_->sleepFirstWaits.fetch_sub(1, std::memory_order_relaxed) > 0;
  const bool sleepFirst = yield && sleepFirst_;
  if (bell_ != nullptr && !sleepFirst &&
      now - start_ < std::chrono::nanoseconds(comm_->pollNs.load(std::memory_order_relaxed))) {
    // Keep polling a while before sleeping: waking a sleeper costs the waker a system call and
    // the sleeper tens of microseconds on a VM (an idle vCPU must be woken), and a wait that
    // sleeps makes the peer's next wait longer, so a too-early sleep feeds on itself. Yield
    // instead of spinning only when the peer may need this core (yieldCore).
    if (yield) {
      yieldAndNote(now);
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
    sleepOnDoorbell(bell_, bellValue_, comm_->bellSleepNs);
    armed_ = false;
    slept_ = gaveCore_ = true;
    return;
  }
  if (now - start_ < kYieldPhase && !sleepFirst) {
    if (yield) {
      yieldAndNote(now);
    } else if (comm_->pinned) {  // the core is its own: a yield costs little
      sched_yield();
      gaveCore_ = true;
    } else {
      cpuRelax();
    }
  } else {
    gaveCore_ = true;
    // Sleep a little longer the longer we wait, up to 200 us.
    auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - start_).count();
    long us = waited < 5000 ? 20 : waited < 50000 ? 50 : 200;
    timespec ts{0, us * 1000};
    nanosleep(&ts, nullptr);
  }
}

// A yield that notes how long it kept this rank off its CPU (kSlowYieldNs above).
void Waiter::yieldAndNote(Clock::time_point before) {
  sched_yield();
  gaveCore_ = true;
  if (steadyNs(Clock::now()) - steadyNs(before) > kSlowYieldNs) {
    const int32_t span = std::clamp(comm_->sleepFirstSpan.load(std::memory_order_relaxed) * 2,
                                    kSleepFirstMin, kSleepFirstMax);
    comm_->sleepFirstSpan.store(span, std::memory_order_relaxed);
    comm_->sleepFirstWaits.store(span, std::memory_order_relaxed);
  } else if (comm_->sleepFirstSpan.load(std::memory_order_relaxed) != 0) {
    comm_->sleepFirstSpan.store(0, std::memory_order_relaxed);
  }
}

// Whether a pause in a wait should give this rank's CPU away (a yield) rather than spin. Yes with
// more ranks than CPUs (the peer may need this core), and where the rank's TCP proxy thread
// shares its one CPU (proxySharesCpu: a rank its launcher pinned, with peers on other nodes),
// whatever it waits for: the proxy moves the bytes of the remote peers, and a rank that spun
// through its poll phase kept it off the core (an 8 B AllReduce across 2 emulated nodes took
// 540 us instead of 21; CHANGELOG, 2026-12-05). No for a pinned rank otherwise (the core is its
// own: its FIFO waits spin-poll). A rank the scheduler may move (not pinned) yields only when the
// peer it waits for was last seen waiting on its CPU: sleeps and wake-ups (the kernel wakes a
// task near its waker) can put two unpinned ranks on one CPU, where a spin would keep the peer
// off it. Elsewhere a yield hands the core to whatever else is runnable, and beside a busy
// process that runs a whole time slice: 2 ranks with CHORUS_BIND=none beside 2 busy processes
// took 1.1-1.5 ms for a 256 KiB AllReduce that yielded, 0.09-0.14 ms spinning (CHANGELOG,
// 2026-12-03). A spin lasts at most the poll phase, then the wait sleeps.
bool Waiter::yieldCore() const {
  if (comm_->moreRanksThanCpus || comm_->proxySharesCpu) return true;
  if (comm_->pinned) return false;
  if (cpu_ < 0 || peer_ < 0 || peer_ >= comm_->nranks || peer_ == comm_->rank ||
      comm_->isRemote(peer_))
    return true;
  return comm_->peerHeader(peer_)->cpu.load(std::memory_order_relaxed) == cpu_;
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
  t.slowWaits.fetch_add(1, std::memory_order_relaxed);
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
  if (slept_ && comm_->pollAdaptive && std::uncaught_exceptions() == 0) adaptPoll(Clock::now());
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
        c->segmentOf(r).shrinkBox()->left.load(std::memory_order_acquire) != 0)
      continue;
    const int64_t sign = lastSign(r);
    if (sign < firstSign || (sign == firstSign && r < first)) first = r, firstSign = sign;
  }
  return first;
}

// Rank `reporter` recorded a failure caused by rank `cause` (its failure flag, or a notice):
// this wait fails too, naming the cause as dead or failed.
void Waiter::throwReported(chorusComm* c, int cause, int reporter, const char* role) const {
  if (cause == reporter)
    throw Failure{chorusRemoteError,
                  format("rank %d: %s: %srank %d failed or aborted", c->rank, what_, role, cause),
                  cause};
  const bool valid = cause >= 0 && cause < c->nranks;
  throwIfUnreachable(c, what_, cause, format("%srank %d failed first", role, reporter));
  const bool dead = valid && (c->isRemote(cause) ? c->control && c->control->seenDead(cause)
                                                 : c->peers[size_t(cause)].pid != getpid() &&
                                                       !processAlive(c->peers[size_t(cause)].pid));
  throw Failure{chorusRemoteError,
                format("rank %d: %s: rank %d %s (reported by %srank %d)", c->rank, what_, cause,
                       dead ? "died" : "failed", role, reporter),
                cause};
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
    const ShrinkBox* box = c->segmentOf(peer_).shrinkBox();
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
    if (f != 0) throwReported(c, f - 1, peer_, "peer ");
  }
  // A wait can hang on a rank it does not watch: once a third rank failed, the others may
  // disagree about the call (a failing rank withdraws its single-copy post, algo/peer_post.h: a
  // peer that read it before copies, one that read it after falls back to the ring, and each
  // then waits for the other, both alive). A failed rank's communicator completes no
  // collective, so a wait that lasts also reads every same-node rank's failure flag (an
  // explicit record: a rank that left or exited after its last call is no failure).
  if (peer_ >= 0 && now - start_ >= kOthersAfter) {  // a wait for a peer (not a queue)
    for (int r = 0; r < c->nranks; ++r) {
      if (r == c->rank || r == peer_ || c->isRemote(r) || c->segmentOf(r).base() == nullptr)
        continue;
      const int32_t f = c->peerHeader(r)->failed.load(std::memory_order_acquire);
      if (f != 0) throwReported(c, f - 1, r, "");
    }
  }
  if (c->timeoutSec > 0 && iter_ > c->spinIters &&
      std::chrono::duration<double>(now - std::max(start_, extendedAt_)).count() > c->timeoutSec) {
    // Throws the failure that names the rank behind, or the network, unless what waits is in
    // TCP's retransmission backoff after a flap and comes at its next retry: then wait again.
    std::string flap;
    diagnoseHang(c, peer_, what_, netExtensions_ < kNetExtensions, &flap);
    ++netExtensions_;
    extendedAt_ = Clock::now();
    CHORUS_WARN(c->rank, "%s: no progress for %.1f s, but %s: waiting another %.1f s", what_,
                c->timeoutSec, flap.c_str(), c->timeoutSec);
  }
}

}  // namespace chorus
