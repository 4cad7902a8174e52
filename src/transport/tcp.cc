#include "transport/tcp.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "bootstrap/siphash.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"

namespace chorus {

void SendConn::wakeProxy() const {
  uint64_t one = 1;
  ssize_t n = write(wakeFd, &one, sizeof(one));
  (void)n;  // a full eventfd counter already means "wake up"
}

namespace {
constexpr uint32_t kDataMagic = 0x41544443;  // "CDTA"
constexpr size_t kCtrlBytes = 4096;

struct DataHello {
  uint32_t magic;
  int32_t rank;
  int32_t channel;
  int32_t sock;
  uint64_t proof;
};

uint64_t proof(const uint8_t secret[16], const uint8_t nonce[16], char role) {
  uint8_t msg[17];
  memcpy(msg, nonce, 16);
  msg[16] = uint8_t(role);
  return sipHash24(secret, msg, sizeof(msg));
}

void setBlocking(int fd, bool blocking) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}
}  // namespace

struct TcpTransport::Link {
  int peer = -1, channel = 0;
  std::vector<int> fds;
  RecvConn staged;  // the rank's outgoing slots, drained to the sockets
  SendConn local;   // the rank's receive FIFO from the peer, filled from the sockets
  size_t outDone = 0;
  uint64_t inBytes = 0;
  size_t inDone = 0;
};

int TcpTransport::openListener(SockAddr* addr) { return listenOn(addr); }

