// The CUDA backend in a build without CUDA (CMake found no CUDA compiler, or -DCHORUS_CUDA=OFF):
// host communicators only; every device path reports that the library was built without CUDA.
// CUDA builds compile device.cc and staged_run.cc instead. (The IPC entry points of backend.h
// come from ipc_allreduce_off.cc here.)
#include "base/error.h"
#include "comm/comm.h"
#include "cuda/backend.h"

namespace chorus {

struct CudaComm {};

bool cudaBuilt() {
  return false;
}

void cudaCheckDevice(const char* fn, int rank, int device) {
  if (device < 0) return;
  fail(chorusInvalidUsage,
       "%s (rank %d): config.cudaDevice = %d but Chorus was built without CUDA (configure with "
       "-DCHORUS_CUDA=ON and a CUDA toolkit)",
       fn, rank, device);
}

void cudaCommSetup(chorusComm* comm, int device) {
  cudaCheckDevice("chorusCommInitRankConfig", comm->rank, device);
}

void cudaCommFree(chorusComm*) {}

void markCudaUsed() {}

void cudaCheckBuffers(const char*, chorusComm*, const OpDesc&, size_t, size_t) {}

void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>&, HostRunner,
                   StreamCudaHandle) {
  fail(chorusInternalError, "rank %d: device communicator in a build without CUDA", comm->rank);
}

}  // namespace chorus
