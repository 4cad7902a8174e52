// The direct IPC AllReduce on user buffers (docs/cuda.md, "CUDA IPC AllReduce"): built only
// with -DCHORUS_CUDA_IPC=ON (and CUDA), taken at run time when CHORUS_CUDA_IPC=1. Experimental:
// written without a GPU and never run on one. Builds without it compile ipc_allreduce_off.cc,
// and every device collective goes through host staging (staged_run.cc).
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
#include "cuda/ipc_allreduce.h"

#include <cuda.h>  // driver types only: driver calls go through cudaGetDriverEntryPointByVersion
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "comm/comm.h"
#include "cuda/backend.h"
#include "cuda/device_state.h"
#include "cuda/ipc.h"
#include "cuda/ipc_direct.h"
#include "cuda/kernels.h"

namespace chorus {

// The per-communicator state (created when CHORUS_CUDA_IPC=1 at communicator creation).
struct CudaIpc {
  size_t cacheCapacity = 64;           // CHORUS_CUDA_IPC_CACHE (0: unmap after every call)
  std::unique_ptr<IpcRegCache> cache;  // created at the first direct call
  bool haveUuid = false;
  uint8_t uuid[16] = {};
  CudaIpcStats stats;
  bool fallbackLogged = false;  // the reason of the first fallback is logged (WARN), once
  int rank = -1;                // for the log lines of the unmapping
};

bool cudaIpcBuilt() {
  return true;
}

CudaIpc* cudaIpcCreate(chorusComm* comm) {
  if (envInt("CHORUS_CUDA_IPC", 0) == 0) return nullptr;
  auto* ipc = new CudaIpc();
  ipc->rank = comm->rank;
  ipc->cacheCapacity = size_t(std::max<int64_t>(0, envInt("CHORUS_CUDA_IPC_CACHE", 64)));
  return ipc;
}

namespace {

// Closes one mapping of another process's allocation. The result is logged, not thrown (this
// runs in cleanup paths): a failure here is the first sign of an exporter that freed its buffer
// while this process kept it open (undefined, per cudaIpcOpenMemHandle's documentation).
void closeMapping(CudaIpc* ipc, const IpcRegEntry& e) {
  if (!e.opened || e.mapped == nullptr) return;
  const cudaError_t ce = cudaIpcCloseMemHandle(e.mapped);
  if (ce != cudaSuccess) {
    ++ipc->stats.closeFailures;
    CHORUS_WARN(ipc->rank, "CUDA IPC: cudaIpcCloseMemHandle(%p) of rank %d's allocation failed: %s",
                e.mapped, e.key.peer, cudaErrName(ce));
    (void)cudaGetLastError();
  } else {
    CHORUS_TRACE(ipc->rank, "CUDA IPC: closed the mapping %p of rank %d's allocation", e.mapped,
                 e.key.peer);
  }
}

}  // namespace

void cudaIpcDestroy(CudaIpc* ipc, bool unmap) {
  if (ipc == nullptr) return;
  if (unmap && ipc->cache != nullptr) {
    for (const IpcRegEntry& e : ipc->cache->clear()) closeMapping(ipc, e);
    (void)cudaGetLastError();
  }
  delete ipc;
}

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
bool describeBuffer(const void* p, IpcBufKey* k, const char** why) {
  const PointerGetAttributesFn fn = pointerGetAttributes();
  if (fn == nullptr) {
    *why = "the driver has no cuPointerGetAttributes (CUDA 12 driver API)";
    return false;
  }
  const CUdeviceptr ptr = CUdeviceptr(reinterpret_cast<uintptr_t>(p));
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long id = 0;
  void* data[3] = {&base, &size, &id};
  if (fn(3, attrs, data, ptr) != CUDA_SUCCESS) {
    *why = "cuPointerGetAttributes failed (not memory of the CUDA driver?)";
    return false;
  }
  if (base == 0 || size == 0 || id == 0 || ptr < base || ptr - base >= size) {
    *why = "the driver reports no allocation range or buffer id for it";
    return false;
  }
  // A newer attribute: an older driver that does not know it answers an error, taken as "yes"
  // (cudaIpcGetMemHandle then decides).
  int capable = 1;
  CUpointer_attribute capAttr = CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE;
  void* capData = &capable;
  if (fn(1, &capAttr, &capData, ptr) == CUDA_SUCCESS && capable == 0) {
    *why =
        "its allocation cannot be exported with cudaIpcGetMemHandle (cudaMallocAsync pool, "
        "managed or VMM memory?)";
    return false;
  }
  k->base = uint64_t(base);
  k->size = uint64_t(size);
  k->id = uint64_t(id);
  k->offset = uint64_t(ptr - base);
  return true;
}

void unmap(CudaIpc* ipc, const std::vector<IpcRegEntry>& removed) {
  for (const IpcRegEntry& e : removed) {
    closeMapping(ipc, e);
    ++ipc->stats.evictions;
  }
  (void)cudaGetLastError();
}

// After a failed launch or wait: waits (bounded, CHORUS_CUDA_TIMEOUT again) until the kernel,
// which may still be reading and writing the peers' buffers, is done, so that barrier 2 does not
// let the peers unmap or free them under it. Returns "" or what remains wrong.
std::string drainStream(chorusComm* comm, CudaComm* cc) {
  try {
    cudaWaitStream(comm, cc->stream, "draining the IPC AllReduce kernel after a failure");
  } catch (const Failure& f) {
    return f.message;
  }
  return "";
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
  CudaIpc* ipc = cc->ipc;
  if (!ipc->haveUuid) {
    cudaDeviceProp prop{};
    cudaCheck(comm, cudaGetDeviceProperties(&prop, cc->device), "cudaGetDeviceProperties");
    std::memcpy(ipc->uuid, &prop.uuid, sizeof ipc->uuid);
    ipc->haveUuid = true;
  }
  IpcRecord r{};
  r.rank = comm->rank;
  r.device = cc->device;
  r.pid = int32_t(getpid());
  r.hostHash = comm->peers[size_t(comm->rank)].hostHash;
  std::memcpy(r.uuid, ipc->uuid, sizeof r.uuid);
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
  CudaIpc* ipc = cc->ipc;
  const int me = comm->rank;
  std::vector<IpcRecord> recs;
  IpcPeers peers;
  if (ipcNeedsExchange(table, missing)) {
    const bool publish = std::find(missing.begin(), missing.end(), me) != missing.end();
    recs = exchangeIpcRecords(comm, slotRecord(comm, cc, table[size_t(me)].buf[s], publish),
                              table[size_t(me)].bytes, &peers);
    ++ipc->stats.exchanges;
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
                        p, cudaErrName(pe));
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
          ++ipc->stats.opens;
        } else {
          e.mapped = nullptr;
          *err = format("cudaIpcOpenMemHandle of rank %d's %s allocation: %s", p,
                        s == 0 ? "sendbuff" : "recvbuff", cudaErrName(oe));
          (void)cudaGetLastError();
        }
      }
    }
    // Inserted even when mapping failed, so that every rank's cache keeps the same keys (the
    // failed call then clears every cache).
    unmap(ipc, ipc->cache->insert(e));
  }
}

}  // namespace

