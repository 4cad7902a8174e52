// The harness's host buffers (host_buffer.h).
#include "host_buffer.h"

#include <chorus/chorus.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "check.h"

namespace chorus_bench {

void FreeDeleter::operator()(unsigned char* p) const {
  if (memAlloc)
    chorusMemFree(p);
  else
    std::free(p);
}

Buffer allocate(size_t bytes, bool memAlloc) {
  const size_t kAlign = 4096;
  const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  void* m = nullptr;
  if (memAlloc && chorusMemAlloc(&m, rounded) != chorusSuccess) m = nullptr;
  auto* p = static_cast<unsigned char*>(memAlloc ? m : std::aligned_alloc(kAlign, rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "chorus bench: cannot allocate %zu bytes\n", rounded);
    std::_Exit(1);
  }
  std::memset(p, kPoison, rounded);
  return Buffer(p, FreeDeleter{memAlloc});
}

}  // namespace chorus_bench
