// TCP transport between nodes (seed 003's socket path). For each remote peer and channel the
// rank keeps the same FIFO interface as shared memory:
//   outgoing: the rank posts into a local staging FIFO; the proxy thread drains each slot into
//             the peer's sockets ({u64 bytes, data}; slot i goes on socket i % nsocks);
//   incoming: the proxy reads slots from the sockets straight into the rank's own receive FIFO
//             for that peer, only when a slot is free (TCP flow control does the rest).
// So primitives and algorithms do not change. Every data connection first answers a
// challenge with the communicator's secret (SipHash), as the bootstrap does.
// Sockets per peer and channel: CHORUS_NSOCKS_PERTHREAD x CHORUS_SOCKET_NTHREADS (default 1 x 1;
// this implementation drives all of them from one proxy thread per communicator).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "transport/fifo.h"

struct chorusComm;

namespace chorus {

class TcpTransport {
 public:
  // Opens this rank's data listener (before the address exchange).
  static int openListener(SockAddr* addr);
  // Connects to every remote peer (lower rank connects, higher accepts), authenticates,
  // allocates staging FIFOs, starts the proxy. `addrs[r]` is rank r's data listener.
  TcpTransport(chorusComm* comm, int listenFd, const std::vector<SockAddr>& addrs,
               const uint8_t secret[16]);
  ~TcpTransport();

  // The FIFO a rank posts into to send to remote `peer` on `channel`.
  void bindSendConn(int peer, int channel, SendConn* conn);
  bool peerFailed(int peer) const { return failed_[size_t(peer)].load() != 0; }
  const char* failureReason(int peer) const;

 private:
  struct Link;
  void proxyLoop();
  bool progressOut(Link& l);
  bool progressIn(Link& l);

  chorusComm* comm_;
  int nsocks_ = 1;
  int wakeFd_ = -1;
  std::vector<std::unique_ptr<Link>> links_;  // one per (remote peer, channel)
  std::vector<char*> staging_;                // staging FIFO memory per link
  std::unique_ptr<std::atomic<int>[]> failed_;
  std::vector<std::string> reasons_;
  std::atomic<bool> stop_{false};
  std::thread proxy_;
};

}  // namespace chorus
