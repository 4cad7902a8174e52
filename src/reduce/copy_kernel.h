// The copy kernels (reduce/copy_kernel.cc): the primitives' copies between the user's buffers and
// the FIFO slots, to one or two destinations, or with streaming stores for large outputs.
#pragma once

#include <cstddef>

namespace chorus {

// memcpy-equivalent that is fast for large buffers; dst1 may be nullptr; copies src to dst0 (and
// dst1). A destination equal to src is left alone; otherwise destinations must not overlap src.
void copyKernel(void* dst0, void* dst1, const void* src, size_t bytes);

// Copies with non-temporal (streaming) stores: for outputs that are not read again soon (large
// results), so the write does not first read each line into the cache. Ends with a store fence.
void streamCopyKernel(void* dst, const void* src, size_t bytes);

}  // namespace chorus
