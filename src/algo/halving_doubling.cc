// Recursive halving-doubling AllReduce (the reduce-scatter / allgather form Gloo and MPI use at
// mid sizes between nodes): log2(p) exchanges instead of the ring's 2(n - 1) steps, with the
// ring's (n - 1)/n of the data moved each way.
//
// Ranks are taken in ring order (comm->ring: every node's ranks contiguous), so that the first
// halving steps, which move the most data, pair ranks of one node, and only the last, small
// ones cross nodes (the doubling steps in the reverse order).
//
//   n = p + e with p the largest power of two <= n. Positions 2i and 2i + 1 (i < e) pair up:
//   the even one folds its input into the odd one and takes no further part until the end; the
//   p ranks left (virtual ids v: position 2v + 1 for v < e, v + e after) run:
//   halving, step s = 0, 1, ..., log2(p) - 1: the partner is v ^ 2^s; both hold the same region
//     (the elements v shares with its partner after steps 0..s-1), split it in two halves at
//     the same line-aligned point; v keeps the lower half when bit s of v is 0, sends the other
//     half and reduces the partner's copy of its kept half into its output. After the last step
//     v holds the full reduction of its own region (avg divides there, once);
//   doubling, s = log2(p) - 1, ..., 0: v sends its region to v ^ 2^s and receives the partner's,
//     so both then hold the region of step s;
//   the odd rank of each folded pair finally sends the whole result to its even partner.
// Every element is reduced at exactly one rank and copied from there, so all ranks end with
// bit-identical results.
//
// Each exchange runs on channel 0 through the primitives (shared-memory or TCP FIFOs alike): per
// chunk, send first, then receive. Both partners send their next chunk before waiting for the
// partner's, so a FIFO of any depth never deadlocks; both ends compute the same chunk sizes.
//
// Recursive doubling ("rd", below) is the small-message form (MPICH's for short AllReduce): the
// same partners and folds, but every exchange swaps the whole vector and both partners reduce
// it, so log2(p) exchanges in all instead of 2 log2(p), each moving all the data. Across nodes
// that halves the network hand-offs of a small AllReduce. Its AllGather doubles the blocks each
// rank holds at every exchange: log2(p) network-crossing steps where the rings take n - 1. Its
// ReduceScatter is the recursive halving: the halving steps alone, on the blocks reordered so
// that each rank ends on its own.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "algo/algo.h"
#include "comm/comm.h"
#include "prims/prims.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

constexpr int kMaxSteps = 32;  // log2 of the largest power of two <= INT_MAX, plus one

struct Region {
  size_t lo, hi;
  size_t size() const { return hi - lo; }
};

// Across nodes the tuner picks the recursive doubling and halving unnamed up to this many bytes
// (rdUnnamedBelow; why 128 KiB is said at hdUnnamedBelow), and
// the recursive halving's scratch (RdState) holds that much: its size limit, forced or not.
constexpr size_t kDoublingMaxBytes = size_t(128) << 10;
// The halving-doubling AllReduce across nodes, unnamed (hdUnnamedBelow).
constexpr size_t kHdNetMaxBytes = size_t(512) << 10;

// The largest power of two <= n (n >= 1) and its log2.
int floorLog2(int n) {
  return 31 - __builtin_clz(unsigned(n));
}

// One exchange with `partner`: sends `out` of `src` and receives `in`, either reduced with `src`
// into `dst` (reduce: the halving steps and the fold) or copied into `dst`. Either may be empty.
void exchange(chorusComm* comm, const OpDesc& op, Proto proto, int partner, const char* src,
              Region out, char* dst, Region in, bool reduce, bool final, const char* what) {
  Prims prims(comm, 0, proto, in.size() ? partner : -1, out.size() ? partner : -1, op.type, op.op,
              what);
  prims.setStreamingSlots(slotStreaming(comm, op));
  const size_t esz = chorusTypeSize(op.type), chunk = prims.chunkElems();
  size_t so = out.lo, ro = in.lo;
  while (so < out.hi || ro < in.hi) {
    if (so < out.hi) {
      const size_t ne = std::min(chunk, out.hi - so);
      prims.send(src + so * esz, ne);
      so += ne;
    }
    if (ro < in.hi) {
      const size_t ne = std::min(chunk, in.hi - ro);
      if (reduce)
        prims.recvReduceCopy(src + ro * esz, dst + ro * esz, ne, final);
      else
        prims.recv(dst + ro * esz, ne);
      ro += ne;
    }
  }
}

