// A device communicator's CUDA state and the helpers the backend's files share: device.cc (setup,
// buffer checks), staged_run.cc (host staging) and ipc_allreduce.cc (the direct IPC AllReduce).
// CUDA builds only (it includes the runtime's header); builds without CUDA use no_cuda.cc.
#pragma once

#ifndef CHORUS_HAVE_CUDA
#error "cuda/device_state.h needs the CUDA backend (CHORUS_HAVE_CUDA)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/backend.h"
#include "cuda/ipc_allreduce.h"

namespace chorus {

struct CudaComm {
  int device = -1;
  cudaStream_t stream = nullptr;  // copies; a blocking stream: ordered after the legacy stream
  cudaEvent_t userDone = nullptr;
  unsigned char* staging = nullptr;  // pinned host memory
  size_t stagingBytes = 0;
  CudaIpc* ipc = nullptr;  // the direct IPC AllReduce's state; nullptr when that path is off
};

const char* cudaErrName(cudaError_t e);

// Throws Failure (chorusUnhandledCudaError) naming the rank, device and `what` unless e is
// cudaSuccess; clears CUDA's sticky last error first.
void cudaCheck(chorusComm* comm, cudaError_t e, const char* what);

// Waits for stream `s`: polls (abort flag and CHORUS_TIMEOUT through Waiter) and gives up after
// CHORUS_CUDA_TIMEOUT seconds (chorusTimeout). Throws Failure.
void cudaWaitStream(chorusComm* comm, cudaStream_t s, const char* what);

// Selects a device for the scope and restores the calling thread's previous choice, so Chorus
// calls leave the user's current device alone.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    result_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t result() const { return result_; }

 private:
  int previous_ = -1;
  cudaError_t result_ = cudaSuccess;
};

}  // namespace chorus
