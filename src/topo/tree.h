// The double binary tree of seed 002.
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
  int child[2] = {-1, -1};
  int nchildren() const { return (child[0] >= 0) + (child[1] >= 0); }
};

// Node of `rank` in tree `which` (0 or 1) over n ranks.
TreeNode treeNode(int n, int rank, int which);
// Rank at the root of tree `which`.
int treeRoot(int n, int which);
// Depth of the deepest node (root = 0).
int treeDepth(int n, int which);

}  // namespace chorus
