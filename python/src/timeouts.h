// torch timeouts as Chorus timeouts: the group's (chorusConfig_t.timeoutMs) and a call's own
// (opts.timeout), which applies for that call only.
#pragma once

#include <chrono>
#include <functional>

#include "chorus/chorus.h"

namespace chorus_torch {

// A torch timeout as chorusConfig_t.timeoutMs: 0 (none) for zero or negative.
int timeoutMs(std::chrono::milliseconds t);

// Runs `job` with the call's own timeout (opts.timeout), when it has one other than the group's.
std::function<void()> withTimeout(std::function<void()> job, chorusComm_t comm,
                                  std::chrono::milliseconds callTimeout,
                                  std::chrono::milliseconds groupTimeout);

}  // namespace chorus_torch
