// The communicator's topology from its ranks' host identities: which node each rank is on and
// the ring order (the ranks of a node contiguous, so the ring crosses each node boundary once).
#pragma once

#include <cstdint>
#include <vector>

namespace chorus {

struct Topology {
  std::vector<int> nodeOf;  // by rank: index of the node (numbered by their first rank)
  int nnodes = 0;
  std::vector<int> ring;     // ranks in ring order
  std::vector<int> ringPos;  // by rank: position on the ring
};

// hostHashes[r]: rank r's host identity; ranks with equal hashes share a node.
Topology buildTopology(const std::vector<uint64_t>& hostHashes);

}  // namespace chorus
