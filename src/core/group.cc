#include "core/group.h"

#include <memory>
#include <vector>

#include "base/error.h"
#include "comm/comm.h"
#include "core/exec.h"

namespace chorus {
namespace {
thread_local int tDepth = 0;
thread_local std::vector<OpDesc> tOps;
thread_local chorusResult_t tGroupError = chorusSuccess;  // first failed call inside the group
}  // namespace

int groupDepth() {
  return tDepth;
}
void groupAdd(const OpDesc& op) {  // may throw std::bad_alloc: the caller's boundary catches it
  tOps.push_back(op);
}
void groupRecordError(chorusResult_t code) {
  if (tDepth > 0 && tGroupError == chorusSuccess) tGroupError = code;
}

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusGroupStart(void) {
  ++tDepth;
  return chorusSuccess;
}

chorusResult_t chorusGroupEnd(void) {
  if (tDepth == 0) {
    setThreadLastError("chorusGroupEnd: no matching chorusGroupStart");
    return chorusInvalidUsage;
  }
  if (--tDepth > 0) return chorusSuccess;
  // The operations run from tOps itself, which is emptied afterwards but keeps its capacity:
  // a group no larger than an earlier one allocates nothing.
  struct Clear {
    ~Clear() { tOps.clear(); }
  } clear;
  chorusResult_t err = tGroupError;
  tGroupError = chorusSuccess;
  // As in NCCL, a call that failed inside the group fails the whole group: nothing is run.
  if (err != chorusSuccess) return err;
  if (tOps.empty()) return chorusSuccess;
  // The common case: every operation on one communicator and the null stream.
  bool oneCommNullStream = true;
  for (const OpDesc& op : tOps)
    oneCommNullStream = oneCommNullStream && op.comm == tOps[0].comm && op.stream == nullptr;
  return guarded(
      -1, "chorusGroupEnd",
      [&] {
        // Each communicator in the group is this thread's for the run, as a single call's is
        // (ApiGuard): a call from another thread meanwhile is refused, and executeGroupNow
        // relies on it.
        if (oneCommNullStream) {
          ApiGuard guard(tOps[0].comm, "chorusGroupEnd");
          return executeGroupNow(tOps);
        }
        std::vector<std::unique_ptr<ApiGuard>> guards;
        for (size_t i = 0; i < tOps.size(); ++i) {
          bool seen = false;
          for (size_t j = 0; j < i && !seen; ++j) seen = tOps[j].comm == tOps[i].comm;
          if (!seen) guards.push_back(std::make_unique<ApiGuard>(tOps[i].comm, "chorusGroupEnd"));
        }
        return submit(tOps);
      },
      [](const Failure& f) {
        setThreadLastError(f.message);
        return f.code;
      });
}
