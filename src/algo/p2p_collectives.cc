// AlltoAll, Gather and Scatter as one batch of point-to-point transfers; the rank's own block is
// a local copy. In-place forms (NCCL's conventions: Gather's sendbuff == recvbuff + root*count at
// the root, Scatter's recvbuff == sendbuff + root*count at the root) need no copy.
#include <cstring>
#include <vector>

#include "algo/algo.h"
#include "comm/comm.h"

namespace chorus {

void directCollective(chorusComm* comm, const OpDesc& op) {
  const int n = comm->nranks, r = comm->rank;
  const size_t block = op.count * chorusTypeSize(op.type);
  if (block == 0) return;
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  std::vector<P2PTransfer>& t = algoState<P2PState>(comm, Algo::kDirect).batch;  // reused
  t.clear();
  auto localCopy = [](char* d, const char* s, size_t bytes) {
    if (d != s) memmove(d, s, bytes);
  };
  switch (op.kind) {
    case OpKind::kAlltoAll: {
      // In place (sendbuff == recvbuff): stage the input so that receives cannot overwrite
      // blocks still to be sent.
      std::vector<char> staged;
      if (src == dst) {
        staged.assign(src, src + block * size_t(n));
        src = staged.data();
      }
      for (int k = 1; k < n; ++k) {
        int to = (r + k) % n, from = (r - k + n) % n;
        t.push_back({true, to, const_cast<char*>(src) + size_t(to) * block, block});
        t.push_back({false, from, dst + size_t(from) * block, block});
      }
      localCopy(dst + size_t(r) * block, src + size_t(r) * block, block);
      runP2P(comm, t, "AlltoAll");
      return;
    }
    case OpKind::kGather:
      if (r == op.root) {
        for (int p = 0; p < n; ++p)
          if (p != r) t.push_back({false, p, dst + size_t(p) * block, block});
        localCopy(dst + size_t(r) * block, src, block);
      } else {
        t.push_back({true, op.root, const_cast<char*>(src), block});
      }
      runP2P(comm, t, "Gather");
      return;
    case OpKind::kScatter:
      if (r == op.root) {
        for (int p = 0; p < n; ++p)
          if (p != r) t.push_back({true, p, const_cast<char*>(src) + size_t(p) * block, block});
        localCopy(dst, src + size_t(r) * block, block);
      } else {
        t.push_back({false, op.root, dst, block});
      }
      runP2P(comm, t, "Scatter");
      return;
    default:
      return;
  }
}

namespace {
double directHops(OpKind, const Shape& s, size_t) {
  return double(s.nranks) - 1;
}
double directBytes(OpKind, int n) {
  const double nn = double(n);
  return (nn - 1) / nn;
}
void runDirect(chorusComm* c, const OpDesc& op, const Work&) {
  directCollective(c, op);
}
}  // namespace

// Send / Recv run as point-to-point batches (core/exec.cc), not through runCollective.
extern const AlgoDesc kDirectAlgo = {
    .name = "direct",
    .serves = kindBit(OpKind::kAlltoAll) | kindBit(OpKind::kGather) | kindBit(OpKind::kScatter) |
              kindBit(OpKind::kSend) | kindBit(OpKind::kRecv),
    .protos = kSimpleOnly,
    .fallbackFor = kindBit(OpKind::kAlltoAll) | kindBit(OpKind::kGather) |
                   kindBit(OpKind::kScatter) | kindBit(OpKind::kSend) | kindBit(OpKind::kRecv),
    .hops = directHops,
    .byteFactor = directBytes,
    .run = entries({{OpKind::kAlltoAll, runDirect},
                    {OpKind::kGather, runDirect},
                    {OpKind::kScatter, runDirect}}),
    // The point-to-point state: every batch runP2P runs, Send/Recv groups included.
    .createState = [](chorusComm*) -> AlgoState* { return new P2PState; },
};

}  // namespace chorus
