// One-shot collectives for latency-bound sizes: one hand-off instead of the ring's or chain's
// n - 1 or more. AllReduce, AllGather and ReduceScatter share the exchange below; each then
// reads what it needs from the slots. Broadcast has its own eager ring (oneShotBroadcast).
//
// Every rank copies its input into one of its two one-shot slots (transport/segment.h), the one
// of the call's parity, and publishes the call's sequence number (release). It then waits for
// every peer's slot of that parity to show the same number (acquire) and reduces the n inputs
// in rank order, ((in_0 op in_1) op in_2) ..., into its output: every rank computes the same
// expression from the same bytes, so all get bit-identical results.
//
// Reusing a slot needs no extra hand-off. Call k writes slot k % 2, which call k-2 used. A rank
// starts call k only after it saw every peer publish call k-1, and a peer publishes k-1 only
// after it has finished call k-2 (including reading this rank's slot). So nobody reads a slot
// while its owner rewrites it. A peer's slot can only hold call k or an older call while this
// rank waits in call k: a peer cannot publish k+2 before this rank published k+1.
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/algo.h"
#include "algo/peer_post.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "reduce/reduce.h"
#include "transport/segment.h"

namespace chorus {

namespace {
// PREFETCHW where the CPU has it (x86: CPUID 0x80000001 ECX bit 8; decided once, at load), else
// an ordinary prefetch.
#if defined(__x86_64__)
bool hasPrefetchW() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 8)) != 0;
}
const bool kPrefetchW = hasPrefetchW();
inline void prefetchForWrite(const void* p) {
  if (kPrefetchW)
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
  else
    __builtin_prefetch(p, 1);
}
#else
inline void prefetchForWrite(const void* p) {
  __builtin_prefetch(p, 1);
}
#endif

// What the one-shot collectives keep per communicator (Algo::kOneShot's state; the two-shot
// AllReduce shares its exchange, so its sequence numbers too).
struct OneShotState final : AlgoState {
  explicit OneShotState(int nranks)
      : eagerSeq{std::vector<uint64_t>(size_t(nranks), 0),
                 std::vector<uint64_t>(size_t(nranks), 0)} {}
  uint64_t seq = 0;  // exchanges run so far (one-shot and two-shot collectives)
  // Per eager ring (0: small, 1: medium): the Broadcasts run so far per root, and as a root the
  // lowest call every receiver has acknowledged when last read.
  std::vector<uint64_t> eagerSeq[2];
  uint64_t eagerAcked[2] = {0, 0};
};
OneShotState& oneShotState(chorusComm* comm) {
  return algoState<OneShotState>(comm, Algo::kOneShot);
}

char* slotData(OneShotSlot* s) {
  return reinterpret_cast<char*>(s) + kOneShotDataOffset;
}
// The result area (two-shot AllReduce: the block this rank reduced, at its offset).
char* slotResult(OneShotSlot* s) {
  return slotData(s) + kTwoShotMaxBytes;
}

// Stores `seq` into one of this rank's publication words (release), then wakes the peers that
// sleep on their doorbells waiting for it (transport/fifo.h): one fence orders the publication
// before every `sleeping` load.
void publish(chorusComm* comm, std::atomic<uint64_t>* word, uint64_t seq) {
  word->store(seq, std::memory_order_release);
  ringPeers(comm);
}

// Waits until every peer's word `word` of its slot `parity` shows `seq` (any order; each wait
// watches abort, death and the timeout, and sleeps on this rank's doorbell once it has polled a
// while), then fails if a peer failed or aborted after it published (its segment's failure
// flag, a cheap read of a quiet line), as the ring's later hand-offs would.
void waitPeers(chorusComm* comm, int parity, std::atomic<uint64_t> OneShotSlot::*word, uint64_t seq,
               const char* what) {
  const int n = comm->nranks;
  for (int p = 0; p < n; ++p) {
    if (p == comm->rank) continue;
    const std::atomic<uint64_t>& w = comm->segmentOf(p).oneShotSlot(parity)->*word;
    if (w.load(std::memory_order_acquire) != seq) {
      Waiter waiter(comm, p, what, /*fifoWait=*/true);
      while (w.load(std::memory_order_acquire) != seq) waiter.pause();
    }
  }
  for (int p = 0; p < n; ++p)
    if (p != comm->rank && comm->peerHeader(p)->failed.load(std::memory_order_relaxed) != 0)
      Waiter(comm, p, what).checkNow();
}

