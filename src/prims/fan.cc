#include "prims/fan.h"

#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "prims/prims.h"
#include "reduce/copy_kernel.h"
#include "reduce/reduce.h"

namespace chorus {

static_assert(FanPrims::kMaxFan + 1 <= int(ChannelScratch::kScratchSlots),
              "a fan-in's receive slots and its send slot fit the channel's scratch");

void FanPrims::init(chorusComm* comm, int channel, Proto proto, const int* recvPeers, int nrecv,
                    const int* sendPeers, int nsend, chorusDataType_t type, chorusRedOp_t op,
                    const char* opName) {
  comm_ = comm;
  type_ = type;
  op_ = op;
  esz_ = chorusTypeSize(type);
  opName_ = opName;
  io_.proto = proto;
  io_.streamSlots = false;
  io_.timeSlots = false;
  missed_ = false;
  waiter_ = nullptr;
  afterPause_ = nullptr;
  const int pr = int(proto);
  char* base = comm->scratch->channel[size_t(channel)].data();
  nrecv_ = nrecv;
  nsend_ = nsend;
  for (int k = 0; k < nrecv; ++k) {
    recv_[k] = &comm->recvConn(pr, channel, recvPeers[k]);
    recvScratch_[k] = base + size_t(k) * comm->slotBytes[0];
  }
  for (int k = 0; k < nsend; ++k) send_[k] = &comm->sendConn(pr, channel, sendPeers[k]);
  io_.sendScratch = base + size_t(kMaxFan) * comm->slotBytes[0];
  chunkElems_ = protoSlotCapacity(proto, comm->slotBytes[pr]) / esz_;
}

void FanPrims::judge() {
  const bool waitedFor = missed_;
  missed_ = false;
  if (!waitedFor || afterPause_ == nullptr || !*afterPause_) return;
  *afterPause_ = false;
  if (nrecv_ == 1 && waiter_->onlySpun()) recv_[0]->noteHandoff(comm_->handoffJudge);
}

int FanPrims::recvPeer(int k) const {
  return recv_[k]->peer;
}

int FanPrims::sendPeer(int k) const {
  return send_[k]->peer;
}

bool FanPrims::ready(size_t bytes) const {
  for (int k = 0; k < nrecv_; ++k)
    if (!io_.recvReady(*recv_[k], bytes)) {
      blocker_ = recv_[k]->peer;
      missed_ = true;
      return false;
    }
  for (int k = 0; k < nsend_; ++k)
    if (!send_[k]->slotFree()) {
      blocker_ = send_[k]->peer;
      missed_ = false;  // the chunks were in: not waited for
      return false;
    }
  return true;
}

const char* FanPrims::received(int k, size_t bytes) {
  const size_t got = io_.recvBytes(*recv_[k], bytes);
  if (got != bytes)
    fail(chorusInvalidUsage,
         "rank %d: %s: received %zu bytes from rank %d where %zu were expected (do all ranks "
         "call the same operation with the same count and type?)",
         comm_->rank, opName_, got, recv_[k]->peer, bytes);
  return io_.recvData(*recv_[k], bytes, recvScratch_[k]);
}

bool FanPrims::tryReduce(const void* src, void* dst, size_t n, bool final) {
  const size_t bytes = n * esz_;
  if (!ready(bytes)) return false;
  if (io_.timeSlots) judge();
  const char* in[kMaxFan];
  for (int k = 0; k < nrecv_; ++k) in[k] = received(k, bytes);
  char* out = static_cast<char*>(dst);
  // The fold's target: the first send slot (Simple) or the send scratch (LL) when sending, with
  // dst as the second destination of the last fold; else dst itself. Simple, folding into dst
  // and sending too (the root of a tree that also broadcasts): dst alone, sent from there
  // (sendPost copies it into the slot: proto/proto.h says why not a fold into both).
  char* second = nullptr;
  if (nsend_ > 0) {
    out = io_.sendBuffer(*send_[0], io_.sendScratch);
    second = static_cast<char*>(dst);
    if (io_.proto == Proto::kSimple && dst != nullptr && nrecv_ > 0) {
      out = static_cast<char*>(dst);
      second = nullptr;
    }
  }
  const char* s = static_cast<const char*>(src);
  if (nrecv_ == 0) {
    if (out != s) copyKernel(out, second != s ? second : nullptr, s, bytes);
  } else {
    const int div = final && op_ == chorusAvg ? comm_->nranks : 0;
    for (int k = 0; k < nrecv_; ++k) {
      const bool last = k == nrecv_ - 1;
      reduceKernel(type_, op_, n, in[k], k == 0 ? s : out, out, last ? second : nullptr,
                   last ? div : 0);
    }
  }
  for (int k = 0; k < nsend_; ++k) io_.sendPost(*send_[k], out, bytes);
  for (int k = 0; k < nrecv_; ++k) recv_[k]->release();
  return true;
}

bool FanPrims::tryCopy(const void* src, void* dst, size_t n) {
  const size_t bytes = n * esz_;
  if (!ready(bytes)) return false;
  if (io_.timeSlots) judge();
  const char* in = nrecv_ > 0 ? received(0, bytes) : static_cast<const char*>(src);
  if (dst != nullptr && dst != in) copyKernel(static_cast<char*>(dst), nullptr, in, bytes);
  for (int k = 0; k < nsend_; ++k) io_.sendPost(*send_[k], in, bytes);
  if (nrecv_ > 0) recv_[0]->release();
  return true;
}

size_t trySendChunk(SendConn& s, const char* src, size_t bytes, bool startsMessage) {
  if (!s.slotFree()) return 0;
  const size_t k = bytes < s.slotBytes ? bytes : s.slotBytes;
  copyKernel(s.slot(), nullptr, src, k);
  s.post(uint64_t(k) | (startsMessage ? kSlotMessageStart : 0));
  return k;
}

size_t tryRecvChunk(chorusComm* comm, RecvConn& r, char* dst, size_t room, const char* what) {
  if (!r.dataReady()) return 0;
  const size_t k = r.slotSize();
  if (k > room || k == 0)
    fail(chorusInvalidUsage,
         "rank %d: %s: rank %d sent more data than this rank receives (%zu bytes still expected); "
         "do the counts of chorusSend and chorusRecv match?",
         comm->rank, what, r.peer, room);
  copyKernel(dst, nullptr, r.slot(), k);
  r.release();
  return k;
}

}  // namespace chorus
