// Zero-copy AllReduce, ReduceScatter and AllGather on registered buffers (chorusCommRegister;
// "zerocopy"): on one node, when every rank's buffers of the call are registered, rank r reduces
// slice r of the data reading every rank's input where it lies (plain loads: the peers'
// chorusMemAlloc memory is mapped in this process, or the peer is a thread of this process) and
// writes the result straight into slice r of every rank's output. One pass over the data, no FIFO,
// no scratch, no system call.
//
// One call, k = ++seq (RegState), every rank of the communicator taking part:
//  1. publish: sendbuff, recvbuff and the registration slots they lie in, then seq = k << 2 |
//     status (release: kRegNone, kRegPlain or kRegMapped: the weakest of the two buffers),
//     ringing sleepers; wait until every peer's seq shows k (Waiter: abort, death, timeout);
//  2. if every rank is registered, and either all are threads of one process or every rank's
//     buffers are mapped memory: reduce this rank's slice into every output. Otherwise every
//     rank runs what the tuner picks without this algorithm (they all saw the same statuses, so
//     they agree);
//  3. done = k, ringing sleepers; wait until every peer's done shows k: only then has every
//     output been written and every input read, so the call may return (and the next publish
//     cannot overwrite words a peer still reads: a peer's seq shows k or k - 1 during call k).
// Only rank r touches slice r of any buffer, so in place (sendbuff == recvbuff, or ReduceScatter's
// recvbuff inside its sendbuff) needs nothing more: rank r reads a slice before writing it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "algo/algo.h"
#include "algo/peer_post.h"
#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/register.h"
#include "comm/wait.h"
#include "reduce/reduce.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

// The bytes of a slice reduced at a time: every input's chunk and the result stay in the core's
// L2 between the reduction and the copies into the other outputs.
constexpr size_t kZeroCopyChunk = size_t(32) << 10;

// Threads of one process write into each other's outputs: a failed call withdraws its buffers
// (status kRegNone) and waits for same-process peers that joined it until their done shows k
// (algo/peer_post.h). Peers in other processes write through their own mapping of this rank's
// memory file, which outlives this rank's; a failed call's output is undefined.
SameProcessAccess<RegPost> holdAccess(chorusComm* comm, uint64_t k) {
  return {comm, &SegmentHeader::reg, k, uint64_t(kRegNone), k};
}

// Steps 1-2: publishes this rank's buffers, waits for every peer's, and returns whether the
// zero-copy path runs; if so, st.in / st.out hold every rank's buffers as this process reaches
// them.
bool publish(chorusComm* comm, RegState& st, uint64_t k, const OpDesc& op, size_t inBytes,
             size_t outBytes, const char* what) {
  const int n = comm->nranks, me = comm->rank;
  const int sslot = regFind(st, me, op.sendbuff, inBytes);
  const int rslot = regFind(st, me, op.recvbuff, outBytes);
  RegKind mineKind = kRegNone;
  if (sslot >= 0 && rslot >= 0) mineKind = std::min(st.at(sslot, me).kind, st.at(rslot, me).kind);
  RegPost& post = comm->mySegment.header()->reg;
  post.send.store(reinterpret_cast<uint64_t>(op.sendbuff), std::memory_order_relaxed);
  post.recv.store(reinterpret_cast<uint64_t>(op.recvbuff), std::memory_order_relaxed);
  post.sendSlot.store(uint32_t(sslot), std::memory_order_relaxed);
  post.recvSlot.store(uint32_t(rslot), std::memory_order_relaxed);
  // Sequentially consistent: a same-process peer whose call fails withdraws its buffers with a
  // store of its own and then reads this word (SameProcessAccess).
  post.seq.store(k << 2 | uint64_t(mineKind), std::memory_order_seq_cst);
  ringPeers(comm);
  waitAllPosts(comm, &SegmentHeader::reg, what,
               [k](const RegPost& c) { return c.seq.load(std::memory_order_acquire) >> 2 == k; });
  bool registered = mineKind != kRegNone, mapped = mineKind == kRegMapped;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const RegKind s =
        RegKind(comm->segmentOf(p).header()->reg.seq.load(std::memory_order_seq_cst) & 3);
    registered = registered && s != kRegNone;
    mapped = mapped && s == kRegMapped;
  }
  if (!registered || !(mapped || st.oneProcess)) return false;
  for (int p = 0; p < n; ++p) {
    if (p == me) {
      st.in[size_t(p)] = static_cast<const char*>(op.sendbuff);
      st.out[size_t(p)] = static_cast<char*>(op.recvbuff);
      continue;
    }
    // Published before the peer's seq (release), read after it (acquire above). The slots are
    // the peer's own lookups, so in range and live (registration is collective); checked all
    // the same, since a bad index would be a wild pointer.
    const RegPost& c = comm->segmentOf(p).header()->reg;
    const uint32_t ss = c.sendSlot.load(std::memory_order_relaxed);
    const uint32_t rs = c.recvSlot.load(std::memory_order_relaxed);
    if (ss >= uint32_t(st.nslots) || rs >= uint32_t(st.nslots))
      fail(chorusInternalError, "rank %d: %s: rank %d published registration slots %u/%u of %d", me,
           what, p, ss, rs, st.nslots);
    const RegRegion& sr = st.at(int(ss), p);
    const RegRegion& rr = st.at(int(rs), p);
    if (sr.local == nullptr || rr.local == nullptr)
      fail(chorusInternalError, "rank %d: %s: rank %d's registered buffer is not reachable", me,
           what, p);
    st.in[size_t(p)] = sr.local + (c.send.load(std::memory_order_relaxed) - sr.base);
    st.out[size_t(p)] = rr.local + (c.recv.load(std::memory_order_relaxed) - rr.base);
  }
  return true;
}

