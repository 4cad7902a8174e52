// CUDA reduce and copy kernels: one grid-stride kernel per (storage format, op), 16-byte
// vector loads and stores when the pointers allow, the element arithmetic from functors.h (over
// reduce/arith.h, the arithmetic the host kernels use too).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/functors.h"
#include "cuda/kernels.h"

namespace chorus::cuda {
namespace {

constexpr unsigned kThreads = 512;
constexpr size_t kMaxBlocks = 1024;
// Every kernel is launched with kThreads threads per block. The bound (kThreads threads, at
// least 2 blocks per SM) caps ptxas at 64 registers per thread, so a launch can never fail with
// cudaErrorLaunchOutOfResources and two blocks fit on each SM. `nvcc -arch=sm_90 -Xptxas -v`
// (CUDA 13.0, 2026-11-27): 20-54 registers without a bound (int8 max / min reduceManyKernel the
// most), at most 64 and no spills with it; (kThreads, 1) let ptxas take 88, and (kThreads, 4)
// (32 registers) spills up to 172 bytes.
#define CHORUS_KERNEL_BOUNDS __launch_bounds__(kThreads, 2)

// Clears the runtime's last error before a launch, so that the cudaGetLastError after it reports
// this launch only (not a cudaErrorNotReady a stream query left, or an earlier call's error).
void clearLastError() {
  (void)cudaGetLastError();
}

// 16 bytes seen as a vector (one load / store) or as its elements.
template <class S>
union Pack {
  static constexpr int kLanes = int(sizeof(uint4) / sizeof(S));
  uint4 v;
  S s[kLanes];
};

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

unsigned blocksFor(size_t units) {
  const size_t b = (units + kThreads - 1) / kThreads;
  return unsigned(std::clamp<size_t>(b, 1, kMaxBlocks));
}

template <class F, class S>
__global__ void CHORUS_KERNEL_BOUNDS reduceKernel(F f, size_t n, const S* a, const S* b, S* d0,
                                                  S* d1, bool vec) {
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    constexpr int L = Pack<S>::kLanes;
    const size_t nv = n / L;
    const uint4* va = reinterpret_cast<const uint4*>(a);
    const uint4* vb = reinterpret_cast<const uint4*>(b);
    uint4* v0 = reinterpret_cast<uint4*>(d0);
    uint4* v1 = reinterpret_cast<uint4*>(d1);
    for (size_t i = tid; i < nv; i += stride) {
      Pack<S> x, y, r;
      x.v = va[i];
      y.v = vb[i];
#pragma unroll
      for (int l = 0; l < L; ++l) r.s[l] = f(x.s[l], y.s[l]);
      v0[i] = r.v;
      if (v1 != nullptr) v1[i] = r.v;
    }
    done = nv * L;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    const S r = f(a[i], b[i]);
    d0[i] = r;
    if (d1 != nullptr) d1[i] = r;
  }
}

#ifdef CHORUS_HAVE_CUDA_IPC
// n inputs and n outputs, passed by value (kernel parameters, indexed at run time).
struct ManyPtrs {
  const void* in[kMaxReduceMany];
  void* out[kMaxReduceMany];
};

template <class F, class S>
__global__ void CHORUS_KERNEL_BOUNDS reduceManyKernel(F f, size_t n, int nptr, ManyPtrs p,
                                                      bool vec) {
  using C = typename F::C;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    constexpr int L = Pack<S>::kLanes;
    const size_t nv = n / L;
    for (size_t i = tid; i < nv; i += stride) {
      Pack<S> x;
      x.v = static_cast<const uint4*>(p.in[0])[i];
      C acc[L];
#pragma unroll
      for (int l = 0; l < L; ++l) acc[l] = f.first(x.s[l]);
      for (int q = 1; q < nptr; ++q) {
        x.v = static_cast<const uint4*>(p.in[q])[i];
#pragma unroll
        for (int l = 0; l < L; ++l) acc[l] = f.next(acc[l], x.s[l]);
      }
      Pack<S> r;
#pragma unroll
      for (int l = 0; l < L; ++l) r.s[l] = f.finish(acc[l]);
      for (int q = 0; q < nptr; ++q) static_cast<uint4*>(p.out[q])[i] = r.v;
    }
    done = nv * L;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    C acc = f.first(static_cast<const S*>(p.in[0])[i]);
    for (int q = 1; q < nptr; ++q) acc = f.next(acc, static_cast<const S*>(p.in[q])[i]);
    const S r = f.finish(acc);
    for (int q = 0; q < nptr; ++q) static_cast<S*>(p.out[q])[i] = r;
  }
}
#endif  // CHORUS_HAVE_CUDA_IPC