// Publishes `bytes` of `src` in this rank's slot of the call's parity and waits until every
// peer's slot of that parity holds the same call (see above); returns the call's sequence
// number (its parity picks the slots). Every rank of the communicator takes part.
uint64_t exchange(chorusComm* comm, const void* src, size_t bytes, const char* what) {
  const uint64_t seq = ++oneShotState(comm).seq;
  const int parity = int(seq & 1);
  OneShotSlot* mine = comm->mySegment.oneShotSlot(parity);
  if (bytes > 0) memcpy(slotData(mine), src, bytes);
  publish(comm, &mine->seq, seq);
  waitPeers(comm, parity, &OneShotSlot::seq, seq, what);
  return seq;
}

// Rank p's published data of the call's parity.
const char* input(chorusComm* comm, int p, int parity) {
  return slotData(p == comm->rank ? comm->mySegment.oneShotSlot(parity)
                                  : comm->segmentOf(p).oneShotSlot(parity));
}

// Reduces the n ranks' `count` elements at byte `offset` of their inputs, in rank order, into
// out (which may be an input's home: the inputs are read from the slots).
void reduceInputs(chorusComm* comm, const OpDesc& op, int parity, size_t offset, size_t count,
                  void* out) {
  const int n = comm->nranks;
  const int divisor = op.op == chorusAvg ? n : 0;
  reduceKernel(op.type, op.op, count, input(comm, 0, parity) + offset,
               input(comm, 1, parity) + offset, out, nullptr, n == 2 ? divisor : 0);
  for (int p = 2; p < n; ++p)
    reduceKernel(op.type, op.op, count, out, input(comm, p, parity) + offset, out, nullptr,
                 p == n - 1 ? divisor : 0);
}

}  // namespace

void oneShotAllReduce(chorusComm* comm, const OpDesc& op) {
  const size_t bytes = op.count * chorusTypeSize(op.type);
  const int parity = int(exchange(comm, op.sendbuff, bytes, "AllReduce") & 1);
  if (bytes == 0) return;
  // recvbuff may be sendbuff (in place): the inputs are all read from the slots.
  reduceInputs(comm, op, parity, 0, op.count, op.recvbuff);
}

// AllGather: every rank publishes its block, every rank copies the n blocks (its own from its
// slot too: in place, sendbuff is its block of recvbuff).
void oneShotAllGather(chorusComm* comm, const OpDesc& op) {
  const size_t block = op.count * chorusTypeSize(op.type);
  if (block == 0) return;  // every rank knows: nothing to exchange
  const int parity = int(exchange(comm, op.sendbuff, block, "AllGather") & 1);
  char* out = static_cast<char*>(op.recvbuff);
  for (int p = 0; p < comm->nranks; ++p)
    memcpy(out + size_t(p) * block, input(comm, p, parity), block);
}

