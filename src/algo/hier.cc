// Hierarchical collectives for several nodes of P ranks each (algo/algo.h HierPlan: local index
// i of node q). They send a node's data across the network once, where a flat ring sends every
// rank's: the bytes through a node's link drop from (N-1)/N of the data to (Q-1)/Q, which is
// what the ideal-busbw model's I·(N-1)·Q / (N·(Q-1)) assumes.
//
// AllReduce:
//   A. reduce-scatter on the node's ring: local rank i ends with the node's sum of block i;
//   B. ring AllReduce of block i among the Q ranks of local index i (one per node);
//   C. allgather of the blocks on the node's ring.
// Avg sums in A and divides by nranks once, at the end of B.
//
// AllGather and ReduceScatter run a ring across nodes between the ranks of the same local index
// (the cross ring) and, for each node's blocks in turn, a ring inside the node, interleaved
// chunk by chunk: AllGather forwards every block the cross ring brings (rank (c, i)'s) to the
// node's other ranks at once; ReduceScatter first sums, on the node's ring, the blocks of node c
// that the cross ring will need next (the node's sum of rank (c, i)'s block lands in a one-chunk
// buffer) and hands that to the cross ring. The node's rings move shared-memory data while the
// cross ring's chunks are in flight (its slots hold several), so no threads are needed.
//
// AllReduce's pipelining: the data is cut into slices (hierSlices) and the three phases run on
// three threads of the rank (the caller and two of the communicator's persistent channel workers),
// slice after slice, so that the network (B) carries slice s while shared memory reduces slice s+1
// (A) and gathers slice s-1 (C). Each phase uses its own connections: A the node ring on channel 0,
// C the node ring on channel 1, B the remote peers on channel 0 (always Simple: the TCP transport
// carries no LL, net/tcp.h kTcpProtocols; the LL scratch of channel 0 is then A's alone). A phase
// waits for the one before it on the same slice through a counter; a failing phase marks the
// communicator failed, which stops the other two.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <vector>

#include "algo/algo.h"
#include "algo/channel_workers.h"
#include "base/clock.h"
#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "prims/prims.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

double hierUs(OpKind kind, Proto p, const Shape& shape, size_t bytes);

// Whether to pipeline, decided once per communicator by timing both: its first 2 x kHierSamples
// calls that could pipeline alternate between the phases one after the other (which also times
// each phase) and the pipeline, and at the last one a small ring AllReduce (max) gives every rank
// the slowest rank's fastest time per byte of each way, so all decide alike; the faster way runs
// from then on. Pipelining pays when the network phase is the long one and the CPUs can run the
// three phases at once; where the ranks (three threads each, plus the proxy) outnumber the
// cores, the phases steal each other's CPU. A threshold on the ratio of the phases' times
// (before 2026-11-29) could not tell these apart on 2 cores: 4 x 2 ranks at 1 Gbit/s measured
// ratios 7.7-8.4 and gained 5-7% from 8 slices, 8 x 2 measured 3.4-5.0 (2.2-10.3 over more
// launches) and lost 9-12%, unshaped veth measured 2.8 and lost 10-40%.
constexpr int kHierSamples = 2;

// The communicator's plan and one chunk for ReduceScatter, made once (createState); the
// AllReduce's measurements so far (shape.hierPipelined holds the decision).
struct HierState final : AlgoState {
  HierPlan plan;
  std::vector<char> chunk;                  // one Simple slot: ReduceScatter's node sum
  int samples = 0;                          // calls measured so far, both ways
  double netPerByte = 0, shmPerByte = 0;    // fastest seen (s/B), this rank: phases in turn
  double turnPerByte = 0, pipePerByte = 0;  // a whole call beyond its fixed cost, each way
};
HierState& hierState(chorusComm* comm) {
  return algoState<HierState>(comm, Algo::kHier);
}

// Whether call number `sample` of the measurement runs the pipeline (even) or the phases in
// turn. The pipeline first: the first large call starts the channel workers it needs, so that
// what the communicator keeps for large calls exists after one of them (chorus-soak's warm-up
// checks it).
bool samplePipelined(int sample) {
  return sample % 2 == 0;
}

double fastest(double seen, double now) {
  return seen > 0 ? std::min(seen, now) : now;
}

