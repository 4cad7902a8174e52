// The harness's host buffers: page-aligned, poisoned (kPoison) when allocated.
#ifndef CHORUS_BENCH_HOST_BUFFER_H_
#define CHORUS_BENCH_HOST_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace chorus_bench {

// Page-aligned host memory.
struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], FreeDeleter>;

// `bytes` rounded up to whole pages (one page at least), filled with kPoison; ends the process
// if the memory is not there.
Buffer allocate(size_t bytes);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_HOST_BUFFER_H_