// The ring position of virtual rank u when `extra` ranks fold (the file's header).
int virtualPos(int u, int extra) {
  return u < extra ? 2 * u + 1 : u + extra;
}

// Where this rank stands among the exchanges (the file's header): n = p + e, p = 2^k; positions
// 2i and 2i + 1 (i < e) are folded pairs, the even one (foldsAway) handing its data to the odd one
// (foldsIn) and taking the result back; the p others take part as virtual ranks v.
struct Doubling {
  const std::vector<int>& ring;
  int k, p, extra, pos, v;
  bool foldsAway, foldsIn;
  explicit Doubling(const chorusComm* comm)
      : ring(comm->ring),
        k(floorLog2(comm->nranks)),
        p(1 << k),
        extra(comm->nranks - p),
        pos(comm->ringPos[size_t(comm->rank)]),
        v(pos < 2 * extra ? pos / 2 : pos - extra),
        foldsAway(pos < 2 * extra && pos % 2 == 0),
        foldsIn(pos < 2 * extra && pos % 2 == 1) {}
  // The other rank of this rank's folded pair (foldsAway or foldsIn).
  int pairPartner() const { return ring[size_t(foldsAway ? pos + 1 : pos - 1)]; }
  // The rank of virtual rank u, and v's partner at step s.
  int rankOf(int u) const { return ring[size_t(virtualPos(u, extra))]; }
  int partner(int s) const { return rankOf(v ^ (1 << s)); }
};

// `what` names the call in failures (recursive doubling hands floating max and min to it).
void halvingDoublingAllReduce(chorusComm* comm, const OpDesc& op, const Work& w,
                              const char* what = "AllReduce(halving-doubling)") {
  const Doubling d(comm);
  const char* send = static_cast<const char*>(op.sendbuff);
  char* recv = static_cast<char*>(op.recvbuff);
  const size_t esz = chorusTypeSize(op.type), count = op.count;
  const Region all{0, count}, none{0, 0};
  const int k = d.k, v = d.v;

  // Folded pairs: the even position hands its input to the odd one and waits for the result.
  if (d.foldsAway) {
    exchange(comm, op, w.proto, d.pairPartner(), send, all, recv, none, false, false, what);
    exchange(comm, op, w.proto, d.pairPartner(), send, none, recv, all, false, false, what);
    return;
  }
  const char* cur = send;  // where this rank's partial sums are: the input until the first fold
  if (d.foldsIn) {
    exchange(comm, op, w.proto, d.pairPartner(), send, none, recv, all, true, false, what);
    cur = recv;
  }

  // Halving: region[s] is what v and its step-s partner share; region[k] is v's own.
  const size_t align = esz >= 64 ? 1 : 64 / esz;
  Region region[kMaxSteps + 1];
  region[0] = all;
  for (int s = 0; s < k; ++s) {
    const Region r = region[s];
    const size_t half = std::min(r.size(), ((r.size() + 1) / 2 + align - 1) / align * align);
    const Region lower{r.lo, r.lo + half}, upper{r.lo + half, r.hi};
    const bool keepLower = ((v >> s) & 1) == 0;
    region[s + 1] = keepLower ? lower : upper;
    exchange(comm, op, w.proto, d.partner(s), cur, keepLower ? upper : lower, recv, region[s + 1],
             true, s == k - 1, what);
    cur = recv;
  }
  // k >= 1 (n >= 2), so the result is in recv. Doubling: hand v's region to the partner, take
  // the partner's half of the step-s region.
  for (int s = k - 1; s >= 0; --s) {
    const Region mine = region[s + 1], parent = region[s];
    const Region theirs =
        mine.lo == parent.lo ? Region{mine.hi, parent.hi} : Region{parent.lo, mine.lo};
    exchange(comm, op, w.proto, d.partner(s), recv, mine, recv, theirs, false, false, what);
  }
  if (d.foldsIn)
    exchange(comm, op, w.proto, d.pairPartner(), recv, all, recv, none, false, false, what);
}

