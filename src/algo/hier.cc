// Hierarchical collectives for several nodes of P ranks each (algo/algo.h HierPlan: local index
// i of node q). They send a node's data across the network once, where a flat ring sends every
// rank's: the bytes through a node's link drop from (N-1)/N of the data to (Q-1)/Q, which is
// what the ideal-busbw model's I·(N-1)·Q / (N·(Q-1)) assumes.
//
// AllGather and ReduceScatter run a ring across nodes between the ranks of the same local index
// (the cross ring) and, for each node's blocks in turn, a ring inside the node, interleaved
// chunk by chunk: AllGather forwards every block the cross ring brings (rank (c, i)'s) to the
// node's other ranks at once; ReduceScatter first sums, on the node's ring, the blocks of node c
// that the cross ring will need next (the node's sum of rank (c, i)'s block lands in a one-chunk
// buffer) and hands that to the cross ring. The node's rings move shared-memory data while the
// cross ring's chunks are in flight (its slots hold several), so no threads are needed.
//
// AllReduce is that ReduceScatter (rank r ends with the sum of block r, in place in its output)
// followed by that AllGather of the blocks, split as LineBlocks (algo/algo.h) splits them: whole
// 64-byte lines, the last blocks shorter or empty. Avg divides once, at the end of the
// ReduceScatter. Until 2026-11-29 it ran a node reduce-scatter, a ring AllReduce across nodes and a
// node allgather, pipelined over slices on three threads per rank, and timed whether to pipeline in
// its first large calls; on 4 nodes x 2 ranks at 1 Gbit/s that ran at 91.0% and 89.1% of the ideal
// at 16 and 64 MiB, this at 93.4% and 90.0% (medians of 5: CHANGELOG.md).
#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/algo.h"
#include "base/error.h"
#include "comm/comm.h"
#include "prims/prims.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

// The communicator's plan and one chunk for ReduceScatter, made once (createState).
struct HierState final : AlgoState {
  HierPlan plan;
  std::vector<char> chunk;  // one Simple slot: ReduceScatter's node sum
};
HierState& hierState(chorusComm* comm) {
  return algoState<HierState>(comm, Algo::kHier);
}

}  // namespace

HierPlan hierPlan(const chorusComm* comm) {
  HierPlan h;
  const int me = comm->rank, node = comm->nodeOf[size_t(me)];
  for (int r : comm->ring)
    if (comm->nodeOf[size_t(r)] == node) h.local.push_back(r);
  h.P = int(h.local.size());
  h.i = int(std::find(h.local.begin(), h.local.end(), me) - h.local.begin());
  for (int q = 0; q < comm->nnodes; ++q) {
    int seen = 0;
    for (int r : comm->ring)
      if (comm->nodeOf[size_t(r)] == q && seen++ == h.i) h.cross.push_back(r);
  }
  h.qpos = int(std::find(h.cross.begin(), h.cross.end(), me) - h.cross.begin());
  std::vector<int> grid;
  for (int q = 0; q < comm->nnodes; ++q) {
    const size_t before = grid.size();
    for (int r : comm->ring)
      if (comm->nodeOf[size_t(r)] == q) grid.push_back(r);
    if (grid.size() - before != size_t(h.P)) return h;  // uneven nodes: no grid
  }
  h.grid = std::move(grid);
  return h;
}