// One measured call: `callSec` the whole call, `netSec` / `shmSec` its phases (in turn only).
void samplePipeline(chorusComm* comm, bool pipelined, double callSec, double netSec, double shmSec,
                    size_t bytes) {
  HierState& st = hierState(comm);
  const double B = double(bytes);
  // The call's time per byte beyond the model's fixed part (hops, base), so that calls of
  // different sizes compare and the model can scale it.
  const double fixedSec = hierUs(OpKind::kAllReduce, Proto::kSimple, comm->shape.get(), 0) * 1e-6;
  const double perByte = std::max(callSec - fixedSec, callSec / 2) / B;
  if (pipelined) {
    st.pipePerByte = fastest(st.pipePerByte, perByte);
  } else {
    st.turnPerByte = fastest(st.turnPerByte, perByte);
    st.netPerByte = fastest(st.netPerByte, netSec / B);
    st.shmPerByte = fastest(st.shmPerByte, shmSec / B);
  }
  if (++st.samples < 2 * kHierSamples) return;
  double v[4] = {st.netPerByte, st.shmPerByte, st.turnPerByte, st.pipePerByte};
  OpDesc op{OpKind::kAllReduce, v, v, 4, chorusFloat64, chorusMax, -1, comm, nullptr};
  ringAllReduce(comm, op, Work{0, Proto::kSimple, 0, 4});
  const bool pipeline = v[3] < v[2];
  // The node phases as measured replace the model's shared-memory bandwidth in hierUs (the
  // network's time per byte comes from the link probe at init, core/net_probe.h), and the
  // faster way's whole call its bytes' time.
  comm->shape.change([&](Shape& s) {
    s.hierPipelined = pipeline;
    s.hierNodeUsPerByte = v[1] * 1e6;
    s.hierCallUsPerByte = std::min(v[2], v[3]) * 1e6;
  });
  CHORUS_INFO(comm->rank,
              "hier AllReduce: network phase %.3f ms/MiB, node phases %.3f ms/MiB; a call %.3f "
              "ms/MiB with the phases in turn, %.3f pipelined (fastest of %d each, slowest rank): "
              "%s",
              v[0] * 1e3 * 1048576, v[1] * 1e3 * 1048576, v[2] * 1e3 * 1048576,
              v[3] * 1e3 * 1048576, kHierSamples,
              pipeline ? "pipelining" : "phases one after the other");
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

// One slice: elements [first, first + count) of the operation, in P blocks of ceil(count / P)
// (the last ones shorter or empty), block k owned by local rank k.
class Slice {
 public:
  Slice(const OpDesc& op, int P, size_t first, size_t count)
      : P_(P),
        first_(first),
        count_(count),
        b_((count + size_t(P) - 1) / size_t(P)),
        esz_(chorusTypeSize(op.type)),
        send_(static_cast<const char*>(op.sendbuff)),
        recv_(static_cast<char*>(op.recvbuff)) {}
  size_t blockElems(int k) const {
    const size_t o = size_t(mod(k, P_)) * b_;
    return o < count_ ? std::min(b_, count_ - o) : 0;
  }
  // Elements of block k's piece [off, off + chunk).
  size_t pieceElems(int k, size_t off, size_t chunk) const {
    const size_t e = blockElems(k);
    return e > off ? std::min(chunk, e - off) : 0;
  }
  size_t elemOffset(int k, size_t off) const { return first_ + size_t(mod(k, P_)) * b_ + off; }
  const char* in(int k, size_t off) const { return send_ + elemOffset(k, off) * esz_; }
  char* out(int k, size_t off) const { return recv_ + elemOffset(k, off) * esz_; }
  size_t blockSize() const { return b_; }

 private:
  int P_;
  size_t first_, count_, b_, esz_;
  const char* send_;
  char* recv_;
};

// A: reduce-scatter of the slice on the node ring.
void reduceScatterSlice(Prims& prims, const HierPlan& h, const Slice& s) {
  const int P = h.P, i = h.i;
  const size_t chunk = prims.chunkElems();
  for (size_t off = 0; off < s.blockSize(); off += chunk) {
    prims.send(s.in(i - 1, off), s.pieceElems(i - 1, off, chunk));
    for (int j = 2; j < P; ++j)
      prims.recvReduceSend(s.in(i - j, off), s.pieceElems(i - j, off, chunk));
    prims.recvReduceCopy(s.in(i, off), s.out(i, off), s.pieceElems(i, off, chunk), /*final=*/false);
  }
}

// B: AllReduce of this rank's block of the slice across nodes, in place in recvbuff.
void crossSlice(chorusComm* comm, const OpDesc& op, const HierPlan& h, const Slice& s) {
  OpDesc share = op;
  share.sendbuff = share.recvbuff = s.out(h.i, 0);
  share.count = s.blockElems(h.i);
  ringAllReduceOn(comm, h.cross, h.qpos, share, Work{0, Proto::kSimple, 0, share.count});
}

// C: allgather of the slice's blocks on the node ring.
void allGatherSlice(Prims& prims, const HierPlan& h, const Slice& s) {
  const int P = h.P, i = h.i;
  const size_t chunk = prims.chunkElems();
  for (size_t off = 0; off < s.blockSize(); off += chunk) {
    char* mine = s.out(i, off);
    prims.copySend(mine, mine, s.pieceElems(i, off, chunk));
    for (int j = 1; j < P - 1; ++j)
      prims.recvCopySend(s.out(i - j, off), s.pieceElems(i - j, off, chunk));
    prims.recv(s.out(i + 1, off), s.pieceElems(i + 1, off, chunk));
  }
}

}  // namespace

