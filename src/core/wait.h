// Waiting: spin briefly, then poll without system calls for a while (not when the node has more
// ranks than cores), then yield, then sleep, so that more ranks than cores still make
// progress and an idle rank burns no core. Every wait watches the abort flag, the peer's health
// (its segment's failure flag and, for another process, whether its pid still exists) and the
// optional CHORUS_TIMEOUT; a problem throws chorus::Failure, which unwinds the algorithm.
#pragma once

#include <sys/types.h>

#include "bootstrap/socket.h"

struct chorusComm;

namespace chorus {

// False for a process that is gone or dead but not yet reaped (a zombie).
bool processAlive(pid_t pid);

class Waiter {
 public:
  Waiter(chorusComm* comm, int peer, const char* what) : comm_(comm), peer_(peer), what_(what) {}
  void pause();
  void setPeer(int peer) { peer_ = peer; }
  // The checks a long wait makes (abort, failed communicator, the peer's failure or death), now:
  // throws if one fails.
  void checkNow() { check(Clock::now()); }

 private:
  void check(Clock::time_point now);
  chorusComm* comm_;
  int peer_;
  const char* what_;
  uint32_t iter_ = 0;
  bool polling_ = false;  // in the poll phase after the spin (comm->pollPhase)
  Clock::time_point start_{};
  Clock::time_point nextCheck_{};
};

}  // namespace chorus
