// The error path of the torch backend (errors.h): the registry of each group's global ranks
// (ProcessGroupChorus::setGlobalRanks fills it), the fault suffix it yields, and refusals.
#include "errors.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "process_group.h"

namespace chorus_torch {

namespace {

// The global ranks (of torch's default group) of each group's communicator, for the error path:
// the library names ranks of the communicator, and a subgroup's rank 1 may be global rank 3.
std::mutex gGlobalRanksMu;
std::map<chorusComm_t, std::vector<int>> gGlobalRanks;

}  // namespace

// "; the rank at fault is global rank G (group rank R)" once comm failed because of rank R, when
// the group's global ranks are known; else empty.
std::string faultSuffix(chorusComm_t comm) {
  int failed = -1;
  if (comm == nullptr || chorusCommGetFailedRank(comm, &failed) != chorusSuccess || failed < 0)
    return "";
  std::lock_guard<std::mutex> l(gGlobalRanksMu);
  auto it = gGlobalRanks.find(comm);
  if (it == gGlobalRanks.end() || size_t(failed) >= it->second.size()) return "";
  return "; the rank at fault is global rank " + std::to_string(it->second[size_t(failed)]) +
         " (group rank " + std::to_string(failed) + ")";
}

[[noreturn]] void refuse(int rank, const char* op, const std::string& why) {
  TORCH_CHECK(false, "chorus ", op, " (rank ", rank, "): ", why);
}

void ProcessGroupChorus::setGlobalRanks(const std::vector<int>& ranks) {
  if (ranks.size() != size_t(size_)) return;
  std::lock_guard<std::mutex> l(gGlobalRanksMu);
  gGlobalRanks[engine_->comm()] = ranks;
}

void ProcessGroupChorus::forgetGlobalRanks() {
  std::lock_guard<std::mutex> l(gGlobalRanksMu);
  gGlobalRanks.erase(engine_->comm());
}

}  // namespace chorus_torch
