// chorusCommCuDevice (as ncclCommCuDevice): the device a communicator is bound to, -1 for a host
// communicator. Every build, with or without CUDA.
#include "base/error.h"
#include "chorus/chorus.h"
#include "comm/comm.h"

using namespace chorus;

chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int* device) {
  return answerQuery(comm, "chorusCommCuDevice", "device", device,
                     [](chorusComm* c) { return c->cudaDevice; });
}
