// The control channel to the ranks on other nodes, as the communicator sees it: failure notices,
// departures, shrink messages and status queries, apart from the data links that carry the
// FIFOs. The communicator holds it as `control` (null when no peer is on another node); its
// waits (comm/wait.cc), markFailed (comm/comm.cc) and chorusCommShrink (core/shrink.cc) use it.
// The TCP transport (net/tcp.h) implements it over its control connections and init
// (core/init.cc) takes it from the transport that offers one, so the communicator's layer does
// not depend on the proxy that lives above it. Its calls are off the hot path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

// A remote rank's state, as its process answers a status query (comm/hang_report.cc follows a
// chain of waits across nodes with it): the peer + 1 it waits for in a long wait (0: none), how
// long ago its last sign of life was (ms; -1: unknown), that wait's operation (sequence number;
// kind + 1, 0: none) and its failure flag (cause + 1, 0: healthy).
struct PeerStatus {
  int waitingFor = 0;
  int64_t aliveAgeMs = -1;
  uint64_t seq = 0;
  uint32_t op = 0;
  int failed = 0;
};

// The network to the other nodes as one rank sees it after a wait stalled
// (PeerControl::probeNetwork): the nodes it cannot reach, each with the evidence of its TCP
// connections (data unacknowledged, retransmitted, no ACK for a while).
struct NetVerdict {
  std::vector<int> nodes;             // unreachable nodes, in order; empty: none found
  std::vector<std::string> evidence;  // by entry of `nodes`
  std::vector<std::string> hosts;     // by entry of `nodes`: the address its connections reach
  // Nodes whose connections stalled but that answer again (a link that came back: TCP's next
  // retransmission, after its backoff, will deliver what waits).
  std::vector<int> recovered;
  bool unreachable() const { return !nodes.empty(); }
};

class PeerControl {
 public:
  virtual ~PeerControl() = default;

  // Whether the link to `peer` failed; once it did: why (a phrase naming the rank that caused
  // it) and that rank.
  virtual bool peerFailed(int peer) const = 0;
  virtual const char* failureReason(int peer) const = 0;
  virtual int failureCause(int peer) const = 0;
  // Whether this rank knows `rank` (on another node) died: its connection was lost, or a peer's
  // notice said so.
  virtual bool seenDead(int rank) const = 0;
  // Whether `peer` destroyed its communicator cleanly (its kLeft notice came: everything it
  // posted was written to its sockets before it closed them); drained: and every data
  // connection from it reached its end, so all it sent is in this rank's FIFOs. A departure
  // fails no wait by itself: only a wait that still needs the peer (comm/wait.cc).
  virtual bool peerLeft(int peer) const = 0;
  virtual bool peerDrained(int peer) const = 0;
  // Tells every remote peer that this communicator failed because of rank `cause` (this rank or
  // a peer); only the first call sends anything. Any thread.
  virtual void notifyFailure(int cause, const std::string& message) = 0;

  // chorusCommShrink: sends a shrink message (core/shrink_wire.h) to every remote peer, after
  // whatever is queued; and the latest one received from `peer` (false if none).
  // controlClosed: the peer's control connection ended (it died or left). Any thread.
  virtual void publishShrink(const std::string& message) = 0;
  virtual bool latestShrink(int peer, std::string* message) = 0;
  virtual bool controlClosed(int peer) const = 0;

  // Asks remote `peer` for its state and waits up to `seconds` for the answer. False: none came
  // (its process is stopped or frozen, or its control connection is gone). Any thread; for the
  // error path of a wait that timed out.
  virtual bool queryStatus(int peer, double seconds, PeerStatus* out) = 0;

  // Error path of a wait that stalled: which other nodes this rank cannot reach. First each
  // node's connections as the kernel sees them (TCP_INFO: data unacknowledged and retransmitted
  // with no ACK for a second; for `suspectNode`, any retransmitted data still unacknowledged);
  // then the nodes that stalled, the suspect's (its ranks are sent a status query unless
  // `askSuspect` is false: asked already) and, once one shows anything, all the others are
  // probed: a status query and a TCP connection attempt to the host, up to `seconds`. A node
  // whose ranks do not answer and whose host neither refuses nor accepts is unreachable; one
  // that stalled but answers now has recovered. A stopped or frozen process is not
  // unreachable: its kernel still acknowledges and refuses. Any thread.
  virtual NetVerdict probeNetwork(double seconds, int suspectNode, bool askSuspect) = 0;

  // A departure without failure (destroy, and comm/comm.cc leaveAtExit for a communicator never
  // destroyed): hands what this rank posted to the sockets and tells the peers it left, so that
  // they finish their last calls without it; stops nothing. Bounded; once.
  virtual void depart() = 0;
};

}  // namespace chorus
