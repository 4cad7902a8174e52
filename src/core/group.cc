#include "core/group.h"

#include <vector>

#include "core/error.h"
#include "core/exec.h"

namespace chorus {
namespace {
thread_local int tDepth = 0;
thread_local std::vector<OpDesc> tOps;
}  // namespace

int groupDepth() { return tDepth; }
void groupAdd(const OpDesc& op) { tOps.push_back(op); }

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
  std::vector<OpDesc> ops;
  ops.swap(tOps);
  return submit(std::move(ops));
}