// Recursive doubling: after the folds, exchange s swaps the whole partial result with v ^ 2^s and
// both reduce it (in OP mine); the last exchange divides for avg. IEEE addition and
// multiplication are commutative bit for bit, so both partners, and in the end every rank, hold
// the same bits. max and min of floating types are not (max(-0, +0) is the first operand, as
// std::max), so those run the halving-doubling exchanges, where each element is reduced at one
// rank: the result every rank ends with stays the same bits.
bool bitIdenticalBothWays(const OpDesc& op) {
  if (op.op != chorusMax && op.op != chorusMin) return true;
  return op.type != chorusFloat16 && op.type != chorusFloat32 && op.type != chorusFloat64 &&
         op.type != chorusBfloat16;
}

void recursiveDoublingAllReduce(chorusComm* comm, const OpDesc& op, const Work& w) {
  const char* what = "AllReduce(recursive doubling)";
  if (!bitIdenticalBothWays(op)) return halvingDoublingAllReduce(comm, op, w, what);
  const Doubling d(comm);
  const char* send = static_cast<const char*>(op.sendbuff);
  char* recv = static_cast<char*>(op.recvbuff);
  const Region all{0, op.count}, none{0, 0};

  if (d.foldsAway) {  // hand the input over, take the result back
    exchange(comm, op, w.proto, d.pairPartner(), send, all, recv, none, false, false, what);
    exchange(comm, op, w.proto, d.pairPartner(), send, none, recv, all, false, false, what);
    return;
  }
  const char* cur = send;
  if (d.foldsIn) {
    exchange(comm, op, w.proto, d.pairPartner(), send, none, recv, all, true, false, what);
    cur = recv;
  }
  // In place after the first exchange: each chunk is sent before the partner's copy of it is
  // reduced into it (exchange's order), so what leaves is always the previous step's.
  for (int s = 0; s < d.k; ++s) {
    exchange(comm, op, w.proto, d.partner(s), cur, all, recv, all, true, s == d.k - 1, what);
    cur = recv;
  }
  if (d.foldsIn)
    exchange(comm, op, w.proto, d.pairPartner(), recv, all, recv, none, false, false, what);
}

// Recursive doubling AllGather: the same partners and folds. The even position of a folded pair
// hands its block to the odd one first and gets every block from it last; exchange s swaps with
// v ^ 2^s the blocks of the 2^s virtual ranks whose blocks v holds (its group, aligned to 2^s),
// so the blocks held double at each step: log2(p) exchanges where the ring takes n - 1 hand-offs.
// Blocks are the ranks' (rank r's at r * count of the output); a virtual rank w stands for ring
// positions 2w and 2w + 1 when w < e (folded), else w + e. A group's blocks move as runs: the
// blocks of consecutive positions whose ranks follow one another are contiguous in the output
// and go as one stream of chunks (the whole group at once where the ring is in rank order), so a
// step of small blocks is one message, not one per block. Both partners walk the same group
// through the same ring: the same runs and chunks.
struct GroupCursor {
  int w, wEnd, extra, sub = 0;  // the virtual rank, the group's end, e; the position within w
  size_t off = 0;               // elements of the current run already moved
  size_t runBlocks = 0;         // blocks in the current run (0: not found yet)
  int runRank = 0;              // the rank of its first block
  bool done() const { return w >= wEnd; }
  int pos() const { return w < extra ? 2 * w + sub : w + extra; }
  void step() {
    if (w < extra && sub == 0) {
      sub = 1;
    } else {
      sub = 0;
      ++w;
    }
  }
  void findRun(const std::vector<int>& ring) {
    if (runBlocks != 0) return;
    GroupCursor c = *this;
    runRank = ring[size_t(c.pos())];
    runBlocks = 1;
    for (c.step(); !c.done() && ring[size_t(c.pos())] == runRank + int(runBlocks); c.step())
      ++runBlocks;
  }
  size_t left(size_t count) const { return runBlocks * count - off; }
  void advance(size_t ne, size_t count) {
    off += ne;
    if (off < runBlocks * count) return;
    for (size_t i = 0; i < runBlocks; ++i) step();
    off = 0;
    runBlocks = 0;
  }
};

