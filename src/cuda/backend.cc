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

#include "base/error.h"
#include "base/param.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "cuda/ipc.h"
#include "cuda/ipc_direct.h"
#include "cuda/kernels.h"
#include "cuda/staging.h"

#ifdef CHORUS_HAVE_CUDA
#include <cuda.h>  // driver types only: driver calls go through cudaGetDriverEntryPointByVersion
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

CudaIpcStats cudaIpcStats(const chorusComm*) {
  return {};
}

void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>&, HostRunner,
                   StreamCudaHandle) {
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
  // CHORUS_CUDA_IPC=1: the direct AllReduce on user buffers (src/cuda/ipc_direct.h).
  bool ipcEnabled = false;          // CHORUS_CUDA_IPC, read when the communicator is created
  size_t ipcCacheCapacity = 64;     // CHORUS_CUDA_IPC_CACHE (0: unmap after every call)
  IpcRegCache* ipcCache = nullptr;  // created at the first direct call
  bool haveUuid = false;
  uint8_t uuid[16] = {};
  CudaIpcStats ipcStats;
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
  cc->ipcCacheCapacity = size_t(std::max<int64_t>(0, envInt("CHORUS_CUDA_IPC_CACHE", 64)));
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
    if (cc->ipcCache != nullptr)
      for (const IpcRegEntry& e : cc->ipcCache->clear())
        if (e.opened && e.mapped != nullptr) (void)cudaIpcCloseMemHandle(e.mapped);
    if (cc->staging != nullptr) (void)cudaFreeHost(cc->staging);
  }
  (void)cudaGetLastError();
  delete cc->ipcCache;
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

void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>& ops, HostRunner runHost,
                   StreamCudaHandle cudaStreamOf) {
  CudaComm* cc = comm->cuda;
  DeviceScope scope(cc->device);
  check(comm, scope.result(), "cudaSetDevice");
  // Order after the user's prior work on wrapped streams (the copy stream is a blocking stream,
  // so it is already ordered after the legacy default stream).
  for (const OpDesc* op : ops) {
    void* us = op->stream != nullptr ? cudaStreamOf(op->stream) : nullptr;
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

// ---- CHORUS_CUDA_IPC=1: the direct AllReduce on user buffers (experimental, never run). ----
//
// Per call (docs/cuda.md, src/cuda/ipc_direct.h):
//  1. wait for the user's prior work (the copy stream waits for it): this rank's sendbuff is
//     final and nothing of its own still uses recvbuff;
//  2. describe sendbuff and recvbuff (allocation base, buffer id, offset: one driver call) and
//     gather every rank's description through the host engine: this AllGather is barrier 1;
//  3. map every rank's two allocations through the registration cache; on a miss, the records
//     (src/cuda/ipc.h) are exchanged and validated and other processes' handles opened, ranks of
//     this process used by address. Every rank makes the same lookups in the same order, so all
//     agree on whether to exchange;
//  4. one kernel: block r of every rank's sendbuff reduced, written to block r of every rank's
//     recvbuff;
//  5. barrier 2 (a host AllReduce of failure flags): nobody returns, frees or overwrites its
//     buffers while another rank's kernel may still read or write them, and a failure on one
//     rank fails the call on every rank.
// The decision to take this path depends only on values equal on every rank (the variable must
// be set alike everywhere), and the fallback to staging (a rank's buffer is not IPC-capable) is
// taken by all ranks together after barrier 1.

namespace {

using PointerGetAttributesFn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes through the runtime (no link against libcuda); nullptr if unavailable.
PointerGetAttributesFn pointerGetAttributes() {
  static const PointerGetAttributesFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 12000,
                                                           cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return PointerGetAttributesFn(nullptr);
    }
    return reinterpret_cast<PointerGetAttributesFn>(f);
  }();
  return fn;
}

// The allocation holding `p` (base, size, buffer id, offset of p). False when the driver cannot
// say or the allocation cannot be exported with cudaIpcGetMemHandle (cudaMallocAsync pools,
// managed memory, ...): the call is then staged on every rank.
bool describeBuffer(const void* p, IpcBufKey* k) {
  const PointerGetAttributesFn fn = pointerGetAttributes();
  if (fn == nullptr) return false;
  const CUdeviceptr ptr = CUdeviceptr(reinterpret_cast<uintptr_t>(p));
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long id = 0;
  void* data[3] = {&base, &size, &id};
  if (fn(3, attrs, data, ptr) != CUDA_SUCCESS || base == 0 || size == 0 || id == 0 || ptr < base ||
      ptr - base >= size)
    return false;
  // A newer attribute: an older driver that does not know it answers an error, taken as "yes"
  // (cudaIpcGetMemHandle then decides).
  int capable = 1;
  CUpointer_attribute capAttr = CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE;
  void* capData = &capable;
  if (fn(1, &capAttr, &capData, ptr) == CUDA_SUCCESS && capable == 0) return false;
  k->base = uint64_t(base);
  k->size = uint64_t(size);
  k->id = uint64_t(id);
  k->offset = uint64_t(ptr - base);
  return true;
}

void unmap(CudaComm* cc, const std::vector<IpcRegEntry>& removed) {
  for (const IpcRegEntry& e : removed) {
    if (e.opened && e.mapped != nullptr) (void)cudaIpcCloseMemHandle(e.mapped);
    ++cc->ipcStats.evictions;
  }
  (void)cudaGetLastError();
}

// Barrier 2: every rank's failure flag summed by the host engine.
int32_t hostSum(chorusComm* comm, HostRunner runHost, int32_t mine) {
  int32_t out = 0;
  OpDesc b{OpKind::kAllReduce, &mine, &out, 1, chorusInt32, chorusSum, -1, comm, nullptr};
  runHost(comm, {&b});
  return out;
}

// This rank's record for slot s (0 sendbuff, 1 recvbuff); with a handle when `publish`.
IpcRecord slotRecord(chorusComm* comm, CudaComm* cc, const IpcBufKey& k, bool publish) {
  if (!cc->haveUuid) {
    cudaDeviceProp prop{};
    check(comm, cudaGetDeviceProperties(&prop, cc->device), "cudaGetDeviceProperties");
    std::memcpy(cc->uuid, &prop.uuid, sizeof cc->uuid);
    cc->haveUuid = true;
  }
  IpcRecord r{};
  r.rank = comm->rank;
  r.device = cc->device;
  r.pid = int32_t(getpid());
  r.hostHash = comm->peers[size_t(comm->rank)].hostHash;
  std::memcpy(r.uuid, cc->uuid, sizeof r.uuid);
  if (publish) {
    cudaIpcMemHandle_t h{};
    static_assert(sizeof(h) == kIpcHandleBytes, "cudaIpcMemHandle_t is 64 bytes");
    // On failure the record goes out without a buffer and the peers report this rank.
    if (cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(k.base)) == cudaSuccess) {
      std::memcpy(r.handle, &h, sizeof h);
      r.flags = kIpcHasBuffer;
      r.offset = 0;  // the whole allocation; per-call offsets travel in the key table
      r.bytes = k.size;
      r.address = k.base;
    }
    (void)cudaGetLastError();
  }
  sealIpcRecord(&r);
  return r;
}

