// Elementwise reduction kernels: the inner loops of every collective (the copy kernels are
// reduce/copy_kernel.h).
//
// All kernels run on host memory, take untyped pointers and are safe to call from any thread.
// On x86-64 an AVX-512 (F/BW/VL/DQ) or AVX2+F16C build of every kernel is chosen once at run
// time when the CPU has those extensions; otherwise (and on other architectures) a portable
// build runs. All builds give bit-identical results for every non-NaN input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/chorus.h"

namespace chorus {

// dst0[i] = a[i] OP b[i] for i < count, and if dst1 != nullptr also dst1[i] = same value.
// For op == chorusAvg: when avgDivisor == 0 the op behaves as sum (an intermediate step);
// when avgDivisor > 0 the result is (a[i] + b[i]) / avgDivisor (the final step).
// (A negative avgDivisor is treated like 0.)
// dst0/dst1 may alias a or b exactly (same pointer), never partially overlap.
// float16/bfloat16: convert to float32, compute (including the divide), round once to
// nearest-even. Integers: wrap-around (computed in the unsigned type of the same width, no UB);
// avg divides with C++ integer division (truncation toward zero) of the wrapped sum.
// Max/min: max(a, b) = a < b ? b : a, min(a, b) = b < a ? b : a (as std::max/std::min); the
// result for NaN inputs is unspecified.
void reduceKernel(chorusDataType_t type, chorusRedOp_t op, size_t count, const void* a,
                  const void* b, void* dst0, void* dst1, int avgDivisor);

// dst[i] = src[i] / divisor (used for avg with a single contribution: rounds like reduceKernel).
// dst may alias src exactly. divisor <= 1 copies.
void scaleKernel(chorusDataType_t type, size_t count, const void* src, void* dst, int divisor);

// Which instruction-set build of the kernels runs. Exposed so tests can check every build.
enum class KernelIsa : int {
  kPortable = 0,  // baseline instruction set of the target (SSE2 on x86-64)
  kAvx2 = 1,      // x86-64 with AVX2 and F16C
  kAvx512 = 2,    // x86-64 with AVX-512 F, BW, VL, DQ (and AVX2, F16C)
};
// "portable", "avx2", "avx512".
const char* kernelIsaName(KernelIsa isa);
// The widest build this CPU runs (decided once, at the first call), capped by the environment
// variable CHORUS_SIMD=scalar|avx2|avx512|auto.
KernelIsa bestKernelIsa();
// The build reduceKernel uses for this type and op (scaleKernel: op chorusAvg). With
// CHORUS_SIMD unset or auto, AVX-512 only where it is faster than AVX2 (bfloat16, 64-bit integer
// prod/max/min), else the best of AVX2/portable; CHORUS_SIMD=<build> uses that build everywhere.
KernelIsa kernelIsaFor(chorusDataType_t type, chorusRedOp_t op);
// Whether this CPU can run the given build.
bool kernelIsaSupported(KernelIsa isa);
// As reduceKernel/scaleKernel, with the build chosen by the caller (it must be supported).
void reduceKernelIsa(KernelIsa isa, chorusDataType_t type, chorusRedOp_t op, size_t count,
                     const void* a, const void* b, void* dst0, void* dst1, int avgDivisor);
void scaleKernelIsa(KernelIsa isa, chorusDataType_t type, size_t count, const void* src, void* dst,
                    int divisor);

}  // namespace chorus
