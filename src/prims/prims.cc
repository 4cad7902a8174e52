#include "prims/prims.h"

#include <cstring>

#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "reduce/copy_kernel.h"
#include "reduce/reduce.h"

namespace chorus {

Prims::Prims(chorusComm* comm, int channel, Proto proto, int recvPeer, int sendPeer,
             chorusDataType_t type, chorusRedOp_t op, const char* opName)
    : comm_(comm), type_(type), op_(op), esz_(chorusTypeSize(type)), opName_(opName) {
  const int pr = int(proto);
  if (sendPeer >= 0) send_ = &comm->sendConn(pr, channel, sendPeer);
  if (recvPeer >= 0) recv_ = &comm->recvConn(pr, channel, recvPeer);
  io_.proto = proto;
  char* scratch = comm->scratch->channel[size_t(channel)].data();
  io_.recvScratch = scratch;
  io_.sendScratch = scratch + comm->slotBytes[0];
  chunkElems_ = protoSlotCapacity(proto, comm->slotBytes[pr]) / esz_;
}

char* Prims::waitSend() {
  if (!send_->slotFree()) {
    Waiter w(comm_, send_->peer, opName_, /*fifoWait=*/true);
    while (!send_->slotFree()) w.pause();
  }
  return io_.sendBuffer(*send_, io_.sendScratch);
}

const char* Prims::waitRecv(size_t bytes) {
  if (!io_.recvReady(*recv_, bytes)) {
    Waiter w(comm_, recv_->peer, opName_, /*fifoWait=*/true);
    while (!io_.recvReady(*recv_, bytes)) w.pause();
    // Seen within a few polls of its arrival: the hand-off's time judges the link.
    if (io_.timeSlots && w.onlySpun()) recv_->noteHandoff(comm_->handoffJudge);
  }
  size_t got = io_.recvBytes(*recv_, bytes);
  if (got != bytes)
    fail(chorusInvalidUsage,
         "rank %d: %s: received %zu bytes from rank %d where %zu were expected (do all ranks call "
         "the same operation with the same count and type?)",
         comm_->rank, opName_, got, recv_->peer, bytes);
  return io_.recvData(*recv_, bytes, io_.recvScratch);
}

int Prims::divisor(bool final) const {
  return final && op_ == chorusAvg ? comm_->nranks : 0;
}

void Prims::writeOut(void* dst, const void* src, size_t bytes) {
  if (dst == src) return;
  if (streamOut_)
    streamCopyKernel(dst, src, bytes);
  else
    copyKernel(dst, nullptr, src, bytes);
}

void Prims::send(const void* src, size_t n) {
  if (n == 0) return;
  const size_t bytes = n * esz_;
  char* out = waitSend();
  if (io_.streamSlots) {
    post(static_cast<const char*>(src), bytes);  // streamed from src: no copy into the scratch
    return;
  }
  copyKernel(out, nullptr, src, bytes);
  post(out, bytes);
}

void Prims::recv(void* dst, size_t n) {
  if (n == 0) return;
  const size_t bytes = n * esz_;
  const char* in = waitRecv(bytes);
  writeOut(dst, in, bytes);
  recv_->release();
}

void Prims::copySend(const void* src, void* dst, size_t n) {
  if (n == 0) return;
  const size_t bytes = n * esz_;
  char* out = waitSend();
  if (io_.streamSlots) {
    writeOut(dst, src, bytes);
    post(static_cast<const char*>(src), bytes);  // streamed from src: no copy into the scratch
    return;
  }
  if (streamOut_) {
    copyKernel(out, nullptr, src, bytes);
    writeOut(dst, src, bytes);
  } else {
    copyKernel(out, src == dst ? nullptr : dst, src, bytes);
  }
  post(out, bytes);
}

void Prims::recvCopySend(void* dst, size_t n) {
  if (n == 0) return;
  const size_t bytes = n * esz_;
  const char* in = waitRecv(bytes);
  char* out = waitSend();
  if (io_.proto == Proto::kSimple && !io_.streamSlots) {
    if (streamOut_) {
      copyKernel(out, nullptr, in, bytes);
      writeOut(dst, out, bytes);
    } else {
      copyKernel(out, dst, in, bytes);
    }
    post(out, bytes);
  } else {
    // LL: packed straight from the received data; streamed slots: streamed from it (the copy
    // to dst first brings it into this core's cache).
    writeOut(dst, in, bytes);
    post(in, bytes);
  }
  recv_->release();
}

void Prims::recvReduceSend(const void* src, size_t n) {
  if (n == 0) return;
  const size_t bytes = n * esz_;
  const char* in = waitRecv(bytes);
  char* out = waitSend();
  reduceKernel(type_, op_, n, in, src, out, nullptr, 0);
  post(out, bytes);
  recv_->release();
}

void Prims::recvReduceCopy(const void* src, void* dst, size_t n, bool final) {
  if (n == 0) return;
  const char* in = waitRecv(n * esz_);
  if (streamOut_ && dst != src) {
    reduceKernel(type_, op_, n, in, src, io_.sendScratch, nullptr, divisor(final));
    writeOut(dst, io_.sendScratch, n * esz_);
  } else {
    reduceKernel(type_, op_, n, in, src, dst, nullptr, divisor(final));
  }
  recv_->release();
}

void Prims::recvReduceCopySend(const void* src, void* dst, size_t n, bool final) {
  if (n == 0) return;
  const size_t bytes = n * esz_;
  const char* in = waitRecv(bytes);
  char* out = waitSend();
  if (io_.proto == Proto::kSimple && streamOut_ && dst != src) {
    reduceKernel(type_, op_, n, in, src, out, nullptr, divisor(final));
    writeOut(dst, out, bytes);
    post(out, bytes);
  } else {
    // Into the output, then sent from it (Simple: copied into the slot by sendPost, not stored
    // there by the reduce loop; proto/proto.h says why).
    reduceKernel(type_, op_, n, in, src, dst, nullptr, divisor(final));
    post(static_cast<const char*>(dst), bytes);
  }
  recv_->release();
}

}  // namespace chorus
