// Fan-in / fan-out primitives: NCCL's primitives with several receive and several send peers
// (its tree arity), for the algorithms whose steps involve more than one neighbour (trees) or many
// independent connections (point-to-point batches). With these, no algorithm touches FIFO slots
// or protocol framing itself: prims/ and proto/ are the only code that does.
//
// Every try* call moves one whole chunk or, when a connection is not ready (no data yet, no free
// slot), touches nothing and returns false. So one loop can drive several of them (both trees of
// the double binary tree, every transfer of a batch) and never blocks on one; the caller waits
// (comm/wait.h) only when none progressed.
#pragma once

#include <cstddef>

#include "chorus/chorus.h"
#include "proto/proto.h"
#include "transport/fifo.h"

struct chorusComm;

namespace chorus {

class Waiter;

class FanPrims {
 public:
  static constexpr int kMaxFan = 3;

  // Up to kMaxFan receive and send peers of one channel. The channel's scratch (kMaxFan + 1
  // slots) stages LL chunks; two FanPrims of one channel may share it, since a call leaves
  // nothing in it.
  void init(chorusComm* comm, int channel, Proto proto, const int* recvPeers, int nrecv,
            const int* sendPeers, int nsend, chorusDataType_t type, chorusRedOp_t op,
            const char* opName);

  // Elements that fit one slot (the largest chunk a call moves).
  size_t chunkElems() const { return chunkElems_; }
  // Simple slots written with streaming stores (Prims::setStreamingSlots); kByLink: where any
  // send peer's receiver asks.
  void setStreamingSlots(SlotStreaming how) { io_.chooseSlots(how, send_, nsend_); }
  // For kByLink: the caller's wait, and a flag it sets when it paused after a pass in which
  // nothing moved. A chunk from a lone receive peer that was missing at the last look and came
  // during such a pause, the wait having only spun, is judged (RecvConn::noteHandoff), and the
  // flag cleared: one hand-off per pause, seen within a few polls of its arrival.
  void judgeHandoffs(const Waiter* waiter, bool* afterPause) {
    waiter_ = waiter;
    afterPause_ = afterPause;
  }
  int recvPeer(int k) const;
  int sendPeer(int k) const;
  int nrecv() const { return nrecv_; }
  int nsend() const { return nsend_; }
  // The peer the last try* that moved nothing waits for (no data from it, or no free slot to
  // it); -1 before any. What a wait watches (comm/wait.h): a peer that is gone fails it.
  int blocker() const { return blocker_; }

  // Reduce: src (n elements) folded with the chunk of every receive peer, in order
  // (in0 op src, then in1 op that, ...; avg divides at the last fold when `final`), written to
  // dst when not null and sent to every send peer. With no receive peer: src copied.
  bool tryReduce(const void* src, void* dst, size_t n, bool final);
  // Copy: the chunk of the one receive peer (or src when there is none) written to dst when not
  // null and different, and sent to every send peer.
  bool tryCopy(const void* src, void* dst, size_t n);

 private:
  bool ready(size_t bytes) const;
  void judge();  // after a ready() that found every chunk (judgeHandoffs)
  const char* received(int k, size_t bytes);

  chorusComm* comm_ = nullptr;
  ProtoIO io_;
  RecvConn* recv_[kMaxFan] = {};
  SendConn* send_[kMaxFan] = {};
  char* recvScratch_[kMaxFan] = {};
  int nrecv_ = 0, nsend_ = 0;
  chorusDataType_t type_ = chorusFloat32;
  chorusRedOp_t op_ = chorusSum;
  size_t esz_ = 1;
  size_t chunkElems_ = 0;
  const char* opName_ = "";
  mutable int blocker_ = -1;
  mutable bool missed_ = false;  // the last look found a receive peer's chunk missing
  const Waiter* waiter_ = nullptr;
  bool* afterPause_ = nullptr;
};

// Whole-message point-to-point chunks over one connection (Simple framing: the slot carries the
// chunk's size). trySendChunk posts up to one slot of src and returns the bytes sent (0 when the
// FIFO is full); tryRecvChunk copies the next chunk to dst and returns its size (0 when none
// arrived), failing when it exceeds `room` (the counts of the send and the receive differ).
// `startsMessage`: mark the slot as the first of a chorusSend message (transport/fifo.h).
size_t trySendChunk(SendConn& s, const char* src, size_t bytes, bool startsMessage = false);
size_t tryRecvChunk(chorusComm* comm, RecvConn& r, char* dst, size_t room, const char* what);

}  // namespace chorus
