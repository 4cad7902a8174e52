#include "device.h"

#include <cstdio>
#include <cstdlib>

#ifdef CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace chorus_bench {

#ifdef CHORUS_HAVE_CUDA

namespace {
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "chorus bench: %s failed: %s\n", what, cudaGetErrorString(e));
  std::fflush(stderr);
  std::_Exit(1);
}
}  // namespace

bool deviceAvailable(int* ndevices, std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no CUDA device is usable: cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device is present";
    return false;
  }
  *ndevices = n;
  return true;
}

void deviceSelect(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
}

void* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return p;
}

void deviceFree(void* p) {
  if (p != nullptr) check(cudaFree(p), "cudaFree");
}

void deviceCopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void deviceCopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

#else  // no CUDA

bool deviceAvailable(int*, std::string* why) {
  *why = "Chorus was built without CUDA (configure with -DCHORUS_CUDA=ON)";
  return false;
}

namespace {
[[noreturn]] void noCuda() {
  std::fprintf(stderr, "chorus bench: built without CUDA\n");
  std::_Exit(1);
}
}  // namespace

void deviceSelect(int) {
  noCuda();
}
void* deviceAlloc(size_t) {
  noCuda();
}
void deviceFree(void*) {}
void deviceCopyToDevice(void*, const void*, size_t) {
  noCuda();
}
void deviceCopyToHost(void*, const void*, size_t) {
  noCuda();
}

#endif

}  // namespace chorus_bench
