// How the torch backend reports failures: a failed Chorus call becomes a c10::Error naming the
// call, the result, the library's message and, when the group's global ranks are known, the
// global rank at fault; a refused argument becomes a c10::Error naming the operation and rank.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "chorus/chorus.h"

namespace chorus_torch {

// "; the rank at fault is global rank G (group rank R)" once comm failed because of rank R, when
// the group's global ranks are known (ProcessGroupChorus::setGlobalRanks); else empty.
std::string faultSuffix(chorusComm_t comm);

// Throws a c10::Error (RuntimeError in Python) for a failed Chorus call: the call, the result and
// the library's message, which names the rank and, for a failed peer, the peer and the cause (and
// that rank's global rank: chorus.torch.failed_rank reads it).
inline void check(chorusResult_t r, chorusComm_t comm, const char* what) {
  if (r == chorusSuccess) return;
  const std::string message = chorusGetLastError(comm);  // before anything else can replace it
  // A timeout says so in the words torch's own checks look for (" Timed out ").
  TORCH_CHECK(false, "chorus ", what, " failed: ", r == chorusTimeout ? "Timed out (" : "",
              chorusGetErrorString(r), r == chorusTimeout ? ")" : "", ": ", message,
              faultSuffix(comm));
}

[[noreturn]] void refuse(int rank, const char* op, const std::string& why);

}  // namespace chorus_torch