// Step 3.
void finish(chorusComm* comm, uint64_t k, const char* what) {
  comm->mySegment.header()->reg.done.store(k, std::memory_order_release);
  ringPeers(comm);
  waitAllPosts(comm, &SegmentHeader::reg, what,
               [k](const RegPost& c) { return c.done.load(std::memory_order_acquire) >= k; });
}

// The call did not run zero-copy: what the tuner picks without this algorithm, on one channel.
// Every rank has read every status once every rank has joined the fallback, and the fallback
// needs every rank, so this rank may publish its next call once the fallback returns; done still
// goes up so that a failing same-process peer sees this rank settled.
void fallback(chorusComm* comm, RegState& st, uint64_t k, const OpDesc& op) {
  comm->mySegment.header()->reg.done.store(k, std::memory_order_release);
  const Choice c = chooseFor(comm, op.kind, modelBytes(op.kind, op.count, op.type, comm->nranks),
                             st.fallbackEnv);
  // CHORUS_DEBUG=INFO: the choice line said zerocopy; this one says the call did not run it.
  CHORUS_INFO(comm->rank, "%s: zerocopy falls back to %s (buffers not registered on every rank)",
              opKindName(op.kind), algoName(c.algo));
  const AlgoEntry run = algoDesc(c.algo).run.of[int(op.kind)];
  if (run == nullptr)
    fail(chorusInternalError, "rank %d: the fallback %s has no %s", comm->rank, algoName(c.algo),
         opKindName(op.kind));
  run(comm, op, Work{0, c.proto, 0, op.count});
}

// Reduces elements [b0, b1) of every rank's input (the element offset `inAt` in it) into `dst`
// and copies each chunk on into `copies` (ncopies outputs at element offset `outAt`).
void reduceSlice(const OpDesc& op, const RegState& st, int me, int n, size_t inAt, size_t cnt,
                 char* dst, size_t outAt, bool toAll) {
  const size_t tsize = chorusTypeSize(op.type);
  const size_t align = std::max<size_t>(1, 64 / tsize);
  const size_t chunk = std::max(align, kZeroCopyChunk / tsize / align * align);
  const int divisor = op.op == chorusAvg ? n : 0;
  // The second output the last reduction writes as well (2 ranks: every output in one pass).
  const int other = toAll ? (me + 1) % n : -1;
  for (size_t c0 = 0; c0 < cnt; c0 += chunk) {
    const size_t m = std::min(chunk, cnt - c0);
    const size_t in = (inAt + c0) * tsize, out = (outAt + c0) * tsize;
    char* d = dst + c0 * tsize;
    // This rank's own input first: in place it is the output, read before written.
    const char* acc = st.in[size_t(me)] + in;
    for (int i = 1; i < n; ++i) {
      const int p = (me + i) % n;
      const bool last = i == n - 1;
      reduceKernel(op.type, op.op, m, acc, st.in[size_t(p)] + in, d,
                   last && other >= 0 ? st.out[size_t(other)] + out : nullptr, last ? divisor : 0);
      acc = d;
    }
    if (toAll)
      for (int i = 2; i < n; ++i) memcpy(st.out[size_t((me + i) % n)] + out, d, m * tsize);
  }
}

