// Tree algorithms (NCCL's tree and tuning design): AllReduce on the double binary tree, Broadcast
// and Reduce on one tree rooted at the operation's root.
//
// AllReduce: tree t carries elements [t*half, ...) on channel t. Per chunk, a rank reduces its
// children's partial results with its own input and sends the sum to its parent (send /
// recvReduceSend); the root finishes the reduction (recvReduceCopy) and starts it back down;
// every other rank receives the result from its parent and passes it to its children
// (recvCopySend / recv). All chunks of both trees progress in one non-blocking loop, so the
// reduce-up of later chunks overlaps the broadcast-down of earlier ones, and neither tree waits
// for the other. Chunks shrink for small messages so that the pipeline holds about two chunks
// per tree level (the chunk-size shrinking by depth of NCCL's tree design).
#include "topo/tree.h"

#include <algorithm>
#include <cstring>

#include "algo/algo.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "prims/fan.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

// A tree's chunks: at least this many bytes each (and at most 2(D + 1) of them, D the tree's
// depth), as TreeRun::setup cuts them and the model counts them.
constexpr size_t kTreeMinChunkBytes = 512;

struct TreeRun {
  const OpDesc* op;
  size_t esz;
  bool doUp, doDown;  // reduce towards the root / broadcast from it
  int parent = -1, child[3] = {-1, -1, -1}, nchildren = 0;
  // up: children -> parent (at the root: -> children when it also broadcasts, else nobody);
  // down: parent (none at a broadcast's root) -> children.
  FanPrims upP, downP;
  size_t begin = 0, end = 0, chunk = 1, nchunks = 0, up = 0, down = 0;

  void setup(chorusComm* c, const OpDesc& o, Proto proto, int channel, const TreeNode& node,
             size_t b, size_t e, int depth) {
    op = &o;
    esz = chorusTypeSize(o.type);
    parent = node.parent;
    for (int k = 0; k < 3; ++k)
      if (node.child[k] >= 0) child[nchildren++] = node.child[k];
    const char* name = opKindName(o.kind);
    if (doUp) {
      const bool toChildren = parent < 0 && doDown;
      upP.init(c, channel, proto, child, nchildren, toChildren ? child : &parent,
               toChildren    ? nchildren
               : parent >= 0 ? 1
                             : 0,
               o.type, o.op, name);
      upP.setStreamingSlots(slotStreaming(c, o));
    }
    if (doDown && (parent >= 0 || !doUp)) {
      downP.init(c, channel, proto, &parent, parent >= 0 ? 1 : 0, child, nchildren, o.type, o.op,
                 name);
      downP.setStreamingSlots(slotStreaming(c, o));
    }
    begin = b;
    end = e;
    const size_t cap = (doUp ? upP : downP).chunkElems();
    const size_t target = (end - begin + size_t(2 * depth) - 1) / size_t(std::max(1, 2 * depth));
    const size_t minChunk = std::max<size_t>(1, kTreeMinChunkBytes / esz);
    chunk = std::clamp(target, std::min(minChunk, cap), cap);
    nchunks = end > begin ? (end - begin + chunk - 1) / chunk : 0;
    up = doUp ? 0 : nchunks;
    down = doDown ? 0 : nchunks;  // the root counts its down-sends in tryUp / tryRootSend
  }

  bool done() const { return up == nchunks && down == nchunks; }
  size_t elems(size_t i) const { return std::min(chunk, end - begin - i * chunk); }
  size_t offset(size_t i) const { return (begin + i * chunk) * esz; }
  const char* in(size_t o) const { return static_cast<const char*>(op->sendbuff) + o; }
  char* out(size_t o) const { return static_cast<char*>(op->recvbuff) + o; }

  // Reduce-up of chunk `up`: children's partials + own input -> parent (or the result, at the
  // root, which then also starts the broadcast-down when doDown).
  bool tryUp() {
    if (up == nchunks) return false;
    const size_t o = offset(up);
    const bool ok = parent >= 0 ? upP.tryReduce(in(o), nullptr, elems(up), false)
                                : upP.tryReduce(in(o), out(o), elems(up), true);
    if (!ok) return false;
    if (parent < 0 && doDown) ++down;
    ++up;
    return true;
  }

