// One rank of the multi-process GPU matrix (tests/test_cuda_gpu.cc starts it under chorusrun):
// a device communicator on CUDA device 0 (every rank shares it), then the device matrix (or,
// with --ipc-allreduce, the direct IPC AllReduce subset).
#include <chorus/chorus.h>

#include <cstdio>
#include <cstring>

#include "cuda_matrix.h"

int main(int argc, char** argv) {
  const bool useStream = argc > 1 && std::strcmp(argv[1], "--stream") == 0;
  // --ipc-allreduce: the direct IPC AllReduce subset (CHORUS_CUDA_IPC=1 in the environment).
  const bool ipcAllReduce = argc > 1 && std::strcmp(argv[1], "--ipc-allreduce") == 0;
  std::string why;
  if (!ctest::cudaDeviceUsable(&why)) {
    std::fprintf(stderr, "cuda_worker: %s\n", why.c_str());
    return 3;
  }
  chorusUniqueId id;
  int proc = 0, nprocs = 1;
  if (chorusUniqueIdFromEnv(&id, &proc, &nprocs) != chorusSuccess) return 1;
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.cudaDevice = 0;
  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitRankConfig(&comm, nprocs, id, proc, &cfg);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "init: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  const auto fails = ipcAllReduce ? ctest::runCudaIpcAllReduce(comm, proc, nprocs)
                                  : ctest::runCudaMatrix(comm, proc, nprocs, useStream);
  for (const auto& f : fails) std::fprintf(stderr, "%s\n", f.c_str());
  chorusCommDestroy(comm);
  return fails.empty() ? 0 : 1;
}
