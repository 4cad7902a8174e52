// The heap settings of the test programs that run the matrix and the threaded tests
// (tests/CMakeLists.txt links this object into each of them): nothing calls into it; its static
// initializer runs at start-up.
#include <malloc.h>

namespace ctest {

namespace {
// The matrix allocates and frees buffers of up to tens of MiB per case; keep them in the heap
// instead of fresh mmaps (and their page faults) each time.
const bool gMallocTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return true;
}();
}  // namespace

}  // namespace ctest
