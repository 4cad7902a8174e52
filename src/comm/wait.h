// Waiting: spin briefly, then yield, then sleep, so that more ranks than cores still make
// progress and an idle rank burns no core. Every wait watches the abort flag, the peer's health
// (its segment's failure flag and, for another process, whether its pid still exists) and the
// optional CHORUS_TIMEOUT; a problem throws chorus::Failure, which unwinds the algorithm.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "base/clock.h"
#include "comm/control.h"

struct chorusComm;

namespace chorus {

// False for a process that is gone or dead but not yet reaped (a zombie).
bool processAlive(pid_t pid);

// The adaptive poll phase (chorusComm::pollNs): its next length after a wait of waitedNs that
// slept on the doorbell, from cur, never below base (comm/wait.cc has the rule and its reasons).
int64_t nextPollNs(int64_t cur, int64_t base, int64_t waitedNs);

struct Doorbell;  // transport/fifo.h

// Usage: `Waiter w(...); while (!condition()) w.pause();`. A wait for FIFO events (fifoWait:
// data from peers, free slots; what same-node peers and the TCP proxy ring this rank's doorbell
// for) that outlasts the spin phase sleeps on the rank's doorbell until a post or release rings
// it: a waiting rank gives its core to the computation, or to the peer it waits for, instead of
// polling or yielding (a yield hands the core to a busy process for a whole time slice). Other
// waits spin, yield, then nap briefly.
class Waiter {
 public:
  Waiter(chorusComm* comm, int peer, const char* what, bool fifoWait = false);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  void pause();
  void setPeer(int peer) { peer_ = peer; }
  // Health checks done so far: a wait for several peers moves to the next one per check, so
  // that every peer is looked at whatever the cadence of pauses (sleeps, yields, spins).
  uint32_t checks() const { return checks_; }
  // Whether this wait only spun so far (no yield, no sleep): it saw its condition turn true
  // within a few polls of the moment it did (transport/fifo.h RecvConn::noteHandoff).
  bool onlySpun() const { return !gaveCore_; }
  // The checks a long wait makes (abort, failed communicator, the peer's failure or death), now:
  // throws if one fails.
  void checkNow() { check(Clock::now()); }

 private:
  void check(Clock::time_point now);
  [[noreturn]] void throwReported(chorusComm* c, int cause, int reporter, const char* role) const;
  void departed(Clock::time_point now, bool drained);
  void publish(Clock::time_point now);
  void adaptPoll(Clock::time_point now);
  bool yieldCore() const;
  void yieldAndNote(Clock::time_point before);
  chorusComm* comm_;
  int peer_;
  const char* what_;
  Doorbell* bell_;
  bool spinPolling_ = false;  // in a spin-poll phase: the clock is read every 64 polls
  bool armed_ = false;        // the bell was read since the last sleep: the next pause sleeps
  bool everArmed_ = false;
  bool sleepFirst_ = false;  // this wait sleeps at once instead of yielding (comm/wait.cc)
  bool slept_ = false;       // slept on the doorbell at least once (the poll phase adapts after)
  bool gaveCore_ = false;    // yielded or slept at least once (onlySpun)
  bool published_ = false;   // this wait is the communicator's published one (comm/status.h)
  std::atomic<int64_t>* alive_ = nullptr;  // the rank's sign of life, refreshed by slow pauses
  int cpu_ = -1;  // the CPU of this rank's last slow pause (unpinned ranks only)
  uint32_t bellValue_ = 0;
  uint32_t iter_ = 0;
  uint32_t checks_ = 0;
  Clock::time_point start_{};
  Clock::time_point nextCheck_{};
  // A timeout found a node whose link had stalled and came back (a flap): the bound counts
  // again from then, at most kNetExtensions times per wait (comm/wait.cc).
  static constexpr int kNetExtensions = 2;
  int netExtensions_ = 0;
  Clock::time_point extendedAt_{};
  // Peers this wait found gone by chorusCommDestroy (not dead, not failed), and when: a wait
  // fails on such a peer at a later check, once what it sent is all in (comm/wait.cc).
  static constexpr int kDepartedSlots = 4;
  int departedPeer_[kDepartedSlots] = {-1, -1, -1, -1};
  Clock::time_point departedAt_[kDepartedSlots] = {};
};

}  // namespace chorus
