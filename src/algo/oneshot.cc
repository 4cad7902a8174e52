// One-shot AllReduce for latency-bound sizes: one hand-off instead of the ring's 2(n-1).
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
#include "core/comm.h"
#include "core/wait.h"
#include "reduce/reduce.h"

namespace chorus {

namespace {
const char* slotData(const OneShotSlot* s) {
  return reinterpret_cast<const char*>(s) + 64;
}
}  // namespace

void oneShotAllReduce(chorusComm* comm, const OpDesc& op) {
  const int n = comm->nranks;
  const size_t esz = chorusTypeSize(op.type), bytes = op.count * esz;
  const uint64_t seq = ++comm->oneShotSeq;
  const int parity = int(seq & 1);
  OneShotSlot* mine = comm->mySegment.oneShotSlot(parity);
  if (bytes > 0) memcpy(reinterpret_cast<char*>(mine) + 64, op.sendbuff, bytes);
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
      Waiter w(comm, p, "AllReduce", /*fifoWait=*/true);
      while (s->seq.load(std::memory_order_acquire) != seq) w.pause();
    }
  }
  // A peer that failed or aborted after it published its input must fail this call too, as the
  // ring's later hand-offs would (its segment's failure flag; a cheap read of a quiet line).
  for (int p = 0; p < n; ++p)
    if (p != comm->rank && comm->peerHeader(p)->failed.load(std::memory_order_relaxed) != 0)
      Waiter(comm, p, "AllReduce").checkNow();
  if (bytes == 0) return;
  auto input = [&](int p) {
    return slotData(p == comm->rank ? mine : comm->peerSegments[size_t(p)].oneShotSlot(parity));
  };
  const int divisor = op.op == chorusAvg ? n : 0;
  // recvbuff may be sendbuff (in place): the inputs are all read from the slots.
  reduceKernel(op.type, op.op, op.count, input(0), input(1), op.recvbuff, nullptr,
               n == 2 ? divisor : 0);
  for (int p = 2; p < n; ++p)
    reduceKernel(op.type, op.op, op.count, op.recvbuff, input(p), op.recvbuff, nullptr,
                 p == n - 1 ? divisor : 0);
}

}  // namespace chorus
