// The TCP proxy thread (net/tcp.h): moves the bytes between the rank's FIFOs and the sockets
// (progressOut drains the staging FIFOs, progressIn fills the rank's receive FIFOs), reads the
// control connections and settles lost connections (net/tcp_control.cc), and sleeps on epoll
// when nothing moves.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "net/tcp.h"
#include "net/tcp_internal.h"
#include "net/tcp_wire.h"

namespace chorus {

using namespace tcpwire;
using namespace tcpimpl;

namespace {
constexpr auto kControlEvery = std::chrono::milliseconds(1);
}  // namespace

void TcpLinks::proxyDied(chorusResult_t code, const std::string& message) noexcept {
  try {
    CHORUS_WARN(comm_->rank, "%s", message.c_str());
    for (int p = 0; p < comm_->nranks; ++p)
      if (comm_->isRemote(p)) failPeer(p, comm_->rank, message);
    markFailed(comm_, code, message, comm_->rank);
    Deadline until = deadlineIn(0.2);  // this thread no longer runs: send the notice here
    while (!flushNotices() && Clock::now() < until) usleep(200);
  } catch (...) {  // out of memory even for the notice: the failed links still stop the rank
  }
}

bool TcpLinks::progressOut(Link& l) {
  bool did = false;
  while (l.staged.dataReady()) {
    const uint64_t word = l.staged.slotWord();  // the size and the message-start marker
    const uint64_t bytes = slotBytesOf(word);
    const int fd = l.fds[l.staged.head % uint64_t(nsocks_)];
    while (l.outDone < 8 + bytes) {
      iovec iov[2];
      int cnt = 0;
      if (l.outDone < 8) {
        iov[cnt++] = {reinterpret_cast<char*>(const_cast<uint64_t*>(&word)) + l.outDone,
                      8 - l.outDone};
        iov[cnt++] = {const_cast<char*>(l.staged.slot()), bytes};
      } else {
        iov[cnt++] = {const_cast<char*>(l.staged.slot()) + (l.outDone - 8),
                      bytes - (l.outDone - 8)};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = size_t(cnt);
      ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return did;
        fail(chorusRemoteError, "send to rank %d: %s", l.peer, strerror(errno));
      }
      l.outDone += size_t(k);
      did = true;
    }
    l.outDone = 0;
    l.staged.release();
    did = true;
  }
  return did;
}

bool TcpLinks::progressIn(Link& l) {
  bool did = false;
  while (l.local.slotFree()) {
    const int fd = l.fds[l.local.tail % uint64_t(nsocks_)];
    const bool header = l.in.inHeader();
    char* dest = header ? l.in.headerDest() : l.local.slot() + l.in.payloadOffset();
    const size_t want = header ? l.in.headerWant() : l.in.payloadWant();
    FrameReader::Status st = FrameReader::Status::kComplete;
    // (A zero-length frame is complete with its header.) Nothing to read on a connection with
    // no arrival since its last empty read.
    if (want > 0) {
      if (!mayRead_[size_t(fd)]) return did;
      ssize_t k = recv(fd, dest, want, 0);
      if (k == 0)
        fail(chorusRemoteError, "rank %d closed the connection%s", l.peer,
             header && l.in.headerWant() == 8 ? "" : " in the middle of a slot");
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) mayRead_[size_t(fd)] = 0;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return did;
        fail(chorusRemoteError, "receive from rank %d: %s", l.peer, strerror(errno));
      }
      did = true;
      st = l.in.advance(size_t(k));
    }
    if (st == FrameReader::Status::kBadLength)
      fail(chorusRemoteError, "rank %d sent a %llu-byte slot (larger than %zu): protocol error",
           l.peer, (unsigned long long)l.in.length(), l.local.slotBytes);
    if (st == FrameReader::Status::kMore) continue;
    l.local.post(l.in.word());
    l.in.next();
    did = true;
  }
  return did;
}

