// Device communicators: CUDA state, buffer checks and host staging (docs/cuda.md). Host code,
// compiled by the C++ compiler against the CUDA runtime headers when CHORUS_HAVE_CUDA is set;
// otherwise every device path reports that the library was built without CUDA.
#include "cuda/backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "core/wait.h"
#include "cuda/ipc.h"
#include "cuda/kernels.h"
#include "cuda/staging.h"

#ifdef CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace chorus {

#ifndef CHORUS_HAVE_CUDA

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

bool cudaTryIpcAllReduce(chorusComm*, const OpDesc&, HostRunner) {
  return false;
}

void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>&, HostRunner) {
  fail(chorusInternalError, "rank %d: device communicator in a build without CUDA", comm->rank);
}

#else  // CHORUS_HAVE_CUDA

namespace {

// Set once this process binds a communicator to a device or wraps a CUDA stream: from then on
// host communicators also classify their buffers (a host-only program never initialises CUDA).
std::atomic<bool> gCudaUsed{false};

const char* errName(cudaError_t e) {
  return cudaGetErrorString(e);
}

// The most seconds one wait for CUDA copies may take (they include the user's prior work on a
// wrapped stream): CHORUS_CUDA_TIMEOUT, default 300.
double copyTimeoutSec() {
  static const double t = double(std::max<int64_t>(1, envInt("CHORUS_CUDA_TIMEOUT", 300)));
  return t;
}

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

struct CudaComm {
  int device = -1;
  cudaStream_t stream = nullptr;  // copies; a blocking stream: ordered after the legacy stream
  cudaEvent_t userDone = nullptr;
  unsigned char* staging = nullptr;  // pinned host memory
  size_t stagingBytes = 0;
  // CHORUS_CUDA_IPC=1: this rank's IPC buffer and every rank's, mapped here (by rank).
  bool ipcEnabled = false;  // CHORUS_CUDA_IPC, read when the communicator is created
  bool ipcTried = false;
  bool ipcReady = false;
  void* ipcBuf = nullptr;
  size_t ipcBytes = 0;
  std::vector<void*> ipcPeers;
  std::vector<bool> ipcOpened;  // opened with cudaIpcOpenMemHandle (else same process)
};

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
         fn, rank, device, errName(e));
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
  cc->ipcEnabled = envInt("CHORUS_CUDA_IPC", 0) != 0;
  DeviceScope scope(device);
  cudaError_t e = scope.result();
  if (e == cudaSuccess) e = cudaStreamCreate(&cc->stream);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&cc->userDone, cudaEventDisableTiming);
  if (e != cudaSuccess)
    fail(chorusUnhandledCudaError, "rank %d: setting up CUDA device %d failed: %s", comm->rank,
         device, errName(e));
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
    for (size_t p = 0; p < cc->ipcPeers.size(); ++p)
      if (cc->ipcOpened[p]) (void)cudaIpcCloseMemHandle(cc->ipcPeers[p]);
    if (cc->ipcBuf != nullptr) (void)cudaFree(cc->ipcBuf);
    if (cc->staging != nullptr) (void)cudaFreeHost(cc->staging);
  }
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

namespace {

void check(chorusComm* comm, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  fail(chorusUnhandledCudaError, "rank %d (CUDA device %d): %s failed: %s", comm->rank,
       comm->cudaDevice, what, errName(e));
}

// Waits for the copy stream: polls (abort flag and CHORUS_TIMEOUT through Waiter) and gives up
// after CHORUS_CUDA_TIMEOUT seconds.
void waitCopies(chorusComm* comm, cudaStream_t s, const char* what) {
  Waiter w(comm, -1, what);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(copyTimeoutSec());
  while (true) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check(comm, e, what);
    if (std::chrono::steady_clock::now() > deadline)
      fail(chorusTimeout,
           "rank %d (CUDA device %d): %s: not done after %.0f s (CHORUS_CUDA_TIMEOUT)", comm->rank,
           comm->cudaDevice, what, copyTimeoutSec());
    w.pause();
  }
}

