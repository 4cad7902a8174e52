// Pipelined chains along the ring order, starting or ending at the root (NCCL's ring
// Broadcast / Reduce): every slot-sized chunk moves one hop per step, so after the first chunk
// reaches the end the chain delivers one chunk per step.
#include <algorithm>
#include <cstring>

#include "algo/algo.h"
#include "comm/comm.h"
#include "prims/prims.h"
#include "reduce/reduce.h"

namespace chorus {

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
  for (size_t off = w.begin; off < w.end; off += prims.chunkElems()) {
    const size_t ne = std::min(prims.chunkElems(), w.end - off), o = off * esz;
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
// n - 1 hand-offs along the chain; every rank moves the data once.
double chainHops(OpKind, const Shape& s, size_t) {
  return double(s.nranks) - 1;
}
double chainBytes(OpKind, int) {
  return 1.0;
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
    .run = entries({{OpKind::kBroadcast, chainBroadcast}, {OpKind::kReduce, chainReduce}}),
};

}  // namespace chorus
