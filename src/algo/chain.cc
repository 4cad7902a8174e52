// Pipelined chains along the ring order, starting or ending at the root (NCCL's ring
// Broadcast / Reduce): every slot-sized chunk moves one hop per step, so after the first chunk
// reaches the end the chain delivers one chunk per step.
#include <algorithm>
#include <cstring>

#include "algo/algo.h"
#include "comm/comm.h"
#include "prims/prims.h"
#include "reduce/reduce.h"
#include "tune/tuner.h"

namespace chorus {

// The Simple protocol's chunk on one node with a core per rank: 32 KiB, a part of the slot (128
// KiB by default), so that a chunk the sender just wrote is still in its L1 (48 KiB per core here)
// and the two copies (into the slot, out of it) overlap in finer steps. Measured on 2 ranks,
// 2026-11-28, in-place Broadcast, 3 launches each (`CHORUS_BUFFSIZE` unchanged): 512 KiB 21-26
// -> 9-12 µs, 2 MiB 38-111 -> 44-52 µs, 8 MiB 178-455 -> 174-215 µs, 32 MiB 2646-2655 ->
// 1379-1623 µs (16 and 64 KiB: alike or worse at 32 MiB). On an oversubscribed node every
// hand-off may cost a switch of the core, and the slot-sized chunk is kept (3 and 4 ranks on 2
// cores were 1.1-1.5x slower with 32 KiB), and so across nodes (a TCP frame per chunk).
constexpr size_t kChainChunkBytes = 32 << 10;

// root -> root+1 -> ... -> root-1.
void chainBroadcast(chorusComm* comm, const OpDesc& op, const Work& w) {
  const int n = comm->nranks, r = comm->ringPos[size_t(comm->rank)];
  const auto& ring = comm->ring;
  const size_t esz = chorusTypeSize(op.type);
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  const int pos = mod(r - comm->ringPos[size_t(op.root)], n);  // 0 = root, n-1 = chain end
  Prims prims(comm, w.channel, w.proto, pos == 0 ? -1 : ring[size_t(mod(r - 1, n))],
              pos == n - 1 ? -1 : ring[size_t(mod(r + 1, n))], op.type, op.op, "Broadcast");
  prims.setStreamingSlots(slotStreaming(comm, op));
  // Every rank of the chain takes the same steps (the receiver checks each chunk's size): the
  // shape is the same on every rank.
  const Shape& shape = comm->shape.get();
  const size_t step =
      w.proto == Proto::kSimple && shape.nnodes == 1 && !shape.oversubscribed
          ? std::max<size_t>(1, std::min(prims.chunkElems(), kChainChunkBytes / esz))
          : prims.chunkElems();
  for (size_t off = w.begin; off < w.end; off += step) {
    const size_t ne = std::min(step, w.end - off), o = off * esz;
    if (pos == 0)
      prims.copySend(src + o, dst + o, ne);
    else if (pos == n - 1)
      prims.recv(dst + o, ne);
    else
      prims.recvCopySend(dst + o, ne);
  }
}

// root+1 -> root+2 -> ... -> root: each hop adds its contribution; the root finishes.
void chainReduce(chorusComm* comm, const OpDesc& op, const Work& w) {
  const int n = comm->nranks, r = comm->ringPos[size_t(comm->rank)];
  const auto& ring = comm->ring;
  const size_t esz = chorusTypeSize(op.type);
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  const int pos = mod(r - comm->ringPos[size_t(op.root)] - 1, n);  // 0 = start, n-1 = root
  Prims prims(comm, w.channel, w.proto, pos == 0 ? -1 : ring[size_t(mod(r - 1, n))],
              pos == n - 1 ? -1 : ring[size_t(mod(r + 1, n))], op.type, op.op, "Reduce");
  prims.setStreamingSlots(slotStreaming(comm, op));
  for (size_t off = w.begin; off < w.end; off += prims.chunkElems()) {
    const size_t ne = std::min(prims.chunkElems(), w.end - off), o = off * esz;
    if (pos == 0)
      prims.send(src + o, ne);
    else if (pos == n - 1)
      prims.recvReduceCopy(src + o, dst + o, ne, /*final=*/true);
    else
      prims.recvReduceSend(src + o, ne);
  }
}

namespace {
// n - 1 hand-offs along the chain; every rank moves the data once. A Broadcast on one node
// overlaps back-to-back calls as the eager ring does (algo/oneshot.cc): the root and each rank
// forward a call and go on to the next while it travels down the chain, so a call costs a rank
// about 1.5 hand-offs, not n - 1 (measured at 8 and 16 ranks on 16 cores: 0.67-0.80 us for
// 512 B, where 15 hand-offs are 8.5 us; the tree, modelled at its depth, took 1.8-3.5 us;
// scripts/device_probe.sh on the GPU machine, 2026-11-28). A Reduce overlaps so too (its far end
// sends and goes on to the next call; every other rank forwards as it receives), which is what
// sets its time where ranks share cores: there each core runs its ranks in turn once per call,
// whatever the chain's length (the fits on 2 cores: 8 ranks' 8 B Reduce took 2.25x the 4 ranks',
// with twice the ranks per core and 7 hand-offs against 3; 3 unpinned ranks 0.87-0.98x 4 ranks',
// where n - 1 hand-offs had predicted 0.5x). With a core each, a Reduce's overlap is not measured
// yet (the GPU machine's 16 cores are the place), so there it keeps its n - 1 hand-offs. (On
// one node only: across nodes chainNetUs below models the whole call.)
double chainHops(OpKind kind, const Shape& s, size_t) {
  const double hops = double(s.nranks) - 1;
  const bool overlaps = kind == OpKind::kBroadcast || (kind == OpKind::kReduce && s.oversubscribed);
  return overlaps ? std::min(hops, 1.5) : hops;
}
double chainBytes(OpKind, int) {
  return 1.0;
}
// The chain's ranks move unequal shares, counted in bytes read and written per byte of the
// operation: the Broadcast's root and last rank read and write the data once (2 each), a rank
// between reads it once and writes it twice (its output and the next rank's slots: 3); the
// Reduce's first rank 2, every other reads two inputs and writes one (3). Nothing holds the
// ranks in lockstep (the chunks stream), so ranks that share cores spread their work over them:
// the busiest core copies the larger of the total over the cores and one rank between's share.
// (3 ranks on 2 cores copy 0.7 times what 4 do, as measured: 0.66-0.76 on 2026-12-04; the
// busiest core's rank count, 2 for both, had predicted 1.) With a core each, the 2 ranks' share:
// a rank between moves 1.5 times an end's bytes there too, but neither the chain nor the tree
// (which has no such term) was measured on more cores than 2, so their choice there stays the
// one the 2 ranks' fits make.
double chainCoreWork(OpKind kind, int ranks, int cores) {
  if (ranks < 2) return 1.0;
  const double two = kind == OpKind::kBroadcast ? 2.0 : 3.0;  // 2 ranks: an end's share
  if (cores <= 0 || cores >= ranks) return two;
  const double total = (kind == OpKind::kBroadcast ? 4.0 : 5.0) + 3.0 * (ranks - 2);
  return std::max(total / cores, ranks > 2 ? 3.0 : two);
}
// Across nodes, back-to-back calls overlap along the chain as on one node: the root (a
// Reduce's far end) sends a call and goes on, every rank forwards as it receives, so a call
// costs the pipeline's rate, which the link probe measures (Shape::netPipeUs, netReducePipeUs:
// 15-90 us per call on 4-8 emulated nodes of 1-2 ranks, where a hop took 60-510), or its bytes
// at the link's rate, whichever is more: the message costs of one call overlap the next one's
// bytes. The tree, whose hops the model counts in full, took 1.7-12x the chain's time there from
// 2 KiB, back to back and one call at a time alike; at 8-512 B the two are level
// (docs/scaling.md, "Broadcast and Reduce across nodes").
double chainNetUs(OpKind kind, Proto p, const Shape& s, size_t bytes) {
  const MachineModel& m = machineModel();
  const double bw = std::min(netBwGBs(s), m.bwGBs[int(p)]) * 1e3;
  return m.baseUs[int(p)] + std::max(netPipeUs(s, kind), double(bytes) / bw);
}
}  // namespace

extern const AlgoDesc kChainAlgo = {
    .name = "chain",
    .serves = kindBit(OpKind::kBroadcast) | kindBit(OpKind::kReduce),
    .protos = kAnyProto,
    .channels = true,
    .fallbackFor = kindBit(OpKind::kBroadcast) | kindBit(OpKind::kReduce),
    .hops = chainHops,
    .byteFactor = chainBytes,
    .coreWork = chainCoreWork,
    .multiNodeUs = chainNetUs,
    .run = entries({{OpKind::kBroadcast, chainBroadcast}, {OpKind::kReduce, chainReduce}}),
};

}  // namespace chorus
