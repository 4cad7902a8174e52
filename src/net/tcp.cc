#include "net/tcp.h"

#include <arpa/inet.h>
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

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/hang_report.h"
#include "comm/wait.h"
#include "net/tcp_wire.h"

namespace chorus {

using namespace tcpwire;

namespace {
constexpr size_t kCtrlBytes = 4096;
constexpr size_t kMaxPendingHandshakes = 256;
constexpr auto kControlEvery = std::chrono::milliseconds(1);
// How long a lost data connection waits for the peer's failure notice while its control
// connection stays open (a peer that exits closes both at once: end of file ends the wait).
constexpr auto kNoticeGrace = std::chrono::milliseconds(100);

double handshakeSeconds() {
  return double(std::max<int64_t>(1, envInt("CHORUS_HANDSHAKE_TIMEOUT_MS", 5000))) / 1000.0;
}

void setBlocking(int fd, bool blocking) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

void wake(int fd) {
  uint64_t one = 1;
  ssize_t r = write(fd, &one, sizeof(one));
  (void)r;
}

std::string peerName(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) return "?";
  return a.str();
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// The data listener

DataListener::DataListener(SockAddr* addr, const uint8_t secret[16], int rank,
                           const std::atomic<bool>* abortFlag)
    : rank_(rank), abortFlag_(abortFlag) {
  memcpy(secret_, secret, 16);
  fd_ = listenOn(addr);  // non-blocking
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    ::close(fd_);
    fail(chorusSystemError, "eventfd: %s", strerror(errno));
  }
  try {
    thread_ = std::thread([this] {
      try {  // the thread's top: a failure reaches take(), never std::terminate
        serve();
      } catch (...) {
        const Failure f = caughtFailure(rank_, "serving the TCP data listener");
        std::lock_guard<std::mutex> l(mu_);
        if (errorCode_ == chorusSuccess) errorCode_ = f.code, error_ = f.message;
        cv_.notify_all();
      }
    });
  } catch (...) {
    ::close(fd_);
    ::close(wakeFd_);
    throw caughtFailure(rank, "starting the TCP data listener thread");
  }
}

DataListener::~DataListener() {
  stop_.store(true);
  wake(wakeFd_);
  if (thread_.joinable()) thread_.join();
  for (auto& kv : ready_) ::close(kv.second);
  ::close(wakeFd_);
}

void DataListener::serve() {
  struct Pending {
    int fd;
    std::string from;
    uint8_t nonce[16];
    DataHello hello;
    size_t got = 0;
    Deadline deadline;
  };
  std::vector<Pending> pending;
  const double hs = handshakeSeconds();
  auto reject = [&](Pending& p, const char* why) {
    CHORUS_WARN(
        rank_, "data listener: closing the connection from %s after %.0f ms: %s", p.from.c_str(),
        hs * 1e3 - std::chrono::duration<double, std::milli>(p.deadline - Clock::now()).count(),
        why);
    ::close(p.fd);
    p.fd = -1;
  };
  while (!stop_.load()) {
    std::vector<pollfd> pfds;
    pfds.push_back({wakeFd_, POLLIN, 0});
    pfds.push_back({fd_, POLLIN, 0});
    Deadline next = Clock::now() + std::chrono::milliseconds(100);
    for (const auto& p : pending) {
      pfds.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.deadline);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    poll(pfds.data(), pfds.size(), int(std::clamp<int64_t>(ms.count() + 1, 0, 100)));
    if (stop_.load()) break;
    // New connections: send each its nonce at once (a fresh socket has room for 16 bytes).
    while (true) {
      const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM))
        fail(chorusSystemError,  // to take(), through the thread's top
             "rank %d: data listener: accept: %s (the peers' connections cannot be taken: raise "
             "the descriptor limit, ulimit -n)",
             rank_, strerror(errno));
      if (fd < 0) break;
      Pending p{fd, peerName(fd), {}, {}, 0, deadlineIn(hs)};
      if (pending.size() >= kMaxPendingHandshakes) {
        reject(p, "too many handshakes in progress");
        continue;
      }
      fillRandom(p.nonce, sizeof(p.nonce));
      if (send(fd, p.nonce, sizeof(p.nonce), MSG_NOSIGNAL) != ssize_t(sizeof(p.nonce))) {
        reject(p, "cannot send the challenge");
        continue;
      }
      pending.push_back(p);
    }
    const Clock::time_point now = Clock::now();
    for (auto& p : pending) {
      const ssize_t k =
          recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof(p.hello) - p.got, 0);
      if (k == 0) {
        reject(p, "closed by the other side before a complete hello");
        continue;
      }
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        reject(p, strerror(errno));
        continue;
      }
      if (k > 0) p.got += size_t(k);
      const DataHelloCheck c = checkDataHello(&p.hello, p.got, secret_, p.nonce, rank_);
      if (c.status == DataHelloStatus::kNeedMore) {
        if (now >= p.deadline) reject(p, "no complete hello within CHORUS_HANDSHAKE_TIMEOUT_MS");
        continue;
      }
      if (c.status != DataHelloStatus::kAccepted) {
        reject(p, dataHelloStatusName(c.status));
        continue;
      }
      const uint64_t reply = dataProof(secret_, p.nonce, 'E');
      if (send(p.fd, &reply, sizeof(reply), MSG_NOSIGNAL) != ssize_t(sizeof(reply))) {
        reject(p, "cannot send the proof");
        continue;
      }
      std::lock_guard<std::mutex> l(mu_);
      if (!ready_.emplace(Key{c.rank, c.channel, c.sock}, p.fd).second) {
        reject(p, "duplicate connection");
        continue;
      }
      p.fd = -1;
      cv_.notify_all();
    }
    pending.erase(
        std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return p.fd < 0; }),
        pending.end());
  }
  for (auto& p : pending) reject(p, "the listener closes (every peer has connected)");
  ::close(fd_);
}

