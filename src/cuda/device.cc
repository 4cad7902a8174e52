// Device communicators (docs/cuda.md): binding a communicator to a CUDA device, releasing it,
// classifying and checking the buffers of a call, and the waits and error checks the other CUDA
// files share. Host code compiled by the C++ compiler against the CUDA runtime headers; CUDA
// builds only (no_cuda.cc stands in otherwise).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "base/error.h"
#include "base/param.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "cuda/backend.h"
#include "cuda/device_state.h"
#include "cuda/ipc_allreduce.h"

namespace chorus {

namespace {

// Set once this process binds a communicator to a device or wraps a CUDA stream: from then on
// host communicators also classify their buffers (a host-only program never initialises CUDA).
std::atomic<bool> gCudaUsed{false};

// The most seconds one wait for CUDA work may take (it includes the user's prior work on a
// wrapped stream): CHORUS_CUDA_TIMEOUT, default 300.
double copyTimeoutSec() {
  static const double t = double(std::max<int64_t>(1, envInt("CHORUS_CUDA_TIMEOUT", 300)));
  return t;
}

enum class MemKind { kHost, kDevice, kManaged };

MemKind classify(const void* p, int* device) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not a CUDA pointer (or no driver): host memory
    return MemKind::kHost;
  }
  *device = a.device;
  if (a.type == cudaMemoryTypeDevice) return MemKind::kDevice;
  if (a.type == cudaMemoryTypeManaged) return MemKind::kManaged;
  return MemKind::kHost;
}

}  // namespace

const char* cudaErrName(cudaError_t e) {
  return cudaGetErrorString(e);
}

void cudaCheck(chorusComm* comm, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  fail(chorusUnhandledCudaError, "rank %d (CUDA device %d): %s failed: %s", comm->rank,
       comm->cudaDevice, what, cudaErrName(e));
}

void cudaWaitStream(chorusComm* comm, cudaStream_t s, const char* what) {
  Waiter w(comm, -1, what);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(copyTimeoutSec());
  while (true) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cudaCheck(comm, e, what);
    // NotReady is not an error, but the runtime may keep it as the last error: left there, the
    // next cudaGetLastError (a kernel launch's check) would report it as that launch's failure.
    (void)cudaGetLastError();
    if (std::chrono::steady_clock::now() > deadline)
      fail(chorusTimeout,
           "rank %d (CUDA device %d): %s: not done after %.0f s (CHORUS_CUDA_TIMEOUT)", comm->rank,
           comm->cudaDevice, what, copyTimeoutSec());
    w.pause();
  }
}

bool cudaBuilt() {
  return true;
}

void cudaCheckDevice(const char* fn, int rank, int device) {
  if (device < 0) return;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(chorusSystemError,
         "%s (rank %d): config.cudaDevice = %d but no CUDA device is usable: cudaGetDeviceCount "
         "failed: %s",
         fn, rank, device, cudaErrName(e));
  }
  if (n == 0)
    fail(chorusSystemError, "%s (rank %d): config.cudaDevice = %d but no CUDA device is present",
         fn, rank, device);
  if (device >= n)
    fail(chorusInvalidArgument,
         "%s (rank %d): config.cudaDevice = %d but this machine has %d CUDA device(s)", fn, rank,
         device, n);
}

void cudaCommSetup(chorusComm* comm, int device) {
  if (device < 0) return;
  cudaCheckDevice("chorusCommInitRankConfig", comm->rank, device);
  auto* cc = new CudaComm();
  cc->device = device;
  comm->cuda = cc;  // freed by cudaCommFree, also on a failure below
  comm->cudaDevice = device;
  DeviceScope scope(device);
  cudaError_t e = scope.result();
  if (e == cudaSuccess) e = cudaStreamCreate(&cc->stream);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&cc->userDone, cudaEventDisableTiming);
  if (e != cudaSuccess)
    fail(chorusUnhandledCudaError, "rank %d: setting up CUDA device %d failed: %s", comm->rank,
         device, cudaErrName(e));
  cc->ipc = cudaIpcCreate(comm);
  gCudaUsed.store(true);
}

void cudaCommFree(chorusComm* comm) {
  CudaComm* cc = comm->cuda;
  if (cc == nullptr) return;
  comm->cuda = nullptr;
  DeviceScope scope(cc->device);
  if (scope.result() == cudaSuccess) {
    if (cc->stream != nullptr) (void)cudaStreamSynchronize(cc->stream);
    if (cc->stream != nullptr) (void)cudaStreamDestroy(cc->stream);
    if (cc->userDone != nullptr) (void)cudaEventDestroy(cc->userDone);
    if (cc->staging != nullptr) (void)cudaFreeHost(cc->staging);
  }
  // Unmaps peers' buffers only where the device could be selected; frees the state anyway.
  cudaIpcDestroy(cc->ipc, scope.result() == cudaSuccess);
  (void)cudaGetLastError();
  delete cc;
}

void markCudaUsed() {
  gCudaUsed.store(true);
}

void cudaCheckBuffers(const char* fn, chorusComm* comm, const OpDesc& op, size_t sendElems,
                      size_t recvElems) {
  const bool deviceComm = comm->cudaDevice >= 0;
  if (!deviceComm && !gCudaUsed.load(std::memory_order_relaxed)) return;
  struct Arg {
    const char* name;
    const void* p;
    bool used;
    MemKind kind = MemKind::kHost;
    int device = -1;
  } args[2] = {{"sendbuff", op.sendbuff, sendElems > 0 && op.sendbuff != nullptr},
               {"recvbuff", op.recvbuff, recvElems > 0 && op.recvbuff != nullptr}};
  bool anyDevice = false, anyHost = false;
  for (Arg& a : args) {
    if (!a.used) continue;
    a.kind = classify(a.p, &a.device);
    (a.kind == MemKind::kHost ? anyHost : anyDevice) = true;
  }
  const char* mixed =
      anyDevice && anyHost ? " (host and device buffers cannot be mixed in one call)" : "";
  for (const Arg& a : args) {
    if (!a.used) continue;
    if (deviceComm && a.kind == MemKind::kHost)
      fail(chorusInvalidArgument,
           "%s (rank %d): %s %p is host memory but the communicator is bound to CUDA device %d%s",
           fn, comm->rank, a.name, a.p, comm->cudaDevice, mixed);
    if (deviceComm && a.device != comm->cudaDevice)
      fail(chorusInvalidArgument,
           "%s (rank %d): %s %p is memory of CUDA device %d but the communicator is bound to "
           "device %d",
           fn, comm->rank, a.name, a.p, a.device, comm->cudaDevice);
    if (!deviceComm && a.kind != MemKind::kHost)
      fail(chorusInvalidArgument,
           "%s (rank %d): %s %p is CUDA %s memory (device %d) but the communicator is a host "
           "communicator (config.cudaDevice = -1)%s",
           fn, comm->rank, a.name, a.p, a.kind == MemKind::kManaged ? "managed" : "device",
           a.device, mixed);
  }
}

}  // namespace chorus
