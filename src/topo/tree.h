// The double binary tree of NCCL's tree and tuning design.
//
// Tree 1 numbers the ranks 1..n in in-order (position p = rank + 1): the root is the largest
// power of two <= n; a node whose lowest set bit is L >= 2 has the left child p - L/2 and, as
// right child, the first of p + L/2, p + L/4, ... that is <= n. Odd positions are leaves, so
// interior nodes are the odd ranks and the depth is at most floor(log2 n) + 1.
// Tree 2 places rank r at position n - r (mirror) when n is even and at (r + 1) mod n + 1
// (shift) when n is odd; either way its interior nodes are even ranks, so no rank is interior
// in both trees and each tree can carry half of the data at full speed.
#pragma once

#include <vector>

namespace chorus {

struct TreeNode {
  int parent = -1;  // rank, -1 at the root
  int child[3] = {-1, -1, -1};
  int nchildren() const { return (child[0] >= 0) + (child[1] >= 0) + (child[2] >= 0); }
};

// Node of `rank` in tree `which` (0 or 1) over n ranks.
TreeNode treeNode(int n, int rank, int which);
// Rank at the root of tree `which`.
int treeRoot(int n, int which);
// Depth of the deepest node (root = 0).
int treeDepth(int n, int which);

// NCCL's tree design for several nodes: tree `which` over the Q nodes (the same construction on
// node indices), and inside each node a chain of its ranks hanging from the node's head. Tree 0's
// heads are each node's first rank in `ring` order and its chains run forward; tree 1's heads
// are the last ranks and its chains run backward, so the two trees cross nodes through
// different ranks. A head has up to three children (next in its chain, two child nodes' heads).
TreeNode nodeTreeNode(const std::vector<int>& nodeOf, int nnodes, const std::vector<int>& ring,
                      int rank, int which);
int nodeTreeDepth(const std::vector<int>& nodeOf, int nnodes, const std::vector<int>& ring,
                  int which);

}  // namespace chorus