// Sends the blocks of group `out` and receives those of group `in` (virtual ranks [lo, hi)), both
// in `buf` at their ranks' offsets, chunk by chunk, send first (as exchange).
void exchangeBlocks(chorusComm* comm, const OpDesc& op, Proto proto, int partner, char* buf,
                    GroupCursor out, GroupCursor in, const char* what) {
  Prims prims(comm, 0, proto, in.done() ? -1 : partner, out.done() ? -1 : partner, op.type, op.op,
              what);
  prims.setStreamingSlots(slotStreaming(comm, op));
  const size_t esz = chorusTypeSize(op.type), chunk = prims.chunkElems(), count = op.count;
  const auto& ring = comm->ring;
  auto at = [&](const GroupCursor& c) { return buf + (size_t(c.runRank) * count + c.off) * esz; };
  while (!out.done() || !in.done()) {
    if (!out.done()) {
      out.findRun(ring);
      const size_t ne = std::min(chunk, out.left(count));
      prims.send(at(out), ne);
      out.advance(ne, count);
    }
    if (!in.done()) {
      in.findRun(ring);
      const size_t ne = std::min(chunk, in.left(count));
      prims.recv(at(in), ne);
      in.advance(ne, count);
    }
  }
}

void recursiveDoublingAllGather(chorusComm* comm, const OpDesc& op, const Work& w) {
  if (op.count == 0) return;
  const Doubling d(comm);
  const size_t blockBytes = op.count * chorusTypeSize(op.type);
  const char* send = static_cast<const char*>(op.sendbuff);
  char* recv = static_cast<char*>(op.recvbuff);
  const char* what = "AllGather(recursive doubling)";
  const Region block{0, op.count}, noBlock{0, 0};
  // Every position's block, as groups: all p virtual ranks.
  const GroupCursor all{0, d.p, d.extra}, none{0, 0, d.extra};

  if (d.foldsAway) {  // hand the block over, take them all back
    exchange(comm, op, w.proto, d.pairPartner(), send, block, recv, noBlock, false, false, what);
    exchangeBlocks(comm, op, w.proto, d.pairPartner(), recv, none, all, what);
    return;
  }
  char* mine = recv + size_t(comm->rank) * blockBytes;
  if (send != mine) memcpy(mine, send, blockBytes);
  if (d.foldsIn) {  // the partner's block first
    char* theirs = recv + size_t(d.pairPartner()) * blockBytes;
    exchange(comm, op, w.proto, d.pairPartner(), send, noBlock, theirs, block, false, false, what);
  }
  for (int s = 0; s < d.k; ++s) {
    const int u = d.v ^ (1 << s), size = 1 << s;
    const int myLo = d.v & ~(size - 1), theirLo = u & ~(size - 1);
    exchangeBlocks(comm, op, w.proto, d.rankOf(u), recv, GroupCursor{myLo, myLo + size, d.extra},
                   GroupCursor{theirLo, theirLo + size, d.extra}, what);
  }
  if (d.foldsIn) exchangeBlocks(comm, op, w.proto, d.pairPartner(), recv, all, none, what);
}

// Recursive halving ReduceScatter (MPICH's for short ReduceScatter), for small sizes: the halving
// steps of the halving-doubling above, on a copy of the input whose blocks are ordered so that
// each virtual rank's halving ends on its own blocks. The halving keeps at step s the lower half
// when bit s of v is 0, so v ends on the p-th part numbered by v's k bits reversed: slot j of the
// copy holds the blocks of virtual rank reverse(j), one block (ring position v + e) or, for a
// folded pair, two (positions 2v and 2v + 1, in that order). Halves split at slot boundaries.
// The even position of a folded pair hands its (reordered) input to the odd one first and gets
// its block from it last. Each element is reduced at one rank, as in the halving-doubling; per
// rank log2(p) exchanges moving half of what it holds each time, so the first, inside a node in
// ring order, move the most, and the network steps S/P of it (the recursive doubling AllReduce
// would move all S at every step). The copy is a scratch the communicator keeps (RdState,
// kDoublingMaxBytes), not written until used (most one-node communicators never run it).
struct RdState final : AlgoState {
  std::unique_ptr<char[]> scratch{new char[kDoublingMaxBytes]};
  // The halving ReduceScatter's slots, j = 0..p-1: the ring position of slot j's first block,
  // and the blocks before slot j (j = 0..p).
  std::vector<int> slotPos, slotFirst;
  explicit RdState(const chorusComm* comm) {
    const Doubling d(comm);
    slotFirst.push_back(0);
    for (int j = 0; j < d.p; ++j) {
      int u = 0;  // reverse(j) over k bits
      for (int b = 0; b < d.k; ++b) u |= ((j >> b) & 1) << (d.k - 1 - b);
      slotPos.push_back(u < d.extra ? 2 * u : u + d.extra);
      slotFirst.push_back(slotFirst.back() + (u < d.extra ? 2 : 1));
    }
  }
};