void ensureStaging(chorusComm* comm, CudaComm* cc, size_t bytes) {
  if (bytes <= cc->stagingBytes) return;
  size_t want = size_t(1) << 20;
  while (want < bytes) want *= 2;
  if (cc->staging != nullptr) {
    check(comm, cudaFreeHost(cc->staging), "cudaFreeHost (staging)");
    cc->staging = nullptr;
    cc->stagingBytes = 0;
  }
  void* p = nullptr;
  check(comm, cudaHostAlloc(&p, want, cudaHostAllocPortable), "cudaHostAlloc (staging)");
  cc->staging = static_cast<unsigned char*>(p);
  cc->stagingBytes = want;
}

}  // namespace

void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>& ops, HostRunner runHost) {
  CudaComm* cc = comm->cuda;
  DeviceScope scope(cc->device);
  check(comm, scope.result(), "cudaSetDevice");
  // Order after the user's prior work on wrapped streams (the copy stream is a blocking stream,
  // so it is already ordered after the legacy default stream).
  for (const OpDesc* op : ops) {
    void* us = op->stream != nullptr ? streamCudaHandle(op->stream) : nullptr;
    if (us == nullptr) continue;
    check(comm, cudaEventRecord(cc->userDone, static_cast<cudaStream_t>(us)),
          "cudaEventRecord on the user's stream");
    check(comm, cudaStreamWaitEvent(cc->stream, cc->userDone, 0), "cudaStreamWaitEvent");
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
      check(comm,
            cudaMemcpyAsync(cc->staging + s.sendOffset, ops[i]->sendbuff, s.sendBytes,
                            cudaMemcpyDeviceToHost, cc->stream),
            "cudaMemcpyAsync device -> host staging");
      copied = true;
    }
  }
  waitCopies(comm, cc->stream,
             copied ? "copying device buffers to host staging"
                    : "waiting for prior work on the CUDA stream");
  std::vector<const OpDesc*> hostOps;
  for (const OpDesc& v : views) hostOps.push_back(&v);
  runHost(comm, hostOps);
  copied = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const StagedOp& s = plan.ops[i];
    if (s.recvBytes == 0) continue;
    check(comm,
          cudaMemcpyAsync(ops[i]->recvbuff, cc->staging + s.recvOffset, s.recvBytes,
                          cudaMemcpyHostToDevice, cc->stream),
          "cudaMemcpyAsync host staging -> device");
    copied = true;
  }
  if (copied) waitCopies(comm, cc->stream, "copying results from host staging to the device");
}

// ---- CHORUS_CUDA_IPC=1: AllReduce through CUDA IPC buffers (experimental, never run). ----
//
// Each rank owns a device buffer of CHORUS_CUDA_IPC_BUFFSIZE bytes (default 64M) whose handle is
// exchanged once (src/cuda/ipc.h), at the first eligible AllReduce, which every rank reaches in
// the same order. Per chunk: copy sendbuff into the own buffer (copy engine), a host barrier (a
// 4-byte AllReduce of the host engine), every rank reduces all ranks' buffers in rank order into
// its recvbuff with the reduce kernels (identical results everywhere), a second barrier before
// the buffers are reused. The decision depends only on values equal on every rank (the variable
// must be set alike on all ranks; every rank must be a device communicator on one node).

