#include "topo/topology.h"

#include <algorithm>

namespace chorus {

Topology buildTopology(const std::vector<uint64_t>& hostHashes) {
  const int n = int(hostHashes.size());
  Topology t;
  t.nodeOf.assign(size_t(n), -1);
  for (int r = 0; r < n; ++r) {
    for (int q = 0; q < r; ++q)
      if (hostHashes[size_t(q)] == hostHashes[size_t(r)]) {
        t.nodeOf[size_t(r)] = t.nodeOf[size_t(q)];
        break;
      }
    if (t.nodeOf[size_t(r)] < 0) t.nodeOf[size_t(r)] = t.nnodes++;
  }
  t.ring.resize(size_t(n));
  for (int r = 0; r < n; ++r) t.ring[size_t(r)] = r;
  std::stable_sort(t.ring.begin(), t.ring.end(),
                   [&](int a, int b) { return t.nodeOf[size_t(a)] < t.nodeOf[size_t(b)]; });
  t.ringPos.resize(size_t(n));
  for (int i = 0; i < n; ++i) t.ringPos[size_t(t.ring[size_t(i)])] = i;
  return t;
}

}  // namespace chorus