// Maps the slot-s allocation of every rank in `missing` (the same list on every rank) and
// inserts it into the cache; a local failure goes to *err (reported at barrier 2).
void mapMissing(chorusComm* comm, CudaComm* cc, const std::vector<IpcCallKey>& table, int s,
                const std::vector<int>& missing, std::string* err) {
  const int me = comm->rank;
  std::vector<IpcRecord> recs;
  IpcPeers peers;
  if (ipcNeedsExchange(table, missing)) {
    const bool publish = std::find(missing.begin(), missing.end(), me) != missing.end();
    recs = exchangeIpcRecords(comm, slotRecord(comm, cc, table[size_t(me)].buf[s], publish),
                              table[size_t(me)].bytes, &peers);
    ++cc->ipcStats.exchanges;
  }
  for (int p : missing) {
    const IpcBufKey& k = table[size_t(p)].buf[s];
    IpcRegEntry e;
    e.key = IpcRegKey{p, k.base, k.id};
    e.size = k.size;
    if (table[size_t(p)].pid == table[size_t(me)].pid) {
      // A process cannot open its own handles: the address is valid here as it is.
      e.mapped = reinterpret_cast<void*>(k.base);
      if (table[size_t(p)].device != cc->device && err->empty()) {
        const cudaError_t pe = cudaDeviceEnablePeerAccess(table[size_t(p)].device, 0);
        if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled)
          *err = format("cudaDeviceEnablePeerAccess(%d) for rank %d: %s", table[size_t(p)].device,
                        p, errName(pe));
        (void)cudaGetLastError();
      }
    } else if (err->empty()) {
      const IpcRecord* r = recs.empty() ? nullptr : &recs[size_t(p)];
      if (r == nullptr || !peers.usable[size_t(p)] || r->address != k.base || r->bytes != k.size) {
        *err = format("rank %d published no usable IPC handle for its %s allocation", p,
                      s == 0 ? "sendbuff" : "recvbuff");
      } else {
        cudaIpcMemHandle_t h;
        std::memcpy(&h, r->handle, sizeof h);
        const cudaError_t oe = cudaIpcOpenMemHandle(&e.mapped, h, cudaIpcMemLazyEnablePeerAccess);
        if (oe == cudaSuccess) {
          e.opened = true;
          ++cc->ipcStats.opens;
        } else {
          e.mapped = nullptr;
          *err = format("cudaIpcOpenMemHandle of rank %d's %s allocation: %s", p,
                        s == 0 ? "sendbuff" : "recvbuff", errName(oe));
          (void)cudaGetLastError();
        }
      }
    }
    // Inserted even when mapping failed, so that every rank's cache keeps the same keys (the
    // failed call then clears every cache).
    unmap(cc, cc->ipcCache->insert(e));
  }
}

}  // namespace