void hierAllReduce(chorusComm* comm, const OpDesc& op, Proto proto) {
  const HierPlan& h = hierState(comm).plan;
  const int P = h.P;
  const size_t esz = chorusTypeSize(op.type), count = op.count;
  const chorusRedOp_t partial = op.op == chorusAvg ? chorusSum : op.op;
  if (P == 1) {
    if (op.sendbuff != op.recvbuff && count) memmove(op.recvbuff, op.sendbuff, count * esz);
    crossSlice(comm, op, h, Slice(op, 1, 0, count));
    return;
  }
  const int prev = h.local[size_t(mod(h.i - 1, P))], next = h.local[size_t(mod(h.i + 1, P))];
  // Slices of a multiple of P elements, so that only the last slice has uneven blocks.
  int nslices = hierSlices(count * esz, P);
  static const bool slicesForced = !envStr("CHORUS_HIER_SLICES").empty();
  const int sample = hierState(comm).samples;
  const bool measure = nslices > 1 && !slicesForced && sample < 2 * kHierSamples;
  if (measure ? !samplePipelined(sample) : !slicesForced && !comm->shape.get().hierPipelined)
    nslices = 1;
  const auto tCall = Clock::now();
  const size_t sliceElems =
      ((count + size_t(nslices) - 1) / size_t(nslices) + size_t(P) - 1) / size_t(P) * size_t(P);
  auto slice = [&](int s) {
    const size_t first = std::min(count, size_t(s) * sliceElems);
    return Slice(op, P, first, std::min(sliceElems, count - first));
  };

  if (nslices == 1) {
    const auto t0 = Clock::now();
    Prims rs(comm, 0, proto, prev, next, op.type, partial,
             "AllReduce(hier, intra-node reduce-scatter)");
    reduceScatterSlice(rs, h, slice(0));
    const double tA = secondsSince(t0);
    const auto t1 = Clock::now();
    crossSlice(comm, op, h, slice(0));
    const double tB = secondsSince(t1);
    const auto t2 = Clock::now();
    Prims ag(comm, 1, proto, prev, next, op.type, op.op, "AllReduce(hier, intra-node allgather)");
    allGatherSlice(ag, h, slice(0));
    if (measure)
      samplePipeline(comm, false, secondsSince(tCall), tB, tA + secondsSince(t2), count * esz);
    return;
  }

  std::atomic<int> doneA{0}, doneB{0};
  LaneFailures failures;
  auto waitFor = [&](std::atomic<int>& done, int s, const char* what) {
    if (done.load(std::memory_order_acquire) > s) return;
    Waiter w(comm, -1, what);  // watches abort and the communicator's failed state
    while (done.load(std::memory_order_acquire) <= s) w.pause();
  };
  // The three phases as lanes, as a multi-channel call runs its channels (algo/select.cc): the
  // caller runs the node's reduce-scatter (lane 0), the communicator's persistent channel workers
  // the inter-node AllReduce (1) and the node's allgather (2), so no call starts a thread. Each
  // lane's top keeps whatever it throws as a Failure and fails the communicator, which stops the
  // other lanes; nothing reaches std::terminate.
  auto lane = [&](int phase) {
    try {
      if (phase == 0) {
        Prims rs(comm, 0, proto, prev, next, op.type, partial,
                 "AllReduce(hier, intra-node reduce-scatter)");
        for (int s = 0; s < nslices; ++s) {
          reduceScatterSlice(rs, h, slice(s));
          doneA.store(s + 1, std::memory_order_release);
        }
      } else if (phase == 1) {
        for (int s = 0; s < nslices; ++s) {
          waitFor(doneA, s, "AllReduce(hier, waiting for the node's reduce-scatter)");
          crossSlice(comm, op, h, slice(s));
          doneB.store(s + 1, std::memory_order_release);
        }
      } else {
        Prims ag(comm, 1, proto, prev, next, op.type, op.op,
                 "AllReduce(hier, intra-node allgather)");
        for (int s = 0; s < nslices; ++s) {
          waitFor(doneB, s, "AllReduce(hier, waiting for the inter-node AllReduce)");
          allGatherSlice(ag, h, slice(s));
        }
      }
    } catch (...) {
      failures.failed(comm, phase, "running AllReduce(hier)");
    }
  };
  using Lane = decltype(lane);
  ChannelWorkers& workers = channelWorkers(comm);  // throws (no thread): nothing started yet
  workers.start(
      3, [](void* ctx, int phase) { (*static_cast<Lane*>(ctx))(phase); }, &lane);
  lane(0);
  workers.wait(comm->spinIters);
  failures.rethrowFirst();
  if (measure) samplePipeline(comm, true, secondsSince(tCall), 0, 0, count * esz);
}