std::map<DataListener::Key, int> DataListener::take(const std::vector<Key>& want, Deadline deadline,
                                                    const std::function<void()>& watch) {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    size_t have = 0;
    for (const Key& k : want) have += ready_.count(k);
    if (have == want.size()) break;
    if (errorCode_ != chorusSuccess) throw Failure{errorCode_, error_};
    if (Clock::now() > deadline) {
      // Name the ranks that never connected (stopped, or gone without anyone saying so).
      std::string missing;
      int first = -1, last = -1;
      for (const Key& k : want) {
        const int r = std::get<0>(k);
        if (ready_.count(k) != 0 || r == last) continue;
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        if (first < 0) first = r;
        last = r;
      }
      throw Failure{chorusTimeout,
                    format("data connections: %zu of %zu arrived; none or not all from rank(s) "
                           "%s (stopped, or gone during the communicator's setup)",
                           have, want.size(), missing.c_str()),
                    first};
    }
    if (abortFlag_ && abortFlag_->load())
      fail(chorusInvalidUsage, "aborted during connection setup");
    // A rank that died during the setup never connects. A peer that finished its setup and saw
    // it die tells every remote peer on its control connection: look there (without taking the
    // bytes, which the proxy reads later), so that this rank fails now naming the dead rank
    // instead of waiting for the deadline.
    for (const auto& [key, fd] : ready_) {
      if (std::get<1>(key) != tcpwire::kControlChannel) continue;
      char buf[sizeof(NoticeHeader) + kMaxNoticeText];
      const ssize_t n = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
      if (n <= 0) continue;
      const NoticeParse np = parseNotice(buf, size_t(n), 1 << 20);
      if (np.status != NoticeParse::Status::kNotice ||
          (np.kind != NoticeKind::kFailed && np.kind != NoticeKind::kDied))
        continue;
      const int from = std::get<0>(key);
      throw Failure{chorusRemoteError,
                    format("rank %d %s (reported by rank %d) while this rank set up its TCP "
                           "connections: data connections: %zu of %zu arrived",
                           np.cause, np.kind == NoticeKind::kDied ? "died" : "failed", from, have,
                           want.size()),
                    np.cause == rank_ ? from : np.cause};
    }
    cv_.wait_for(l, std::chrono::milliseconds(100));
    if (watch) {
      l.unlock();
      watch();
      l.lock();
    }
  }
  std::map<Key, int> out;
  for (const Key& k : want) {
    out[k] = ready_.at(k);
    ready_.erase(k);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The transport

namespace {
// A peer's data listener opened before the bootstrap exchange that published its address, and
// stays open until the links exist: a connection it refuses for kRefusedSec means the peer's
// process is gone (killed, or its init failed), which fails now, naming it, instead of at the
// deadline.
constexpr double kRefusedSec = 2;
int connectToPeer(const SockAddr& addr, int peer, Deadline deadline,
                  const std::atomic<bool>* abortFlag) {
  while (true) {
    int lastError = 0;
    try {
      return connectTo(addr, std::min(deadline, deadlineIn(kRefusedSec)), abortFlag, &lastError);
    } catch (const Failure& e) {
      if (e.code == chorusTimeout && lastError == ECONNREFUSED)
        throw Failure{chorusRemoteError,
                      format("rank %d's data listener at %s refuses connections: rank %d died "
                             "or failed during the communicator's setup",
                             peer, addr.str().c_str(), peer),
                      peer};
      if (e.code != chorusTimeout || Clock::now() >= deadline) throw;
    }
  }
}
}  // namespace

struct TcpTransport::Link {
  int peer = -1, channel = 0;
  std::vector<int> fds;
  RecvConn staged;  // the rank's outgoing slots, drained to the sockets (proxy thread only)
  const SendConn* sender = nullptr;  // the rank's side of `staged` (rank thread only)
  SendConn local;  // the rank's receive FIFO from the peer, filled from the sockets
  size_t outDone = 0;
  FrameReader in{0};
  bool inEnded = false, outEnded = false;  // end of file or an error; nothing more moves there
};

struct TcpTransport::Control {
  int peer = -1;
  int fd = -1;
  std::string in;   // bytes received, not yet a whole notice
  std::string out;  // the notice being sent
  size_t outDone = 0;
  bool closed = false;  // end of file (the peer left) or an error
};

TcpTransport::TcpTransport(chorusComm* comm, DataListener& listener,
                           const std::vector<SockAddr>& addrs, const uint8_t secret[16])
    : comm_(comm) {
  const int n = comm->nranks, me = comm->rank, nch = comm->nchannels;
  nsocks_ = int(std::clamp<int64_t>(
      envInt("CHORUS_NSOCKS_PERTHREAD", 1) * envInt("CHORUS_SOCKET_NTHREADS", 1), 1, kMaxSocks));
  if (nch > kMaxChannels)
    fail(chorusInvalidUsage, "rank %d: %d channels (TCP carries at most %d)", me, nch,
         kMaxChannels);
  failed_.reset(new std::atomic<int>[size_t(n)]);
  dead_.reset(new std::atomic<bool>[size_t(n)]);
  left_.reset(new std::atomic<bool>[size_t(n)]);
  drained_.reset(new std::atomic<bool>[size_t(n)]);
  for (int i = 0; i < n; ++i) {
    failed_[size_t(i)].store(0), dead_[size_t(i)].store(false);
    left_[size_t(i)].store(false), drained_[size_t(i)].store(false);
  }
  controlClosed_.reset(new std::atomic<bool>[size_t(n)]);
  for (int i = 0; i < n; ++i) controlClosed_[size_t(i)].store(false);
  shrinkIn_.assign(size_t(n), "");
  statusIn_.assign(size_t(n), PeerStatus{});
  statusCount_.assign(size_t(n), 0);
  reasons_.assign(size_t(n), "");
  causes_.assign(size_t(n), -1);
  controlOf_.assign(size_t(n), nullptr);
  lossWhy_.assign(size_t(n), "");
  lossUntil_.assign(size_t(n), Clock::time_point{});
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) fail(chorusSystemError, "eventfd: %s", strerror(errno));

  const double hs = handshakeSeconds();
  Deadline deadline = deadlineIn(bootstrapTimeout());
  // Outgoing: to every higher remote rank, the control connection then nch x nsocks data ones.
  // Incoming: the same from every lower remote rank, through the listener (already serving).
  std::map<DataListener::Key, int> fds;
  try {
    for (int p = me + 1; p < n; ++p) {
      if (!comm->isRemote(p)) continue;
      for (int ch = kControlChannel; ch < nch; ++ch)
        for (int s = 0; s < (ch == kControlChannel ? 1 : nsocks_); ++s) {
          int fd = connectToPeer(addrs[size_t(p)], p, deadline, &comm->abortFlag);
          try {
            uint8_t nonce[16];
            recvAll(fd, nonce, sizeof(nonce), deadlineIn(hs * 2), &comm->abortFlag,
                    "data handshake");
            DataHello h{kDataMagic, me, ch, s, dataProof(secret, nonce, 'D')};
            sendAll(fd, &h, sizeof(h), deadline, &comm->abortFlag, "data handshake");
            uint64_t reply = 0;
            recvAll(fd, &reply, sizeof(reply), deadlineIn(hs * 2), &comm->abortFlag,
                    "data handshake");
            if (reply != dataProof(secret, nonce, 'E'))
              fail(chorusSystemError, "rank %d's data listener failed to prove the secret", p);
          } catch (const Failure& e) {
            ::close(fd);
            // Closed or reset by the peer during the handshake: the peer failed (its error
            // names the cause); name it here too.
            throw Failure{e.code,
                          format("rank %d's data listener at %s: %s", p,
                                 addrs[size_t(p)].str().c_str(), e.message.c_str()),
                          e.code == chorusRemoteError ? p : e.cause};
          } catch (...) {
            ::close(fd);
            throw;
          }
          fds[DataListener::Key{p, ch, s}] = fd;
        }
    }
    std::vector<DataListener::Key> want;
    for (int p = 0; p < me; ++p) {
      if (!comm->isRemote(p)) continue;
      want.emplace_back(p, kControlChannel, 0);
      for (int ch = 0; ch < nch; ++ch)
        for (int s = 0; s < nsocks_; ++s) want.emplace_back(p, ch, s);
    }
    // The root's connection is watched meanwhile: a root that lost a rank says so, and a root
    // whose process died (with the ranks in it) closes; either fails this rank now, naming the
    // lost rank, instead of at the deadline.
    Bootstrap* boot = comm->bootstrap.get();
    for (auto& kv : listener.take(want, deadline, [boot] {
           if (boot != nullptr) boot->checkRoot();
         }))
      fds[kv.first] = kv.second;
  } catch (const Failure& e) {
    for (auto& kv : fds) ::close(kv.second);
    ::close(wakeFd_);
    if (e.cause >= 0)  // another rank's death or failure: keep the code and the cause
      throw Failure{e.code, format("rank %d: TCP setup failed: %s", me, e.message.c_str()),
                    e.cause};
    fail(chorusSystemError, "rank %d: TCP setup failed: %s", me, e.message.c_str());
  }

  // From here every failure (out of memory, the proxy thread refused) closes what was opened.
  try {
    // Links, staging FIFOs, and the rank's receive FIFOs as the proxy's send side.
    const size_t slotBytes = comm->slotBytes[0];
    const size_t stagingBytes = kCtrlBytes + size_t(kNSteps) * slotStride(slotBytes);
    for (int p = 0; p < n; ++p) {
      if (!comm->isRemote(p)) continue;
      auto c = std::make_unique<Control>();
      c->peer = p;
      c->fd = fds.at(DataListener::Key{p, kControlChannel, 0});
      setBlocking(c->fd, false);
      controlOf_[size_t(p)] = c.get();
      controls_.push_back(std::move(c));
      for (int ch = 0; ch < nch; ++ch) {
        auto l = std::make_unique<Link>();
        l->peer = p;
        l->channel = ch;
        l->in = FrameReader(slotBytes);
        for (int s = 0; s < nsocks_; ++s) {
          int fd = fds.at(DataListener::Key{p, ch, s});
          setBlocking(fd, false);
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          l->fds.push_back(fd);
        }
        char* mem = static_cast<char*>(aligned_alloc(4096, (stagingBytes + 4095) / 4096 * 4096));
        if (mem == nullptr) throw std::bad_alloc();
        memset(mem, 0, stagingBytes);
        staging_.push_back(mem);
        l->staged.ctrl = reinterpret_cast<FifoCtrl*>(mem);
        l->staged.slots = mem + kCtrlBytes;
        l->staged.slotBytes = slotBytes;
        l->staged.peer = p;
        // The proxy's posts into this rank's FIFO, and its releases of the staged FIFO this rank
        // sends through, wake this rank if it sleeps.
        l->local.wakee = l->staged.wakee = &comm->mySegment.header()->bell;
        l->local.ctrl = comm->mySegment.fifoCtrl(0, ch, p);
        l->local.slots = comm->mySegment.fifoData(0, ch, p);
        l->local.slotBytes = slotBytes;
        l->local.peer = p;
        links_.push_back(std::move(l));
      }
    }
    CHORUS_INFO(me,
                "TCP transport: %zu links to remote ranks, %d socket(s) each, %zu control "
                "connection(s)",
                links_.size(), nsocks_, controls_.size());
    proxy_ = std::thread([this] {
      try {  // the proxy's top: nothing reaches std::terminate
        proxyLoop();
      } catch (...) {
        const Failure f = caughtFailure(comm_->rank, "running the TCP proxy thread");
        proxyDied(f.code, f.message);
      }
    });
  } catch (...) {
    const Failure f = caughtFailure(me, "setting up the TCP transport (staging, proxy thread)");
    for (auto& kv : fds) ::close(kv.second);
    for (char* m : staging_) free(m);
    staging_.clear();
    ::close(wakeFd_);
    throw f;
  }
}

