// chorusCommCuDevice (as ncclCommCuDevice): the device a communicator is bound to, -1 for a host
// communicator. Every build, with or without CUDA.
#include "base/error.h"
#include "chorus/chorus.h"
#include "comm/comm.h"

using namespace chorus;

chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int* device) {
  if (comm == nullptr || !isLiveComm(comm)) {
    setThreadLastError("chorusCommCuDevice: comm is NULL or not a live communicator");
    return chorusInvalidArgument;
  }
  if (device == nullptr) {
    setLastError(comm, format("chorusCommCuDevice (rank %d): device is NULL", comm->rank));
    return chorusInvalidArgument;
  }
  *device = comm->cudaDevice;
  return chorusSuccess;
}
