// Point-to-point batches: every send and receive of a group progresses in one loop that never
// blocks on a single transfer, so any call order completes. Per peer and direction, transfers
// keep their issue order (the FIFO carries them one after the other).
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
  size_t left = 0;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const P2PTransfer& t = transfers[i];
    if (t.bytes == 0) continue;
    const int d = t.isSend ? 0 : 1;
    int32_t& tail = sc.tail[d][size_t(t.peer)];
    (tail < 0 ? sc.head[d][size_t(t.peer)] : sc.next[size_t(tail)]) = int32_t(i);
    tail = int32_t(i);
    ++left;
  }
  Waiter waiter(comm, -1, what, /*fifoWait=*/true);
  while (left > 0) {
    bool progressed = false;
    int waitingOn = -1;
    for (int p = 0; p < n; ++p) {
      int32_t& sq = sc.head[0][size_t(p)];
      if (sq >= 0) {
        SendConn& s = comm->sendConn(0, channel, p);
        while (sq >= 0) {
          const P2PTransfer& t = transfers[size_t(sq)];
          size_t& done = sc.done[size_t(sq)];
          const size_t k = trySendChunk(s, t.buf + done, t.bytes - done);
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
        while (rq >= 0) {
          const P2PTransfer& t = transfers[size_t(rq)];
          size_t& done = sc.done[size_t(rq)];
          const size_t k = tryRecvChunk(comm, rc, t.buf + done, t.bytes - done, what);
          if (k == 0) break;
          done += k;
          progressed = true;
          if (done == t.bytes) {
            rq = sc.next[size_t(rq)];
            --left;
          }
        }
        if (rq >= 0) waitingOn = p;
      }
    }
    if (!progressed && left > 0) {
      waiter.setPeer(waitingOn);
      waiter.pause();
    }
  }
}

}  // namespace chorus
