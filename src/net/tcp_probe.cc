// Network failure diagnosis of the TCP links (net/tcp.h), on the error path of a wait that
// stalled (comm/hang_report.cc): what the kernel says of each connection (data unacknowledged
// and retransmitted), then status queries and connection attempts to the hosts of other nodes,
// for the nodes this rank cannot reach.
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "comm/comm.h"
#include "net/tcp.h"
#include "net/tcp_internal.h"
#include "net/tcp_wire.h"

namespace chorus {

using namespace tcpwire;
using namespace tcpimpl;

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

// "host" of "host:port" or "[v6]:port".
std::string hostPart(std::string a) {
  const size_t colon = a.rfind(':');
  if (colon != std::string::npos && colon > 0) a.resize(colon);  // the port is of no interest
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  return a;
}
}  // namespace

// The first connection to a rank of `node` (control, then data) that shows a stall, named.
std::string TcpLinks::stalledEvidence(int node, uint32_t minSilentMs) const {
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

NetVerdict TcpLinks::probeNetwork(double seconds, int suspectNode, bool askSuspect) {
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
  // (to the data listener address one of its ranks published at init, which nothing listens on
  // once the links exist: a live host refuses at once, whatever its processes do; not the control
  // connection's peer address, which the kernel forgets once the peer reset the connection). A node
  // is reachable once a rank answers or its host refuses or accepts (a stall seen there is over:
  // the link came back, and TCP's next retransmission will deliver); it is unreachable when the
  // attempt fails with no route, or nothing answers within `seconds`. Two rounds at most: a node
  // found unreachable in the first has the others probed too, so that every unreachable node is
  // named.
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
      const SockAddr& host = nodeListener_[size_t(n)];
      if (host.len == 0) continue;
      const int fd = socket(host.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      if (connect(fd, reinterpret_cast<const sockaddr*>(&host.ss), host.len) == 0 ||
          errno == ECONNREFUSED) {
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
    unreachable_[size_t(n)].store(true);
    v.evidence.push_back(ev[size_t(n)]);
    const SockAddr& host = nodeListener_[size_t(n)];
    v.hosts.push_back(host.len > 0 ? hostPart(host.str()) : "");
  }
  return v;
}

}  // namespace chorus
