// The IPC entry points of backend.h in a build without the direct IPC AllReduce (the default:
// configure with -DCHORUS_CUDA_IPC=ON and CUDA to build ipc_allreduce.cc instead): no state,
// never eligible, so every collective of a device communicator goes through host staging
// (staged_run.cc). CHORUS_CUDA_IPC=1 at run time then only warns.
#include "base/debug.h"
#include "base/param.h"
#include "comm/comm.h"
#include "cuda/backend.h"
#include "cuda/ipc_allreduce.h"

namespace chorus {

bool cudaIpcBuilt() {
  return false;
}

CudaIpc* cudaIpcCreate(chorusComm* comm) {
  if (envInt("CHORUS_CUDA_IPC", 0) != 0)
    CHORUS_WARN(comm->rank,
                "CHORUS_CUDA_IPC is set but this Chorus was built without the CUDA IPC AllReduce "
                "(configure with -DCHORUS_CUDA_IPC=ON); device buffers go through host staging");
  return nullptr;
}

void cudaIpcDestroy(CudaIpc*, bool) {}

bool cudaTryIpcAllReduce(chorusComm*, const OpDesc&, HostRunner) {
  return false;
}

CudaIpcStats cudaIpcStats(const chorusComm*) {
  return {};
}

}  // namespace chorus