void recursiveHalvingReduceScatter(chorusComm* comm, const OpDesc& op, const Work& w) {
  const char* what = "ReduceScatter(recursive halving)";
  if (op.count == 0) return;
  const size_t esz = chorusTypeSize(op.type), count = op.count, blockBytes = count * esz;
  RdState& st = algoState<RdState>(comm, Algo::kRecursiveDoubling);
  if (blockBytes * size_t(comm->nranks) > kDoublingMaxBytes)
    fail(chorusInternalError, "rank %d: %s of %zu bytes (at most %zu)", comm->rank, what,
         blockBytes * size_t(comm->nranks), kDoublingMaxBytes);
  const Doubling d(comm);
  char* scratch = st.scratch.get();
  const char* send = static_cast<const char*>(op.sendbuff);
  char* recv = static_cast<char*>(op.recvbuff);
  auto slotStart = [&](size_t j) { return size_t(st.slotFirst[j]) * count; };  // in elements
  // The input's blocks in slot order (ring position q's block is rank ring[q]'s).
  for (size_t j = 0; j < size_t(d.p); ++j)
    for (int b = 0; b < st.slotFirst[j + 1] - st.slotFirst[j]; ++b)
      memcpy(scratch + (slotStart(j) + size_t(b) * count) * esz,
             send + size_t(d.ring[size_t(st.slotPos[j] + b)]) * blockBytes, blockBytes);
  const Region all{0, slotStart(size_t(d.p))}, none{0, 0};
  if (d.foldsAway) {  // hand the input over, take this rank's block back
    exchange(comm, op, w.proto, d.pairPartner(), scratch, all, scratch, none, false, false, what);
    exchange(comm, op, w.proto, d.pairPartner(), scratch, none, recv, Region{0, count}, false,
             false, what);
    return;
  }
  if (d.foldsIn)
    exchange(comm, op, w.proto, d.pairPartner(), scratch, none, scratch, all, true, false, what);
  size_t lo = 0, hi = size_t(d.p);  // the slots v and its step-s partner share
  for (int s = 0; s < d.k; ++s) {
    const size_t mid = (lo + hi) / 2;
    const Region lower{slotStart(lo), slotStart(mid)}, upper{slotStart(mid), slotStart(hi)};
    const bool keepLower = ((d.v >> s) & 1) == 0;
    exchange(comm, op, w.proto, d.partner(s), scratch, keepLower ? upper : lower, scratch,
             keepLower ? lower : upper, true, s == d.k - 1, what);
    (keepLower ? hi : lo) = mid;
  }
  // Slot lo is v's: this rank's block last in it (a folded pair's odd position follows the even).
  const size_t mine = slotStart(lo + 1) - count;
  if (d.foldsIn)
    exchange(comm, op, w.proto, d.pairPartner(), scratch, Region{mine - count, mine}, recv, none,
             false, false, what);
  memcpy(recv, scratch + mine * esz, blockBytes);
}

}  // namespace

// The exchanges' pairs as Doubling makes them, over positions whose nodes nodeAtPos gives: what
// each node's link carries out and in over the halving steps (step s moves 1/2^(s+1) of the data
// each way between partners; a recursive doubling step all of it), the most any link carries one
// way, twice for the hd (the doubling steps mirror the halving ones). Steps overlap across links:
// a pair whose exchange stays in a node goes on to its next one while others still send (3 nodes
// of 2: a node's link carries 3/4 of the data each way over the halving, one step's 1/2 and the
// other's 1/4, and the hd took 1.47 times the data at the link's rate, not the 2 of its steps'
// most one after the other). The folded pairs move all of it once each way, before and after
// everything. Even nodes of P ranks, both powers of two: the exchanges at distance < P stay in
// the node, and the hd's sum is 2(Q - 1)/Q, the rd's log2(Q) P.
DoublingLoads doublingLinkLoads(const std::vector<int>& nodeAtPos, int nnodes) {
  const int n = int(nodeAtPos.size());
  if (n < 2 || nnodes < 2) return {0, 0};
  const int k = floorLog2(n), p = 1 << k, extra = n - p;
  auto nodeOfV = [&](int u) { return nodeAtPos[size_t(virtualPos(u, extra))]; };
  // Per node: [0] out, [1] in; for the folds, the hd's and the rd's exchanges.
  std::vector<double> fold(2 * size_t(nnodes)), hd(fold.size()), rd(fold.size());
  auto add = [](std::vector<double>& l, int a, int b, double share) {
    if (a == b) return;
    l[2 * size_t(a)] += share;
    l[2 * size_t(b) + 1] += share;
  };
  for (int i = 0; i < extra; ++i)
    add(fold, nodeAtPos[size_t(2 * i)], nodeAtPos[size_t(2 * i + 1)], 1.0);
  for (int st = 0; st < k; ++st)
    for (int v = 0; v < p; ++v) {
      add(hd, nodeOfV(v), nodeOfV(v ^ (1 << st)), std::ldexp(1.0, -(st + 1)));
      add(rd, nodeOfV(v), nodeOfV(v ^ (1 << st)), 1.0);
    }
  auto most = [](const std::vector<double>& l) { return *std::max_element(l.begin(), l.end()); };
  return {2 * most(fold) + 2 * most(hd), 2 * most(fold) + most(rd)};
}

