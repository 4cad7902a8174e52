// TCP transport between nodes (NCCL's socket path): a row of the transport table
// (comm/transport.h; net/tcp_row.cc) and the communicator's control channel to the ranks of
// other nodes (comm/control.h), with a proxy thread per communicator. For each remote peer and
// channel the rank keeps the same FIFO interface as shared memory:
//   outgoing: the rank posts into a local staging FIFO; the proxy thread drains each slot into
//             the peer's sockets ({u64 bytes, data}; slot i goes on socket i % nsocks);
//   incoming: the proxy reads slots from the sockets straight into the rank's own receive FIFO
//             for that peer, only when a slot is free (TCP flow control does the rest).
// So primitives and algorithms do not change. Every data connection first answers a
// challenge with the communicator's secret (SipHash), as the bootstrap does
// (net/tcp_wire.h has the wire format).
// Sockets per peer and channel: CHORUS_NSOCKS_PERTHREAD x CHORUS_SOCKET_NTHREADS (default 1 x 1;
// this implementation drives all of them from one proxy thread per communicator).
//
// Failures: besides the data sockets, each pair of ranks on different nodes keeps one control
// connection. When a communicator is marked failed (markFailed), the proxy sends every remote
// peer a notice naming the rank that caused the failure (itself, or a rank that died), so that
// peers on other nodes stop waiting at once instead of when the sockets close; a peer whose data
// sockets close or reset is failed too. Either way a wait on that peer fails (comm/wait.cc) with
// chorusRemoteError naming the cause.
// A rank may exit as soon as its failed call returns, so the notice is written to the control
// sockets by the failing thread itself before markFailed returns (not left queued for the proxy,
// which dies with the process). On the receiving side, a data socket that closes or resets is not
// taken for the peer's death at once: its control connection is read first, until a notice or
// end of file, for at most kNoticeGrace, and a notice found there names the real cause.
// A rank that destroys its communicator first writes every posted slot to its sockets, then a
// kLeft notice on each control connection, then closes: its peers take that end of file for a
// departure, not a failure, and keep reading its other connections to their end (a peer that
// finished its last call leaves while others still finish theirs with the rest of the ranks).
//
// The files, by concern: TcpLinks below (its records and the helpers its files share are in
// net/tcp_internal.h) is set up and torn down in net/tcp_links.cc, moves the bytes in
// net/tcp_proxy.cc, runs the control plane (notices, lost connections, shrink messages, status
// queries) in net/tcp_control.cc and diagnoses the network in net/tcp_probe.cc; the data
// listener is net/data_listener.h, the wire format net/tcp_wire.h, the row net/tcp_row.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "chorus/chorus.h"
#include "comm/control.h"
#include "comm/transport.h"
#include "proto/proto.h"
#include "transport/fifo.h"

struct chorusComm;

namespace chorus {

class DataListener;  // net/data_listener.h

// The links of a rank to the ranks of other nodes: their data and control connections and the
// proxy thread that drives them. The transport's row (net/tcp_row.cc) binds the rank's FIFOs to
// them and offers them as the communicator's control channel (a PeerControl).
class TcpLinks final : public PeerControl {
 public:
  // Connects to every remote peer (lower rank connects, higher accepts through `listener`),
  // authenticates, allocates staging FIFOs, starts the proxy. `addrs[r]` is rank r's listener.
  TcpLinks(chorusComm* comm, DataListener& listener, const std::vector<SockAddr>& addrs,
           const uint8_t secret[16]);
  ~TcpLinks() override;

  // The FIFO a rank posts into to send to remote `peer` on `channel`.
  void bindSendConn(int peer, int channel, SendConn* conn);
  bool peerFailed(int peer) const override { return failed_[size_t(peer)].load() != 0; }
  // Once peerFailed: why (a phrase naming the rank that caused it) and that rank.
  const char* failureReason(int peer) const override;
  int failureCause(int peer) const override { return causes_[size_t(peer)]; }
  // Whether this rank knows `rank` (on another node) died: its connection was lost, or a peer's
  // notice said so.
  bool seenDead(int rank) const override { return dead_[size_t(rank)].load(); }
  bool peerLeft(int peer) const override { return left_[size_t(peer)].load(); }
  bool peerDrained(int peer) const override { return drained_[size_t(peer)].load(); }
  // Tells every remote peer that this communicator failed because of rank `cause` (this rank or
  // a peer); only the first call sends anything. Any thread.
  void notifyFailure(int cause, const std::string& message) override;

  // chorusCommShrink (core/shrink.cc): sends a shrink message (core/shrink_wire.h) to every
  // remote peer, after whatever is queued; and the latest one received from `peer` (false if
  // none). controlClosed: the peer's control connection ended (it died or left). Any thread.
  void publishShrink(const std::string& message) override;
  bool latestShrink(int peer, std::string* message) override;
  bool controlClosed(int peer) const override { return controlClosed_[size_t(peer)].load(); }
  // A status query: answered by the peer's proxy thread from its rank's segment header.
  bool queryStatus(int peer, double seconds, PeerStatus* out) override;
  // Waits (10 s at most) until the proxy handed every slot this rank posted to its sockets,
  // then, if it did, sends the kLeft notice.
  void depart() override;
  // Which other nodes this rank cannot reach (comm/control.h).
  NetVerdict probeNetwork(double seconds, int suspectNode, bool askSuspect) override;

