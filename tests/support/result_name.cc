// The name of a chorusResult_t (result_name.h).
#include "result_name.h"

namespace ctest {

const char* resultName(chorusResult_t r) {
  switch (r) {
    case chorusSuccess:
      return "chorusSuccess";
    case chorusUnhandledCudaError:
      return "chorusUnhandledCudaError";
    case chorusSystemError:
      return "chorusSystemError";
    case chorusInternalError:
      return "chorusInternalError";
    case chorusInvalidArgument:
      return "chorusInvalidArgument";
    case chorusInvalidUsage:
      return "chorusInvalidUsage";
    case chorusRemoteError:
      return "chorusRemoteError";
    case chorusInProgress:
      return "chorusInProgress";
    case chorusTimeout:
      return "chorusTimeout";
    default:
      return "chorus<unknown result>";
  }
}

}  // namespace ctest