TcpTransport::TcpTransport(chorusComm* comm, int listenFd, const std::vector<SockAddr>& addrs,
                           const uint8_t secret[16])
    : comm_(comm) {
  const int n = comm->nranks, me = comm->rank, nch = comm->nchannels;
  nsocks_ = int(std::clamp<int64_t>(envInt("CHORUS_NSOCKS_PERTHREAD", 1) *
                                        envInt("CHORUS_SOCKET_NTHREADS", 1),
                                    1, 16));
  failed_.reset(new std::atomic<int>[size_t(n)]);
  for (int i = 0; i < n; ++i) failed_[size_t(i)].store(0);
  reasons_.assign(size_t(n), "");
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) fail(chorusSystemError, "eventfd: %s", strerror(errno));

  // Sockets: key (peer, channel, sock) -> fd.
  std::map<std::tuple<int, int, int>, int> fds;
  std::mutex mu;
  int expected = 0;
  for (int p = 0; p < me; ++p)
    if (comm->nodeOf[size_t(p)] != comm->nodeOf[size_t(me)]) expected += nch * nsocks_;
  const double hs = double(envInt("CHORUS_HANDSHAKE_TIMEOUT_MS", 5000)) / 1000.0;
  Deadline deadline = deadlineIn(bootstrapTimeout());
  std::string acceptError;
  std::thread acceptor([&] {
    int got = 0;
    while (got < expected) {
      try {
        pollfd pf{listenFd, POLLIN, 0};
        poll(&pf, 1, 100);
        if (Clock::now() > deadline) fail(chorusTimeout, "data connections: %d of %d peers connected", got, expected);
        if (comm->abortFlag.load()) fail(chorusInvalidUsage, "aborted during connection setup");
        int fd = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        try {
          uint8_t nonce[16];
          fillRandom(nonce, sizeof(nonce));
          sendAll(fd, nonce, sizeof(nonce), deadlineIn(hs), nullptr, "data handshake");
          DataHello h{};
          recvAll(fd, &h, sizeof(h), deadlineIn(hs), nullptr, "data handshake");
          if (h.magic != kDataMagic || h.proof != proof(secret, nonce, 'D') || h.rank < 0 ||
              h.rank >= me || h.channel < 0 || h.channel >= nch || h.sock < 0 || h.sock >= nsocks_)
            fail(chorusSystemError, "stranger or bad hello");
          uint64_t reply = proof(secret, nonce, 'E');
          sendAll(fd, &reply, sizeof(reply), deadlineIn(hs), nullptr, "data handshake");
          std::lock_guard<std::mutex> l(mu);
          if (!fds.emplace(std::make_tuple(int(h.rank), int(h.channel), int(h.sock)), fd).second)
            fail(chorusSystemError, "duplicate connection");
          ++got;
        } catch (const Failure& e) {
          CHORUS_WARN(me, "data listener: closing a connection: %s", e.message.c_str());
          ::close(fd);
        }
      } catch (const Failure& e) {
        acceptError = e.message;
        return;
      }
    }
  });
  std::string connectError;
  try {
    for (int p = me + 1; p < n; ++p) {
      if (comm->nodeOf[size_t(p)] == comm->nodeOf[size_t(me)]) continue;
      for (int ch = 0; ch < nch; ++ch)
        for (int s = 0; s < nsocks_; ++s) {
          int fd = connectTo(addrs[size_t(p)], deadline, &comm->abortFlag);
          try {
            uint8_t nonce[16];
            recvAll(fd, nonce, sizeof(nonce), deadlineIn(hs * 2), &comm->abortFlag, "data handshake");
            DataHello h{kDataMagic, me, ch, s, proof(secret, nonce, 'D')};
            sendAll(fd, &h, sizeof(h), deadline, &comm->abortFlag, "data handshake");
            uint64_t reply = 0;
            recvAll(fd, &reply, sizeof(reply), deadlineIn(hs * 2), &comm->abortFlag, "data handshake");
            if (reply != proof(secret, nonce, 'E'))
              fail(chorusSystemError, "rank %d's data listener failed to prove the secret", p);
          } catch (...) {
            ::close(fd);
            throw;
          }
          std::lock_guard<std::mutex> l(mu);
          fds[std::make_tuple(p, ch, s)] = fd;
        }
    }
  } catch (const Failure& e) {
    connectError = e.message;
  }
  acceptor.join();
  if (!connectError.empty() || !acceptError.empty()) {
    for (auto& kv : fds) ::close(kv.second);
    ::close(wakeFd_);
    fail(chorusSystemError, "rank %d: TCP setup failed: %s%s", me, connectError.c_str(),
         acceptError.c_str());
  }

  // Links, staging FIFOs, and the rank's receive FIFOs as the proxy's send side.
  const size_t slotBytes = comm->slotBytes[0];
  const size_t stagingBytes = kCtrlBytes + size_t(kNSteps) * slotStride(slotBytes);
  for (int p = 0; p < n; ++p) {
    if (comm->nodeOf[size_t(p)] == comm->nodeOf[size_t(me)]) continue;
    for (int ch = 0; ch < nch; ++ch) {
      auto l = std::make_unique<Link>();
      l->peer = p;
      l->channel = ch;
      for (int s = 0; s < nsocks_; ++s) {
        int fd = fds.at(std::make_tuple(p, ch, s));
        setBlocking(fd, false);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        l->fds.push_back(fd);
      }
      char* mem = static_cast<char*>(aligned_alloc(4096, (stagingBytes + 4095) / 4096 * 4096));
      memset(mem, 0, stagingBytes);
      staging_.push_back(mem);
      l->staged.ctrl = reinterpret_cast<FifoCtrl*>(mem);
      l->staged.slots = mem + kCtrlBytes;
      l->staged.slotBytes = slotBytes;
      l->staged.peer = p;
      l->local.ctrl = comm->mySegment.fifoCtrl(0, ch, p);
      l->local.slots = comm->mySegment.fifoData(0, ch, p);
      l->local.slotBytes = slotBytes;
      l->local.peer = p;
      links_.push_back(std::move(l));
    }
  }
  CHORUS_INFO(me, "TCP transport: %zu links to remote ranks, %d socket(s) each", links_.size(),
              nsocks_);
  proxy_ = std::thread([this] { proxyLoop(); });
}

void TcpTransport::bindSendConn(int peer, int channel, SendConn* conn) {
  for (auto& l : links_)
    if (l->peer == peer && l->channel == channel) {
      conn->ctrl = l->staged.ctrl;
      conn->slots = l->staged.slots;
      conn->slotBytes = l->staged.slotBytes;
      conn->peer = peer;
      conn->wakeFd = wakeFd_;
      return;
    }
}

const char* TcpTransport::failureReason(int peer) const { return reasons_[size_t(peer)].c_str(); }