  // Broadcast-down of chunk `down` at a non-root rank: parent -> own output and children.
  bool tryDown() {
    if (down == nchunks || parent < 0) return false;
    if (!downP.tryCopy(nullptr, out(offset(down)), elems(down))) return false;
    ++down;
    return true;
  }

  // Broadcast at the root: own input -> children (and own output out of place).
  bool tryRootSend() {
    if (down == nchunks) return false;
    const size_t o = offset(down);
    if (!downP.tryCopy(in(o), out(o), elems(down))) return false;
    ++down;
    return true;
  }

  // After a pass that moved nothing: the neighbours this run waits for (its up and its down
  // step each wait on one), into out; returns how many.
  int blockers(int* out) const {
    int m = 0;
    if (up < nchunks && upP.blocker() >= 0) out[m++] = upP.blocker();
    if (down < nchunks && (parent >= 0 || !doUp) && downP.blocker() >= 0)
      out[m++] = downP.blocker();
    return m;
  }
};

void runAll(chorusComm* comm, TreeRun* runs, int nruns, bool rootSend) {
  Waiter waiter(comm, -1, opKindName(runs[0].op->kind), /*fifoWait=*/true);
  bool afterPause = false;  // the last pass moved nothing and the wait paused (FanPrims::judge)
  for (int t = 0; t < nruns; ++t) {
    runs[t].upP.judgeHandoffs(&waiter, &afterPause);
    runs[t].downP.judgeHandoffs(&waiter, &afterPause);
  }
  while (true) {
    bool all = true, progressed = false;
    for (int t = 0; t < nruns; ++t) {
      TreeRun& r = runs[t];
      if (r.done()) continue;
      all = false;
      // Once a chunk moved, what arrives later in this pass did not come during the pause.
      while (r.tryUp()) progressed = true;
      afterPause = afterPause && !progressed;
      if (rootSend && r.parent < 0)
        while (r.tryRootSend()) progressed = true;
      else
        while (r.tryDown()) progressed = true;
      afterPause = afterPause && !progressed;
    }
    if (all) return;
    if (!progressed) {
      // Each health check looks at the next neighbour a run waits for (all in turn, whatever
      // the pauses in between). Only those: a neighbour that finished its part and destroyed
      // its communicator must not fail a rank that waits for another one.
      int waits[4], m = 0;  // two runs at most (the double binary tree), two waits each
      for (int t = 0; t < nruns; ++t)
        if (!runs[t].done()) m += runs[t].blockers(waits + m);
      waiter.setPeer(m > 0 ? waits[waiter.checks() % uint32_t(m)] : -1);
      waiter.pause();
      afterPause = true;
    }
  }
}

// Maps ranks so that `root` sits at the top of tree 0.
struct Rooted {
  int n, shift;
  Rooted(int nranks, int root) : n(nranks), shift(treeRoot(nranks, 0) - root) {}
  int virt(int r) const { return ((r + shift) % n + n) % n; }
  int real(int v) const { return v < 0 ? -1 : ((v - shift) % n + n) % n; }
  TreeNode node(int r) const {
    TreeNode t = treeNode(n, virt(r), 0);
    t.parent = real(t.parent);
    for (int& c : t.child) c = real(c);
    return t;
  }
};

}  // namespace

void treeAllReduce(chorusComm* comm, const OpDesc& op, Proto proto) {
  const int n = comm->nranks;
  const int ntrees = comm->nchannels >= 2 ? 2 : 1;
  TreeRun runs[2];
  const size_t half = ntrees == 2 ? op.count / 2 : op.count;
  for (int t = 0; t < ntrees; ++t) {
    runs[t].doUp = runs[t].doDown = true;
    // One node: the double binary tree over ranks; several: trees over nodes with chains inside.
    const bool nodes = comm->nnodes > 1;
    TreeNode node = nodes ? nodeTreeNode(comm->nodeOf, comm->nnodes, comm->ring, comm->rank, t)
                          : treeNode(n, comm->rank, t);
    int depth = nodes ? nodeTreeDepth(comm->nodeOf, comm->nnodes, comm->ring, t) : treeDepth(n, t);
    runs[t].setup(comm, op, proto, t, node, t == 0 ? 0 : half, t == 0 ? half : op.count, depth + 1);
  }
  runAll(comm, runs, ntrees, false);
}

