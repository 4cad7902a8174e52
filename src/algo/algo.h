// Algorithms: each a loop over primitives (ring, chain) or a batch of point-to-point transfers.
// Each is described by one AlgoDesc (comm/plan.h) defined in its file and listed in
// algo/table.cc; the entry points below are the ones other algorithms or callers reuse.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <vector>

#include "comm/op.h"
#include "comm/plan.h"
#include "proto/proto.h"

struct chorusComm;

namespace chorus {

// a mod n in [0, n) for negative a too (ring positions).
inline int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// `count` elements of `typeSize` bytes split into `parts` blocks of whole 64-byte lines, the
// last ones shorter or empty: block i is [begin(i), begin(i + 1)). Channels, the single-copy,
// two-shot and hierarchical AllReduces' blocks all split this way.
struct LineBlocks {
  size_t count;
  size_t per;  // elements per block (a multiple of a line's elements)
  LineBlocks(size_t n, int parts, size_t typeSize) : count(n) {
    const size_t align = typeSize >= 64 ? 1 : 64 / typeSize;
    per = ((n + size_t(parts) - 1) / size_t(parts) + align - 1) / align * align;
  }
  // Blocks of exactly `perBlock` elements, whole lines or not (AllGather's and ReduceScatter's
  // blocks of the user's count: `count` is then parts * perBlock).
  LineBlocks(size_t n, size_t perBlock) : count(n), per(perBlock) {}
  size_t begin(int i) const { return per * size_t(i) < count ? per * size_t(i) : count; }
  size_t size(int i) const { return begin(i + 1) - begin(i); }
};

// Ring algorithms (algo/ring.cc).
void ringAllReduce(chorusComm* comm, const OpDesc& op, const Work& w);
// The same on any ring of ranks (`ring` in order, this rank at position `pos`).
void ringAllReduceOn(chorusComm* comm, const std::vector<int>& ring, int pos, const OpDesc& op,
                     const Work& w);
// Hierarchical AllReduce (algo/hier.cc): the hierarchical ReduceScatter of the blocks, then
// their hierarchical AllGather (LineBlocks over the ranks: every count in one pass). Needs every
// node to hold the same number of ranks.
void hierAllReduce(chorusComm* comm, const OpDesc& op, Proto proto);
// Hierarchical AllGather and ReduceScatter (algo/hier.cc): a ring across nodes between the ranks
// of one local index, each node's blocks passed on (summed) on the node's ring chunk by chunk.
void hierAllGather(chorusComm* comm, const OpDesc& op, Proto proto);
void hierReduceScatter(chorusComm* comm, const OpDesc& op, Proto proto);

// The hierarchical collectives' rings, as seen by this rank (also the link probe's,
// core/net_probe.cc): its node's ranks in ring order, its index i there, and the ranks of index i
// of every node (one per node that has that many ranks), in node order, with its place there.
struct HierPlan {
  std::vector<int> local;  // this node's ranks in ring order
  std::vector<int> cross;  // local index i of every node, in node order
  std::vector<int> grid;   // even nodes: local index k of node q at [q * P + k]; else empty
  int P = 1, i = 0, qpos = 0;
  int at(int q, int k) const { return grid[size_t(q * P + mod(k, P))]; }
};
HierPlan hierPlan(const chorusComm* comm);

// The halving-doubling's and the recursive doubling's network bytes per byte of an AllReduce on
// the most loaded node's link, summed over their steps (algo/halving_doubling.cc), for ranks on
// the nodes `nodeAtPos` gives in ring order (Shape::hdNetBytes, rdNetBytes).
struct DoublingLoads {
  double hd, rd;
};
DoublingLoads doublingLinkLoads(const std::vector<int>& nodeAtPos, int nnodes);

void ringAllGather(chorusComm* comm, const OpDesc& op, const Work& w);
void ringReduceScatter(chorusComm* comm, const OpDesc& op, const Work& w);
// Pipelined chains along the ring (algo/chain.cc).
void chainBroadcast(chorusComm* comm, const OpDesc& op, const Work& w);
void chainReduce(chorusComm* comm, const OpDesc& op, const Work& w);
// Double binary tree AllReduce (algo/tree.cc): tree t runs on channel t over its half of the
// data; both halves progress in one loop. Single-tree Broadcast / Reduce rooted at op.root.
void treeAllReduce(chorusComm* comm, const OpDesc& op, Proto proto);
// The bytes of the tree AllReduce the link probe times across nodes (Shape::netTreeUs): the
// smallest call cut into the most chunks, 2(Dn + P) a tree of 512 bytes.
size_t treeProbeBytes(const Shape& shape);
void treeBroadcast(chorusComm* comm, const OpDesc& op, const Work& w);
void treeReduce(chorusComm* comm, const OpDesc& op, const Work& w);

// The lanes of one call that run at once (a multi-channel call's channels, the hierarchical
// AllReduce's phases): each lane's top calls failed() in its catch block, which keeps the first
// failure and fails the communicator (so the other lanes stop); after they have all ended,
// rethrowFirst() throws it on the calling thread. Nothing is allocated unless a lane fails.
struct LaneFailures {
  static constexpr int kMaxLanes = 64;
  std::exception_ptr errors[kMaxLanes];
  std::atomic<int> first{-1};
  void failed(chorusComm* comm, int lane, const char* doing) noexcept;  // in a catch block
  void rethrowFirst() const;
};

// How a call writes its Simple slots (Prims::setStreamingSlots), by its size as the benchmarks
// count it (AllGather and ReduceScatter: every rank's block): with streaming stores from
// CHORUS_SLOT_STREAM_THRESHOLD (unset: never); else, from CHORUS_SLOT_STREAM_BY_LINK (64 KiB;
// 0: never), as each link's receiver asks; below, through the cache. Each rank decides for its own
// sends: the receiver reads a slot the same way however it was written. A streamed slot leaves no
// line in the writer's cache, so the reader fetches it from memory: where the two cores share no
// cache (another die or socket) that is several times faster than from the writer's cache, where
// they share one it is slower. Measured on 2 ranks on this project's VM, whose two vCPUs change
// between the two placements for seconds at a time (docs/performance.md, "Why the medians
// spread"): from 64 KiB the ring's AllReduce, AllGather and ReduceScatter took 2-7x less time
// streamed without a shared cache, and 1.3-2x more at 512 KiB-8 MiB with one (torch's all_reduce
// 1.4-2x at 512 KiB-128 MiB). So the link chooses: a receiver that waited for a post times it
// from the sender's time stamp (transport/fifo.h RecvConn::noteHandoff; 45-130 ns on this VM with
// a shared cache, a median of 230-280 without) and asks for streamed slots while they are slow.
// Not with more ranks than CPUs (chorusComm::slotStreamByLink): neighbours taking turns on one
// core pass a cached slot through that core's cache (streamed, 4 ranks on 2 cores: 1.5-2x
// slower), and their waits yield, which times nothing.
SlotStreaming slotStreaming(const chorusComm* comm, const OpDesc& op);

// One-shot AllReduce (algo/oneshot.cc): every rank publishes its input once in its segment and
// reduces every rank's input, in rank order, into its output: one hand-off, and bit-identical
// results on every rank. Same node only, at most kOneShotMaxBytes (transport/segment.h).
void oneShotAllReduce(chorusComm* comm, const OpDesc& op);
void twoShotAllReduce(chorusComm* comm, const OpDesc& op);
// The same one hand-off for AllGather (every rank's block fits a slot), Broadcast and
// ReduceScatter (the whole input fits a slot): tune/tuner.h slotLimit.
void oneShotAllGather(chorusComm* comm, const OpDesc& op);
void oneShotBroadcast(chorusComm* comm, const OpDesc& op);
void oneShotReduceScatter(chorusComm* comm, const OpDesc& op);

// Single-copy Broadcast and AllGather on one node (algo/copy.cc): every rank reads what it needs
// straight from the buffers of the ranks that hold it (cross-memory attach between processes,
// memcpy between threads), then all wait until every peer has read. Falls back to the FIFO
// algorithm, on every rank together, where the kernel refuses cross-memory attach.
void cmaBroadcast(chorusComm* comm, const OpDesc& op);
void cmaAllGather(chorusComm* comm, const OpDesc& op);
// Single-copy AllReduce: each rank reduces its block of every rank's input (read through
// scratch) and then reads the other ranks' reduced blocks.
void cmaAllReduce(chorusComm* comm, const OpDesc& op);

// Point-to-point (algo/p2p.cc): every transfer of the batch (comm/op.h P2PTransfer) progresses
// together, so no call order can deadlock. Transfers to the same peer keep their order.
void runP2P(chorusComm* comm, const std::vector<P2PTransfer>& transfers, const char* what);
// The point-to-point state (Algo::kDirect's row: algoState<P2PState>): batches kept from call
// to call, so that a batch no larger than an earlier one allocates nothing. Shared by the
// callers that build a batch (core/exec.cc, algo/p2p_collectives.cc) and runP2P.
struct P2PState final : AlgoState {
  std::vector<P2PTransfer> ops;           // a group's sends and receives (core/exec.cc)
  std::vector<P2PTransfer> batch;         // a direct collective's transfers (p2p_collectives.cc)
  std::vector<int32_t> next;              // per transfer: the next one to the same peer/direction
  std::vector<size_t> done;               // per transfer: bytes moved so far
  std::vector<int32_t> head[2], tail[2];  // [send, recv][peer]: first / last pending, -1: none
  std::vector<int32_t> any;               // the batch's any-source receives, in issue order
  int anyStart = 0;                       // the peer an any-source match looks at first
};
// Direct algorithms built on runP2P: AlltoAll, Gather, Scatter (algo/p2p_collectives.cc).
void directCollective(chorusComm* comm, const OpDesc& op);
// The unpipelined ring of the naive-ring study (algo/naive.cc).
void naiveAllReduce(chorusComm* comm, const OpDesc& op);

// The algorithm table (algo/table.cc); an algorithm's index in it is its Algo value.
extern const AlgoDesc* const kAlgoTable[];
extern const int kNumAlgoTable;
// Cost-term helpers the descriptors share.
inline bool oneNodeOnly(OpKind, const Shape& s) {
  return s.nnodes == 1 && s.nranks > 1;
}
constexpr uint16_t kindBit(OpKind k) {
  return uint16_t(1u << int(k));
}
constexpr uint8_t kSimpleOnly = 1u << int(Proto::kSimple);
// AlgoDesc::run from {kind, entry} pairs.
struct KindEntry {
  OpKind kind;
  AlgoEntry run;
};
constexpr AlgoEntries entries(std::initializer_list<KindEntry> list) {
  AlgoEntries e;
  for (const KindEntry& k : list) e.of[int(k.kind)] = k.run;
  return e;
}
constexpr uint8_t kAnyProto = (1u << kNumProtos) - 1;

// Runs one collective (not send/recv) to completion with the algorithm chosen for it.
void runCollective(const OpDesc& op);

// The communicator's algorithm state (algo/table.cc): createAlgoStates makes every table row's
// state (AlgoDesc::createState) and the primitives' per-channel scratch, once, when the
// transport is up (init), so that no call allocates them; destroyAlgoStates stops the channel
// workers and frees it all (freeComm; safe on a communicator whose init failed part way).
void createAlgoStates(chorusComm* comm);
void destroyAlgoStates(chorusComm* comm);

}  // namespace chorus