CudaIpcStats cudaIpcStats(const chorusComm* comm) {
  return comm->cuda != nullptr ? comm->cuda->ipcStats : CudaIpcStats{};
}

bool cudaTryIpcAllReduce(chorusComm* comm, const OpDesc& op, HostRunner runHost) {
  CudaComm* cc = comm->cuda;
  const int n = comm->nranks;
  const int me = comm->rank;
  if (!cc->ipcEnabled || op.kind != OpKind::kAllReduce || op.count == 0 || comm->nnodes != 1 ||
      n > cuda::kMaxReduceMany)
    return false;
  const size_t esz = chorusTypeSize(op.type);
  const uint64_t bytes = uint64_t(op.count) * esz;
  // 1. This rank's inputs are final and its own prior work is done with recvbuff.
  waitCopies(comm, cc->stream, "waiting for prior work before the IPC AllReduce");
  // 2. Describe the buffers; gather every rank's description (barrier 1).
  IpcCallKey mine;
  mine.magic = kIpcCallMagic;
  mine.rank = me;
  mine.pid = int32_t(getpid());
  mine.device = cc->device;
  mine.bytes = bytes;
  mine.ok = describeBuffer(op.sendbuff, &mine.buf[0]) && describeBuffer(op.recvbuff, &mine.buf[1]);
  std::vector<IpcCallKey> table(static_cast<size_t>(n));
  OpDesc gather{OpKind::kAllGather,
                &mine,
                table.data(),
                sizeof(IpcCallKey),
                chorusUint8,
                chorusSum,
                -1,
                comm,
                nullptr};
  runHost(comm, {&gather});
  const std::string bad = checkIpcCallKeys(table, bytes);
  if (!bad.empty())
    fail(chorusInvalidUsage, "rank %d: CHORUS_CUDA_IPC AllReduce: %s", me, bad.c_str());
  if (!ipcCallAllOk(table)) {  // the same answer on every rank: all stage this call
    ++cc->ipcStats.fallbacks;
    return false;
  }
  // 3. Every rank's allocations mapped here (the cache, the record exchange on misses).
  if (cc->ipcCache == nullptr) cc->ipcCache = new IpcRegCache(cc->ipcCacheCapacity, n);
  IpcRegCache& cache = *cc->ipcCache;
  cache.beginCall();
  std::string err;
  for (int s = 0; s < 2; ++s) {
    std::vector<int> missing;
    for (int p = 0; p < n; ++p) {
      const IpcBufKey& k = table[size_t(p)].buf[s];
      if (cache.find(IpcRegKey{p, k.base, k.id}) != nullptr) {
        ++cc->ipcStats.hits;
      } else {
        ++cc->ipcStats.misses;
        missing.push_back(p);
      }
    }
    if (!missing.empty()) mapMissing(comm, cc, table, s, missing, &err);
  }
  // 4. Block `me` of every rank's sendbuff reduced into block `me` of every recvbuff. In place
  // (a rank's sendbuff == recvbuff) is safe: only this rank touches block `me` of any buffer, and
  // in the kernel each element is read (from all n inputs) by the thread that then writes it.
  const IpcBlock blk = ipcBlock(op.count, esz, n, me);
  if (err.empty() && blk.count > 0) {
    std::vector<const void*> in(static_cast<size_t>(n));
    std::vector<void*> out(static_cast<size_t>(n));
    for (int p = 0; p < n && err.empty(); ++p) {
      for (int s = 0; s < 2; ++s) {
        const IpcBufKey& k = table[size_t(p)].buf[s];
        const IpcRegEntry* e = cache.find(IpcRegKey{p, k.base, k.id});
        if (e == nullptr || e->mapped == nullptr) {
          err = format("rank %d's %s is not mapped", p, s == 0 ? "sendbuff" : "recvbuff");
          break;
        }
        unsigned char* at = static_cast<unsigned char*>(e->mapped) + k.offset + blk.first * esz;
        if (s == 0)
          in[size_t(p)] = at;
        else
          out[size_t(p)] = at;
      }
    }
    if (err.empty()) {
      try {
        check(comm,
              cudaError_t(cuda::launchReduceMany(op.type, op.op, blk.count, n, in.data(),
                                                 out.data(), cc->stream)),
              "IPC AllReduce kernel launch");
        waitCopies(comm, cc->stream, "the IPC AllReduce kernel");
      } catch (const Failure& f) {
        err = f.message;
      }
    }
  }
  // 5. Barrier 2, carrying the failures.
  const int32_t failed = hostSum(comm, runHost, err.empty() ? 0 : 1);
  if (failed != 0 || cc->ipcCacheCapacity == 0) unmap(cc, cache.clear());
  if (!err.empty())
    fail(chorusUnhandledCudaError, "rank %d (CUDA device %d): CHORUS_CUDA_IPC AllReduce: %s", me,
         cc->device, err.c_str());
  if (failed != 0)
    fail(chorusRemoteError, "rank %d: CHORUS_CUDA_IPC AllReduce failed on %d other rank(s)", me,
         failed);
  ++cc->ipcStats.directCalls;
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
