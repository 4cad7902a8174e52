// Time for bounded waits: the steady clock and deadlines (a wait that may not end by itself
// takes one).
#pragma once

#include <chrono>
#include <cstdint>

namespace chorus {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline noDeadline() {
  return Deadline::max();
}
// A steady-clock time as nanoseconds since its epoch (CLOCK_MONOTONIC: the same in every process
// of a machine, as CLOCK_MONOTONIC_COARSE is).
inline int64_t steadyNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
// Seconds from t to now.
inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
inline Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

}  // namespace chorus