void zeroCopyAllReduce(chorusComm* comm, const OpDesc& op) {
  if (op.count == 0) return;  // every rank knows: nothing to agree on
  RegState& st = *comm->reg;
  const uint64_t k = ++st.seq;
  const auto access = holdAccess(comm, k);
  const size_t bytes = op.count * chorusTypeSize(op.type);
  if (!publish(comm, st, k, op, bytes, bytes, "AllReduce")) return fallback(comm, st, k, op);
  const int n = comm->nranks, me = comm->rank;
  const LineBlocks blocks(op.count, n, chorusTypeSize(op.type));
  const size_t b0 = blocks.begin(me), b1 = blocks.begin(me + 1);
  if (b1 > b0)
    reduceSlice(op, st, me, n, b0, b1 - b0, st.out[size_t(me)] + b0 * chorusTypeSize(op.type), b0,
                /*toAll=*/true);
  finish(comm, k, "AllReduce");
}

void zeroCopyReduceScatter(chorusComm* comm, const OpDesc& op) {
  if (op.count == 0) return;
  RegState& st = *comm->reg;
  const uint64_t k = ++st.seq;
  const auto access = holdAccess(comm, k);
  const int n = comm->nranks, me = comm->rank;
  const size_t bytes = op.count * chorusTypeSize(op.type);
  if (!publish(comm, st, k, op, bytes * size_t(n), bytes, "ReduceScatter"))
    return fallback(comm, st, k, op);
  reduceSlice(op, st, me, n, size_t(me) * op.count, op.count, st.out[size_t(me)], 0,
              /*toAll=*/false);
  finish(comm, k, "ReduceScatter");
}

// AllGather: each rank writes its block straight from its sendbuff into every rank's recvbuff
// (in place its own block is already there). Only this rank writes block `me` of any output.
void zeroCopyAllGather(chorusComm* comm, const OpDesc& op) {
  if (op.count == 0) return;
  RegState& st = *comm->reg;
  const uint64_t k = ++st.seq;
  const auto access = holdAccess(comm, k);
  const int n = comm->nranks, me = comm->rank;
  const size_t block = op.count * chorusTypeSize(op.type);
  if (!publish(comm, st, k, op, block, block * size_t(n), "AllGather"))
    return fallback(comm, st, k, op);
  const char* in = st.in[size_t(me)];
  for (int i = 0; i < n; ++i) {
    char* dst = st.out[size_t((me + i) % n)] + size_t(me) * block;  // this rank's own output last
    if (dst != in) memcpy(dst, in, block);
  }
  finish(comm, k, "AllGather");
}

bool zeroCopyRunsOn(OpKind kind, const Shape& s) {
  return oneNodeOnly(kind, s) && s.registered;
}
// Publish and wait for every peer, then done and wait again: two hand-offs per peer.
double zeroCopyHops(OpKind, const Shape& s, size_t) {
  return 2.0 * (double(s.nranks) - 1);
}
// Each rank reads (n-1)/n of the data from its peers and (AllReduce) writes as much into them,
// with plain loads and stores at about twice a FIFO stream's bandwidth (each FIFO byte is
// copied twice).
// AllGather: each rank writes its block into every peer with memcpy (the single-copy AllGather
// moves as much through the kernel's slower copy: 0.5 of it there).
double zeroCopyBytes(OpKind kind, int n) {
  const double nn = double(n);
  return (kind == OpKind::kAllReduce   ? 1.0
          : kind == OpKind::kAllGather ? 0.4
                                       : 0.5) *
         (nn - 1) / nn;
}
// Every step waits for every rank to be scheduled (as the single-copy collectives).
double zeroCopyWakeups(const Shape&) {
  return 2.0;
}

}  // namespace

extern const AlgoDesc kZeroCopyAlgo = {
    .name = "zerocopy",
    .serves =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kReduceScatter) | kindBit(OpKind::kAllGather),
    .protos = kSimpleOnly,
    .runsOn = zeroCopyRunsOn,
    .hops = zeroCopyHops,
    .byteFactor = zeroCopyBytes,
    .wakeups = zeroCopyWakeups,
    .run = entries({{OpKind::kAllReduce, [](chorusComm* c, const OpDesc& op,
                                            const Work&) { zeroCopyAllReduce(c, op); }},
                    {OpKind::kReduceScatter, [](chorusComm* c, const OpDesc& op,
                                                const Work&) { zeroCopyReduceScatter(c, op); }},
                    {OpKind::kAllGather, [](chorusComm* c, const OpDesc& op,
                                            const Work&) { zeroCopyAllGather(c, op); }}}),
};

}  // namespace chorus
