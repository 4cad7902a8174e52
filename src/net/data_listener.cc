// The data listener of a rank (net/data_listener.h): accepts the TCP connections of the ranks
// of other nodes during communicator creation, checks that each proves the communicator's
// secret (net/tcp_wire.h), and hands the authenticated ones to the links (net/tcp_links.cc).
#include "net/data_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/debug.h"
#include "base/error.h"
#include "base/thread_name.h"
#include "net/tcp_internal.h"
#include "net/tcp_wire.h"

namespace chorus {

using namespace tcpwire;
using namespace tcpimpl;

namespace {
constexpr size_t kMaxPendingHandshakes = 256;
}  // namespace

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
      nameThisThread("listen");
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

}  // namespace chorus
