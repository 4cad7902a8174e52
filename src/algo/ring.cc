// Ring AllReduce, AllGather and ReduceScatter on one channel (NCCL's internals).
//
// AllReduce processes the channel's elements in loops of nranks chunks; in each loop chunk k
// covers [off + k*real, off + (k+1)*real) where real = min(slot elements, ceil(remaining /
// nranks)). Rank r sends to r+1 and receives from r-1. Step 0: rank r sends chunk r-1; at step
// j it receives chunk r-j from r-1 (sent one step earlier), so after nranks-1 reduce steps rank
// r holds the full reduction of chunk r; the allgather half then circulates the reduced chunks
// for nranks-1 more steps: 2(nranks-1) transfers in 2k-1 steps. Both ends of every transfer
// compute the same chunk size, so empty chunks are skipped by both.
#include <algorithm>
#include <cstring>

#include "algo/algo.h"
#include "comm/comm.h"
#include "prims/prims.h"
#include "reduce/reduce.h"
#include "tune/tuner.h"

namespace chorus {

// Positions on the ring (comm->ring: nodes contiguous, so the ring crosses each node boundary
// once): data chunks are indexed by position; AllGather / ReduceScatter blocks by owner rank.

void ringAllReduce(chorusComm* comm, const OpDesc& op, const Work& w) {
  ringAllReduceOn(comm, comm->ring, comm->ringPos[size_t(comm->rank)], op, w);
}

void ringAllReduceOn(chorusComm* comm, const std::vector<int>& ring, int r, const OpDesc& op,
                     const Work& w) {
  const int n = int(ring.size());
  if (n == 1) {
    const size_t esz = chorusTypeSize(op.type);
    if (op.sendbuff != op.recvbuff && w.end > w.begin)
      memmove(static_cast<char*>(op.recvbuff) + w.begin * esz,
              static_cast<const char*>(op.sendbuff) + w.begin * esz, (w.end - w.begin) * esz);
    return;
  }
  Prims prims(comm, w.channel, w.proto, ring[size_t(mod(r - 1, n))], ring[size_t(mod(r + 1, n))],
              op.type, op.op, "AllReduce");
  const size_t esz = chorusTypeSize(op.type);
  prims.setStreamingOutput(op.count * esz >= comm->streamThreshold);
  prims.setStreamingSlots(slotStreaming(comm, op));
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  const size_t end = w.end, maxChunk = prims.chunkElems();
  for (size_t off = w.begin; off < end;) {
    const size_t real = std::min(maxChunk, (end - off + size_t(n) - 1) / size_t(n));
    auto at = [&](int k, size_t* elems) {
      size_t o = off + size_t(k) * real;
      *elems = o < end ? std::min(real, end - o) : 0;
      return o * esz;
    };
    size_t ne;
    size_t o = at(mod(r - 1, n), &ne);
    prims.send(src + o, ne);
    for (int j = 2; j < n; ++j) {
      o = at(mod(r - j, n), &ne);
      prims.recvReduceSend(src + o, ne);
    }
    o = at(r, &ne);
    prims.recvReduceCopySend(src + o, dst + o, ne, /*final=*/true);
    for (int j = 1; j < n - 1; ++j) {
      o = at(mod(r - j, n), &ne);
      prims.recvCopySend(dst + o, ne);
    }
    o = at(mod(r + 1, n), &ne);
    prims.recv(dst + o, ne);
    off += real * size_t(n);
  }
}

// AllGather: block k of the output is rank k's input; it travels k -> k+1 -> ... in slot-sized
// pieces. In place (NCCL): sendbuff == recvbuff + rank * count.
void ringAllGather(chorusComm* comm, const OpDesc& op, const Work& w) {
  const int n = comm->nranks, r = comm->ringPos[size_t(comm->rank)];
  const auto& ring = comm->ring;
  const size_t esz = chorusTypeSize(op.type), blockBytes = op.count * esz;
  char* dst = static_cast<char*>(op.recvbuff);
  const char* src = static_cast<const char*>(op.sendbuff);
  auto block = [&](int pos) { return dst + size_t(ring[size_t(mod(pos, n))]) * blockBytes; };
  Prims prims(comm, w.channel, w.proto, ring[size_t(mod(r - 1, n))], ring[size_t(mod(r + 1, n))],
              op.type, op.op, "AllGather");
  prims.setStreamingOutput(op.count * esz * size_t(n) >= comm->streamThreshold);
  prims.setStreamingSlots(slotStreaming(comm, op));
  for (size_t off = w.begin; off < w.end; off += prims.chunkElems()) {
    const size_t ne = std::min(prims.chunkElems(), w.end - off), o = off * esz;
    prims.copySend(src + o, block(r) + o, ne);
    for (int j = 1; j < n - 1; ++j) prims.recvCopySend(block(r - j) + o, ne);
    prims.recv(block(r + 1) + o, ne);
  }
}

// ReduceScatter: rank k ends with the reduction of block k; block k starts at rank k+1 and is
// reduced along the ring, reaching k last. In place (NCCL): recvbuff == sendbuff + rank*count.
void ringReduceScatter(chorusComm* comm, const OpDesc& op, const Work& w) {
  const int n = comm->nranks, r = comm->ringPos[size_t(comm->rank)];
  const auto& ring = comm->ring;
  const size_t esz = chorusTypeSize(op.type), blockBytes = op.count * esz;
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  auto block = [&](int pos) { return src + size_t(ring[size_t(mod(pos, n))]) * blockBytes; };
  Prims prims(comm, w.channel, w.proto, ring[size_t(mod(r - 1, n))], ring[size_t(mod(r + 1, n))],
              op.type, op.op, "ReduceScatter");
  prims.setStreamingOutput(op.count * esz * size_t(n) >= comm->streamThreshold);
  prims.setStreamingSlots(slotStreaming(comm, op));
  for (size_t off = w.begin; off < w.end; off += prims.chunkElems()) {
    const size_t ne = std::min(prims.chunkElems(), w.end - off), o = off * esz;
    prims.send(block(r - 1) + o, ne);
    for (int j = 2; j < n; ++j) prims.recvReduceSend(block(r - j) + o, ne);
    prims.recvReduceCopy(block(r) + o, dst + o, ne, /*final=*/true);
  }
}

namespace {
// 2(n - 1) hand-offs for AllReduce (2k - 1 steps), n - 1 for AllGather / ReduceScatter; each
// rank moves (n - 1)/n of the data each way (twice for AllReduce).
double ringHops(OpKind kind, const Shape& s, size_t) {
  const double nn = double(s.nranks);
  return kind == OpKind::kAllReduce ? 2.0 * (nn - 1) : nn - 1;
}
double ringBytes(OpKind kind, int n) {
  const double nn = double(n);
  return kind == OpKind::kAllReduce ? 2.0 * (nn - 1) / nn : (nn - 1) / nn;
}
// Across nodes: a node's ranks sit together on the ring, so Q of its n edges cross the network
// and the others stay inside a node. No step waits for the whole ring, only for the one before
// it on the previous rank, so the critical path runs its steps along consecutive edges: Q/n of
// them network hops, the rest node hand-offs (16 nodes of 8 ranks: 127 AllGather steps are 16
// network and 111 node hand-offs, as the hierarchical one's 15 and 112).
double ringNetHopsUs(OpKind kind, Proto p, const Shape& s, size_t bytes, double) {
  const double n = double(s.nranks), q = double(std::max(s.nnodes, 1));
  return ringHops(kind, s, bytes) * (q * netHopUs(s) + (n - q) * nodeHopUs(s, p)) / n;
}

}  // namespace

extern const AlgoDesc kRingAlgo = {
    .name = "ring",
    .serves =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) | kindBit(OpKind::kReduceScatter),
    .protos = kAnyProto,
    .channels = true,
    .fallbackFor =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) | kindBit(OpKind::kReduceScatter),
    .hops = ringHops,
    .byteFactor = ringBytes,
    .netHopsUs = ringNetHopsUs,
    .run = entries({{OpKind::kAllReduce, ringAllReduce},
                    {OpKind::kAllGather, ringAllGather},
                    {OpKind::kReduceScatter, ringReduceScatter}}),
};

}  // namespace chorus