namespace {

// Cost terms. p = the largest power of two <= n, e = n - p folded ranks.
struct HdShape {
  int k;       // exchanges of each phase: log2(p)
  double p;    // ranks in the exchanges
  bool folds;  // some ranks fold into a partner (n not a power of two)
};
HdShape hdShape(int n) {
  const int k = floorLog2(std::max(n, 1));
  return {k, double(1 << k), n != (1 << k)};
}
// log2(p) exchanges each way, and one more each way for the folded pairs.
double hdHops(OpKind, const Shape& s, size_t) {
  const HdShape h = hdShape(s.nranks);
  return 2.0 * h.k + (h.folds ? 2.0 : 0.0);
}
// (p - 1)/p of the data each way in the exchanges, as the ring; the folded pairs move all of it
// once more each way first and last.
double hdBytes(OpKind, int n) {
  const HdShape h = hdShape(n);
  return 2.0 * (h.p - 1) / h.p + (h.folds ? 2.0 : 0.0);
}
// Across Q nodes of P ranks in ring order: the exchanges at distance < P stay in the node (the
// first halving steps, the last doubling ones: shared memory hops, 2(P - 1)/P of the data), the
// log2(Q) others cross the network with 2(Q - 1)/Q of the data per node, as the hierarchical
// AllReduce's, but unpipelined and with log2(Q) network hand-offs each way instead of Q - 1.
// On any other placement the communicator's own loads replace that (Shape::hdNetBytes,
// rdNetBytes: doublingLinkLoads above). The terms both models across nodes share: Q nodes of P
// ranks, kIn exchanges inside a node and kNet across, the link's and a rank's memory bandwidth
// (bytes per us), the fixed cost, the hand-offs, and 2 for the folded pairs (0 without).
struct DoublingTerms {
  HdShape h;
  double S, Q, P;
  int kIn, kNet;
  double netBw, shmBw, baseUs, nodeHop, netHop, folds;
};
DoublingTerms doublingTerms(Proto proto, const Shape& shape, size_t bytes) {
  const MachineModel& m = machineModel();
  DoublingTerms t{};
  t.h = hdShape(shape.nranks);
  t.S = double(bytes);
  t.Q = shape.nnodes;
  t.P = double(shape.nranks) / t.Q;
  t.kIn = std::min(t.h.k, floorLog2(std::max(1, int(t.P))));
  t.kNet = t.h.k - t.kIn;
  t.netBw = netBwGBs(shape) * 1e3;
  t.shmBw = m.bwGBs[int(proto)] * 1e3;
  t.baseUs = m.baseUs[int(proto)];
  t.nodeHop = nodeHopUs(shape, proto);
  t.netHop = netHopUs(shape);
  t.folds = t.h.folds ? 2.0 : 0.0;
  return t;
}

// The halving splits a region on 64-byte lines (halvingDoublingAllReduce's align): a step whose
// region is one line sends one way only, so a call of S bytes runs about log2(S / 64) of its
// k halving steps (and doubling ones) both ways, and the others as a binomial reduce and
// broadcast, fewer messages. Where the link probe measured a call of one double (Shape::netHdUs,
// every step one way) its hops go from that to the model's 2 log2 n as the two-way steps do.
double hdHopsUs(const DoublingTerms& t, const Shape& shape) {
  const double full = (2.0 * t.kIn + t.folds) * t.nodeHop + 2.0 * t.kNet * t.netHop;
  if (shape.netHdUs <= 0 || t.h.k < 1) return full;
  const double oneWay = std::max(shape.netHdUs - t.baseUs, 0.0);
  const double twoWaySteps = std::floor(std::log2(std::max(1.0, std::ceil(t.S / 64.0))));
  return oneWay + (full - oneWay) * std::min(1.0, twoWaySteps / t.h.k);
}

double hdUs(OpKind, Proto proto, const Shape& shape, size_t bytes) {
  const DoublingTerms t = doublingTerms(proto, shape, bytes);
  const double inBytes = 2.0 * (1.0 - std::ldexp(1.0, -t.kIn));
  const double netBytes = shape.hdNetBytes > 0 ? shape.hdNetBytes : 2.0 * (t.Q - 1) / t.Q;
  return t.baseUs + pipelinedUs(shape, hdHopsUs(t, shape),
                                t.S * (inBytes + t.folds) / t.shmBw + t.S * netBytes / t.netBw);
}

// The tuner picks it (and the recursive doubling and halving) unnamed across nodes up to 128 KiB,
// where the model prefers it: measured with all_reduce_perf on emulated nodes (TCP over loopback,
// 2 cores; 2 nodes x 2 ranks, 2 + 1 ranks, 4 x 1), it was ahead of every other algorithm at
// 1-64 KiB in each (1.1-4x); at 128 KiB, since the sockets run cubic instead of this machine's
// BBR (net/tcp_links.cc: BBR stalled its calls there), level on 4 nodes and 1.2-1.3x faster than
// the tree, ring or hier on 8 nodes of 1 and 2 ranks at 1 Gbit/s (the recursive halving and
// doubling 1.1-1.4x); at 256 KiB the recursive doubling AllGather and halving ReduceScatter were
// 1.3-1.8x slower on 8 x 2 (CHANGELOG 2026-12-05). The halving-doubling AllReduce goes on to
// 512 KiB (kHdNetMaxBytes): forced at 256 and 512 KiB on 8 x 2 it took 4.0 and 7.8 ms where the
// tree the tuner ran took 5.5 and 9.7 and the hierarchical one 7.4 and 9.1, level on 8 x 1 and
// 4 x 2 (CHANGELOG 2026-12-06, thirty-first session). From 1 MiB it was 1.15x slower than the
// hierarchical one on 8 x 2 (18.3 against 15.9 ms), 1.34x at 2 MiB: the pipelined ones keep every
// link busy, where this model (unpipelined steps at the full network bandwidth) would still
// prefer it. On 2 even nodes of 1 or 2 ranks its hops and bytes are the hierarchical AllReduce's
// (and, at 1 rank per node, the ring's): the tuner keeps those there, as floating-point rounding
// alone would pick between them. On one node, at every size on 2 ranks, where it is one exchange
// each way and was measured ahead of the ring and the tree from 1 KiB to 128 MiB (1.2-2x;
// docs/performance.md "Halving-doubling on one node"; its measured times are in
// tune/reference_fits.inc). On more ranks of one node only when named: at 4 ranks on 2 cores it was
// not ahead of the ring.
size_t hdUnnamedBelow(const Shape& s) {
  if (s.nnodes == 1) return s.nranks == 2 ? SIZE_MAX : 0;
  if (s.nnodes == 2 && s.evenNodes && s.nranks <= 4) return 0;
  return kHdNetMaxBytes + 1;
}

// Recursive doubling: log2(p) exchanges, one more each way for the folded pairs. AllReduce: every
// exchange moves all the data (the folds too); AllGather (S: all the blocks): a rank takes in the
// (n - 1)/n of S it lacks, and the last fold all of S.
double rdHops(OpKind, const Shape& s, size_t) {
  const HdShape h = hdShape(s.nranks);
  return h.k + (h.folds ? 2.0 : 0.0);
}
double rdBytes(OpKind kind, int n) {
  const HdShape h = hdShape(n);
  if (kind == OpKind::kAllGather) return (double(n) - 1) / n + (h.folds ? 1.0 : 0.0);
  if (kind == OpKind::kReduceScatter) return (h.p - 1) / h.p + (h.folds ? 1.0 : 0.0);
  return h.k + (h.folds ? 2.0 : 0.0);
}
// Across Q nodes of P ranks in ring order: log2(P) exchanges inside the node, log2(Q) across.
// AllReduce: each of the node's P ranks sends all the data over the node's one link at each
// network exchange. AllGather: each rank takes the (Q - 1)/Q of the blocks held on other nodes
// through the link, P times what the hierarchical AllGather sends: for the smallest sizes.
// ReduceScatter (S: all the blocks): the copy into slot order, the halving steps inside the node
// (1 - 1/P of S), then each rank holds its node's sum of S/P and the network steps move
// (Q - 1)/Q of that: the node's link carries (Q - 1)/Q of S, as the hierarchical one's.
double rdUs(OpKind kind, Proto proto, const Shape& shape, size_t bytes) {
  const DoublingTerms t = doublingTerms(proto, shape, bytes);
  const double hops = (t.kIn + t.folds) * t.nodeHop + t.kNet * t.netHop;
  const double netBytes = shape.rdNetBytes > 0 ? shape.rdNetBytes : t.kNet * t.P;
  double bytesUs = t.S * (t.kIn + t.folds) / t.shmBw + t.S * netBytes / t.netBw;
  if (kind == OpKind::kAllGather)
    bytesUs = t.S * ((t.P - 1) / double(shape.nranks) + t.folds / 2) / t.shmBw +
              t.S * t.P * (t.Q - 1) / t.Q / t.netBw;
  else if (kind == OpKind::kReduceScatter)
    bytesUs = t.S * (2.0 - std::ldexp(1.0, -t.kIn) + t.folds / 2) / t.shmBw +
              t.S * (t.Q - 1) / t.Q / t.netBw;
  return t.baseUs + pipelinedUs(shape, hops, bytesUs);
}
// ReduceScatter: what fits the scratch.
size_t rdLimit(OpKind kind, int) {
  return kind == OpKind::kReduceScatter ? kDoublingMaxBytes : SIZE_MAX;
}
// Across nodes, up to the sizes the halving-doubling serves there (the model chooses between
// them and the rest below that). On one node, 2 ranks, up to one Simple slot (128 KiB of the
// default 1 MiB FIFO) and only where chorus-tune measured it (unnamedOnlyFitted): there it is one
// exchange, each rank copying its whole input into the other's slot and reducing the other's
// slot into its output (the ring: two dependent steps of half each). 2 ranks on this project's
// 2-core VM, 5 interleaved rounds, best / median (CHANGELOG, forty-third session): 128 KiB 11.5 /
// 11.8 us against the default's (the ring's) 17.9 / 18.8, 64 KiB 9.6 / 10.0 against 11.6 / 13.1,
// 1-32 KiB equal or ahead; from 160 KiB (a second, partial chunk) behind. With more ranks of
// one node, only when named: each exchange moves the whole vector (at 4 ranks on 2 cores it was
// ahead at 8-64 KiB in one run and behind in the next).
size_t rdUnnamedBelow(const Shape& s) {
  return s.nnodes == 1 && s.nranks != 2 ? 0 : kDoublingMaxBytes + 1;
}

}  // namespace

