#include "topo/tree.h"

#include <algorithm>

namespace chorus {

namespace {
inline int lowbit(int p) {
  return p & -p;
}

// Positions are 1-based; ranks 0-based.
int posOf(int n, int rank, int which) {
  if (which == 0) return rank + 1;
  if (n % 2 == 0) return n - rank;
  return (rank + 1) % n + 1;
}
int rankOf(int n, int pos, int which) {
  if (which == 0) return pos - 1;
  if (n % 2 == 0) return n - pos;
  return (pos - 2 + n) % n;  // inverse of (rank + 1) % n + 1
}
int rootPos(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}
void childrenPos(int n, int p, int out[2]) {
  out[0] = out[1] = -1;
  int half = lowbit(p) / 2;
  if (half == 0) return;
  out[0] = p - half;
  for (int off = half; off >= 1; off /= 2)
    if (p + off <= n) {
      out[1] = p + off;
      break;
    }
}
// The parent is the unique node that lists p as a child: walk down from the root.
int parentPos(int n, int p) {
  int cur = rootPos(n);
  if (p == cur) return -1;
  while (true) {
    int c[2];
    childrenPos(n, cur, c);
    if (c[0] == p || c[1] == p) return cur;
    cur = p < cur ? c[0] : c[1];
    if (cur < 0) return -1;  // unreachable for a valid position
  }
}
}  // namespace

TreeNode treeNode(int n, int rank, int which) {
  TreeNode t;
  int p = posOf(n, rank, which);
  int pp = parentPos(n, p);
  t.parent = pp < 0 ? -1 : rankOf(n, pp, which);
  int c[2];
  childrenPos(n, p, c);
  for (int i = 0; i < 2; ++i) t.child[i] = c[i] < 0 ? -1 : rankOf(n, c[i], which);
  return t;
}

namespace {
// The ranks of `node` in chain order for tree `which`.
std::vector<int> chainOf(const std::vector<int>& nodeOf, const std::vector<int>& ring, int node,
                         int which) {
  std::vector<int> chain;
  for (int r : ring)
    if (nodeOf[size_t(r)] == node) chain.push_back(r);
  if (which == 1) std::reverse(chain.begin(), chain.end());
  return chain;
}
}  // namespace

TreeNode nodeTreeNode(const std::vector<int>& nodeOf, int nnodes, const std::vector<int>& ring,
                      int rank, int which) {
  TreeNode t;
  const int node = nodeOf[size_t(rank)];
  const std::vector<int> chain = chainOf(nodeOf, ring, node, which);
  const size_t at = size_t(std::find(chain.begin(), chain.end(), rank) - chain.begin());
  int k = 0;
  if (at + 1 < chain.size()) t.child[k++] = chain[at + 1];
  if (at > 0) {
    t.parent = chain[at - 1];
    return t;
  }
  // The head: links of the node tree.
  TreeNode nt = treeNode(nnodes, node, which);
  if (nt.parent >= 0) t.parent = chainOf(nodeOf, ring, nt.parent, which)[0];
  for (int c : nt.child)
    if (c >= 0) t.child[k++] = chainOf(nodeOf, ring, c, which)[0];
  return t;
}

int nodeTreeDepth(const std::vector<int>& nodeOf, int nnodes, const std::vector<int>& ring,
                  int which) {
  int deepest = 0;
  for (int r : ring) {
    int d = 0;
    for (int cur = r; nodeTreeNode(nodeOf, nnodes, ring, cur, which).parent >= 0;
         cur = nodeTreeNode(nodeOf, nnodes, ring, cur, which).parent)
      ++d;
    deepest = std::max(deepest, d);
  }
  return deepest;
}

int treeRoot(int n, int which) {
  return rankOf(n, rootPos(n), which);
}

int treeDepth(int n, int which) {
  int deepest = 0;
  for (int r = 0; r < n; ++r) {
    int d = 0;
    for (int cur = r; treeNode(n, cur, which).parent >= 0; cur = treeNode(n, cur, which).parent)
      ++d;
    deepest = d > deepest ? d : deepest;
  }
  return deepest;
}

}  // namespace chorus
