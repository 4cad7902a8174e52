// Small TCP helpers: addresses, listeners, and sends/receives with a deadline that also watch an
// abort flag, so that no bootstrap wait is unbounded.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "base/clock.h"

namespace chorus {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string str() const;
  int port() const;
  void setPort(int port);
};

// "host:port", "[v6addr]:port" or "v6addr:port"; host may be a name. Throws chorus::Failure.
SockAddr parseHostPort(const std::string& hostPort);
// The address a root and the data listeners advertise: the first address of an interface that
// matches CHORUS_SOCKET_IFNAME (NCCL's syntax: prefix list, ^ to exclude, = for exact names),
// else of the first interface that is not lo or docker*, else loopback; IPv4 before IPv6, only
// one family when CHORUS_SOCKET_FAMILY=AF_INET or AF_INET6. Throws chorus::Failure on a bad
// CHORUS_SOCKET_FAMILY.
SockAddr pickLocalAddress();
// Whether interface `name` matches a CHORUS_SOCKET_IFNAME spec (empty: every interface).
bool ifNameMatches(const std::string& spec, const char* name);

// Binds and listens on `addr` (port 0 = ephemeral); returns the fd and fills the real port.
int listenOn(SockAddr* addr);
// Connects, retrying refused connections until `deadline`. Throws chorus::Failure; `lastError`
// (optional) then holds the last attempt's errno (ECONNREFUSED: nothing listens there).
int connectTo(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abortFlag,
              int* lastError = nullptr);

// Full-length I/O on a non-blocking fd. Throw chorus::Failure (chorusRemoteError on EOF/reset,
// chorusTimeout past the deadline, chorusInvalidUsage when the abort flag is raised).
void sendAll(int fd, const void* data, size_t len, Deadline deadline,
             const std::atomic<bool>* abortFlag, const char* what);
void recvAll(int fd, void* data, size_t len, Deadline deadline, const std::atomic<bool>* abortFlag,
             const char* what);

void setNonBlocking(int fd);
void fillRandom(void* data, size_t len);

}  // namespace chorus
