// The control plane of the TCP links (net/tcp.h), over one control connection per remote
// peer: failure notices out (notifyFailure, written by the failing thread itself) and in
// (progressControl), the settling of a lost data connection (a notice, a departure or a death),
// shrink messages, and status queries with their answers.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/hang_report.h"
#include "comm/wait.h"
#include "net/tcp.h"
#include "net/tcp_internal.h"
#include "net/tcp_wire.h"

namespace chorus {

using namespace tcpwire;
using namespace tcpimpl;

namespace {
// How long a lost data connection waits for the peer's failure notice while its control
// connection stays open (a peer that exits closes both at once: end of file ends the wait).
constexpr auto kNoticeGrace = std::chrono::milliseconds(100);
}  // namespace

const char* TcpLinks::failureReason(int peer) const {
  return reasons_[size_t(peer)].c_str();
}

// Proxy thread only (the single writer of reasons_ and causes_).
void TcpLinks::failPeer(int peer, int cause, const std::string& reason) {
  if (failed_[size_t(peer)].load()) return;
  reasons_[size_t(peer)] = reason;
  causes_[size_t(peer)] = cause;
  failed_[size_t(peer)].store(1);
  CHORUS_WARN(comm_->rank, "TCP: %s", reason.c_str());
}

void TcpLinks::notifyFailure(int cause, const std::string& message) {
  const int me = comm_->rank;
  if (cause < 0 || cause >= comm_->nranks) cause = me;
  NoticeKind kind = NoticeKind::kFailed;
  if (cause != me) {
    const bool died = comm_->isRemote(cause)
                          ? dead_[size_t(cause)].load()
                          : comm_->peers[size_t(cause)].pid != getpid() &&
                                !processAlive(pid_t(comm_->peers[size_t(cause)].pid));
    if (died) kind = NoticeKind::kDied;
  }
  {
    std::lock_guard<std::mutex> l(noticeMu_);
    if (!notice_.empty()) return;  // the first cause sticks
    notice_ = encodeNotice(kind, cause, message);
    for (auto& c : controls_) queueControl(*c, notice_);
  }
  // Written now, by this thread: the rank may exit as soon as its call returns, and a notice
  // left for the proxy thread would die with it (its peers would then see its sockets close and
  // blame it). A control connection carries nothing else, so its send buffer has room: this
  // does not block. What did not fit (never, in practice) the proxy finishes.
  if (!flushNotices()) {
    noticeQueued_.store(true);
    wake(wakeFd_);
  }
}

// Appended after what the connection is still sending (never over it: a failure notice may
// follow a shrink message). Called with noticeMu_ held.
void TcpLinks::queueControl(Control& c, const std::string& bytes) {
  if (c.outDone >= c.out.size()) c.out.clear(), c.outDone = 0;
  c.out += bytes;
}

bool TcpLinks::flushNotices() {
  std::lock_guard<std::mutex> l(noticeMu_);
  bool all = true;
  for (auto& c : controls_) {
    while (c->outDone < c->out.size()) {
      const ssize_t k =
          send(c->fd, c->out.data() + c->outDone, c->out.size() - c->outDone, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        all = false;
        break;
      }
      if (k < 0) {
        c->out.clear(), c->outDone = 0;  // the peer is gone: nobody to tell
        break;
      }
      c->outDone += size_t(k);
    }
  }
  if (all && !notice_.empty()) noticeSent_.store(true);
  return all;
}

// A data connection to `peer` closed or reset (proxy thread). The peer died, or it failed
// because of another rank and left: its notice, written before it could exit, is then on the
// control connection, ahead of that connection's end of file. settleLoss decides.
void TcpLinks::peerLost(int peer, const std::string& why) {
  if (failed_[size_t(peer)].load() || left_[size_t(peer)].load() || !lossWhy_[size_t(peer)].empty())
    return;
  lossWhy_[size_t(peer)] = format("lost the connection to rank %d (node %d): %s", peer,
                                  comm_->nodeOf[size_t(peer)], why.c_str());
  lossUntil_[size_t(peer)] = Clock::now() + kNoticeGrace;
  ++lossesPending_;
  settleLoss(peer, Clock::now());
}

// Reads the lost peer's control connection: a kLeft notice settles it as a departure, another
// notice fails the peer with its cause; end of file (or the grace over) without one means the
// peer itself died or exited without destroying its communicator. True once settled.
bool TcpLinks::settleLoss(int peer, Clock::time_point now) {
  Control* c = controlOf_[size_t(peer)];
  if (c != nullptr) progressControl(*c);
  if (left_[size_t(peer)].load() && !failed_[size_t(peer)].load()) {
    lossWhy_[size_t(peer)].clear();
    --lossesPending_;
    noteDrained(peer);
    return true;
  }
  if (!failed_[size_t(peer)].load() &&
      (c == nullptr || c->closed || now >= lossUntil_[size_t(peer)])) {
    dead_[size_t(peer)].store(true);  // its sockets closed or reset, no notice: it died or left
    failPeer(peer, peer, lossWhy_[size_t(peer)]);
  }
  if (!failed_[size_t(peer)].load()) return false;
  lossWhy_[size_t(peer)].clear();
  --lossesPending_;
  return true;
}

void TcpLinks::publishShrink(const std::string& message) {
  {
    std::lock_guard<std::mutex> l(noticeMu_);
    const std::string bytes = encodeShrinkNotice(comm_->rank, message);
    for (auto& c : controls_) queueControl(*c, bytes);
  }
  if (!flushNotices()) {  // the rest by the proxy
    noticeQueued_.store(true);
    wake(wakeFd_);
  }
}

bool TcpLinks::latestShrink(int peer, std::string* message) {
  std::lock_guard<std::mutex> l(shrinkMu_);
  if (shrinkIn_[size_t(peer)].empty()) return false;
  *message = shrinkIn_[size_t(peer)];
  return true;
}

bool TcpLinks::queryStatus(int peer, double seconds, PeerStatus* out) {
  Control* c = controlOf_[size_t(peer)];
  if (c == nullptr || controlClosed_[size_t(peer)].load()) return false;
  uint64_t before;
  {
    std::lock_guard<std::mutex> l(shrinkMu_);
    before = statusCount_[size_t(peer)];
  }
  {
    std::lock_guard<std::mutex> l(noticeMu_);
    queueControl(*c, encodeNotice(NoticeKind::kStatusQuery, comm_->rank, ""));
  }
  if (!flushNotices()) noticeQueued_.store(true);
  wake(wakeFd_);
  const Deadline until = deadlineIn(seconds);
  while (Clock::now() < until) {
    {
      std::lock_guard<std::mutex> l(shrinkMu_);
      if (statusCount_[size_t(peer)] != before) {
        *out = statusIn_[size_t(peer)];
        return true;
      }
    }
    if (controlClosed_[size_t(peer)].load()) return false;
    usleep(1000);
  }
  return false;
}

// This rank's state for a peer's status query (proxy thread): from its own segment header.
static std::string statusAnswer(chorusComm* comm) {
  StatusBody b;
  if (comm->mySegment.base() != nullptr) {
    const PeerStatus st = segmentStatus(comm, comm->rank, steadyNs(Clock::now()));
    b.waitingFor = st.waitingFor;
    b.aliveAgeMs = st.aliveAgeMs;
    b.seq = st.seq;
    b.op = st.op;
    b.failed = st.failed;
  }
  return encodeStatus(comm->rank, b);
}

// Reads the peer's notice (flushNotices sends ours). Proxy thread.
void TcpLinks::progressControl(Control& c) {
  if (c.closed) return;
  const int me = comm_->rank;
  char buf[1024];
  while (true) {
    const ssize_t k = recv(c.fd, buf, sizeof(buf), 0);
    if (k > 0) {
      c.in.append(buf, size_t(k));
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.closed = true;
    break;
  }
  while (!c.in.empty()) {
    const NoticeParse np = parseNotice(c.in.data(), c.in.size(), comm_->nranks);
    if (np.status == NoticeParse::Status::kNeedMore) break;
    const int node = comm_->nodeOf[size_t(c.peer)];
    if (np.status == NoticeParse::Status::kBad) {
      failPeer(c.peer, c.peer,
               format("rank %d (node %d) sent a malformed failure notice", c.peer, node));
      c.in.clear();
      c.closed = true;
      break;
    }
    c.in.erase(0, np.consumed);
    if (np.kind == NoticeKind::kShrink) {  // not a failure: core/shrink.cc parses it
      std::lock_guard<std::mutex> l(shrinkMu_);
      shrinkIn_[size_t(c.peer)] = np.text;
      continue;
    }
    if (np.kind == NoticeKind::kStatusQuery) {  // answered at once, from the segment header
      if (np.cause == c.peer) {
        {
          std::lock_guard<std::mutex> l(noticeMu_);
          queueControl(c, statusAnswer(comm_));
        }
        if (!flushNotices()) noticeQueued_.store(true);
      }
      continue;
    }
    if (np.kind == NoticeKind::kStatus) {  // an answer to this rank's query
      StatusBody b;
      if (np.cause == c.peer && parseStatusText(np.text, comm_->nranks, &b)) {
        std::lock_guard<std::mutex> l(shrinkMu_);
        statusIn_[size_t(c.peer)] =
            PeerStatus{int(b.waitingFor), b.aliveAgeMs, b.seq, b.op, int(b.failed)};
        ++statusCount_[size_t(c.peer)];
      }
      continue;
    }
    if (np.kind == NoticeKind::kLeft) {  // a departure (the sender only speaks for itself)
      if (np.cause == c.peer) {
        left_[size_t(c.peer)].store(true);
        noteDrained(c.peer);
      }
      continue;
    }
    if (np.kind == NoticeKind::kDied) dead_[size_t(np.cause)].store(true);
    if (np.cause == c.peer)
      failPeer(c.peer, np.cause,
               format("peer rank %d (node %d) failed: %s", c.peer, node,
                      np.text.empty() ? "(no reason given)" : np.text.c_str()));
    else if (np.cause == me)
      failPeer(c.peer, np.cause,
               format("peer rank %d (node %d) failed because of this rank", c.peer, node));
    else
      failPeer(c.peer, np.cause,
               format("rank %d %s (reported by peer rank %d of node %d)", np.cause,
                      np.kind == NoticeKind::kDied ? "died" : "failed", c.peer, node));
  }
  // Published after the notices that came before the end (a shrink message, then the close).
  if (c.closed) controlClosed_[size_t(c.peer)].store(true);
}

}  // namespace chorus
