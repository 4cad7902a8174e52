#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/param.h"

namespace chorus {

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(port());
  }
  inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
  return "[" + std::string(host) + "]:" + std::to_string(port());
}

int SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
}

void SockAddr::setPort(int p) {
  if (ss.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(uint16_t(p));
  else
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(uint16_t(p));
}

SockAddr parseHostPort(const std::string& hp) {
  std::string host, port;
  if (!hp.empty() && hp[0] == '[') {
    size_t close = hp.find(']');
    if (close == std::string::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
      fail(chorusInvalidArgument, "bad address '%s': expected [v6]:port", hp.c_str());
    host = hp.substr(1, close - 1);
    port = hp.substr(close + 2);
  } else {
    size_t colon = hp.rfind(':');
    if (colon == std::string::npos)
      fail(chorusInvalidArgument, "bad address '%s': expected host:port", hp.c_str());
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    fail(chorusInvalidArgument, "cannot resolve '%s': %s", hp.c_str(), gai_strerror(rc));
  SockAddr a;
  memcpy(&a.ss, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  return a;
}

// NCCL's interface syntax: "eth,ib" prefixes; "^docker" excludes; "=eth0" exact names; "^=eth0"
// excludes exactly eth0.
bool ifNameMatches(const std::string& spec, const char* name) {
  if (spec.empty()) return true;
  std::string s = spec;
  bool exclude = false, exact = false;
  if (s[0] == '^') exclude = true, s = s.substr(1);
  if (!s.empty() && s[0] == '=') exact = true, s = s.substr(1);
  bool any = false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item =
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      bool m = exact ? item == name : strncmp(name, item.c_str(), item.size()) == 0;
      any = any || m;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !any : any;
}

static int socketFamilyFromEnv() {
  const std::string f = envStr("CHORUS_SOCKET_FAMILY");
  if (f.empty()) return AF_UNSPEC;
  if (f == "AF_INET" || f == "4" || f == "ipv4") return AF_INET;
  if (f == "AF_INET6" || f == "6" || f == "ipv6") return AF_INET6;
  fail(chorusInvalidArgument, "CHORUS_SOCKET_FAMILY=%s: expected AF_INET or AF_INET6", f.c_str());
}

SockAddr pickLocalAddress() {
  const std::string spec = envStr("CHORUS_SOCKET_IFNAME");
  const int family = socketFamilyFromEnv();
  ifaddrs* list = nullptr;
  SockAddr chosen;
  if (getifaddrs(&list) == 0) {
    // Pass 0: IPv4 (unless CHORUS_SOCKET_FAMILY says otherwise) on a matching interface, lo and
    // docker* excluded when no CHORUS_SOCKET_IFNAME is given. Pass 1: IPv6 too, and lo/docker*.
    for (int pass = 0; pass < 2 && chosen.len == 0; ++pass) {
      for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
        const int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        if (family != AF_UNSPEC && fam != family) continue;
        if (fam == AF_INET6) {
          auto* a6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
          if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
          if (pass == 0 && family == AF_UNSPEC) continue;
        }
        const bool loopOrDocker =
            strncmp(i->ifa_name, "lo", 2) == 0 || strncmp(i->ifa_name, "docker", 6) == 0;
        if (!spec.empty()) {
          if (!ifNameMatches(spec, i->ifa_name)) continue;
        } else if (pass == 0 && loopOrDocker) {
          continue;
        }
        chosen.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        memcpy(&chosen.ss, i->ifa_addr, chosen.len);
        break;
      }
    }
    freeifaddrs(list);
  }
  if (chosen.len == 0 && family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&chosen.ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    chosen.len = sizeof(sockaddr_in6);
  } else if (chosen.len == 0) {
    auto* a = reinterpret_cast<sockaddr_in*>(&chosen.ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    chosen.len = sizeof(sockaddr_in);
  }
  chosen.setPort(0);
  return chosen;
}

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int listenOn(SockAddr* addr) {
  int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(chorusSystemError, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // A fixed port (the bootstrap root's, agreed before the job started) may be held for a moment
  // by a socket that is not a listener: a peer's connection attempt to this very address, made
  // before this rank listens, for which the kernel chose this port as its own (it then connects
  // to itself and closes once its handshake fails), or a job's socket closing. Retry for up to
  // 2 s before giving up (once seen in 45 jobs on emulated nodes).
  constexpr double kBusyPortSeconds = 2.0;
  const Deadline busyUntil = deadlineIn(addr->port() != 0 ? kBusyPortSeconds : 0.0);
  while (bind(fd, reinterpret_cast<sockaddr*>(&addr->ss), addr->len) != 0) {
    int e = errno;
    if (e == EADDRINUSE && Clock::now() < busyUntil) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    close(fd);
    const bool busy = e == EADDRINUSE && addr->port() != 0;
    fail(chorusSystemError, "bind %s: %s%s", addr->str().c_str(), strerror(e),
         busy ? format(" (for %g s: does another job use this port?)", kBusyPortSeconds).c_str()
              : "");
  }
  if (listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    fail(chorusSystemError, "listen %s: %s", addr->str().c_str(), strerror(e));
  }
  socklen_t len = sizeof(addr->ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr->ss), &len);
  addr->len = len;
  setNonBlocking(fd);
  return fd;
}

namespace {
int pollMs(Deadline deadline) {
  if (deadline == noDeadline()) return 100;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::max<int64_t>(0, std::min<int64_t>(left, 100)));
}
void checkWait(Deadline deadline, const std::atomic<bool>* abortFlag, const char* what) {
  if (abortFlag && abortFlag->load(std::memory_order_relaxed))
    fail(chorusInvalidUsage, "%s: communicator aborted", what);
  if (Clock::now() >= deadline) fail(chorusTimeout, "%s: timed out", what);
}
}  // namespace

// A connection to a local port nobody listens on can meet itself: the kernel may pick that very
// port as the source, and the two ends open simultaneously (a TCP self-connect). Retried connects
// to a dead peer's port on the same host do exactly that now and then (2026-11-28: a rank
// waited for its own handshake). Such a socket is a refused connection.
static bool connectedToItself(int fd) {
  sockaddr_storage me{}, peer{};
  socklen_t ml = sizeof(me), pl = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
    return false;
  return ml == pl && memcmp(&me, &peer, ml) == 0;
}

int connectTo(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abortFlag,
              int* lastError) {
  int delayMs = 1;
  while (true) {
    int fd = socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) fail(chorusSystemError, "socket: %s", strerror(errno));
    if (lastError != nullptr) *lastError = 0;  // this attempt's, once it has one
    int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      while (true) {
        pollfd p{fd, POLLOUT, 0};
        int n = poll(&p, 1, pollMs(deadline));
        if (n > 0) {
          socklen_t l = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
          break;
        }
        try {
          checkWait(deadline, abortFlag, "connect");
        } catch (...) {
          close(fd);
          throw;
        }
      }
    }
    if (err == 0 && connectedToItself(fd)) err = ECONNREFUSED;
    if (err == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    close(fd);
    if (lastError != nullptr) *lastError = err;
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != ECONNRESET && err != EHOSTUNREACH &&
        err != ENETUNREACH)
      fail(chorusSystemError, "connect to %s: %s", addr.str().c_str(), strerror(err));
    if (Clock::now() >= deadline)
      fail(chorusTimeout, "connect to %s: %s (gave up)", addr.str().c_str(), strerror(err));
    checkWait(deadline, abortFlag, "connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    delayMs = std::min(delayMs * 2, 100);
  }
}

void sendAll(int fd, const void* data, size_t len, Deadline deadline,
             const std::atomic<bool>* abortFlag, const char* what) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, pollMs(deadline));
      checkWait(deadline, abortFlag, what);
      continue;
    }
    fail(chorusRemoteError, "%s: connection lost (%s)", what, n < 0 ? strerror(errno) : "closed");
  }
}

void recvAll(int fd, void* data, size_t len, Deadline deadline, const std::atomic<bool>* abortFlag,
             const char* what) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd pf{fd, POLLIN, 0};
      poll(&pf, 1, pollMs(deadline));
      checkWait(deadline, abortFlag, what);
      continue;
    }
    fail(chorusRemoteError, "%s: connection lost (%s)", what,
         n < 0 ? strerror(errno) : "closed by peer");
  }
}

void fillRandom(void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(chorusSystemError, "getrandom: %s", strerror(errno));
    }
    p += n;
    len -= size_t(n);
  }
}

}  // namespace chorus
