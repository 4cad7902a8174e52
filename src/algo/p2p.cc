// Point-to-point batches: every send and receive of a group progresses in one loop that never
// blocks on a single transfer, so any call order completes. Per peer and direction, transfers
// keep their issue order (the FIFO carries them one after the other).
#include <algorithm>
#include <deque>

#include "algo/algo.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/wait.h"
#include "reduce/reduce.h"

namespace chorus {

namespace {
struct Pending {
  char* buf;
  size_t bytes;
  size_t done;
};
}  // namespace

void runP2P(chorusComm* comm, const std::vector<P2PTransfer>& transfers, const char* what) {
  const int n = comm->nranks;
  const int channel = 0;
  std::vector<std::deque<Pending>> sends(static_cast<size_t>(n)), recvs(static_cast<size_t>(n));
  size_t left = 0;
  for (const auto& t : transfers) {
    if (t.bytes == 0) continue;
    (t.isSend ? sends : recvs)[size_t(t.peer)].push_back({t.buf, t.bytes, 0});
    ++left;
  }
  Waiter waiter(comm, -1, what, /*fifoWait=*/true);
  while (left > 0) {
    bool progressed = false;
    int waitingOn = -1;
    for (int p = 0; p < n; ++p) {
      auto& sq = sends[size_t(p)];
      if (!sq.empty()) {
        SendConn& s = comm->sendConn(0, channel, p);
        while (!sq.empty() && s.slotFree()) {
          Pending& t = sq.front();
          size_t k = std::min(s.slotBytes, t.bytes - t.done);
          copyKernel(s.slot(), nullptr, t.buf + t.done, k);
          s.post(k);
          t.done += k;
          progressed = true;
          if (t.done == t.bytes) {
            sq.pop_front();
            --left;
          }
        }
        if (!sq.empty()) waitingOn = p;
      }
      auto& rq = recvs[size_t(p)];
      if (!rq.empty()) {
        RecvConn& rc = comm->recvConn(0, channel, p);
        while (!rq.empty() && rc.dataReady()) {
          Pending& t = rq.front();
          size_t k = rc.slotSize();
          if (k > t.bytes - t.done || k == 0)
            fail(chorusInvalidUsage,
                 "rank %d: %s: rank %d sent more data than this rank receives (%zu bytes "
                 "expected); do the counts of chorusSend and chorusRecv match?",
                 comm->rank, what, p, t.bytes);
          copyKernel(t.buf + t.done, nullptr, rc.slot(), k);
          rc.release();
          t.done += k;
          progressed = true;
          if (t.done == t.bytes) {
            rq.pop_front();
            --left;
          }
        }
        if (!rq.empty()) waitingOn = p;
      }
    }
    if (!progressed && left > 0) {
      waiter.setPeer(waitingOn);
      waiter.pause();
    }
  }
}

}  // namespace chorus