bool TcpTransport::progressOut(Link& l) {
  bool did = false;
  while (l.staged.dataReady()) {
    const uint64_t bytes = l.staged.slotSize();
    const int fd = l.fds[l.staged.head % uint64_t(nsocks_)];
    while (l.outDone < 8 + bytes) {
      iovec iov[2];
      int cnt = 0;
      if (l.outDone < 8) {
        iov[cnt++] = {reinterpret_cast<char*>(const_cast<uint64_t*>(&bytes)) + l.outDone, 8 - l.outDone};
        iov[cnt++] = {const_cast<char*>(l.staged.slot()), bytes};
      } else {
        iov[cnt++] = {const_cast<char*>(l.staged.slot()) + (l.outDone - 8), bytes - (l.outDone - 8)};
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

bool TcpTransport::progressIn(Link& l) {
  bool did = false;
  while (l.local.slotFree()) {
    const int fd = l.fds[l.local.tail % uint64_t(nsocks_)];
    if (l.inDone < 8) {
      ssize_t k = recv(fd, reinterpret_cast<char*>(&l.inBytes) + l.inDone, 8 - l.inDone, 0);
      if (k == 0) fail(chorusRemoteError, "rank %d closed the connection", l.peer);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return did;
        fail(chorusRemoteError, "receive from rank %d: %s", l.peer, strerror(errno));
      }
      l.inDone += size_t(k);
      did = true;
      if (l.inDone < 8) return did;
      if (l.inBytes > l.local.slotBytes)
        fail(chorusRemoteError, "rank %d sent a %llu-byte slot (larger than %zu): protocol error",
             l.peer, (unsigned long long)l.inBytes, l.local.slotBytes);
    }
    while (l.inDone < 8 + l.inBytes) {
      ssize_t k = recv(fd, l.local.slot() + (l.inDone - 8), 8 + l.inBytes - l.inDone, 0);
      if (k == 0) fail(chorusRemoteError, "rank %d closed the connection", l.peer);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return did;
        fail(chorusRemoteError, "receive from rank %d: %s", l.peer, strerror(errno));
      }
      l.inDone += size_t(k);
      did = true;
    }
    l.local.post(l.inBytes);
    l.inDone = 0;
    did = true;
  }
  return did;
}

void TcpTransport::proxyLoop() {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakeFd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, wakeFd_, &ev);
  for (auto& l : links_)
    for (int fd : l->fds) {
      epoll_event e{};
      e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      e.data.fd = fd;
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
    }
  int idle = 0;
  epoll_event events[64];
  while (!stop_.load(std::memory_order_relaxed)) {
    bool did = false, fifoFull = false;
    for (auto& l : links_) {
      if (failed_[size_t(l->peer)].load()) continue;
      try {
        did = progressOut(*l) || did;
        did = progressIn(*l) || did;
        if (!l->local.slotFree()) fifoFull = true;
      } catch (const Failure& e) {
        reasons_[size_t(l->peer)] = e.message;
        failed_[size_t(l->peer)].store(1);
        CHORUS_WARN(comm_->rank, "TCP: %s", e.message.c_str());
      }
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
    int k = epoll_wait(ep, events, 64, fifoFull ? 0 : 20);
    for (int i = 0; i < k; ++i)
      if (events[i].data.fd == wakeFd_) {
        uint64_t v;
        ssize_t r = read(wakeFd_, &v, sizeof(v));
        (void)r;
      }
    if (fifoFull && k == 0) usleep(50);
  }
  ::close(ep);
}

TcpTransport::~TcpTransport() {
  // Deliver what the rank already posted (its calls have returned), then stop.
  Deadline flush = deadlineIn(10);
  for (auto& l : links_)
    while (!failed_[size_t(l->peer)].load() && l->staged.dataReady() && Clock::now() < flush)
      usleep(100);
  stop_.store(true);
  if (wakeFd_ >= 0) {
    uint64_t one = 1;
    ssize_t r = write(wakeFd_, &one, sizeof(one));
    (void)r;
  }
  if (proxy_.joinable()) proxy_.join();
  for (auto& l : links_)
    for (int fd : l->fds) ::close(fd);
  for (char* m : staging_) free(m);
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

}  // namespace chorus
