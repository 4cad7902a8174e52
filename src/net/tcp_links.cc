// The TCP links of a rank (net/tcp.h): set-up, the connections to every rank of another node
// (a control connection and the data connections of each channel, authenticated), the staging
// FIFOs and the proxy thread; the binding of the rank's FIFOs to them; and the tear-down, which
// delivers what the rank posted and tells the peers it left.
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "base/thread_name.h"
#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/hang_report.h"
#include "net/data_listener.h"
#include "net/tcp.h"
#include "net/tcp_internal.h"
#include "net/tcp_wire.h"

namespace chorus {

using namespace tcpwire;
using namespace tcpimpl;

namespace {
constexpr size_t kCtrlBytes = 4096;
static_assert(kCtrlBytes % kSlotPage == 0);  // the staged slots start on a page (fifo.h)

// A peer's data listener opened before the bootstrap exchange that published its address, and
// stays open until the links exist: a connection it refuses for kRefusedSec means the peer's
// process is gone (killed, or its init failed), which fails now, naming it, instead of at the
// deadline. The root's connection is watched between attempts (every kRootCheckSec): a root that
// lost a rank says so, which fails this rank at once, naming that rank.
constexpr double kRefusedSec = 2;
constexpr double kRootCheckSec = 0.1;
int connectToPeer(const SockAddr& addr, int peer, Deadline deadline,
                  const std::atomic<bool>* abortFlag, Bootstrap* boot) {
  Deadline refusedSince{};  // refused since (none: the epoch)
  while (true) {
    int lastError = 0;
    try {
      return connectTo(addr, std::min(deadline, deadlineIn(kRootCheckSec)), abortFlag, &lastError);
    } catch (const Failure& e) {
      if (e.code != chorusTimeout || Clock::now() >= deadline) throw;
      if (boot != nullptr) boot->checkRoot();
      if (lastError != ECONNREFUSED) {
        refusedSince = Deadline{};
      } else if (refusedSince == Deadline{}) {
        refusedSince = Clock::now();
      } else if (Clock::now() - refusedSince >= std::chrono::duration<double>(kRefusedSec)) {
        throw Failure{chorusRemoteError,
                      format("rank %d's data listener at %s refuses connections: rank %d died "
                             "or failed during the communicator's setup",
                             peer, addr.str().c_str(), peer),
                      peer};
      }
    }
  }
}

// The congestion control of the data connections: CHORUS_SOCKET_CC names one (`cubic` unless
// set; `system` keeps the kernel's default, net.ipv4.tcp_congestion_control). Not BBR, where a
// machine defaults to it: BBR sizes its window from the least round trip it has seen (tens of
// microseconds between neighbours) and its delivery rate, and a collective's bursts, with the
// acknowledgements queued behind the data going the other way, hold the round trip at
// milliseconds for a while; BBR's window then lets a few packets through per round trip. On
// emulated nodes shaped at 1 Gbit/s (4 x 1, halving-doubling AllReduce of 128-256 KiB, 200 calls)
// one call in tens waited 20-230 ms for the rest of a slot that had left the sender; with cubic
// on the sockets none did (CHANGELOG, 2026-12-05). The choice is the sender's: every rank sets
// its own sockets. A name the kernel refuses (not loaded, or not allowed to unprivileged users:
// net.ipv4.tcp_allowed_congestion_control) leaves the default, with a warning when it was asked.
class Congestion {
 public:
  explicit Congestion(int rank) : rank_(rank), name_(envStr("CHORUS_SOCKET_CC")) {
    asked_ = !name_.empty();
    if (!asked_) name_ = "cubic";
  }
  void apply(int fd) {
    if (name_ == "system" || refused_) return;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name_.data(), socklen_t(name_.size())) == 0)
      return;
    refused_ = true;
    if (asked_)
      CHORUS_WARN(rank_,
                  "CHORUS_SOCKET_CC=%s: the kernel refused it (%s); the data connections "
                  "keep the system's congestion control",
                  name_.c_str(), strerror(errno));
    else
      CHORUS_INFO(rank_, "TCP: cubic refused (%s); the system's congestion control stays",
                  strerror(errno));
  }
  // What a socket runs (for the INFO line).
  static std::string of(int fd) {
    char buf[32] = {};
    socklen_t len = sizeof(buf) - 1;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, buf, &len) != 0) return "?";
    return std::string(buf, strnlen(buf, len));
  }

 private:
  int rank_;
  bool asked_, refused_ = false;
  std::string name_;
};
}  // namespace

