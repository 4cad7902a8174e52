// Point-to-point batches: every send and receive of a group progresses in one loop that never
// blocks on a single transfer, so any call order completes. Per peer and direction, transfers
// keep their issue order (the FIFO carries them one after the other).
//
// Any-source receives (chorusRecvAny, peer kAnySource) are matched here, one at a time in issue
// order, as MPI matches: the first unmatched one takes the first peer p (looking round-robin
// from the peer after the last match) whose FIFO holds the first slot of a chorusSend message
// (transport/fifo.h kSlotMessageStart: a collective's data is never taken) and that has no
// receive issued before it still pending in the batch (whose bytes come first from p). It then
// goes first in p's receive queue. A receive issued after an unmatched any-source receive waits
// until that one is matched (the message it would take may be the one the earlier receive must
// get). Matching looks only at FIFO heads already there: no allocation, no wait of its own.
#include <algorithm>

#include "algo/algo.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "prims/fan.h"

namespace chorus {

void runP2P(chorusComm* comm, const std::vector<P2PTransfer>& transfers, const char* what) {
  const int n = comm->nranks;
  const int channel = 0;
  // Per peer and direction, a list of the pending transfers in issue order (indices into
  // `transfers`), in the communicator's reused scratch: no allocation once it is large enough.
  P2PState& sc = algoState<P2PState>(comm, Algo::kDirect);
  for (int d = 0; d < 2; ++d) {
    sc.head[d].assign(size_t(n), -1);
    sc.tail[d].assign(size_t(n), -1);
  }
  sc.next.assign(transfers.size(), -1);
  sc.done.assign(transfers.size(), 0);
  sc.any.clear();
  size_t left = 0;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const P2PTransfer& t = transfers[i];
    if (t.bytes == 0) continue;
    if (t.peer == kAnySource) {
      sc.any.push_back(int32_t(i));
      ++left;
      continue;
    }
    const int d = t.isSend ? 0 : 1;
    int32_t& tail = sc.tail[d][size_t(t.peer)];
    (tail < 0 ? sc.head[d][size_t(t.peer)] : sc.next[size_t(tail)]) = int32_t(i);
    tail = int32_t(i);
    ++left;
  }
  size_t nextAny = 0;  // the first unmatched any-source receive (index into sc.any)
  // Whether receive i waits for an earlier any-source receive to be matched first.
  auto held = [&](int32_t i) { return nextAny < sc.any.size() && sc.any[nextAny] < i; };
  Waiter waiter(comm, -1, what, /*fifoWait=*/true);
  while (left > 0) {
    bool progressed = false;
    int waitingOn = -1;
    while (nextAny < sc.any.size()) {
      const int32_t a = sc.any[nextAny];
      int matched = -1;
      for (int k = 0; k < n && matched < 0; ++k) {
        const int p = (sc.anyStart + k) % n;
        const int32_t h = sc.head[1][size_t(p)];
        if (p == comm->rank || (h >= 0 && h < a)) continue;
        const RecvConn& rc = comm->recvConn(0, channel, p);
        if (rc.dataReady() && rc.slotStartsMessage()) matched = p;
      }
      if (matched < 0) break;
      sc.anyStart = (matched + 1) % n;
      int32_t& h = sc.head[1][size_t(matched)];  // every receive queued there came after `a`
      sc.next[size_t(a)] = h;
      if (h < 0) sc.tail[1][size_t(matched)] = a;
      h = a;
      if (transfers[size_t(a)].source != nullptr) *transfers[size_t(a)].source = matched;
      ++nextAny;
      progressed = true;
    }
    for (int p = 0; p < n; ++p) {
      int32_t& sq = sc.head[0][size_t(p)];
      if (sq >= 0) {
        SendConn& s = comm->sendConn(0, channel, p);
        while (sq >= 0) {
          const P2PTransfer& t = transfers[size_t(sq)];
          size_t& done = sc.done[size_t(sq)];
          const size_t k = trySendChunk(s, t.buf + done, t.bytes - done, t.message && done == 0);
          if (k == 0) break;
          done += k;
          progressed = true;
          if (done == t.bytes) {
            sq = sc.next[size_t(sq)];
            --left;
          }
        }
        if (sq >= 0) waitingOn = p;
      }
      int32_t& rq = sc.head[1][size_t(p)];
      if (rq >= 0) {
        RecvConn& rc = comm->recvConn(0, channel, p);
        while (rq >= 0 && !held(rq)) {
          const P2PTransfer& t = transfers[size_t(rq)];
          size_t& done = sc.done[size_t(rq)];
          // An any-source receive matched a message of exactly its size: a new message from
          // its peer before it is full means the sender's was shorter. Test readiness once and
          // decide on that slot: a second test could see the next message arrive in between.
          if (t.peer == kAnySource && done > 0) {
            if (!rc.dataReady()) break;
            if (rc.slotStartsMessage())
              fail(chorusInvalidUsage,
                   "rank %d: %s: the message rank %d sent is %zu bytes, shorter than the %zu bytes "
                   "of the any-source receive it matched (chorusRecvAny's count must equal "
                   "chorusSend's)",
                   comm->rank, what, p, done, t.bytes);
          }
          const size_t k = tryRecvChunk(comm, rc, t.buf + done, t.bytes - done, what);
          if (k == 0) break;
          done += k;
          progressed = true;
          if (done == t.bytes) {
            rq = sc.next[size_t(rq)];
            --left;
          }
        }
        if (rq >= 0 && !held(rq)) waitingOn = p;
      }
    }
    if (!progressed && left > 0) {
      waiter.setPeer(waitingOn);
      waiter.pause();
    }
  }
}

}  // namespace chorus