extern const AlgoDesc kRecursiveDoublingAlgo = {
    .name = "rd",
    .serves =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) | kindBit(OpKind::kReduceScatter),
    .protos = kAnyProto,
    .unnamedBelow = rdUnnamedBelow,
    .unnamedOnlyFitted = true,
    .hops = rdHops,
    .byteFactor = rdBytes,
    .slotLimit = rdLimit,
    .multiNodeUs = rdUs,
    .run = entries({{OpKind::kAllReduce, recursiveDoublingAllReduce},
                    {OpKind::kAllGather, recursiveDoublingAllGather},
                    {OpKind::kReduceScatter, recursiveHalvingReduceScatter}}),
    .createState = [](chorusComm* c) -> AlgoState* { return new RdState(c); },
};

extern const AlgoDesc kHalvingDoublingAlgo = {
    .name = "hd",
    .serves = kindBit(OpKind::kAllReduce),
    .protos = kAnyProto,
    .unnamedBelow = hdUnnamedBelow,
    .hops = hdHops,
    .byteFactor = hdBytes,
    .multiNodeUs = hdUs,
    .run =
        entries({{OpKind::kAllReduce, [](chorusComm* c, const OpDesc& op,
                                         const Work& w) { halvingDoublingAllReduce(c, op, w); }}}),
};

}  // namespace chorus
