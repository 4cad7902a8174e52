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
#include "reduce/reduce.h"

namespace chorus {

namespace {

struct TreeRun {
  chorusComm* comm;
  const OpDesc* op;
  ProtoIO io;
  size_t esz;
  bool doUp, doDown;  // reduce towards the root / broadcast from it
  int parent = -1, child[3] = {-1, -1, -1}, nchildren = 0;
  SendConn* toParent = nullptr;
  RecvConn* fromParent = nullptr;
  SendConn* toChild[3] = {nullptr, nullptr, nullptr};
  RecvConn* fromChild[3] = {nullptr, nullptr, nullptr};
  char* scratch[3];
  size_t begin = 0, end = 0, chunk = 1, nchunks = 0, up = 0, down = 0;

  void setup(chorusComm* c, const OpDesc& o, Proto proto, int channel, const TreeNode& node,
             size_t b, size_t e, int depth) {
    comm = c;
    op = &o;
    esz = chorusTypeSize(o.type);
    io.proto = proto;
    const int pr = int(proto);
    parent = node.parent;
    if (parent >= 0) {
      toParent = &c->sendConn(pr, channel, parent);
      fromParent = &c->recvConn(pr, channel, parent);
    }
    for (int k = 0; k < 3; ++k) {
      int ch = node.child[k];
      if (ch < 0) continue;
      child[nchildren] = ch;
      toChild[nchildren] = &c->sendConn(pr, channel, ch);
      fromChild[nchildren] = &c->recvConn(pr, channel, ch);
      ++nchildren;
    }
    char* base = c->scratch[size_t(channel)].data();
    for (int k = 0; k < 3; ++k) scratch[k] = base + size_t(k) * c->slotBytes[0];
    io.sendScratch = base + 3 * c->slotBytes[0];
    begin = b;
    end = e;
    const size_t cap = protoSlotCapacity(proto, c->slotBytes[pr]) / esz;
    const size_t target = (end - begin + size_t(2 * depth) - 1) / size_t(std::max(1, 2 * depth));
    const size_t minChunk = std::max<size_t>(1, 512 / esz);
    chunk = std::clamp(target, std::min(minChunk, cap), cap);
    nchunks = end > begin ? (end - begin + chunk - 1) / chunk : 0;
    up = doUp ? 0 : nchunks;
    down = doDown ? 0 : nchunks;  // the root counts its down-sends in tryUp / tryRootSend
  }

  bool done() const { return up == nchunks && down == nchunks; }
  size_t elems(size_t i) const { return std::min(chunk, end - begin - i * chunk); }
  size_t offset(size_t i) const { return (begin + i * chunk) * esz; }

  const char* received(RecvConn& r, size_t bytes, char* scratchBuf) {
    size_t got = io.recvBytes(r, bytes);
    if (got != bytes)
      fail(chorusInvalidUsage,
           "rank %d: %s: received %zu bytes from rank %d where %zu were expected (do all ranks "
           "call the same operation with the same count and type?)",
           comm->rank, opKindName(op->kind), got, r.peer, bytes);
    return io.recvData(r, bytes, scratchBuf);
  }
  void sendFrom(SendConn& s, const char* data, size_t bytes) {
    if (io.proto == Proto::kSimple) {
      copyKernel(s.slot(), nullptr, data, bytes);
      s.post(bytes);
    } else {
      io.sendPost(s, data, bytes);
    }
  }