TcpLinks::TcpLinks(chorusComm* comm, DataListener& listener, const std::vector<SockAddr>& addrs,
                   const uint8_t secret[16])
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
  unreachable_.reset(new std::atomic<bool>[size_t(comm->nnodes)]);
  for (int k = 0; k < comm->nnodes; ++k) unreachable_[size_t(k)].store(false);
  for (int i = 0; i < n; ++i) {
    failed_[size_t(i)].store(0), dead_[size_t(i)].store(false);
    left_[size_t(i)].store(false), drained_[size_t(i)].store(false);
  }
  nodeListener_.assign(size_t(comm->nnodes), SockAddr{});
  for (int p = 0; p < n; ++p)
    if (comm->isRemote(p) && nodeListener_[size_t(comm->nodeOf[size_t(p)])].len == 0)
      nodeListener_[size_t(comm->nodeOf[size_t(p)])] = addrs[size_t(p)];
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
          int fd =
              connectToPeer(addrs[size_t(p)], p, deadline, &comm->abortFlag, comm->bootstrap.get());
          try {
            // The peer's nonce; meanwhile the root is watched, as while connecting (a peer whose
            // listener took the connection may be failing because of a lost rank).
            const Deadline hello = deadlineIn(hs * 2);
            for (pollfd pf{fd, POLLIN, 0}; poll(&pf, 1, 100) == 0 && Clock::now() < hello;)
              if (comm->bootstrap) comm->bootstrap->checkRoot();
            uint8_t nonce[16];
            recvAll(fd, nonce, sizeof(nonce), hello, &comm->abortFlag, "data handshake");
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
    Congestion congestion(me);
    const size_t stagingBytes = kCtrlBytes + fifoSlotsBytes(slotBytes);
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
          congestion.apply(fd);
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
        l->local.wakee = l->staged.wakee = comm->doorbellOf(comm->rank);
        l->local.ctrl = comm->mySegment.fifoCtrl(0, ch, p);
        l->local.slots = comm->mySegment.fifoData(0, ch, p);
        l->local.slotBytes = slotBytes;
        l->local.peer = p;
        links_.push_back(std::move(l));
      }
    }
    CHORUS_INFO(me,
                "TCP transport: %zu links to remote ranks, %d socket(s) each, %zu control "
                "connection(s), congestion control %s",
                links_.size(), nsocks_, controls_.size(),
                links_.empty() ? "-" : Congestion::of(links_.front()->fds.front()).c_str());
    proxy_ = std::thread([this] {
      nameThisThread("proxy");
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

void TcpLinks::bindSendConn(int peer, int channel, SendConn* conn) {
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

void TcpLinks::awaitNoticesReceived(Deadline until) {
  for (;;) {
    bool pending = false;
    for (const auto& c : controls_) {
      // Not a peer that failed (it has its own verdict), died or is out of reach, nor a
      // connection its peer already closed or reset (whose count of unacknowledged bytes stays).
      const int p = c->peer;
      tcp_info ti{};
      socklen_t len = sizeof(ti);
      int unacked = 0;
      if (failed_[size_t(p)].load() || dead_[size_t(p)].load() ||
          unreachable_[size_t(comm_->nodeOf[size_t(p)])].load() ||
          getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
          ti.tcpi_state != TCP_ESTABLISHED || ioctl(c->fd, SIOCOUTQ, &unacked) != 0)
        continue;
      pending = pending || unacked > 0;
    }
    if (!pending || Clock::now() >= until) return;
    usleep(1000);
  }
}

TcpLinks::~TcpLinks() {
  if (comm_->abortFlag.load() || comm_->state.load() == CommState::kFailed) {
    // Aborted or failed: nothing more will be delivered. Tell the remote peers (if markFailed
    // has not already) and give the proxy a moment to send it.
    notifyFailure(comm_->rank, format("rank %d: communicator aborted", comm_->rank));
    Deadline until = deadlineIn(0.2);
    while (proxy_.joinable() && !noticeSent_.load() && Clock::now() < until) usleep(200);
    // A rank that exits as soon as its call failed must not close its sockets on a notice still
    // in its kernel's retransmission backoff (a lossy or mute link): the data connections'
    // resets would reach its peers first (a close with unread data resets, and a reset is never
    // held back), and they would name this rank dead, not the rank its notice names.
    awaitNoticesReceived(deadlineIn(answerWindowInAll(comm_)));
  } else {
    depart();
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

void TcpLinks::depart() {
  if (departed_.exchange(true)) return;
  // Deliver what the rank already posted (its calls have returned).
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

}  // namespace chorus