// Broadcast, eager (up to kEagerMedMaxBytes): the root writes call k into cell k % cells of
// one of its two rings (transport/segment.h: up to kEagerMaxBytes the small ring, whose cells
// share the first line between the sequence word and the data; above it the medium ring of
// fewer, larger cells) and returns; every other rank waits for the cell to show k and copies it
// out. Nobody waits for the root's receivers, so back-to-back calls pipeline: the root runs
// ahead by up to a ring's cells, and the receivers read consecutive cells that it wrote while
// they were busy, instead of one hand-off and one slot release per call; and a receiver waits
// for the root only, not for the ranks before it as in the chain. Reuse: the root writes cell
// k % cells again at call k + cells only after every receiver has acknowledged call k or later;
// receivers acknowledge every `ackEvery` calls (one line write per 32 calls on the small ring,
// per 4 on the medium). No deadlock: a receiver that has read every call before the root's
// current one has acknowledged at least the current one minus ackEvery, which is past the call
// the root waits for. Each ring counts its own calls per root (every rank picks the same ring:
// the size is the same on all).
template <int ring>
void eagerBroadcast(chorusComm* comm, const OpDesc& op, size_t bytes) {
  constexpr uint64_t cells = ring == 0 ? kEagerCells : kEagerMedCells;
  constexpr uint64_t ackEvery = ring == 0 ? kEagerAckEvery : kEagerMedAckEvery;
  constexpr size_t dataOffset = ring == 0 ? 8 : kEagerMedDataOffset;
  auto cellOf = [](const Segment& seg, uint64_t call) {
    return ring == 0 ? seg.eagerCell(call) : seg.eagerMedCell(call);
  };
  auto ackOf = [](const Segment& seg, int p) {
    return ring == 0 ? seg.eagerAck(p) : seg.eagerMedAck(p);
  };
  const int root = op.root, me = comm->rank;
  OneShotState& st = oneShotState(comm);
  const uint64_t k = ++st.eagerSeq[ring][size_t(root)];
  if (me == root) {
    const Segment& seg = comm->mySegment;
    if (k > st.eagerAcked[ring] + cells) {
      uint64_t lowest = ~uint64_t(0);
      for (int p = 0; p < comm->nranks; ++p) {
        if (p == me) continue;
        const std::atomic<uint64_t>* ack = ackOf(seg, p);
        if (ack->load(std::memory_order_acquire) + cells < k) {
          Waiter w(comm, p, "Broadcast", /*fifoWait=*/true);
          while (ack->load(std::memory_order_acquire) + cells < k) w.pause();
        }
        lowest = std::min(lowest, ack->load(std::memory_order_acquire));
      }
      st.eagerAcked[ring] = lowest;
    }
    EagerCell* cell = cellOf(seg, k);
    memcpy(reinterpret_cast<char*>(cell) + dataOffset, op.sendbuff, bytes);
    cell->seq.store(k, std::memory_order_release);
    ringPeers(comm);  // the receivers asleep on their doorbells
    // Take the next cell's lines (as many as this call used) for writing now: a receiver read
    // them a lap ago and may hold them, and their transfer then overlaps the rest of this call
    // instead of stalling the next one.
    const char* next = reinterpret_cast<const char*>(cellOf(seg, k + 1));
    for (size_t line = 0; line < dataOffset + bytes; line += 64) prefetchForWrite(next + line);
    if (op.recvbuff != op.sendbuff) memcpy(op.recvbuff, op.sendbuff, bytes);
    return;
  }
  const Segment& seg = comm->segmentOf(root);
  const EagerCell* cell = cellOf(seg, k);
  if (cell->seq.load(std::memory_order_acquire) != k) {
    Waiter w(comm, root, "Broadcast", /*fifoWait=*/true);
    while (cell->seq.load(std::memory_order_acquire) != k) w.pause();
  }
  memcpy(op.recvbuff, reinterpret_cast<const char*>(cell) + dataOffset, bytes);
  // The next cell (as many lines as this call used): a root running ahead has written it, and
  // it crosses while this call returns.
  const char* next = reinterpret_cast<const char*>(cellOf(seg, k + 1));
  for (size_t line = 0; line < dataOffset + bytes; line += 64) __builtin_prefetch(next + line);
  if (k % ackEvery == 0) {
    ackOf(seg, me)->store(k, std::memory_order_release);
    notifySleeper(&seg.header()->bell);  // the root may sleep waiting for this
  }
}

