// How a device communicator holds the direct IPC AllReduce (docs/cuda.md, "CUDA IPC
// AllReduce"): its per-communicator state is created with the communicator and destroyed with
// it. Defined by ipc_allreduce.cc in builds configured with -DCHORUS_CUDA_IPC=ON and CUDA, by
// ipc_allreduce_off.cc otherwise (no state; every call is staged). No CUDA types here.
#pragma once

struct chorusComm;

namespace chorus {

struct CudaIpc;  // ipc_allreduce.cc

// The state for a new device communicator (its device is current), or nullptr when the path is
// off: CHORUS_CUDA_IPC unset or 0, or a build without it (then a warning if CHORUS_CUDA_IPC
// asks for it). Reads CHORUS_CUDA_IPC and CHORUS_CUDA_IPC_CACHE.
CudaIpc* cudaIpcCreate(chorusComm* comm);
// Frees the state, first closing every mapping of peers' buffers when `unmap` (the
// communicator's device is current); nullptr is fine.
void cudaIpcDestroy(CudaIpc* ipc, bool unmap);

}  // namespace chorus