__global__ void CHORUS_KERNEL_BOUNDS copyKernel(uint8_t* d0, uint8_t* d1, const uint8_t* src,
                                                size_t bytes, bool vec) {
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nv = bytes / sizeof(uint4);
    const uint4* vs = reinterpret_cast<const uint4*>(src);
    uint4* v0 = reinterpret_cast<uint4*>(d0);
    uint4* v1 = reinterpret_cast<uint4*>(d1);
    for (size_t i = tid; i < nv; i += stride) {
      const uint4 x = vs[i];
      v0[i] = x;
      if (v1 != nullptr) v1[i] = x;
    }
    done = nv * sizeof(uint4);
  }
  for (size_t i = done + tid; i < bytes; i += stride) {
    d0[i] = src[i];
    if (d1 != nullptr) d1[i] = src[i];
  }
}

template <class E, RedKind K>
int reduceT(size_t count, const void* a, const void* b, void* d0, void* d1, int divisor,
            cudaStream_t stream) {
  using S = typename E::Storage;
  using C = typename E::Compute;
  const ReduceFunctor<E, K> f{RedOp<C, K>{static_cast<DivisorOf<C>>(divisor)}};
  const bool vec = aligned16(a) && aligned16(b) && aligned16(d0) && aligned16(d1);
  const size_t units = vec ? count / Pack<S>::kLanes + count % Pack<S>::kLanes : count;
  clearLastError();
  reduceKernel<<<blocksFor(units), kThreads, 0, stream>>>(
      f, count, static_cast<const S*>(a), static_cast<const S*>(b), static_cast<S*>(d0),
      static_cast<S*>(d1), vec);
  return int(cudaGetLastError());
}

#ifdef CHORUS_HAVE_CUDA_IPC
template <class E, RedKind K>
int reduceManyT(size_t count, int n, const void* const* in, void* const* out, cudaStream_t stream) {
  using S = typename E::Storage;
  using C = typename E::Compute;
  const ReduceManyFunctor<E, K> f{{}, static_cast<DivisorOf<C>>(n)};
  ManyPtrs p{};
  bool vec = true;
  for (int q = 0; q < n; ++q) {
    p.in[q] = in[q];
    p.out[q] = out[q];
    vec = vec && aligned16(in[q]) && aligned16(out[q]);
  }
  const size_t units = vec ? count / Pack<S>::kLanes + count % Pack<S>::kLanes : count;
  clearLastError();
  reduceManyKernel<ReduceManyFunctor<E, K>, S>
      <<<blocksFor(units), kThreads, 0, stream>>>(f, count, n, p, vec);
  return int(cudaGetLastError());
}
#endif  // CHORUS_HAVE_CUDA_IPC

bool knownType(chorusDataType_t t) {
  return int(t) >= 0 && int(t) < int(chorusNumTypes);
}

}  // namespace

int launchReduce(chorusDataType_t type, chorusRedOp_t op, size_t count, const void* a,
                 const void* b, void* dst0, void* dst1, int avgDivisor, void* stream) {
  if (!knownType(type) || int(op) < 0 || int(op) >= int(chorusNumOps)) {
    return int(cudaErrorInvalidValue);
  }
  if (count == 0) return int(cudaSuccess);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return withElem<int>(type, [&]<class E>() {
    return withKind<int>(op, avgDivisor, [&]<RedKind K>() {
      return reduceT<E, K>(count, a, b, dst0, dst1, avgDivisor, s);
    });
  });
}

#ifdef CHORUS_HAVE_CUDA_IPC
int launchReduceMany(chorusDataType_t type, chorusRedOp_t op, size_t count, int n,
                     const void* const* in, void* const* out, void* stream) {
  if (!knownType(type) || int(op) < 0 || int(op) >= int(chorusNumOps) || n < 1 ||
      n > kMaxReduceMany) {
    return int(cudaErrorInvalidValue);
  }
  if (count == 0) return int(cudaSuccess);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // withKind with divisor n: avg selects the kAvg functor, which divides by n at the end.
  return withElem<int>(type, [&]<class E>() {
    return withKind<int>(op, n,
                         [&]<RedKind K>() { return reduceManyT<E, K>(count, n, in, out, s); });
  });
}
#endif  // CHORUS_HAVE_CUDA_IPC

int launchCopy(void* dst0, void* dst1, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return int(cudaSuccess);
  const bool vec = aligned16(dst0) && aligned16(dst1) && aligned16(src);
  const size_t units = vec ? bytes / sizeof(uint4) + bytes % sizeof(uint4) : bytes;
  clearLastError();
  copyKernel<<<blocksFor(units), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<uint8_t*>(dst0), static_cast<uint8_t*>(dst1), static_cast<const uint8_t*>(src),
      bytes, vec);
  return int(cudaGetLastError());
}

}  // namespace chorus::cuda