namespace {

// Rank r's block b.begin(r), b.size(r) in AllGather's output and ReduceScatter's input: its piece
// at [o, o + chunk) lies at pieceAt and holds pieceElems elements (0 past the block's end: both
// ends of a transfer skip it).
template <typename T>
T* pieceAt(T* base, const LineBlocks& b, int r, size_t o, size_t esz) {
  return base + (b.begin(r) + o) * esz;
}
size_t pieceElems(const LineBlocks& b, int r, size_t o, size_t chunk) {
  const size_t n = b.size(r);
  return o < n ? std::min(chunk, n - o) : 0;
}

// The cross ring's and the node ring's primitives of AllGather / ReduceScatter (the node's
// without peers on a node of one rank): both on channel 0, the cross ring always Simple.
struct HierRings {
  Prims cross, node;
  HierRings(chorusComm* comm, const HierPlan& h, const OpDesc& op, Proto proto,
            chorusRedOp_t nodeOp, const char* crossName, const char* nodeName)
      : cross(comm, 0, Proto::kSimple, h.cross[size_t(mod(h.qpos - 1, int(h.cross.size())))],
              h.cross[size_t(mod(h.qpos + 1, int(h.cross.size())))], op.type, op.op, crossName),
        node(comm, 0, proto, h.P > 1 ? h.local[size_t(mod(h.i - 1, h.P))] : -1,
             h.P > 1 ? h.local[size_t(mod(h.i + 1, h.P))] : -1, op.type, nodeOp, nodeName) {
    node.setStreamingSlots(slotStreaming(comm, op));  // the node ring's shared-memory slots
  }
};

// One chunk's elements: the smaller of the node's and the cross ring's slots, so that both
// ends of every connection agree.
size_t hierChunk(const Prims& node, const Prims& cross, const HierPlan& h) {
  return h.P > 1 ? std::min(node.chunkElems(), cross.chunkElems()) : cross.chunkElems();
}

// AllGather of `b`'s blocks, one per rank (op.count is ignored): rank r's, b.size(r) elements
// from op.sendbuff, lands at b.begin(r) in op.recvbuff.
void hierAllGatherBlocks(chorusComm* comm, const OpDesc& op, Proto proto, const LineBlocks& b) {
  const HierPlan& h = hierState(comm).plan;
  const int P = h.P, Q = int(h.cross.size()), i = h.i, q = h.qpos;
  const size_t esz = chorusTypeSize(op.type);
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  // Named for the user's call (an AllReduce's second half says AllReduce in its errors).
  const bool ar = op.kind == OpKind::kAllReduce;
  HierRings rings(comm, h, op, proto, op.op,
                  ar ? "AllReduce(hier, allgather across nodes)" : "AllGather(hier, across nodes)",
                  ar ? "AllReduce(hier, intra-node allgather)" : "AllGather(hier, intra-node)");
  Prims &cross = rings.cross, &node = rings.node;
  cross.setStreamingOutput(b.count * esz >= comm->streamThreshold);
  node.setStreamingOutput(b.count * esz >= comm->streamThreshold);
  const size_t chunk = hierChunk(node, cross, h);
  // Rank r's piece at o, received through `prims` (and passed on).
  auto recvCopySend = [&](Prims& prims, int r, size_t o) {
    prims.recvCopySend(pieceAt(dst, b, r, o, esz), pieceElems(b, r, o, chunk));
  };
  auto recv = [&](Prims& prims, int r, size_t o) {
    prims.recv(pieceAt(dst, b, r, o, esz), pieceElems(b, r, o, chunk));
  };
  // The node's ring passes on node c's blocks: this rank's (just received or copied) first.
  auto nodeRing = [&](int c, size_t o) {
    if (P == 1) return;
    const int r = h.at(c, i);
    node.send(pieceAt(dst, b, r, o, esz), pieceElems(b, r, o, chunk));
    for (int j = 1; j < P - 1; ++j) recvCopySend(node, h.at(c, i - j), o);
    recv(node, h.at(c, i + 1), o);
  };
  const int me = h.at(q, i);
  for (size_t o = 0; o < b.size(0); o += chunk) {  // block 0 is the largest
    cross.copySend(src + o * esz, pieceAt(dst, b, me, o, esz), pieceElems(b, me, o, chunk));
    nodeRing(q, o);
    for (int j = 1; j < Q - 1; ++j) {
      recvCopySend(cross, h.at(mod(q - j, Q), i), o);
      nodeRing(mod(q - j, Q), o);
    }
    recv(cross, h.at(mod(q + 1, Q), i), o);
    nodeRing(mod(q + 1, Q), o);
  }
}

// ReduceScatter of `b`'s blocks, one per rank (op.count is ignored): rank r's, b.size(r)
// elements at b.begin(r) in op.sendbuff, reduced over the ranks into op.recvbuff.
void hierReduceScatterBlocks(chorusComm* comm, const OpDesc& op, Proto proto, const LineBlocks& b) {
  HierState& st = hierState(comm);
  const HierPlan& h = st.plan;
  const int P = h.P, Q = int(h.cross.size()), i = h.i, q = h.qpos;
  const size_t esz = chorusTypeSize(op.type);
  const chorusRedOp_t partial = op.op == chorusAvg ? chorusSum : op.op;
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  const bool ar = op.kind == OpKind::kAllReduce;  // named for the user's call, as above
  HierRings rings(
      comm, h, op, proto, partial,
      ar ? "AllReduce(hier, reduce-scatter across nodes)" : "ReduceScatter(hier, across nodes)",
      ar ? "AllReduce(hier, intra-node reduce-scatter)" : "ReduceScatter(hier, intra-node)");
  Prims &cross = rings.cross, &node = rings.node;
  const size_t chunk = std::min(hierChunk(node, cross, h), st.chunk.size() / esz);
  auto in = [&](int r, size_t o) { return pieceAt(src, b, r, o, esz); };
  auto ne = [&](int r, size_t o) { return pieceElems(b, r, o, chunk); };
  // The node's sum of rank (c, i)'s piece, in the chunk buffer (this rank's own input alone on
  // a node of one rank).
  auto nodeSum = [&](int c, size_t o) -> const char* {
    if (P == 1) return in(h.at(c, i), o);
    const int first = h.at(c, i - 1), own = h.at(c, i);
    node.send(in(first, o), ne(first, o));
    for (int j = 2; j < P; ++j) {
      const int r = h.at(c, i - j);
      node.recvReduceSend(in(r, o), ne(r, o));
    }
    node.recvReduceCopy(in(own, o), st.chunk.data(), ne(own, o), /*final=*/false);
    return st.chunk.data();
  };
  const int me = h.at(q, i);
  for (size_t o = 0; o < b.size(0); o += chunk) {  // block 0 is the largest
    cross.send(nodeSum(mod(q - 1, Q), o), ne(h.at(mod(q - 1, Q), i), o));
    for (int j = 2; j < Q; ++j)
      cross.recvReduceSend(nodeSum(mod(q - j, Q), o), ne(h.at(mod(q - j, Q), i), o));
    cross.recvReduceCopy(nodeSum(q, o), dst + o * esz, ne(me, o), /*final=*/true);
  }
}

}  // namespace

