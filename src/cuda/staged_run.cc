// Host staging of a device communicator's operations (docs/cuda.md, "Host staging"): device
// buffers copied into pinned host regions (the plan of staging.h), the host engine run on them,
// the results copied back. The data path of every collective on a device communicator, except an
// AllReduce the direct IPC path takes (ipc_allreduce.cc, -DCHORUS_CUDA_IPC=ON builds). CUDA builds
// only.
#include <cstddef>
#include <vector>

#include "base/error.h"
#include "comm/comm.h"
#include "cuda/backend.h"
#include "cuda/device_state.h"
#include "cuda/staging.h"

namespace chorus {

namespace {

// Grows the communicator's pinned staging area to at least `bytes` (powers of two from 1 MiB).
void ensureStaging(chorusComm* comm, CudaComm* cc, size_t bytes) {
  if (bytes <= cc->stagingBytes) return;
  size_t want = size_t(1) << 20;
  while (want < bytes) want *= 2;
  if (cc->staging != nullptr) {
    cudaCheck(comm, cudaFreeHost(cc->staging), "cudaFreeHost (staging)");
    cc->staging = nullptr;
    cc->stagingBytes = 0;
  }
  void* p = nullptr;
  cudaCheck(comm, cudaHostAlloc(&p, want, cudaHostAllocPortable), "cudaHostAlloc (staging)");
  cc->staging = static_cast<unsigned char*>(p);
  cc->stagingBytes = want;
}

// A device collective cannot be captured into a CUDA graph: it waits for its copies on the host
// (cudaStreamQuery), which is not allowed during a capture and would invalidate it, and it
// would pull the copy stream into the user's capture. Refused before anything is queued, with
// a clear error, rather than failing the user's capture. `us`: the user's stream, nullptr when
// the call has none (the legacy default stream is then asked, which reports a capture in
// global mode on another stream of the device as cudaErrorStreamCaptureImplicit).
void refuseCapture(chorusComm* comm, void* us) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaStream_t s = us != nullptr ? static_cast<cudaStream_t>(us) : cudaStreamLegacy;
  const cudaError_t e = cudaStreamIsCapturing(s, &st);
  if (e == cudaSuccess && st == cudaStreamCaptureStatusNone) return;
  (void)cudaGetLastError();
  if (e != cudaSuccess && e != cudaErrorStreamCaptureImplicit &&
      e != cudaErrorStreamCaptureUnsupported)
    cudaCheck(comm, e, "cudaStreamIsCapturing");
  fail(chorusInvalidUsage,
       "rank %d (CUDA device %d): the %s is being captured into a CUDA graph (%s); Chorus device "
       "collectives wait for their copies on the host and cannot be captured: call them outside "
       "the capture",
       comm->rank, comm->cudaDevice, us != nullptr ? "call's CUDA stream" : "device's CUDA work",
       e != cudaSuccess                      ? cudaErrName(e)
       : st == cudaStreamCaptureStatusActive ? "capture active"
                                             : "capture invalidated");
}

}  // namespace

void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>& ops, HostRunner runHost,
                   StreamCudaHandle cudaStreamOf) {
  CudaComm* cc = comm->cuda;
  DeviceScope scope(cc->device);
  cudaCheck(comm, scope.result(), "cudaSetDevice");
  // Order the copy stream after the user's prior work: on the wrapped stream, or without one on
  // the legacy default stream (which waits for every blocking stream). The copy stream being a
  // blocking stream orders the work queued on it after the legacy stream, but not an empty one:
  // waiting for it on the host (the IPC AllReduce's step 1) then returned at once while the
  // user's cudaMemcpy from pageable memory still had its DMA in flight, and peers' kernels read
  // the old sendbuff (seen on the first GPU run, 2026-11-28).
  for (const OpDesc* op : ops) {
    void* us = op->stream != nullptr ? cudaStreamOf(op->stream) : nullptr;
    refuseCapture(comm, us);
    const cudaStream_t s = us != nullptr ? static_cast<cudaStream_t>(us) : cudaStreamLegacy;
    cudaCheck(comm, cudaEventRecord(cc->userDone, s),
              us != nullptr ? "cudaEventRecord on the user's stream"
                            : "cudaEventRecord on the legacy default stream");
    cudaCheck(comm, cudaStreamWaitEvent(cc->stream, cc->userDone, 0), "cudaStreamWaitEvent");
  }
  if (ops.size() == 1 && cudaTryIpcAllReduce(comm, *ops[0], runHost)) return;
  const StagingPlan plan = planStaging(ops, comm->rank, comm->nranks);
  ensureStaging(comm, cc, plan.totalBytes);
  std::vector<OpDesc> views;
  views.reserve(ops.size());
  bool copied = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const StagedOp& s = plan.ops[i];
    views.push_back(stagedView(*ops[i], s, cc->staging));
    if (s.sendBytes > 0) {
      cudaCheck(comm,
                cudaMemcpyAsync(cc->staging + s.sendOffset, ops[i]->sendbuff, s.sendBytes,
                                cudaMemcpyDeviceToHost, cc->stream),
                "cudaMemcpyAsync device -> host staging");
      copied = true;
    }
  }
  cudaWaitStream(comm, cc->stream,
                 copied ? "copying device buffers to host staging"
                        : "waiting for prior work on the CUDA stream");
  std::vector<const OpDesc*> hostOps;
  for (const OpDesc& v : views) hostOps.push_back(&v);
  runHost(comm, hostOps);
  copied = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const StagedOp& s = plan.ops[i];
    if (s.recvBytes == 0) continue;
    cudaCheck(comm,
              cudaMemcpyAsync(ops[i]->recvbuff, cc->staging + s.recvOffset, s.recvBytes,
                              cudaMemcpyHostToDevice, cc->stream),
              "cudaMemcpyAsync host staging -> device");
    copied = true;
  }
  if (copied) cudaWaitStream(comm, cc->stream, "copying results from host staging to the device");
}

}  // namespace chorus