namespace {

// The piece [o, o + ne) of rank r's block of `count` elements in `base` (AllGather's output,
// ReduceScatter's input).
template <typename T>
T* blockAt(T* base, int r, size_t count, size_t o, size_t esz) {
  return base + (size_t(r) * count + o) * esz;
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
             h.P > 1 ? h.local[size_t(mod(h.i + 1, h.P))] : -1, op.type, nodeOp, nodeName) {}
};

// One chunk's elements: the smaller of the node's and the cross ring's slots, so that both
// ends of every connection agree.
size_t hierChunk(const Prims& node, const Prims& cross, const HierPlan& h) {
  return h.P > 1 ? std::min(node.chunkElems(), cross.chunkElems()) : cross.chunkElems();
}

}  // namespace

void hierAllGather(chorusComm* comm, const OpDesc& op, Proto proto) {
  const HierPlan& h = hierState(comm).plan;
  const int P = h.P, Q = int(h.cross.size()), i = h.i, q = h.qpos;
  const size_t esz = chorusTypeSize(op.type), count = op.count;
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  HierRings rings(comm, h, op, proto, op.op, "AllGather(hier, across nodes)",
                  "AllGather(hier, intra-node)");
  Prims &cross = rings.cross, &node = rings.node;
  cross.setStreamingOutput(count * esz * size_t(comm->nranks) >= comm->streamThreshold);
  node.setStreamingOutput(count * esz * size_t(comm->nranks) >= comm->streamThreshold);
  // The node's ring passes on node c's blocks: this rank's (just received or copied) first.
  auto nodeRing = [&](int c, size_t o, size_t ne) {
    if (P == 1) return;
    node.send(blockAt(dst, h.at(c, i), count, o, esz), ne);
    for (int j = 1; j < P - 1; ++j)
      node.recvCopySend(blockAt(dst, h.at(c, i - j), count, o, esz), ne);
    node.recv(blockAt(dst, h.at(c, i + 1), count, o, esz), ne);
  };
  const size_t chunk = hierChunk(node, cross, h);
  for (size_t o = 0; o < count; o += chunk) {
    const size_t ne = std::min(chunk, count - o);
    cross.copySend(src + o * esz, blockAt(dst, h.at(q, i), count, o, esz), ne);
    nodeRing(q, o, ne);
    for (int j = 1; j < Q - 1; ++j) {
      cross.recvCopySend(blockAt(dst, h.at(mod(q - j, Q), i), count, o, esz), ne);
      nodeRing(mod(q - j, Q), o, ne);
    }
    cross.recv(blockAt(dst, h.at(mod(q + 1, Q), i), count, o, esz), ne);
    nodeRing(mod(q + 1, Q), o, ne);
  }
}