void hierAllGather(chorusComm* comm, const OpDesc& op, Proto proto) {
  hierAllGatherBlocks(comm, op, proto, LineBlocks(op.count * size_t(comm->nranks), op.count));
}

void hierReduceScatter(chorusComm* comm, const OpDesc& op, Proto proto) {
  hierReduceScatterBlocks(comm, op, proto, LineBlocks(op.count * size_t(comm->nranks), op.count));
}

void hierAllReduce(chorusComm* comm, const OpDesc& op, Proto proto) {
  const HierPlan& h = hierState(comm).plan;
  const size_t esz = chorusTypeSize(op.type), count = op.count;
  if (h.P == 1) {  // one rank per node: the ring across nodes is the whole of it, in place
    if (op.sendbuff != op.recvbuff && count) memmove(op.recvbuff, op.sendbuff, count * esz);
    OpDesc all = op;
    all.sendbuff = op.recvbuff;
    ringAllReduceOn(comm, h.cross, h.qpos, all, Work{0, Proto::kSimple, 0, count});
    return;
  }
  // The elements split over the ranks as the single-copy and two-shot AllReduces split them
  // (whole lines, the last blocks shorter or empty): every element in one pass (a remainder's
  // separate ring AllReduce cost 2(n - 1) more hops: 8 x 2 emulated nodes, 2 MiB + 4 B, 33-38
  // ms against 31-35).
  const LineBlocks b(count, comm->nranks, esz);
  char* recv = static_cast<char*>(op.recvbuff);
  OpDesc rs = op;
  rs.recvbuff = pieceAt(recv, b, comm->rank, 0, esz);
  hierReduceScatterBlocks(comm, rs, proto, b);
  OpDesc ag = op;
  ag.sendbuff = rs.recvbuff;  // in place: this rank's block of the output
  hierAllGatherBlocks(comm, ag, proto, b);
}

namespace {
bool hierRunsOn(OpKind, const Shape& s) {
  return s.nnodes > 1 && s.evenNodes;
}
// (Only across nodes, where hierUs replaces these: as the ring.)
double hierHops(OpKind kind, const Shape& s, size_t) {
  return (kind == OpKind::kAllReduce ? 2.0 : 1.0) * (double(s.nranks) - 1);
}
double hierBytes(OpKind kind, int n) {
  const double nn = double(n);
  return (kind == OpKind::kAllReduce ? 2.0 : 1.0) * (nn - 1) / nn;
}
// AllGather / ReduceScatter: the link carries (Q-1)/Q of the data and the node's rings (P-1)/P,
// chunk by chunk beside the cross ring's chunks in flight: the slower of the two, and a node
// ring's hand-offs after each of the cross ring's. AllReduce: one of each.
double hierUs(OpKind kind, Proto p, const Shape& shape, size_t bytes) {
  const MachineModel& m = machineModel();
  const double S = double(bytes);
  const double Q = shape.nnodes, P = double(shape.nranks) / Q;
  const double netBw = netBwGBs(shape) * 1e3, shmBw = m.bwGBs[0] * 1e3;
  const double shmT = S * (P - 1) / P / shmBw, netT = S * (Q - 1) / Q / netBw;
  const double once = pipelinedUs(
      shape, Q * (P - 1) * nodeHopUs(shape, p) + (Q - 1) * netHopUs(shape), std::max(shmT, netT));
  return m.baseUs[int(p)] + (kind == OpKind::kAllReduce ? 2 : 1) * once;
}
}  // namespace

extern const AlgoDesc kHierAlgo = {
    .name = "hier",
    .serves =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) | kindBit(OpKind::kReduceScatter),
    .protos = kAnyProto,
    .runsOn = hierRunsOn,
    .hops = hierHops,
    .byteFactor = hierBytes,
    .multiNodeUs = hierUs,
    .run = entries(
        {{OpKind::kAllReduce,
          [](chorusComm* c, const OpDesc& op, const Work& w) { hierAllReduce(c, op, w.proto); }},
         {OpKind::kAllGather,
          [](chorusComm* c, const OpDesc& op, const Work& w) { hierAllGather(c, op, w.proto); }},
         {OpKind::kReduceScatter, [](chorusComm* c, const OpDesc& op,
                                     const Work& w) { hierReduceScatter(c, op, w.proto); }}}),
    .createState = [](chorusComm* c) -> AlgoState* {
      auto* st = new HierState;
      st->plan = hierPlan(c);
      st->chunk.resize(c->slotBytes[0]);
      return st;
    },
};

}  // namespace chorus
