// The CUDA reduce and copy kernels (src/cuda/kernels.cu), launched from host code that
// does not include CUDA headers: streams are cudaStream_t passed as void*, results are
// cudaError_t values as int (0: cudaSuccess). Only built with CHORUS_HAVE_CUDA.
//
// Every kernel reads 16 bytes per load and store when every pointer is 16-byte aligned, one
// element at a time otherwise; the arithmetic is the functors of src/cuda/functors.h over
// src/reduce/arith.h (the host kernels' own arithmetic), so the results equal the host engine's
// (chorus::reduceKernel) for every non-NaN input.
#pragma once

#include <cstddef>

#include "chorus/chorus.h"

namespace chorus::cuda {

// dst0[i] = a[i] OP b[i] (and dst1[i] when dst1 != nullptr), i < count, on device memory.
// avgDivisor as chorus::reduceKernel: for chorusAvg, 0 is an intermediate step (sum), > 0 the
// final (a + b) / avgDivisor. Destinations may alias an input exactly.
int launchReduce(chorusDataType_t type, chorusRedOp_t op, size_t count, const void* a,
                 const void* b, void* dst0, void* dst1, int avgDivisor, void* stream);
// The n-input reduction: only the direct IPC AllReduce uses it, built with -DCHORUS_CUDA_IPC=ON.
#ifdef CHORUS_HAVE_CUDA_IPC
// The most inputs / outputs of launchReduceMany (ranks of the direct IPC AllReduce).
constexpr int kMaxReduceMany = 16;

// The direct IPC AllReduce's fused step: r = in[0][i] OP ... OP in[n-1][i] in rank order,
// accumulated in the compute type (avg: divided by n at the end), stored to out[0..n-1][i],
// i < count. 1 <= n <= kMaxReduceMany. An output may be the same pointer as an input (each
// element is read by the thread that later writes it, and by no other); partial overlaps are
// not allowed. Vectorised when every pointer is 16-byte aligned.
int launchReduceMany(chorusDataType_t type, chorusRedOp_t op, size_t count, int n,
                     const void* const* in, void* const* out, void* stream);
#endif  // CHORUS_HAVE_CUDA_IPC
// dst0 (and dst1 when not nullptr) = src, `bytes` bytes, with a kernel (fused dual copy).
int launchCopy(void* dst0, void* dst1, const void* src, size_t bytes, void* stream);

}  // namespace chorus::cuda
