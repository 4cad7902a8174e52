// Private to the TCP transport's files (src/net/): the helpers they share, and
// the link and control connection records of TcpLinks (net/tcp.h).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/param.h"
#include "bootstrap/socket.h"
#include "net/tcp.h"
#include "net/tcp_wire.h"
#include "transport/fifo.h"

namespace chorus {

// Helpers of the TCP files (the data listener, the links, the proxy, the control plane).
namespace tcpimpl {
inline double handshakeSeconds() {
  return double(std::max<int64_t>(1, envInt("CHORUS_HANDSHAKE_TIMEOUT_MS", 5000))) / 1000.0;
}

inline void setBlocking(int fd, bool blocking) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

inline void wake(int fd) {
  uint64_t one = 1;
  ssize_t r = write(fd, &one, sizeof(one));
  (void)r;
}

inline std::string peerName(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) return "?";
  return a.str();
}
}  // namespace tcpimpl

struct TcpLinks::Link {
  int peer = -1, channel = 0;
  std::vector<int> fds;
  RecvConn staged;  // the rank's outgoing slots, drained to the sockets (proxy thread only)
  const SendConn* sender = nullptr;  // the rank's side of `staged` (rank thread only)
  SendConn local;  // the rank's receive FIFO from the peer, filled from the sockets
  size_t outDone = 0;
  tcpwire::FrameReader in{0};
  bool inEnded = false, outEnded = false;  // end of file or an error; nothing more moves there
};

struct TcpLinks::Control {
  int peer = -1;
  int fd = -1;
  std::string in;   // bytes received, not yet a whole notice
  std::string out;  // the notice being sent
  size_t outDone = 0;
  bool closed = false;  // end of file (the peer left) or an error
};

}  // namespace chorus
