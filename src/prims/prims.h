// The primitives of NCCL's internals over one channel's connections: each moves one chunk (at most
// one slot) from the receive connection and/or to the send connection, fused with a copy or a
// reduction. Algorithms are loops over these calls; both ends of a connection compute the same
// chunk sizes, and the receiver checks them (a mismatch means mismatched calls across ranks).
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/chorus.h"
#include "proto/proto.h"
#include "transport/fifo.h"

struct chorusComm;

namespace chorus {

// The primitives' scratch, per channel: kScratchSlots Simple slots and a line to align them, that
// LL stages through (Prims) and a tree's fan-in receives into (FanPrims); the single-copy
// AllReduce borrows channel 0's between primitive calls (algo/copy.cc). The communicator holds
// it opaquely (chorusComm::scratch), made and freed with the algorithms' state (algo/table.cc).
struct ChannelScratch {
  static constexpr size_t kScratchSlots = 4;  // FanPrims: kMaxFan receive slots and a send slot
  ChannelScratch(int nchannels, size_t simpleSlotBytes)
      : channel(size_t(nchannels), std::vector<char>(kScratchSlots * simpleSlotBytes + 64)) {}
  std::vector<std::vector<char>> channel;  // [channel]
};

class Prims {
 public:
  // recvPeer / sendPeer: -1 when this rank does not receive / send in the algorithm.
  Prims(chorusComm* comm, int channel, Proto proto, int recvPeer, int sendPeer,
        chorusDataType_t type, chorusRedOp_t op, const char* opName);

  // Elements that fit one slot (the largest chunk a primitive moves).
  size_t chunkElems() const { return chunkElems_; }
  // Write the user's output with streaming stores (large results that will not be re-read
  // soon: saves the read-for-ownership of every output line). Slots stay cached either way.
  void setStreamingOutput(bool on) { streamOut_ = on; }
  // Write the Simple slots with streaming stores (algo/algo.h slotStreaming says when): the
  // receiver then reads lines from memory instead of from this core's cache, which is what a
  // line costs where the two cores share no cache (another die or socket; proto/proto.h).
  // kByLink: as the receiver asks, and the posts stamped and the hand-offs judged.
  void setStreamingSlots(SlotStreaming how) { io_.chooseSlots(how, &send_, send_ ? 1 : 0); }

  void send(const void* src, size_t n);
  void recv(void* dst, size_t n);
  void copySend(const void* src, void* dst, size_t n);
  void recvCopySend(void* dst, size_t n);
  void recvReduceSend(const void* src, size_t n);
  // final: the last reduction of the op (avg divides by nranks here).
  void recvReduceCopy(const void* src, void* dst, size_t n, bool final);
  void recvReduceCopySend(const void* src, void* dst, size_t n, bool final);

 private:
  char* waitSend();                    // where to write the outgoing chunk
  const char* waitRecv(size_t bytes);  // the incoming chunk's data
  void post(const char* buf, size_t bytes) { io_.sendPost(*send_, buf, bytes); }
  int divisor(bool final) const;

  void writeOut(void* dst, const void* src, size_t bytes);

  ProtoIO io_;
  bool streamOut_ = false;
  chorusComm* comm_;
  SendConn* send_ = nullptr;
  RecvConn* recv_ = nullptr;
  chorusDataType_t type_;
  chorusRedOp_t op_;
  size_t esz_;
  size_t chunkElems_;
  const char* opName_;
};

}  // namespace chorus
