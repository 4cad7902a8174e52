#include "topo/cpu_share.h"

#include <cstddef>

namespace chorus {

std::vector<int> cpuShare(const std::vector<int>& cpus, int index, int n) {
  const size_t total = cpus.size();
  if (n < 1 || index < 0 || index >= n || total < size_t(n)) return {};
  const size_t base = total / size_t(n), extra = total % size_t(n), i = size_t(index);
  const size_t begin = i * base + (i < extra ? i : extra);
  const size_t size = base + (i < extra ? 1 : 0);
  return std::vector<int>(cpus.begin() + std::ptrdiff_t(begin),
                          cpus.begin() + std::ptrdiff_t(begin + size));
}

uint64_t cpuSetDigest(const std::vector<int>& cpus) {
  // FNV-1a over the CPU numbers and the count: equal lists give equal digests; a collision
  // between two different sets of one node only costs the binding's benefit, never correctness.
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  };
  for (int c : cpus) mix(uint64_t(uint32_t(c)));
  mix(cpus.size());
  return h;
}

}  // namespace chorus
