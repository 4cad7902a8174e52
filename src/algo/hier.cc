// Hierarchical AllReduce for several nodes of P ranks each: the bytes that cross nodes drop from
// 2(N-1)/N of the data per rank (one ring over all ranks) to 2(Q-1)/Q of a 1/P share per rank,
// so every rank of a node uses the network at once and busbw approaches seed 001's
// I·(N-1)·Q / (N·(Q-1)).
//   1. reduce-scatter on the node's ring: local rank i ends with the node's sum of block i
//      (blocks of ceil(count / P) elements, the last one shorter, indexed by ring position);
//   2. ring AllReduce of block i among the Q ranks of local index i (one per node);
//   3. allgather of the blocks on the node's ring.
// Avg sums in step 1 and divides by nranks once, at the end of step 2.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/algo.h"
#include "core/comm.h"
#include "prims/prims.h"

namespace chorus {


void hierAllReduce(chorusComm* comm, const OpDesc& op, Proto proto) {
  const int me = comm->rank, node = comm->nodeOf[size_t(me)];
  std::vector<int> local;
  for (int r : comm->ring)
    if (comm->nodeOf[size_t(r)] == node) local.push_back(r);
  const int P = int(local.size());
  const int i = int(std::find(local.begin(), local.end(), me) - local.begin());
  std::vector<int> cross;  // local index i of every node, in node order
  for (int q = 0; q < comm->nnodes; ++q) {
    int seen = 0;
    for (int r : comm->ring)
      if (comm->nodeOf[size_t(r)] == q && seen++ == i) cross.push_back(r);
  }
  const int qpos = int(std::find(cross.begin(), cross.end(), me) - cross.begin());

  const size_t esz = chorusTypeSize(op.type), count = op.count;
  const size_t b = (count + size_t(P) - 1) / size_t(P);
  auto blockElems = [&](int k) { return size_t(k) * b < count ? std::min(b, count - size_t(k) * b) : 0; };
  auto at = [&](const void* base, int k, size_t off) {
    return static_cast<const char*>(base) + (size_t(mod(k, P)) * b + off) * esz;
  };
  auto atMut = [&](void* base, int k, size_t off) {
    return static_cast<char*>(base) + (size_t(mod(k, P)) * b + off) * esz;
  };
  const chorusRedOp_t partial = op.op == chorusAvg ? chorusSum : op.op;

  // 1. Reduce-scatter inside the node.
  if (P == 1) {
    if (op.sendbuff != op.recvbuff && count) memmove(op.recvbuff, op.sendbuff, count * esz);
  } else {
    Prims prims(comm, 0, proto, local[size_t(mod(i - 1, P))], local[size_t(mod(i + 1, P))],
                op.type, partial, "AllReduce(hier, intra-node reduce-scatter)");
    for (size_t off = 0; off < b; off += prims.chunkElems()) {
      auto ne = [&](int k) {
        size_t e = blockElems(mod(k, P));
        return e > off ? std::min(prims.chunkElems(), e - off) : size_t(0);
      };
      prims.send(at(op.sendbuff, i - 1, off), ne(i - 1));
      for (int j = 2; j < P; ++j) prims.recvReduceSend(at(op.sendbuff, i - j, off), ne(i - j));
      prims.recvReduceCopy(at(op.sendbuff, i, off), atMut(op.recvbuff, i, off), ne(i),
                           /*final=*/false);
    }
  }
  // 2. AllReduce of my block across nodes (in place in recvbuff).
  OpDesc share = op;
  share.sendbuff = share.recvbuff = atMut(op.recvbuff, i, 0);
  share.count = blockElems(i);
  ringAllReduceOn(comm, cross, qpos, share, Work{0, proto, 0, share.count});
  // 3. Allgather inside the node.
  if (P == 1) return;
  Prims prims(comm, 0, proto, local[size_t(mod(i - 1, P))], local[size_t(mod(i + 1, P))], op.type,
              op.op, "AllReduce(hier, intra-node allgather)");
  for (size_t off = 0; off < b; off += prims.chunkElems()) {
    auto ne = [&](int k) {
      size_t e = blockElems(mod(k, P));
      return e > off ? std::min(prims.chunkElems(), e - off) : size_t(0);
    };
    char* mine = atMut(op.recvbuff, i, off);
    prims.copySend(mine, mine, ne(i));
    for (int j = 1; j < P - 1; ++j) prims.recvCopySend(atMut(op.recvbuff, i - j, off), ne(i - j));
    prims.recv(atMut(op.recvbuff, i + 1, off), ne(i + 1));
  }
}

}  // namespace chorus
