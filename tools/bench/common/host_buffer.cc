// The harness's host buffers (host_buffer.h).
#include "host_buffer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "check.h"

namespace chorus_bench {

Buffer allocate(size_t bytes) {
  const size_t kAlign = 4096;
  const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(kAlign, rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "chorus bench: cannot allocate %zu bytes\n", rounded);
    std::_Exit(1);
  }
  std::memset(p, kPoison, rounded);
  return Buffer(p);
}

}  // namespace chorus_bench