namespace {

void hostBarrier(chorusComm* comm, HostRunner runHost) {
  int32_t in = 0, out = 0;
  OpDesc b{OpKind::kAllReduce, &in, &out, 1, chorusInt32, chorusSum, -1, comm, nullptr};
  runHost(comm, {&b});
}

void ipcSetup(chorusComm* comm, CudaComm* cc) {
  cc->ipcTried = true;
  cc->ipcBytes = size_t(std::max<int64_t>(1 << 20, envSize("CHORUS_CUDA_IPC_BUFFSIZE", 64 << 20)));
  check(comm, cudaMalloc(&cc->ipcBuf, cc->ipcBytes), "cudaMalloc (IPC buffer)");
  cudaIpcMemHandle_t h{};
  check(comm, cudaIpcGetMemHandle(&h, cc->ipcBuf), "cudaIpcGetMemHandle");
  cudaDeviceProp prop{};
  check(comm, cudaGetDeviceProperties(&prop, cc->device), "cudaGetDeviceProperties");
  IpcRecord mine{};
  static_assert(sizeof(h) == kIpcHandleBytes, "cudaIpcMemHandle_t is 64 bytes");
  std::memcpy(mine.handle, &h, sizeof h);
  std::memcpy(mine.uuid, &prop.uuid, sizeof mine.uuid);
  mine.flags = kIpcHasBuffer;
  mine.rank = comm->rank;
  mine.device = cc->device;
  mine.pid = int32_t(getpid());
  mine.hostHash = comm->peers[size_t(comm->rank)].hostHash;
  mine.offset = 0;
  mine.bytes = cc->ipcBytes;
  mine.address = reinterpret_cast<uint64_t>(cc->ipcBuf);
  sealIpcRecord(&mine);
  IpcPeers peers;
  const std::vector<IpcRecord> all = exchangeIpcRecords(comm, mine, cc->ipcBytes, &peers);
  cc->ipcPeers.assign(size_t(comm->nranks), nullptr);
  cc->ipcOpened.assign(size_t(comm->nranks), false);
  for (int p = 0; p < comm->nranks; ++p) {
    const IpcRecord& r = all[size_t(p)];
    if (p == comm->rank || r.pid == mine.pid) {
      cc->ipcPeers[size_t(p)] = reinterpret_cast<void*>(r.address);
      continue;
    }
    if (!peers.usable[size_t(p)])
      fail(chorusInvalidUsage,
           "rank %d: CHORUS_CUDA_IPC=1 but rank %d cannot be reached by CUDA IPC", comm->rank, p);
    cudaIpcMemHandle_t ph;
    std::memcpy(&ph, r.handle, sizeof ph);
    check(comm, cudaIpcOpenMemHandle(&cc->ipcPeers[size_t(p)], ph, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
    cc->ipcOpened[size_t(p)] = true;
  }
  cc->ipcReady = true;
}

}  // namespace

bool cudaTryIpcAllReduce(chorusComm* comm, const OpDesc& op, HostRunner runHost) {
  CudaComm* cc = comm->cuda;
  if (!cc->ipcEnabled || op.kind != OpKind::kAllReduce || op.count == 0 || comm->nnodes != 1)
    return false;
  if (!cc->ipcTried) ipcSetup(comm, cc);
  if (!cc->ipcReady) return false;
  const size_t esz = chorusTypeSize(op.type);
  const size_t chunkElems = cc->ipcBytes / esz;
  const int n = comm->nranks;
  const auto* send = static_cast<const unsigned char*>(op.sendbuff);
  auto* recv = static_cast<unsigned char*>(op.recvbuff);
  for (size_t first = 0; first < op.count; first += chunkElems) {
    const size_t cnt = std::min(chunkElems, op.count - first);
    const size_t off = first * esz;
    check(comm,
          cudaMemcpyAsync(cc->ipcBuf, send + off, cnt * esz, cudaMemcpyDeviceToDevice, cc->stream),
          "cudaMemcpyAsync into the IPC buffer");
    waitCopies(comm, cc->stream, "copying into the IPC buffer");
    hostBarrier(comm, runHost);  // every rank's buffer holds its chunk
    if (n == 1) {
      check(comm,
            cudaMemcpyAsync(recv + off, cc->ipcPeers[0], cnt * esz, cudaMemcpyDeviceToDevice,
                            cc->stream),
            "cudaMemcpyAsync (one rank)");
    } else {
      for (int p = 1; p < n; ++p) {
        const void* acc = p == 1 ? cc->ipcPeers[0] : recv + off;
        const int div = op.op == chorusAvg && p == n - 1 ? n : 0;
        check(comm,
              cudaError_t(cuda::launchReduce(op.type, op.op, cnt, acc, cc->ipcPeers[size_t(p)],
                                             recv + off, nullptr, div, cc->stream)),
              "reduce kernel launch");
      }
    }
    waitCopies(comm, cc->stream, "reducing the IPC buffers");
    hostBarrier(comm, runHost);  // nobody reads the buffers any more
  }
  return true;
}

#endif  // CHORUS_HAVE_CUDA

}  // namespace chorus

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