  // Reduce-up of chunk `up`: children's partials + own input -> parent (or the result, at the
  // root, which then also starts the broadcast-down when doDown).
  bool tryUp() {
    if (up == nchunks) return false;
    const size_t ne = elems(up), bytes = ne * esz, o = offset(up);
    for (int k = 0; k < nchildren; ++k)
      if (!io.recvReady(*fromChild[k], bytes)) return false;
    if (parent >= 0) {
      if (!toParent->slotFree()) return false;
    } else if (doDown) {
      for (int k = 0; k < nchildren; ++k)
        if (!toChild[k]->slotFree()) return false;
    }
    const char* src = static_cast<const char*>(op->sendbuff) + o;
    const char* in[3];
    for (int k = 0; k < nchildren; ++k) in[k] = received(*fromChild[k], bytes, scratch[k]);
    // Fold the children's partials into `out` one by one (avg divides at the root's last fold).
    auto fold = [&](char* out, int div) {
      if (nchildren == 0) copyKernel(out, nullptr, src, bytes);
      for (int k = 0; k < nchildren; ++k)
        reduceKernel(op->type, op->op, ne, in[k], k == 0 ? src : out, out, nullptr,
                     k == nchildren - 1 ? div : 0);
    };
    if (parent >= 0) {
      char* out = io.sendBuffer(*toParent, io.sendScratch);
      fold(out, 0);
      io.sendPost(*toParent, out, bytes);
    } else {
      char* dst = static_cast<char*>(op->recvbuff) + o;
      fold(dst, op->op == chorusAvg ? comm->nranks : 0);
      if (doDown) {
        for (int k = 0; k < nchildren; ++k) sendFrom(*toChild[k], dst, bytes);
        ++down;
      }
    }
    for (int k = 0; k < nchildren; ++k) fromChild[k]->release();
    ++up;
    return true;
  }

  // Broadcast-down of chunk `down` at a non-root rank: parent -> own output and children.
  bool tryDown() {
    if (down == nchunks || parent < 0) return false;
    const size_t bytes = elems(down) * esz, o = offset(down);
    if (!io.recvReady(*fromParent, bytes)) return false;
    for (int k = 0; k < nchildren; ++k)
      if (!toChild[k]->slotFree()) return false;
    const char* in = received(*fromParent, bytes, scratch[2]);
    char* dst = static_cast<char*>(op->recvbuff) + o;
    copyKernel(dst, nullptr, in, bytes);
    for (int k = 0; k < nchildren; ++k) sendFrom(*toChild[k], in, bytes);
    fromParent->release();
    ++down;
    return true;
  }

  // Broadcast at the root: own input -> children (and own output out of place).
  bool tryRootSend() {
    if (down == nchunks) return false;
    const size_t bytes = elems(down) * esz, o = offset(down);
    for (int k = 0; k < nchildren; ++k)
      if (!toChild[k]->slotFree()) return false;
    const char* src = static_cast<const char*>(op->sendbuff) + o;
    char* dst = static_cast<char*>(op->recvbuff) + o;
    if (src != dst) copyKernel(dst, nullptr, src, bytes);
    for (int k = 0; k < nchildren; ++k) sendFrom(*toChild[k], src, bytes);
    ++down;
    return true;
  }

  int someNeighbor(uint32_t k) const {
    int nb[4], m = 0;
    if (parent >= 0) nb[m++] = parent;
    for (int i = 0; i < nchildren; ++i) nb[m++] = child[i];
    return m ? nb[k % uint32_t(m)] : -1;
  }
};

void runAll(chorusComm* comm, TreeRun* runs, int nruns, bool rootSend) {
  Waiter waiter(comm, -1, opKindName(runs[0].op->kind), /*fifoWait=*/true);
  while (true) {
    bool all = true, progressed = false;
    for (int t = 0; t < nruns; ++t) {
      TreeRun& r = runs[t];
      if (r.done()) continue;
      all = false;
      while (r.tryUp()) progressed = true;
      if (rootSend && r.parent < 0)
        while (r.tryRootSend()) progressed = true;
      else
        while (r.tryDown()) progressed = true;
    }
    if (all) return;
    if (!progressed) {
      // Each health check looks at the next neighbour of the next run (all are checked in
      // turn, whatever the pauses in between).
      const uint32_t k = waiter.checks();
      waiter.setPeer(runs[k % uint32_t(nruns)].someNeighbor(k / uint32_t(nruns)));
      waiter.pause();
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

}  // namespace chorus