void oneShotBroadcast(chorusComm* comm, const OpDesc& op) {
  const size_t bytes = op.count * chorusTypeSize(op.type);
  if (bytes == 0) return;  // every rank knows: no call to count
  if (bytes <= kEagerMaxBytes)
    eagerBroadcast<0>(comm, op, bytes);
  else
    eagerBroadcast<1>(comm, op, bytes);
}

// ReduceScatter: every rank publishes its n blocks; rank r reduces block r of every input.
void oneShotReduceScatter(chorusComm* comm, const OpDesc& op) {
  const size_t block = op.count * chorusTypeSize(op.type);
  if (block == 0) return;
  const int parity =
      int(exchange(comm, op.sendbuff, block * size_t(comm->nranks), "ReduceScatter") & 1);
  reduceInputs(comm, op, parity, block * size_t(comm->rank), op.count, op.recvbuff);
}

// Two-shot AllReduce (up to kTwoShotMaxBytes): the exchange above publishes every rank's input;
// rank r then reduces only block r of the n inputs (in rank order, so every rank's block is the
// same expression as the one-shot's) into the result area of its slot, publishes it (the slot's
// `reduced` word), and copies every rank's reduced block into its output. Two hand-offs instead
// of one, but each rank reads (n - 1)/n of the data from its peers twice instead of n - 1 times
// and reduces 1/n of it instead of all: it takes over from the one-shot where reading the peers'
// inputs costs more than a hand-off (more ranks, larger sizes). Slot reuse as above: call k
// writes the areas call k - 2 used, and a rank starts call k only after every peer has published
// call k - 1, i.e. finished call k - 2 (including its reads of this rank's result area).
void twoShotAllReduce(chorusComm* comm, const OpDesc& op) {
  const size_t esz = chorusTypeSize(op.type);
  const uint64_t seq = exchange(comm, op.sendbuff, op.count * esz, "AllReduce");
  if (op.count == 0) return;
  const int parity = int(seq & 1), me = comm->rank;
  const LineBlocks blocks(op.count, comm->nranks, esz);
  OneShotSlot* mine = comm->mySegment.oneShotSlot(parity);
  char* out = static_cast<char*>(op.recvbuff);
  const size_t myOffset = blocks.begin(me) * esz, myCount = blocks.size(me);
  if (myCount > 0) reduceInputs(comm, op, parity, myOffset, myCount, slotResult(mine) + myOffset);
  publish(comm, &mine->reduced, seq);
  if (myCount > 0) memcpy(out + myOffset, slotResult(mine) + myOffset, myCount * esz);
  waitPeers(comm, parity, &OneShotSlot::reduced, seq, "AllReduce");
  for (int p = 0; p < comm->nranks; ++p) {
    const size_t offset = blocks.begin(p) * esz, bytes = blocks.size(p) * esz;
    if (p != me && bytes > 0)
      memcpy(out + offset, slotResult(comm->segmentOf(p).oneShotSlot(parity)) + offset, bytes);
  }
}

