// The transport seam: what a way of moving FIFO slots between two ranks implements (NCCL's
// transport function table, Gloo's Pair). Init (core/init.cc) walks the table of transports
// (core/transports.cc, one row each) and gives every peer the first transport that reaches it;
// CHORUS_TRANSPORT=<name> (read once per init) keeps that row alone, for tests.
//
// A transport's life in init's phases:
//   - created before the bootstrap (a listener may have to accept connections from then on);
//   - address: after the topology is known, this rank's opaque address, at most
//     kTransportAddrBytes, published in the peer record (PeerInfo::addr[row]);
//   - reaches / connect: after every record is known, connect to the peers it was chosen for
//     (every rank calls connect on every transport, with its own list, possibly empty);
//   - bind: the FIFO pair a primitive uses for (protocol, channel, peer): the SendConn this
//     rank posts into, and the RecvConn it reads (init first points the RecvConn at this rank's
//     segment, where a proxy or a same-node sender writes; a transport may point it elsewhere);
//   - close: its destructor (freeComm), after the control channel was dropped.
// A transport that also runs the control channel to other nodes (failure notices, departures,
// shrink messages, status queries: comm/control.h) hands it out through control().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

struct chorusComm;

namespace chorus {

struct SendConn;    // transport/fifo.h
struct RecvConn;    // transport/fifo.h
class PeerControl;  // comm/control.h

constexpr size_t kTransportAddrBytes = 32;
constexpr int kMaxTransports = 4;  // rows of the table (core/transports.cc)

class Transport {
 public:
  virtual ~Transport() = default;
  // This rank's address (opaque to everyone but the transport); all zero by default.
  virtual void address(uint8_t* addr) { (void)addr; }
  // Whether this transport can carry the FIFOs to `peer` (peer records exchanged).
  virtual bool reaches(int peer) const = 0;
  // Connects to `peers` (those init chose this transport for); every rank calls it.
  virtual void connect(const std::vector<int>& peers) = 0;
  // The protocols it carries (bit p: Proto p, proto/proto.h): init binds only those, and the
  // communicator's Shape::protos (what the tuner may pick) is what every peer's transport
  // carries. All of them by default.
  virtual uint8_t protocols() const { return 0xff; }
  // Binds the FIFO pair of (proto, channel, peer), for each protocol it carries.
  virtual void bind(int proto, int channel, int peer, SendConn* send, RecvConn* recv) = 0;
  // The control channel to the peers of other nodes, if this transport runs one.
  virtual PeerControl* control() { return nullptr; }
};

// One row of the table: the transport's name (CHORUS_TRANSPORT), whether it is used only when
// named, whether its FIFOs live in the receiving rank's segment (transport/segment.h: init
// sizes the segments' FIFO sets only when such a row is open; every rank's segment header, with
// its doorbell, failure flag and posts, is the communicator's and exists whatever the
// transports), and how to create it for communicator c (its rank and size set, nothing
// exchanged yet; `row`: its index, so the peers' addresses are c->peers[p].addr[row]).
struct TransportRow {
  const char* name;
  bool onlyWhenNamed;
  bool fifosInSegments;
  std::unique_ptr<Transport> (*create)(chorusComm* c, int row, const uint8_t secret[16]);
};

}  // namespace chorus