CudaIpcStats cudaIpcStats(const chorusComm* comm) {
  return comm->cuda != nullptr && comm->cuda->ipc != nullptr ? comm->cuda->ipc->stats
                                                             : CudaIpcStats{};
}

bool cudaTryIpcAllReduce(chorusComm* comm, const OpDesc& op, HostRunner runHost) {
  CudaComm* cc = comm->cuda;
  CudaIpc* ipc = cc->ipc;
  const int n = comm->nranks;
  const int me = comm->rank;
  if (ipc == nullptr || op.kind != OpKind::kAllReduce || op.count == 0 || comm->nnodes != 1 ||
      n > cuda::kMaxReduceMany)
    return false;
  const size_t esz = chorusTypeSize(op.type);
  const uint64_t bytes = uint64_t(op.count) * esz;
  // 1. This rank's inputs are final and its own prior work is done with recvbuff.
  cudaWaitStream(comm, cc->stream, "waiting for prior work before the IPC AllReduce");
  // 2. Describe the buffers; gather every rank's description (barrier 1).
  IpcCallKey mine;
  mine.magic = kIpcCallMagic;
  mine.rank = me;
  mine.pid = int32_t(getpid());
  mine.device = cc->device;
  mine.bytes = bytes;
  const char* why = nullptr;
  const char* whichBad = "sendbuff";
  const void* badPtr = op.sendbuff;
  mine.ok = describeBuffer(op.sendbuff, &mine.buf[0], &why);
  if (mine.ok) {
    whichBad = "recvbuff";
    badPtr = op.recvbuff;
    mine.ok = describeBuffer(op.recvbuff, &mine.buf[1], &why);
  }
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
    ++ipc->stats.fallbacks;
    if (!ipc->fallbackLogged) {  // once per communicator: the first reason
      ipc->fallbackLogged = true;
      int badRank = -1;
      for (int p = 0; p < n && badRank < 0; ++p)
        if (!table[size_t(p)].ok) badRank = p;
      ipc->stats.fallbackReason = mine.ok ? "another rank's buffer is not IPC-capable" : why;
      if (mine.ok)
        CHORUS_WARN(me,
                    "CHORUS_CUDA_IPC AllReduce staged (first time; later ones not logged): "
                    "rank %d's buffer is not IPC-capable",
                    badRank);
      else
        CHORUS_WARN(me,
                    "CHORUS_CUDA_IPC AllReduce staged (first time; later ones not logged): "
                    "this rank's %s %p: %s",
                    whichBad, badPtr, why);
    }
    return false;
  }
  // 3. Every rank's allocations mapped here (the cache, the record exchange on misses).
  if (ipc->cache == nullptr) ipc->cache = std::make_unique<IpcRegCache>(ipc->cacheCapacity, n);
  IpcRegCache& cache = *ipc->cache;
  cache.beginCall();
  std::string err;
  for (int s = 0; s < 2; ++s) {
    std::vector<int> missing;
    for (int p = 0; p < n; ++p) {
      const IpcBufKey& k = table[size_t(p)].buf[s];
      if (cache.find(IpcRegKey{p, k.base, k.id}) != nullptr) {
        ++ipc->stats.hits;
      } else {
        ++ipc->stats.misses;
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
        cudaCheck(comm,
                  cudaError_t(cuda::launchReduceMany(op.type, op.op, blk.count, n, in.data(),
                                                     out.data(), cc->stream)),
                  "IPC AllReduce kernel launch");
        cudaWaitStream(comm, cc->stream, "the IPC AllReduce kernel");
      } catch (const Failure& f) {
        err = f.message;
        // The kernel may have been queued (a failed wait) and still use the peers' buffers.
        const std::string left = drainStream(comm, cc);
        if (!left.empty()) err += "; then " + left;
      }
    }
  }
  // 5. Barrier 2, carrying the failures.
  const int32_t failed = hostSum(comm, runHost, err.empty() ? 0 : 1);
  if (failed != 0 || ipc->cacheCapacity == 0) unmap(ipc, cache.clear());
  if (!err.empty())
    fail(chorusUnhandledCudaError, "rank %d (CUDA device %d): CHORUS_CUDA_IPC AllReduce: %s", me,
         cc->device, err.c_str());
  if (failed != 0)
    fail(chorusRemoteError, "rank %d: CHORUS_CUDA_IPC AllReduce failed on %d other rank(s)", me,
         failed);
  ++ipc->stats.directCalls;
  return true;
}

}  // namespace chorus
