// Invariants of the double binary tree for every rank count 1..64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "topo/tree.h"

using chorus::treeDepth;
using chorus::treeNode;
using chorus::treeRoot;

TEST(DoubleBinaryTree, InvariantsForEveryRankCount) {
  for (int n = 1; n <= 64; ++n) {
    int interiorBoth = 0;
    for (int which = 0; which < 2; ++which) {
      int roots = 0;
      std::set<int> seenAsChild;
      for (int r = 0; r < n; ++r) {
        auto t = treeNode(n, r, which);
        if (t.parent < 0) {
          ++roots;
          EXPECT_EQ(treeRoot(n, which), r) << "n=" << n;
        } else {
          ASSERT_GE(t.parent, 0);
          ASSERT_LT(t.parent, n);
          auto p = treeNode(n, t.parent, which);
          EXPECT_TRUE(p.child[0] == r || p.child[1] == r)
              << "n=" << n << " tree " << which << " rank " << r << " not a child of its parent";
        }
        for (int c : t.child)
          if (c >= 0) {
            ASSERT_LT(c, n);
            EXPECT_TRUE(seenAsChild.insert(c).second)
                << "n=" << n << " rank " << c << " has two parents";
            EXPECT_EQ(treeNode(n, c, which).parent, r);
          }
      }
      EXPECT_EQ(roots, 1) << "n=" << n << " tree " << which;
      EXPECT_EQ(int(seenAsChild.size()), n - 1)
          << "n=" << n << ": every rank but the root is reached";
      int maxDepth = int(std::ceil(std::log2(double(n)))) + 1;
      EXPECT_LE(treeDepth(n, which), maxDepth) << "n=" << n << " tree " << which;
    }
    for (int r = 0; r < n; ++r)
      if (treeNode(n, r, 0).nchildren() > 0 && treeNode(n, r, 1).nchildren() > 0) ++interiorBoth;
    EXPECT_EQ(interiorBoth, 0) << "n=" << n << ": a rank is interior in both trees";
  }
}

TEST(DoubleBinaryTree, SmallShapes) {
  // n = 4: tree 1 in-order positions 1..4, root position 4 (rank 3) -> child 2 (rank 1) -> 1, 3.
  EXPECT_EQ(treeRoot(4, 0), 3);
  EXPECT_EQ(treeNode(4, 1, 0).parent, 3);
  EXPECT_EQ(treeNode(4, 0, 0).parent, 1);
  EXPECT_EQ(treeNode(4, 2, 0).parent, 1);
  // Mirror: rank r at position 4 - r, root position 4 is rank 0.
  EXPECT_EQ(treeRoot(4, 1), 0);
  EXPECT_EQ(treeNode(1, 0, 0).parent, -1);
  EXPECT_EQ(treeNode(1, 0, 1).nchildren(), 0);
}

// NCCL's multi-node trees (the tree design): chains inside nodes, a binary tree over nodes; every
// rank is reached exactly once, the root has no parent, and with more than one rank per node the
// two trees send across nodes from different ranks.
TEST(NodeTree, InvariantsForUnevenNodes) {
  for (int q = 2; q <= 6; ++q)
    for (int n = q; n <= 3 * q + 1; ++n) {
      std::vector<int> nodeOf(static_cast<size_t>(n)), ring(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) nodeOf[size_t(r)] = r % q, ring[size_t(r)] = r;
      std::stable_sort(ring.begin(), ring.end(),
                       [&](int a, int b) { return nodeOf[size_t(a)] < nodeOf[size_t(b)]; });
      std::set<int> crossers[2];
      for (int which = 0; which < 2; ++which) {
        int roots = 0;
        std::set<int> reached;
        for (int r = 0; r < n; ++r) {
          auto t = chorus::nodeTreeNode(nodeOf, q, ring, r, which);
          if (t.parent < 0) ++roots;
          if (t.parent >= 0 && nodeOf[size_t(t.parent)] != nodeOf[size_t(r)])
            crossers[which].insert(r);
          for (int c : t.child)
            if (c >= 0) {
              EXPECT_TRUE(reached.insert(c).second) << "q=" << q << " n=" << n << " rank " << c;
              EXPECT_EQ(chorus::nodeTreeNode(nodeOf, q, ring, c, which).parent, r);
            }
        }
        EXPECT_EQ(roots, 1) << "q=" << q << " n=" << n;
        EXPECT_EQ(int(reached.size()), n - 1) << "q=" << q << " n=" << n;
        EXPECT_LE(chorus::nodeTreeDepth(nodeOf, q, ring, which),
                  int(std::ceil(std::log2(double(q)))) + 1 + (n + q - 1) / q - 1);
      }
      if (n >= 2 * q) {  // every node has >= 2 ranks: the trees' inter-node ranks differ
        for (int r : crossers[0]) {
          EXPECT_EQ(crossers[1].count(r), 0u) << "q=" << q << " n=" << n;
        }
      }
    }
}
