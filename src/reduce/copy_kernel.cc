// The copy kernels (reduce/copy_kernel.h): a copy to one or two destinations, and a copy with
// streaming stores. Built with -O3 like the reduction kernels (CMakeLists.txt).
#include "reduce/copy_kernel.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace chorus {

void copyKernel(void* dst0, void* dst1, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (dst1 == nullptr || dst1 == src) {
    if (dst0 != src) std::memcpy(dst0, src, bytes);
    return;
  }
  if (dst0 == src) {
    std::memcpy(dst1, src, bytes);
    return;
  }
  // Two destinations: copy a cache-sized piece to both before moving on, so the second copy
  // reads src from cache rather than memory. (glibc's memcpy is already the fastest single
  // copy; it picks vector width and non-temporal stores itself.)
  constexpr size_t kChunk = 64 * 1024;
  const char* s = static_cast<const char*>(src);
  char* d0 = static_cast<char*>(dst0);
  char* d1 = static_cast<char*>(dst1);
  for (size_t off = 0; off < bytes; off += kChunk) {
    const size_t n = bytes - off < kChunk ? bytes - off : kChunk;
    std::memcpy(d0 + off, s + off, n);
    std::memcpy(d1 + off, s + off, n);
  }
}

void streamCopyKernel(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Align the destination to 16 bytes; the loads may be unaligned.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t blocks = bytes / 64;
  for (size_t i = 0; i < blocks; ++i) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    d += 64;
    s += 64;
  }
  std::memcpy(d, s, bytes % 64);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace chorus
