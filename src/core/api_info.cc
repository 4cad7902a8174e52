// Version, error strings, type sizes and the last-error query.
#include "base/error.h"
#include "comm/comm.h"

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

const char* chorusGetLastError(chorusComm_t comm) {
  if (comm != nullptr && isLiveComm(comm)) {
    std::lock_guard<std::mutex> l(comm->errMutex);
    if (!comm->lastError.empty()) {
      thread_local std::string copy;
      copy = comm->lastError;
      return copy.c_str();
    }
  }
  return threadLastError();
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