 private:
  struct Link;     // net/tcp_internal.h
  struct Control;  // net/tcp_internal.h
  // The proxy thread (net/tcp_proxy.cc).
  void proxyLoop();
  // The proxy thread's top caught `message`: every remote peer's link fails with it and the
  // communicator fails (peers told), instead of std::terminate.
  void proxyDied(chorusResult_t code, const std::string& message) noexcept;
  bool progressOut(Link& l);
  bool progressIn(Link& l);
  void linkEnded(Link& l, bool in, const std::string& why);
  void noteDrained(int peer);
  // The control plane (net/tcp_control.cc).
  void progressControl(Control& c);
  bool flushNotices();  // any thread; true once every control connection has its output
  // Until `until`, while a control connection to a reachable peer still holds bytes its peer
  // has not acknowledged (a failure notice in TCP's retransmission backoff). Destructor.
  void awaitNoticesReceived(Deadline until);
  void queueControl(Control& c, const std::string& bytes);  // noticeMu_ held
  void peerLost(int peer, const std::string& why);
  bool settleLoss(int peer, Clock::time_point now);
  void failPeer(int peer, int cause, const std::string& reason);
  // The network probe (net/tcp_probe.cc).
  std::string stalledEvidence(int node, uint32_t minSilentMs) const;

  chorusComm* comm_;
  int nsocks_ = 1;
  int wakeFd_ = -1;
  std::vector<std::unique_ptr<Link>> links_;        // one per (remote peer, channel)
  std::vector<std::unique_ptr<Control>> controls_;  // one per remote peer
  std::vector<char*> staging_;                      // staging FIFO memory per link
  std::unique_ptr<std::atomic<int>[]> failed_;
  std::vector<std::string> reasons_;  // written once, before failed_ is set
  std::vector<int> causes_;
  std::unique_ptr<std::atomic<bool>[]> dead_;         // rank seen dead (connection lost, or notice)
  std::unique_ptr<std::atomic<bool>[]> left_;         // kLeft notice read (proxy writes)
  std::unique_ptr<std::atomic<bool>[]> drained_;      // left, and every link from it at its end
  std::unique_ptr<std::atomic<bool>[]> unreachable_;  // by node: probeNetwork found it so
  std::mutex noticeMu_;  // guards notice_ and every control connection's output (out, outDone)
  std::string notice_;   // the one notice to send (empty: none yet)
  std::atomic<bool> noticeQueued_{false};  // output still to be written (the proxy finishes it)
  // Proxy thread only: a peer whose data connection was lost, while its control connection is
  // read for a notice (until lossUntil_).
  std::vector<Control*> controlOf_;   // by rank (null: same node)
  std::vector<std::string> lossWhy_;  // by rank; empty: no loss pending
  std::vector<Clock::time_point> lossUntil_;
  int lossesPending_ = 0;
  // Proxy thread only, by file descriptor (sized when the proxy starts; the connections are fixed
  // from then on): bytes may be waiting. Set by every epoll event of the descriptor, cleared when
  // a read finds nothing, so the proxy reads only the connections that moved, not every one of
  // them (one per remote peer and channel, and the control connections) on every turn.
  std::vector<uint8_t> mayRead_;
  std::atomic<bool> noticeSent_{false};  // written to every control connection (or given up)
  std::atomic<bool> departed_{false};    // depart() ran (the destructor's, or at exit)
  std::atomic<bool> stop_{false};
  std::thread proxy_;
  // chorusCommShrink messages: out through queueControl, the latest in per peer.
  std::mutex shrinkMu_;
  std::vector<std::string> shrinkIn_;
  // Status answers received, by rank (under shrinkMu_): the latest, and how many so far.
  std::vector<PeerStatus> statusIn_;
  std::vector<uint64_t> statusCount_;
  std::unique_ptr<std::atomic<bool>[]> controlClosed_;
  // Per node: the data listener address of one of its ranks, as published at init (closed once
  // the links exist, so a live host refuses a connection to it at once). The network probe
  // connects there: a control connection's own peer address is gone once its peer reset it.
  std::vector<SockAddr> nodeListener_;
};

// TCP's row of the transport table (net/tcp_row.cc): reaches the ranks of other nodes; its
// data listener is open from its creation until its links exist.
std::unique_ptr<Transport> createTcpTransport(chorusComm* c, int row, const uint8_t secret[16]);
// What the TCP transport carries: Simple only. The proxy forwards whole slots; LL's flag in every
// 8 bytes relies on the reader seeing the writer's stores as they land (shared memory).
constexpr uint8_t kTcpProtocols = 1u << int(Proto::kSimple);

}  // namespace chorus
