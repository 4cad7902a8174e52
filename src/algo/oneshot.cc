// One-shot collectives for latency-bound sizes: one hand-off instead of the ring's or chain's
// n - 1 or more. AllReduce, AllGather, Broadcast and ReduceScatter share the exchange below;
// each then reads what it needs from the slots.
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
#include <cstring>

#include "algo/algo.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "reduce/reduce.h"

namespace chorus {

namespace {
const char* slotData(const OneShotSlot* s) {
  return reinterpret_cast<const char*>(s) + 64;
}

// Publishes `bytes` of `src` in this rank's slot of the call's parity and waits until every
// peer's slot of that parity holds the same call (see above); returns the parity. Every rank of
// the communicator takes part, whatever it publishes (a Broadcast's non-roots publish nothing
// but the sequence number, which is what lets the root reuse its slot two calls later).
int exchange(chorusComm* comm, const void* src, size_t bytes, const char* what) {
  const int n = comm->nranks;
  const uint64_t seq = ++comm->oneShotSeq;
  const int parity = int(seq & 1);
  OneShotSlot* mine = comm->mySegment.oneShotSlot(parity);
  if (bytes > 0) memcpy(reinterpret_cast<char*>(mine) + 64, src, bytes);
  mine->seq.store(seq, std::memory_order_release);
  // Wake the peers that sleep on their doorbells waiting for this input (transport/fifo.h): one
  // fence orders the publication before every `sleeping` load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int p = 0; p < n; ++p) {
    if (p == comm->rank) continue;
    Doorbell* d = &comm->peerSegments[size_t(p)].header()->bell;
    if (d->sleeping.load(std::memory_order_relaxed) != 0) ringDoorbell(d);
  }
  // Wait for every peer's input (any order; each wait watches abort, death and the timeout, and
  // sleeps on this rank's doorbell once it has polled a while).
  for (int p = 0; p < n; ++p) {
    if (p == comm->rank) continue;
    const OneShotSlot* s = comm->peerSegments[size_t(p)].oneShotSlot(parity);
    if (s->seq.load(std::memory_order_acquire) != seq) {
      Waiter w(comm, p, what, /*fifoWait=*/true);
      while (s->seq.load(std::memory_order_acquire) != seq) w.pause();
    }
  }
  // A peer that failed or aborted after it published its input must fail this call too, as the
  // ring's later hand-offs would (its segment's failure flag; a cheap read of a quiet line).
  for (int p = 0; p < n; ++p)
    if (p != comm->rank && comm->peerHeader(p)->failed.load(std::memory_order_relaxed) != 0)
      Waiter(comm, p, what).checkNow();
  return parity;
}

// Rank p's published data of the call's parity.
const char* input(chorusComm* comm, int p, int parity) {
  return slotData(p == comm->rank ? comm->mySegment.oneShotSlot(parity)
                                  : comm->peerSegments[size_t(p)].oneShotSlot(parity));
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
  const int parity = exchange(comm, op.sendbuff, bytes, "AllReduce");
  if (bytes == 0) return;
  // recvbuff may be sendbuff (in place): the inputs are all read from the slots.
  reduceInputs(comm, op, parity, 0, op.count, op.recvbuff);
}

// AllGather: every rank publishes its block, every rank copies the n blocks (its own from its
// slot too: in place, sendbuff is its block of recvbuff).
void oneShotAllGather(chorusComm* comm, const OpDesc& op) {
  const size_t block = op.count * chorusTypeSize(op.type);
  if (block == 0) return;  // every rank knows: nothing to exchange
  const int parity = exchange(comm, op.sendbuff, block, "AllGather");
  char* out = static_cast<char*>(op.recvbuff);
  for (int p = 0; p < comm->nranks; ++p)
    memcpy(out + size_t(p) * block, input(comm, p, parity), block);
}

// Broadcast: the root publishes its buffer, every other rank copies it.
void oneShotBroadcast(chorusComm* comm, const OpDesc& op) {
  const size_t bytes = op.count * chorusTypeSize(op.type);
  const bool root = comm->rank == op.root;
  if (bytes == 0) return;
  const int parity = exchange(comm, op.sendbuff, root ? bytes : 0, "Broadcast");
  if (!root)
    memcpy(op.recvbuff, input(comm, op.root, parity), bytes);
  else if (op.recvbuff != op.sendbuff)
    memcpy(op.recvbuff, op.sendbuff, bytes);
}

// ReduceScatter: every rank publishes its n blocks; rank r reduces block r of every input.
void oneShotReduceScatter(chorusComm* comm, const OpDesc& op) {
  const size_t block = op.count * chorusTypeSize(op.type);
  if (block == 0) return;
  const int parity = exchange(comm, op.sendbuff, block * size_t(comm->nranks), "ReduceScatter");
  reduceInputs(comm, op, parity, block * size_t(comm->rank), op.count, op.recvbuff);
}

}  // namespace chorus
