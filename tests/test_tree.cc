// Invariants of the double binary tree for every rank count 1..64.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

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
            EXPECT_TRUE(seenAsChild.insert(c).second) << "n=" << n << " rank " << c << " has two parents";
            EXPECT_EQ(treeNode(n, c, which).parent, r);
          }
      }
      EXPECT_EQ(roots, 1) << "n=" << n << " tree " << which;
      EXPECT_EQ(int(seenAsChild.size()), n - 1) << "n=" << n << ": every rank but the root is reached";
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
