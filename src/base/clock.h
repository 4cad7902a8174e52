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
inline Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

}  // namespace chorus