// A data connection ended in one direction (end of file, reset, an error): nothing more moves
// there. The peer is lost unless it left (a departure after its last slot). Proxy thread.
void TcpLinks::linkEnded(Link& l, bool in, const std::string& why) {
  (in ? l.inEnded : l.outEnded) = true;
  peerLost(l.peer, why);
  noteDrained(l.peer);
}

// A peer that left is drained once every link from it reached its end: all it sent is in this
// rank's FIFOs (posted before the flag is set). Proxy thread.
void TcpLinks::noteDrained(int peer) {
  if (!left_[size_t(peer)].load() || drained_[size_t(peer)].load()) return;
  for (auto& l : links_)
    if (l->peer == peer && !l->inEnded) return;
  drained_[size_t(peer)].store(true, std::memory_order_release);
}

void TcpLinks::proxyLoop() {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakeFd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, wakeFd_, &ev);
  int maxFd = wakeFd_;
  for (auto& l : links_)
    for (int fd : l->fds) {
      epoll_event e{};
      e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      e.data.fd = fd;
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
      maxFd = std::max(maxFd, fd);
    }
  for (auto& c : controls_) {
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    e.data.fd = c->fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
    maxFd = std::max(maxFd, c->fd);
  }
  // Every connection is read once at the start (bytes may have come before it was added); from
  // then on only after an epoll event: edge-triggered, every arrival after an empty read raises
  // one, so none is missed.
  mayRead_.assign(size_t(maxFd) + 1, 1);
  epoll_event events[64];
  const auto noteEvents = [&](int k) {
    for (int i = 0; i < k; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wakeFd_) {
        uint64_t v;
        ssize_t r = read(wakeFd_, &v, sizeof(v));
        (void)r;
      } else if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        mayRead_[size_t(fd)] = 1;
      }
    }
  };
  int idle = 0;
  Clock::time_point nextControl{};
  while (!stop_.load(std::memory_order_relaxed)) {
    bool did = false, fifoFull = false, lossPending = false;
    // What arrived since the last turn: one call for every connection.
    noteEvents(epoll_wait(ep, events, 64, 0));
    // Control connections: the rest of our notice at once (else every kControlEvery), the
    // peers' notices as they arrive.
    const Clock::time_point now = Clock::now();
    if (noticeQueued_.load(std::memory_order_relaxed) || now >= nextControl) {
      if (noticeQueued_.load() && flushNotices()) noticeQueued_.store(false);
      nextControl = now + kControlEvery;
    }
    for (auto& c : controls_)
      if (mayRead_[size_t(c->fd)]) {
        mayRead_[size_t(c->fd)] = 0;  // before the read: what comes during it raises an event
        progressControl(*c);
      }
    for (size_t p = 0; lossesPending_ > 0 && p < lossWhy_.size(); ++p)
      if (!lossWhy_[p].empty() && !settleLoss(int(p), now)) lossPending = true;
    for (auto& l : links_) {
      if (failed_[size_t(l->peer)].load() || !lossWhy_[size_t(l->peer)].empty()) continue;
      if (!l->outEnded) try {
          did = progressOut(*l) || did;
        } catch (const Failure& e) {
          linkEnded(*l, false, e.message);
        }
      if (!l->inEnded) try {
          did = progressIn(*l) || did;
          if (!l->local.slotFree()) fifoFull = true;
        } catch (const Failure& e) {
          linkEnded(*l, true, e.message);
        }
      if (!lossWhy_[size_t(l->peer)].empty()) lossPending = true;
    }
    if (did) {
      idle = 0;
      continue;
    }
    if (++idle < 32) {
      sched_yield();
      continue;
    }
    // Sleep until a socket or the rank (eventfd) wakes us; poll the receive FIFOs every 50 us
    // while one of them is full (the rank frees slots without a wake-up).
    const int k = epoll_wait(ep, events, 64, fifoFull ? 0 : lossPending ? 1 : 20);
    noteEvents(k);
    if (fifoFull && k <= 0) usleep(50);
  }
  ::close(ep);
}

}  // namespace chorus
