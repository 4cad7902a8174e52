// The harness's host buffers: page-aligned, poisoned (kPoison) when allocated.
#ifndef CHORUS_BENCH_HOST_BUFFER_H_
#define CHORUS_BENCH_HOST_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace chorus_bench {

// Page-aligned host memory: aligned_alloc, or chorusMemAlloc (-R 1).
struct FreeDeleter {
  bool memAlloc = false;
  void operator()(unsigned char* p) const;
};
using Buffer = std::unique_ptr<unsigned char[], FreeDeleter>;

// `bytes` rounded up to whole pages (one page at least), filled with kPoison; ends the process
// if the memory is not there. memAlloc: from chorusMemAlloc (memory peers can map).
Buffer allocate(size_t bytes, bool memAlloc = false);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_HOST_BUFFER_H_