void TcpTransport::proxyDied(chorusResult_t code, const std::string& message) noexcept {
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

void TcpTransport::bindSendConn(int peer, int channel, SendConn* conn) {
  for (auto& l : links_)
    if (l->peer == peer && l->channel == channel) {
      conn->ctrl = l->staged.ctrl;
      conn->slots = l->staged.slots;
      conn->slotBytes = l->staged.slotBytes;
      conn->peer = peer;
      conn->wakeFd = wakeFd_;
      l->sender = conn;
      return;
    }
}

const char* TcpTransport::failureReason(int peer) const {
  return reasons_[size_t(peer)].c_str();
}

// Proxy thread only (the single writer of reasons_ and causes_).
void TcpTransport::failPeer(int peer, int cause, const std::string& reason) {
  if (failed_[size_t(peer)].load()) return;
  reasons_[size_t(peer)] = reason;
  causes_[size_t(peer)] = cause;
  failed_[size_t(peer)].store(1);
  CHORUS_WARN(comm_->rank, "TCP: %s", reason.c_str());
}

void TcpTransport::notifyFailure(int cause, const std::string& message) {
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
void TcpTransport::queueControl(Control& c, const std::string& bytes) {
  if (c.outDone >= c.out.size()) c.out.clear(), c.outDone = 0;
  c.out += bytes;
}

bool TcpTransport::flushNotices() {
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
void TcpTransport::peerLost(int peer, const std::string& why) {
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
bool TcpTransport::settleLoss(int peer, Clock::time_point now) {
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

void TcpTransport::publishShrink(const std::string& message) {
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

bool TcpTransport::latestShrink(int peer, std::string* message) {
  std::lock_guard<std::mutex> l(shrinkMu_);
  if (shrinkIn_[size_t(peer)].empty()) return false;
  *message = shrinkIn_[size_t(peer)];
  return true;
}

bool TcpTransport::queryStatus(int peer, double seconds, PeerStatus* out) {
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

// ---------------------------------------------------------------------------------------------
// Network failure diagnosis (the error path of a wait that stalled)

namespace {
// What the kernel says of one connection: a phrase when data sent on it waits for an ACK, was
// retransmitted, and no ACK came for at least minSilentMs (the path to the peer's host is
// down or drops everything); empty otherwise. A live peer's kernel acknowledges within a round
// trip even when its process is stopped, so a stopped process never looks like this.
std::string tcpStall(int fd, uint32_t minSilentMs) {
  tcp_info ti{};
  socklen_t len = sizeof(ti);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return "";
  if (ti.tcpi_unacked == 0 || (ti.tcpi_retransmits == 0 && ti.tcpi_backoff == 0)) return "";
  if (ti.tcpi_last_ack_recv < minSilentMs) return "";
  return format(
      "%u segment(s) unacknowledged, retransmitted %u time(s) (backoff %u, %u in all), no ACK "
      "for %.1f s",
      ti.tcpi_unacked, unsigned(ti.tcpi_retransmits), unsigned(ti.tcpi_backoff),
      ti.tcpi_total_retrans, double(ti.tcpi_last_ack_recv) / 1e3);
}

std::string hostOf(int fd) {
  std::string a = peerName(fd);
  const size_t colon = a.rfind(':');
  if (colon != std::string::npos && colon > 0) a.resize(colon);  // the port is of no interest
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  return a;
}
}  // namespace

// The first connection to a rank of `node` (control, then data) that shows a stall, named.
std::string TcpTransport::stalledEvidence(int node, uint32_t minSilentMs) const {
  for (const auto& c : controls_) {
    if (comm_->nodeOf[size_t(c->peer)] != node) continue;
    const std::string s = tcpStall(c->fd, minSilentMs);
    if (!s.empty()) return format("control connection to rank %d: %s", c->peer, s.c_str());
  }
  for (const auto& l : links_) {
    if (comm_->nodeOf[size_t(l->peer)] != node) continue;
    for (int fd : l->fds) {
      const std::string s = tcpStall(fd, minSilentMs);
      if (!s.empty())
        return format("data connection to rank %d (channel %d): %s", l->peer, l->channel,
                      s.c_str());
    }
  }
  return "";
}

NetVerdict TcpTransport::probeNetwork(double seconds, int suspectNode, bool askSuspect) {
  const int nnodes = comm_->nnodes;
  std::vector<int> hostFd(size_t(nnodes), -1);  // a control connection to the node
  for (const auto& c : controls_) {
    const int n = comm_->nodeOf[size_t(c->peer)];
    if (hostFd[size_t(n)] < 0) hostFd[size_t(n)] = c->fd;
  }
  // First what the kernel says: retransmitted data still unacknowledged (only a hint: every
  // node it shows is probed below).
  std::vector<std::string> stall(static_cast<size_t>(nnodes)), ev(static_cast<size_t>(nnodes));
  bool any = false;
  for (int n = 0; n < nnodes; ++n)
    if (hostFd[size_t(n)] >= 0) {
      stall[size_t(n)] = stalledEvidence(n, 0);
      any = any || !stall[size_t(n)].empty();
    }
  // Then the nodes that stalled, the suspect's, and once either shows anything every other
  // node: a status query to each of their ranks, and a TCP connection attempt to the node's host
  // (to the port of the control connection, which nothing listens on: a live host refuses at
  // once, whatever its processes do). A node is reachable once a rank answers or its host
  // refuses or accepts (a stall seen there is over: the link came back, and TCP's next
  // retransmission will deliver); it is unreachable when the attempt fails with no route, or
  // nothing answers within `seconds`. Two rounds at most: a node found unreachable in the first
  // has the others probed too, so that every unreachable node is named.
  NetVerdict v;
  std::vector<bool> probed(size_t(nnodes), false);
  for (int round = 0; round < 2; ++round) {
    std::vector<bool> probe(size_t(nnodes), false);
    bool probing = false;
    for (int n = 0; n < nnodes; ++n) {
      probe[size_t(n)] = seconds > 0 && hostFd[size_t(n)] >= 0 && !probed[size_t(n)] &&
                         (any || n == suspectNode || !stall[size_t(n)].empty());
      probing = probing || probe[size_t(n)];
      if (probe[size_t(n)]) probed[size_t(n)] = true;
    }
    if (!probing) break;
    std::vector<uint64_t> before;
    {
      std::lock_guard<std::mutex> l(shrinkMu_);
      before = statusCount_;
    }
    {
      std::lock_guard<std::mutex> l(noticeMu_);
      for (auto& c : controls_) {
        const int n = comm_->nodeOf[size_t(c->peer)];
        if (!probe[size_t(n)] || controlClosed_[size_t(c->peer)].load()) continue;
        if (n == suspectNode && !askSuspect && round == 0) continue;  // asked already
        queueControl(*c, encodeNotice(NoticeKind::kStatusQuery, comm_->rank, ""));
      }
    }
    if (!flushNotices()) noticeQueued_.store(true);
    wake(wakeFd_);
    std::vector<int> conn(size_t(nnodes), -1);
    std::vector<int> reach(size_t(nnodes), 0);  // 1 reachable, -1 unreachable, 0 unknown
    for (int n = 0; n < nnodes; ++n) {
      if (!probe[size_t(n)]) continue;
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (getpeername(hostFd[size_t(n)], reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
      const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 || errno == ECONNREFUSED) {
        reach[size_t(n)] = 1;
        ::close(fd);
      } else if (errno == ENETUNREACH || errno == EHOSTUNREACH || errno == ENETDOWN) {
        reach[size_t(n)] = -1;
        ev[size_t(n)] =
            format("a TCP connection attempt to its host failed at once: %s", strerror(errno));
        ::close(fd);
      } else if (errno == EINPROGRESS) {
        conn[size_t(n)] = fd;
      } else {
        ::close(fd);
      }
    }
    const Deadline until = deadlineIn(seconds);
    while (true) {
      {
        std::lock_guard<std::mutex> l(shrinkMu_);
        for (int p = 0; p < comm_->nranks; ++p)
          if (statusCount_[size_t(p)] != before[size_t(p)] &&
              reach[size_t(comm_->nodeOf[size_t(p)])] == 0)
            reach[size_t(comm_->nodeOf[size_t(p)])] = 1;
      }
      bool waiting = false;
      for (int n = 0; n < nnodes; ++n) {
        const int fd = conn[size_t(n)];
        if (fd >= 0 && reach[size_t(n)] == 0) {
          pollfd pf{fd, POLLOUT, 0};
          if (poll(&pf, 1, 0) == 1) {
            int err = 0;
            socklen_t el = sizeof(err);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
            if (err == 0 || err == ECONNREFUSED) {
              reach[size_t(n)] = 1;
            } else if (err == ENETUNREACH || err == EHOSTUNREACH || err == ENETDOWN ||
                       err == ETIMEDOUT) {
              reach[size_t(n)] = -1;
              ev[size_t(n)] =
                  format("a TCP connection attempt to its host failed: %s", strerror(err));
            }
          }
        }
        waiting = waiting || (probe[size_t(n)] && reach[size_t(n)] == 0);
      }
      if (!waiting || Clock::now() >= until) break;
      usleep(1000);
    }
    for (int n = 0; n < nnodes; ++n) {
      if (conn[size_t(n)] >= 0) ::close(conn[size_t(n)]);
      if (!probe[size_t(n)]) continue;
      if (reach[size_t(n)] == 1) {
        if (!stall[size_t(n)].empty()) v.recovered.push_back(n);
        continue;
      }
      const std::string st = stall[size_t(n)].empty() ? stalledEvidence(n, 0) : stall[size_t(n)];
      if (reach[size_t(n)] == 0)
        ev[size_t(n)] = format(
            "no answer to a status query nor to a TCP connection attempt to its host in %.1f s%s%s",
            seconds, st.empty() ? "" : "; ", st.c_str());
      else if (!st.empty())
        ev[size_t(n)] += "; " + st;
      any = true;
    }
  }
  for (int n = 0; n < nnodes; ++n) {
    if (ev[size_t(n)].empty()) continue;
    v.nodes.push_back(n);
    v.evidence.push_back(ev[size_t(n)]);
    v.hosts.push_back(hostFd[size_t(n)] >= 0 ? hostOf(hostFd[size_t(n)]) : "");
  }
  return v;
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

bool TcpTransport::progressOut(Link& l) {
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

bool TcpTransport::progressIn(Link& l) {
  bool did = false;
  while (l.local.slotFree()) {
    const int fd = l.fds[l.local.tail % uint64_t(nsocks_)];
    const bool header = l.in.inHeader();
    char* dest = header ? l.in.headerDest() : l.local.slot() + l.in.payloadOffset();
    const size_t want = header ? l.in.headerWant() : l.in.payloadWant();
    FrameReader::Status st = FrameReader::Status::kComplete;
    if (want > 0) {  // (a zero-length frame is complete with its header)
      ssize_t k = recv(fd, dest, want, 0);
      if (k == 0)
        fail(chorusRemoteError, "rank %d closed the connection%s", l.peer,
             header && l.in.headerWant() == 8 ? "" : " in the middle of a slot");
      if (k < 0) {
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
void TcpTransport::linkEnded(Link& l, bool in, const std::string& why) {
  (in ? l.inEnded : l.outEnded) = true;
  peerLost(l.peer, why);
  noteDrained(l.peer);
}

// A peer that left is drained once every link from it reached its end: all it sent is in this
// rank's FIFOs (posted before the flag is set). Proxy thread.
void TcpTransport::noteDrained(int peer) {
  if (!left_[size_t(peer)].load() || drained_[size_t(peer)].load()) return;
  for (auto& l : links_)
    if (l->peer == peer && !l->inEnded) return;
  drained_[size_t(peer)].store(true, std::memory_order_release);
}

// Reads the peer's notice (flushNotices sends ours). Proxy thread.
void TcpTransport::progressControl(Control& c) {
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
  for (auto& c : controls_) {
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    e.data.fd = c->fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
  }
  int idle = 0;
  Clock::time_point nextControl{};
  epoll_event events[64];
  while (!stop_.load(std::memory_order_relaxed)) {
    bool did = false, fifoFull = false, lossPending = false;
    // Control connections: the rest of our notice at once, the peers' notices every
    // kControlEvery.
    const Clock::time_point now = Clock::now();
    if (noticeQueued_.load(std::memory_order_relaxed) || now >= nextControl) {
      if (noticeQueued_.load() && flushNotices()) noticeQueued_.store(false);
      for (auto& c : controls_) progressControl(*c);
      nextControl = now + kControlEvery;
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
    int k = epoll_wait(ep, events, 64, fifoFull ? 0 : lossPending ? 1 : 20);
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
  if (comm_->abortFlag.load() || comm_->state.load() == CommState::kFailed) {
    // Aborted or failed: nothing more will be delivered. Tell the remote peers (if markFailed
    // has not already) and give the proxy a moment to send it.
    notifyFailure(comm_->rank, format("rank %d: communicator aborted", comm_->rank));
    Deadline until = deadlineIn(0.2);
    while (proxy_.joinable() && !noticeSent_.load() && Clock::now() < until) usleep(200);
  } else {
    // Deliver what the rank already posted (its calls have returned), then stop.
    Deadline flush = deadlineIn(10);
    // Compare what the rank posted (its own tail) with what the proxy released (the atomic
    // head); the proxy's `staged` cursor is its own and is not read here.
    bool delivered = true;
    for (auto& l : links_) {
      while (l->sender && !failed_[size_t(l->peer)].load() &&
             l->staged.ctrl->head.load(std::memory_order_acquire) < l->sender->tail &&
             Clock::now() < flush)
        usleep(100);
      if (l->sender && l->staged.ctrl->head.load() < l->sender->tail) delivered = false;
    }
    // Every slot is in the sockets: tell the peers this end of file is a departure (a peer may
    // still be finishing its last call with other ranks). Written before the data connections
    // close, on the control connection (which carries nothing else now).
    if (delivered) {
      {
        std::lock_guard<std::mutex> l(noticeMu_);
        const std::string bytes = encodeNotice(NoticeKind::kLeft, comm_->rank, "");
        for (auto& c : controls_) queueControl(*c, bytes);
      }
      Deadline until = deadlineIn(0.2);
      while (!flushNotices() && Clock::now() < until) usleep(200);
    }
  }
  stop_.store(true);
  if (wakeFd_ >= 0) wake(wakeFd_);
  if (proxy_.joinable()) proxy_.join();
  for (auto& l : links_)
    for (int fd : l->fds) ::close(fd);
  for (auto& c : controls_) ::close(c->fd);
  for (char* m : staging_) free(m);
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

}  // namespace chorus
