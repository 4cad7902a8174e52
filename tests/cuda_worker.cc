// One rank of the multi-process GPU matrix (tests/test_cuda_gpu.cc starts it under chorusrun):
// a device communicator on CUDA device 0 (every rank shares it), then the device matrix (or,
// with --ipc-allreduce, the direct IPC AllReduce subset).
#include <chorus/chorus.h>

#include <cstdio>
#include <cstring>

#include "cuda_matrix.h"

#ifdef CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/backend.h"
#endif

namespace {

// Free and total device memory (MiB) as this process sees them, for the log: the IPC mappings
// of freed peer buffers show up here first.
void printMemInfo(int rank, const char* when) {
#ifdef CHORUS_HAVE_CUDA
  size_t freeB = 0, totalB = 0;
  if (cudaMemGetInfo(&freeB, &totalB) == cudaSuccess)
    std::fprintf(stderr, "cuda_worker rank %d: %s: cudaMemGetInfo free %zu MiB of %zu MiB\n", rank,
                 when, freeB >> 20, totalB >> 20);
  else
    (void)cudaGetLastError();
#else
  (void)rank, (void)when;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  bool useStream = false, ipcAllReduce = false, expectIpc = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--stream") == 0) {
      useStream = true;
    } else if (std::strcmp(argv[i], "--ipc-allreduce") == 0) {
      // The direct IPC AllReduce subset (CHORUS_CUDA_IPC=1 in the environment).
      ipcAllReduce = true;
    } else if (std::strcmp(argv[i], "--expect-ipc") == 0) {
      // Fail unless AllReduce calls took the direct IPC path and none fell back to staging.
      expectIpc = true;
    } else {
      std::fprintf(stderr, "cuda_worker: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  std::string why;
  if (!ctest::cudaDeviceUsable(&why)) {
    std::fprintf(stderr, "cuda_worker: %s\n", why.c_str());
    return 3;
  }
  chorusUniqueId id;
  int proc = 0, nprocs = 1;
  if (chorusUniqueIdFromEnv(&id, &proc, &nprocs) != chorusSuccess) return 1;
  printMemInfo(proc, "before init");
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.cudaDevice = 0;
  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitRankConfig(&comm, nprocs, id, proc, &cfg);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "init: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  auto fails = ipcAllReduce ? ctest::runCudaIpcAllReduce(comm, proc, nprocs)
                            : ctest::runCudaMatrix(comm, proc, nprocs, useStream);
#ifdef CHORUS_HAVE_CUDA
  // The direct IPC AllReduce's counters (zeros when CHORUS_CUDA_IPC is not 1).
  const chorus::CudaIpcStats s = chorus::cudaIpcStats(comm);
  std::fprintf(stderr,
               "cuda_worker rank %d: IPC stats: directCalls %llu fallbacks %llu hits %llu misses "
               "%llu exchanges %llu opens %llu evictions %llu closeFailures %llu%s%s\n",
               proc, (unsigned long long)s.directCalls, (unsigned long long)s.fallbacks,
               (unsigned long long)s.hits, (unsigned long long)s.misses,
               (unsigned long long)s.exchanges, (unsigned long long)s.opens,
               (unsigned long long)s.evictions, (unsigned long long)s.closeFailures,
               s.fallbackReason ? "; first fallback: " : "",
               s.fallbackReason ? s.fallbackReason : "");
  if (expectIpc && (s.directCalls == 0 || s.fallbacks != 0))
    fails.push_back("[rank " + std::to_string(proc) +
                    "] --expect-ipc: the direct IPC path did not take every AllReduce");
#else
  if (expectIpc) fails.push_back("--expect-ipc: built without CUDA");
#endif
  for (const auto& f : fails) std::fprintf(stderr, "%s\n", f.c_str());
  printMemInfo(proc, "after the tests, before destroy");
  chorusCommDestroy(comm);
  printMemInfo(proc, "after destroy");
  return fails.empty() ? 0 : 1;
}
