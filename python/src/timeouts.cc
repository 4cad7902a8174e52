// torch timeouts as Chorus timeouts (timeouts.h).
#include "timeouts.h"

#include <algorithm>
#include <cstdint>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <utility>

#include "errors.h"

namespace chorus_torch {

// A torch timeout as chorusConfig_t.timeoutMs: 0 (none) for zero or negative.
int timeoutMs(std::chrono::milliseconds t) {
  const int64_t ms = t.count();
  return ms <= 0 ? 0 : int(std::min<int64_t>(ms, 2000000000));
}

// Runs `job` with the call's own timeout (opts.timeout), when it has one other than the group's.
std::function<void()> withTimeout(std::function<void()> job, chorusComm_t comm,
                                  std::chrono::milliseconds callTimeout,
                                  std::chrono::milliseconds groupTimeout) {
  if (callTimeout == c10d::kUnsetTimeout || callTimeout == groupTimeout) return job;
  const int callMs = timeoutMs(callTimeout), groupMs = timeoutMs(groupTimeout);
  return [job = std::move(job), comm, callMs, groupMs] {
    check(chorusCommSetTimeout(comm, callMs), comm, "timeout");
    struct Restore {
      chorusComm_t comm;
      int ms;
      ~Restore() { chorusCommSetTimeout(comm, ms); }
    } restore{comm, groupMs};
    job();
  };
}

}  // namespace chorus_torch