void hierReduceScatter(chorusComm* comm, const OpDesc& op, Proto proto) {
  HierState& st = hierState(comm);
  const HierPlan& h = st.plan;
  const int P = h.P, Q = int(h.cross.size()), i = h.i, q = h.qpos;
  const size_t esz = chorusTypeSize(op.type), count = op.count;
  const chorusRedOp_t partial = op.op == chorusAvg ? chorusSum : op.op;
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  HierRings rings(comm, h, op, proto, partial, "ReduceScatter(hier, across nodes)",
                  "ReduceScatter(hier, intra-node)");
  Prims &cross = rings.cross, &node = rings.node;
  // The node's sum of rank (c, i)'s piece, in the chunk buffer (this rank's own input alone on
  // a node of one rank).
  auto nodeSum = [&](int c, size_t o, size_t ne) -> const char* {
    if (P == 1) return blockAt(src, h.at(c, i), count, o, esz);
    node.send(blockAt(src, h.at(c, i - 1), count, o, esz), ne);
    for (int j = 2; j < P; ++j)
      node.recvReduceSend(blockAt(src, h.at(c, i - j), count, o, esz), ne);
    node.recvReduceCopy(blockAt(src, h.at(c, i), count, o, esz), st.chunk.data(), ne,
                        /*final=*/false);
    return st.chunk.data();
  };
  const size_t chunk = std::min(hierChunk(node, cross, h), st.chunk.size() / esz);
  for (size_t o = 0; o < count; o += chunk) {
    const size_t ne = std::min(chunk, count - o);
    cross.send(nodeSum(mod(q - 1, Q), o, ne), ne);
    for (int j = 2; j < Q; ++j) cross.recvReduceSend(nodeSum(mod(q - j, Q), o, ne), ne);
    cross.recvReduceCopy(nodeSum(q, o, ne), dst + o * esz, ne, /*final=*/true);
  }
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
// AllReduce: the network link carries 2(Q-1)/Q of the data per node, after and before
// node-local reduce-scatter / allgather over shared memory: K slices through a three-phase
// pipeline, one slice's phases in full, then the slowest phase for each further slice (the two
// shared-memory phases counted together, as they share the node's memory bandwidth). Once its
// first large calls have timed both ways, the faster one's measured time per byte instead.
// AllGather / ReduceScatter: the link carries (Q-1)/Q of the data and the node's rings (P-1)/P,
// chunk by chunk beside the cross ring's chunks in flight: the slower of the two, and a node
// ring's hand-offs after each of the cross ring's.
double hierUs(OpKind kind, Proto p, const Shape& shape, size_t bytes) {
  const MachineModel& m = machineModel();
  const int pi = int(p);
  const double S = double(bytes);
  const double Q = shape.nnodes, P = double(shape.nranks) / Q;
  const double netBw = netBwGBs(shape) * 1e3, shmBw = m.bwGBs[0] * 1e3;
  if (kind != OpKind::kAllReduce) {
    const double shmT =
        shape.hierNodeUsPerByte > 0 ? S * shape.hierNodeUsPerByte / 2 : S * (P - 1) / P / shmBw;
    const double netT = S * (Q - 1) / Q / netBw;
    return m.baseUs[pi] + Q * (P - 1) * nodeHopUs(shape, p) + (Q - 1) * netHopUs(shape) +
           std::max(shmT, netT);
  }
  const double shmT =
      shape.hierNodeUsPerByte > 0 ? S * shape.hierNodeUsPerByte : S * 2 * (P - 1) / P / shmBw;
  const double netT = S * 2 * (Q - 1) / Q / netBw;
  const int K = shape.hierPipelined ? hierSlices(bytes, int(P)) : 1;
  // Measured (its first large calls, both ways): the faster way's time per byte; else the
  // phases as modelled.
  const double dataT = shape.hierCallUsPerByte > 0
                           ? S * shape.hierCallUsPerByte
                           : (shmT + netT) / K + (K - 1.0) / K * std::max(shmT, netT);
  return m.baseUs[pi] + (K > 1 ? m.channelWakeUs : 0.0) + 2 * (P - 1) * nodeHopUs(shape, p) +
         2 * (Q - 1) * netHopUs(shape) + dataT;
}
}  // namespace

// Its slice count (so its cost) steps at every multiple of kHierMinSliceBytes.
extern const AlgoDesc kHierAlgo = {
    .name = "hier",
    .serves =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) | kindBit(OpKind::kReduceScatter),
    .protos = kAnyProto,
    .runsOn = hierRunsOn,
    .hops = hierHops,
    .byteFactor = hierBytes,
    .multiNodeUs = hierUs,
    .costStepBytes = kHierMinSliceBytes,
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
