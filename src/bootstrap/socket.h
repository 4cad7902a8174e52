// Small TCP helpers: addresses, listeners, and sends/receives with a deadline that also watch an
// abort flag, so that no bootstrap wait is unbounded.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace chorus {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline noDeadline() { return Deadline::max(); }
inline Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string str() const;
  int port() const;
  void setPort(int port);
};

// "host:port", "[v6addr]:port" or "v6addr:port"; host may be a name. Throws chorus::Failure.
SockAddr parseHostPort(const std::string& hostPort);
// The address a root should advertise: CHORUS_SOCKET_IFNAME rules (prefix list, ^ exclude,
// = exact), else the first interface that is not lo or docker, else loopback.
SockAddr pickLocalAddress();

// Binds and listens on `addr` (port 0 = ephemeral); returns the fd and fills the real port.
int listenOn(SockAddr* addr);
// Connects, retrying refused connections until `deadline`. Throws chorus::Failure.
int connectTo(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abortFlag);

// Full-length I/O on a non-blocking fd. Throw chorus::Failure (chorusRemoteError on EOF/reset,
// chorusTimeout past the deadline, chorusInvalidUsage when the abort flag is raised).
void sendAll(int fd, const void* data, size_t len, Deadline deadline,
             const std::atomic<bool>* abortFlag, const char* what);
void recvAll(int fd, void* data, size_t len, Deadline deadline, const std::atomic<bool>* abortFlag,
             const char* what);

void setNonBlocking(int fd);
void fillRandom(void* data, size_t len);

}  // namespace chorus
