// What the sweep visits (sweep.h).
#include "sweep.h"

namespace chorus_bench {

std::vector<size_t> sweepCounts(const Options& o, const CollDesc& d, size_t typeBytes, int nranks) {
  std::vector<size_t> counts;
  size_t size = o.minBytes;
  while (size <= o.maxBytes) {
    const size_t elems = size / typeBytes;
    const size_t count = d.countPerRank ? elems / static_cast<size_t>(nranks) : elems;
    if (counts.empty() || counts.back() != count) counts.push_back(count);
    if (o.stepFactor > 1) {
      if (size == 0) {
        size = 1;
      } else if (size > o.maxBytes / o.stepFactor) {
        break;
      } else {
        size *= o.stepFactor;
      }
    } else {
      if (o.stepBytes == 0 || size > o.maxBytes - o.stepBytes) break;
      size += o.stepBytes;
    }
  }
  return counts;
}

uint64_t mixSeed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

}  // namespace chorus_bench