void treeBroadcast(chorusComm* comm, const OpDesc& op, const Work& w) {
  Rooted rooted(comm->nranks, op.root);
  TreeRun run;
  run.doUp = false;
  run.doDown = true;
  run.setup(comm, op, w.proto, w.channel, rooted.node(comm->rank), w.begin, w.end,
            treeDepth(comm->nranks, 0) + 1);
  if (comm->rank == op.root) run.down = 0;
  runAll(comm, &run, 1, true);
}

void treeReduce(chorusComm* comm, const OpDesc& op, const Work& w) {
  Rooted rooted(comm->nranks, op.root);
  TreeRun run;
  run.doUp = true;
  run.doDown = false;
  run.setup(comm, op, w.proto, w.channel, rooted.node(comm->rank), w.begin, w.end,
            treeDepth(comm->nranks, 0) + 1);
  runAll(comm, &run, 1, false);
}

namespace {
// Broadcast / Reduce need a tree with an interior (more than 2 ranks).
bool treeRunsOn(OpKind kind, const Shape& s) {
  return kind == OpKind::kAllReduce || s.nranks > 2;
}
// Up and down the deepest tree for AllReduce, down (or up) it once for Broadcast / Reduce. More
// ranks than cores: a small tree Broadcast / Reduce waits for every rank to be scheduled like
// the chain does, and the chain's one send per rank lets each run further ahead (measured at 4
// ranks on 2 cores, docs/performance.md): the tree gets the chain's n - 1 hops.
double treeHops(OpKind kind, const Shape& s, size_t bytes) {
  int depth = s.treeDepth;
  if (s.oversubscribed && bytes <= kOversubscribedChainBytes &&
      (kind == OpKind::kBroadcast || kind == OpKind::kReduce))
    depth = s.nranks - 1;
  return kind == OpKind::kAllReduce ? 2.0 * depth : double(depth);
}
// Across nodes. Interior nodes send twice (NCCL's tree and tuning design: tree ratio 0.5); an
// AllReduce on 2 ranks has no interior node. And an AllReduce's pipeline fills and drains: its
// first chunk crosses the Dn network levels of the tree over nodes on the way up, its last on
// the way down, while the links carry less than their share. TreeRun::setup makes a chunk the
// tree's elements (half the call's) over 2(D + 1), D = Dn + P - 1 with each node's chain of P
// ranks, so those 2 Dn chunks add Dn / (2(D + 1)) of the call's bytes: 0.3 at 8 nodes of 2
// ranks (4 MiB took the tree 84-91 ms there, 2.5x the link's time for the bytes: 2026-11-29,
// CHANGELOG.md). Above 4(D + 1) slots the slot caps the chunk and this overstates the fill; the
// tree is not the tuner's choice across nodes at those sizes.
// The trees across nodes as the model sees them: P ranks a node (the most), the deeper node
// tree's depth Dn.
struct NodeTrees {
  int per, dn;
};
NodeTrees nodeTrees(const Shape& s) {
  const int q = std::max(s.nnodes, 1);
  return {(s.nranks + q - 1) / q, std::max(treeDepth(q, 0), treeDepth(q, 1))};
}
// The most chunks a tree cuts its half of a call into: 2(D + 1), D = Dn + P - 1 (TreeRun::setup).
int mostChunks(const NodeTrees& t) {
  return 2 * (t.dn + t.per);
}
double treeNetBytes(OpKind kind, const Shape& s) {
  if (kind != OpKind::kAllReduce) return 2.0;
  if (s.nranks <= 2) return 1.0;
  const NodeTrees t = nodeTrees(s);
  return 2.0 + double(t.dn) / double(mostChunks(t));
}
// Across nodes an AllReduce runs on trees over the nodes, each node's P ranks a chain below its
// head (topo/tree.h nodeTreeNode): up and down the deeper node tree's Dn network hand-offs and
// the chain's P - 1 inside a node, where the tree over all ranks would count 2 log2(QP) network
// ones (16 nodes of 8 ranks: 8 network and 14 node hand-offs, not 14 network). Broadcast and
// Reduce run on one tree over the ranks, every edge counted as a network hop.
// And each chunk past the first costs the pipeline's step, which is the larger of its messages'
// cost and its bytes' time (the bytes term has the latter): TreeRun::setup cuts a tree's half of
// the call into chunks of at least 512 bytes, 2(D + 1) of them (D = Dn + P - 1) once it is large
// enough (a slot caps them only past about 10 MiB, where the bytes decide), and an interior rank
// handles 6 messages a chunk (2 in and 1 out up the tree, 1 in and 2 out down it), 3 times a
// chain rank's 2 a call, whose rate the link probe measures (Shape::netPipeUs). Continuous in the
// bytes (the plan cache's classes): half / 512 chunks below that. On 8 emulated nodes of 1 rank
// (2026-12-06) the tree took 0.6 ms with one chunk and 2.1-2.4 ms with 8 (8-32 KiB), where the
// hops and bytes alone predicted about 1 ms.
// Where the link probe timed a tree AllReduce of its most chunks (Shape::netTreeUs), the step is
// what makes this model give that call's time: on 3, 5 and 6 emulated nodes of 1 rank the step
// took 136-254 us where 3 chain Broadcasts' rate said 41-89 (the chain's back-to-back calls
// stream; a tree's chunk waits for both children), and the tuner ran the tree at 8-32 KiB there,
// 2.2-2.7x slower than the recursive doubling (2026-12-06).
constexpr double kTreeChunkMessages = 3;  // an interior rank's messages per chunk / a chain's
double treeNetHopsUs(OpKind kind, Proto p, const Shape& s, size_t bytes, double bytesUs) {
  if (kind != OpKind::kAllReduce) return treeHops(kind, s, bytes) * netHopUs(s);
  const NodeTrees t = nodeTrees(s);
  const double hops = 2.0 * (double(t.dn) * netHopUs(s) + double(t.per - 1) * nodeHopUs(s, p));
  const double most = double(mostChunks(t));  // per tree
  const double chunks = std::min(most, double(bytes) / 2 / double(kTreeMinChunkBytes));
  if (chunks <= 1) return hops;
  double step = kTreeChunkMessages * netPipeUs(s);
  if (s.netTreeUs > 0) {
    // The probe's call: base + pipelinedUs(hops + (most - 1)(step - its bytes / most), its
    // bytes), its bytes' term in proportion to this call's (both are bytes over one bandwidth).
    const double probeBytesUs = bytesUs * double(treeProbeBytes(s)) / double(bytes);
    const double h = hopsTermUs(s, s.netTreeUs - machineModel().baseUs[int(p)], probeBytesUs);
    if (h >= 0) step = std::max(0.0, (h - hops) / (most - 1) + probeBytesUs / most);
  }
  return hops + (chunks - 1) * std::max(0.0, step - bytesUs / chunks);
}
// On one node, an AllReduce with interior ranks moves its bytes 1.4x slower than the ring's 2(n -
// 1)/n: at 8 and 16 ranks on 16 cores, 16 MiB took the tree 1.35-1.43x the ring's time (the GPU
// machine's CPU, 2026-11-28, scripts/device_probe.sh), and 1.15x at 4 ranks on 2 cores. The
// reference fit (below) is measured at 2 ranks, where the tree has no interior, so the factor
// carries the difference: 1.4 x 1.875 (the ring's at 16 ranks) x 7.58 / 7.03 (the two fits'
// bandwidths) = 2.8.
double treeBytes(OpKind kind, int n) {
  if (kind == OpKind::kAllReduce) return n > 2 ? 2.8 : 1.0;
  return 2.0;
}
}  // namespace

size_t treeProbeBytes(const Shape& shape) {
  return 2 * size_t(mostChunks(nodeTrees(shape))) * kTreeMinChunkBytes;  // both trees
}

extern const AlgoDesc kTreeAlgo = {
    .name = "tree",
    .serves = kindBit(OpKind::kAllReduce) | kindBit(OpKind::kBroadcast) | kindBit(OpKind::kReduce),
    .protos = kAnyProto,
    .runsOn = treeRunsOn,
    .hops = treeHops,
    .byteFactor = treeBytes,
    .netByteFactor = treeNetBytes,
    .netHopsUs = treeNetHopsUs,
    .run = entries({{OpKind::kAllReduce, [](chorusComm* c, const OpDesc& op,
                                            const Work& w) { treeAllReduce(c, op, w.proto); }},
                    {OpKind::kBroadcast, treeBroadcast},
                    {OpKind::kReduce, treeReduce}}),
};

}  // namespace chorus