namespace {
// Publish once, read every input. The Broadcast is the eager ring: the root waits for nobody,
// each receiver for one publication, and back-to-back calls overlap (the root runs ahead;
// receivers find their cells written): half a hand-off per call (measured: docs/performance.md,
// "Eager Broadcast").
double oneShotHops(OpKind kind, const Shape&, size_t) {
  return kind == OpKind::kBroadcast ? 0.5 : 1.0;
}
// AllReduce: copy in, then read and reduce all n inputs; AllGather: one block in, n - 1 out;
// Broadcast: in at the root, out at the others (one after the other); ReduceScatter: all in,
// then n blocks of 1/n read and reduced.
double oneShotBytes(OpKind kind, int n) {
  if (kind == OpKind::kAllReduce) return double(n);
  return kind == OpKind::kAllGather ? 1.0 : 2.0;
}
// Every rank's published input must fit its slot (AllGather publishes one block of bytes /
// nranks); the Broadcast one eager cell: on 2 ranks of the small ring only, where the chain is
// one hand-off too and its FIFO pipelines as well (measured 2026-12-07, 5 rounds, 1-8 KiB: the
// medium ring's medians 1.2-3x the chain's), from 3 ranks of the medium ring too (3, 4 and 8
// ranks on 2 cores, 256 B-8 KiB: 1.1-2x faster than the chain, best and median).
size_t oneShotLimit(OpKind kind, int nranks) {
  if (kind == OpKind::kBroadcast) return nranks > 2 ? kEagerMedMaxBytes : kEagerMaxBytes;
  return kind == OpKind::kAllGather ? kOneShotMaxBytes * size_t(std::max(nranks, 1))
                                    : kOneShotMaxBytes;
}

// Two publications, each one line like the one-shot's, but the second waits for the slowest
// rank's reduction: 1.5 (fitted at 2 ranks: it overtakes the one-shot between 1 and 2 KiB,
// docs/performance.md).
double twoShotHops(OpKind, const Shape&, size_t) {
  return 1.5;
}
// (n - 1)/n of the data crosses to the ranks that reduce it and (n - 1)/n of the result back, as
// in the ring, but in two publications instead of 2(n - 1) FIFO steps.
double twoShotBytes(OpKind, int n) {
  const double nn = double(n);
  return 2.0 * (nn - 1) / nn;
}
size_t twoShotLimit(OpKind, int) {
  return kTwoShotMaxBytes;
}
// The second wait, for every rank's reduced block, ends only after the ranks beyond the cores
// have each been scheduled again: its hand-offs count 2 n / cores - 1 times, at most 3 (3 ranks
// on 2 cores: 2, 4 ranks and more: 3; fitted where it overtakes the one-shot and the tree /
// ring at 3, 4, 5 and 8 ranks on 2 cores: docs/performance.md, "Two-shot AllReduce"; beyond 3
// the model's tree and ring, which it does not penalise for oversubscription, would win where
// they are 1.3-5x slower).
double twoShotWakeups(const Shape& s) {
  return s.onlineCores > 0 ? std::clamp(2.0 * s.nranks / s.onlineCores - 1.0, 1.0, 3.0) : 3.0;
}
}  // namespace

extern const AlgoDesc kOneShotAlgo = {
    .name = "oneshot",
    .serves = kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) |
              kindBit(OpKind::kBroadcast) | kindBit(OpKind::kReduceScatter),
    .protos = kSimpleOnly,
    .runsOn = oneNodeOnly,
    .hops = oneShotHops,
    .byteFactor = oneShotBytes,
    .slotLimit = oneShotLimit,
    .run = entries({{OpKind::kAllReduce,
                     [](chorusComm* c, const OpDesc& op, const Work&) { oneShotAllReduce(c, op); }},
                    {OpKind::kAllGather,
                     [](chorusComm* c, const OpDesc& op, const Work&) { oneShotAllGather(c, op); }},
                    {OpKind::kBroadcast,
                     [](chorusComm* c, const OpDesc& op, const Work&) { oneShotBroadcast(c, op); }},
                    {OpKind::kReduceScatter, [](chorusComm* c, const OpDesc& op,
                                                const Work&) { oneShotReduceScatter(c, op); }}}),
    .createState = [](chorusComm* c) -> AlgoState* { return new OneShotState(c->nranks); },
};

extern const AlgoDesc kTwoShotAlgo = {
    .name = "twoshot",
    .serves = kindBit(OpKind::kAllReduce),
    .protos = kSimpleOnly,
    .runsOn = oneNodeOnly,
    .hops = twoShotHops,
    .byteFactor = twoShotBytes,
    .slotLimit = twoShotLimit,
    .wakeups = twoShotWakeups,
    .run = entries({{OpKind::kAllReduce, [](chorusComm* c, const OpDesc& op,
                                            const Work&) { twoShotAllReduce(c, op); }}}),
};

}  // namespace chorus
