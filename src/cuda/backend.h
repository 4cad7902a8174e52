// The CUDA backend as the API layer (src/core) calls it: device communicators, buffer location
// checks, host staging of device buffers, CUDA-wrapped streams. It uses the communicator
// (src/comm) and nothing above it: what it needs of the API is passed in (HostRunner,
// StreamCudaHandle). Declared for every build; without CHORUS_HAVE_CUDA the device paths report
// "built without CUDA".
//
// Where it is defined, by concern: no_cuda.cc (builds without CUDA); device.cc (device setup,
// buffer checks) and staged_run.cc (host staging) in CUDA builds; the direct IPC AllReduce in
// ipc_allreduce.cc (-DCHORUS_CUDA_IPC=ON with CUDA) or its stand-in ipc_allreduce_off.cc;
// chorusCommCuDevice in comm_cu_device.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/op.h"

struct chorusComm;

namespace chorus {

struct CudaComm;  // a device communicator's CUDA state (device_state.h)

// Whether this library was built with the CUDA backend.
bool cudaBuilt();

// Checks config.cudaDevice before anything is created; throws Failure naming `fn` and the rank:
// chorusInvalidUsage without CUDA built in, chorusSystemError when no device / driver is
// usable, chorusInvalidArgument for an ordinal out of range. device < 0 (host) passes.
void cudaCheckDevice(const char* fn, int rank, int device);
// Binds a communicator to `device` (comm->cudaDevice, comm->cuda); throws Failure.
void cudaCommSetup(chorusComm* comm, int device);
// Releases comm->cuda (staging memory, streams); safe when there is none.
void cudaCommFree(chorusComm* comm);

// Buffer locations of one call: a device communicator takes device memory of its device only, a
// host communicator host memory only (checked once this process uses CUDA through Chorus).
// Throws Failure (chorusInvalidArgument) "fn (rank r): sendbuff is ...".
void cudaCheckBuffers(const char* fn, chorusComm* comm, const OpDesc& op, size_t sendElems,
                      size_t recvElems);

// Runs `ops` (all on `comm`, a device communicator) through pinned host staging: device ->
// host copies, `runHost` on the host view, host -> device copies; returns when the results are
// in device memory. Ordered after prior work of a CUDA-wrapped stream and of the legacy default
// stream. Throws Failure.
// `cudaStreamOf` gives the cudaStream_t a Chorus stream wraps (kLegacyCudaStream for the default
// stream 0, nullptr when it wraps none): the streams are the API layer's (core/stream.cc).
using HostRunner = void (*)(chorusComm* comm, const std::vector<const OpDesc*>& ops);
using StreamCudaHandle = void* (*)(chorusStream_t stream);
void cudaRunStaged(chorusComm* comm, const std::vector<const OpDesc*>& ops, HostRunner runHost,
                   StreamCudaHandle cudaStreamOf);

// Whether this library was built with the direct IPC AllReduce (-DCHORUS_CUDA_IPC=ON and CUDA;
// off by default until it has run on a GPU). Without it the two functions below are stand-ins:
// never eligible, counters zero.
bool cudaIpcBuilt();

// CHORUS_CUDA_IPC=1 (experimental, untested on a GPU): runs `op` (an AllReduce alone in its
// batch, every rank on one node, at most cuda::kMaxReduceMany ranks) directly on the ranks'
// buffers mapped through CUDA IPC: rank r reduces block r of every sendbuff into block r of every
// recvbuff (src/cuda/ipc_direct.h). Returns false when the op is not eligible (the caller stages it
// then; every rank decides alike).
bool cudaTryIpcAllReduce(chorusComm* comm, const OpDesc& op, HostRunner runHost);

// Counters of the direct IPC AllReduce of one communicator (zeros for a host communicator or
// without CUDA or without the IPC build), for tests and diagnostics. hits / misses count (rank,
// buffer) lookups in the registration cache, exchanges the record exchanges, opens the
// cudaIpcOpenMemHandle calls, evictions the mappings dropped from the cache.
struct CudaIpcStats {
  uint64_t directCalls = 0;
  uint64_t fallbacks = 0;  // eligible calls staged because some rank's buffer is not IPC-capable
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t exchanges = 0;
  uint64_t opens = 0;
  uint64_t evictions = 0;
  uint64_t closeFailures = 0;  // cudaIpcCloseMemHandle calls that failed (each logged, WARN)
  // Why the first fallback of this communicator was staged (a static string), nullptr if none.
  const char* fallbackReason = nullptr;
};
CudaIpcStats cudaIpcStats(const chorusComm* comm);

// Host communicators classify buffers from now on (a CUDA stream was wrapped).
void markCudaUsed();

// What a stream wrapping CUDA's legacy default stream (0) reports as its cudaStream_t.
inline void* const kLegacyCudaStream = reinterpret_cast<void*>(uintptr_t{1});  // cudaStreamLegacy

}  // namespace chorus
