// The public API's plain functions: version, error strings, type sizes (every layer may call
// them; the last-error query is the communicator's: comm/comm.cc).
#include "base/error.h"
#include "chorus/chorus.h"

using namespace chorus;

chorusResult_t chorusGetVersion(int* version) {
  if (version == nullptr) {
    setThreadLastError("chorusGetVersion: version is NULL");
    return chorusInvalidArgument;
  }
  *version = CHORUS_VERSION_CODE;
  return chorusSuccess;
}

const char* chorusGetErrorString(chorusResult_t result) {
  switch (result) {
    case chorusSuccess:
      return "no error";
    case chorusUnhandledCudaError:
      return "unhandled cuda error";
    case chorusSystemError:
      return "unhandled system error (a system call failed: see the log)";
    case chorusInternalError:
      return "internal error (a bug in Chorus)";
    case chorusInvalidArgument:
      return "invalid argument";
    case chorusInvalidUsage:
      return "invalid usage (the library is used incorrectly)";
    case chorusRemoteError:
      return "remote process exited or there was a network error";
    case chorusInProgress:
      return "operation in progress";
    case chorusTimeout:
      return "operation timed out";
    default:
      return "unknown result code";
  }
}

size_t chorusTypeSize(chorusDataType_t t) {
  switch (t) {
    case chorusInt8:
    case chorusUint8:
      return 1;
    case chorusFloat16:
    case chorusBfloat16:
      return 2;
    case chorusInt32:
    case chorusUint32:
    case chorusFloat32:
      return 4;
    case chorusInt64:
    case chorusUint64:
    case chorusFloat64:
      return 8;
    default:
      return 0;
  }
}
