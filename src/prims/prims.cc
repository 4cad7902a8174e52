#include "prims/prims.h"

#include <cstring>

#include "core/comm.h"
#include "core/error.h"
#include "core/wait.h"
#include "reduce/reduce.h"

namespace chorus {

Prims::Prims(chorusComm* comm, int channel, int recvPeer, int sendPeer, chorusDataType_t type,
             chorusRedOp_t op, const char* opName)
    : comm_(comm), type_(type), op_(op), esz_(chorusTypeSize(type)), opName_(opName) {
  if (sendPeer >= 0) send_ = &comm->sendConns[size_t(channel)][size_t(sendPeer)];
  if (recvPeer >= 0) recv_ = &comm->recvConns[size_t(channel)][size_t(recvPeer)];
  chunkElems_ = comm->slotBytes / esz_;
}

void Prims::waitSend() {
  if (send_->slotFree()) return;
  Waiter w(comm_, send_->peer, opName_);
  while (!send_->slotFree()) w.pause();
}

const char* Prims::waitRecv(size_t bytes) {
  if (!recv_->dataReady()) {
    Waiter w(comm_, recv_->peer, opName_);
    while (!recv_->dataReady()) w.pause();
  }
  size_t got = recv_->slotSize();
  if (got != bytes)
    fail(chorusInvalidUsage,
         "rank %d: %s: received %zu bytes from rank %d where %zu were expected (do all ranks call "
         "the same operation with the same count and type?)",
         comm_->rank, opName_, got, recv_->peer, bytes);
  return recv_->slot();
}

int Prims::divisor(bool final) const { return final && op_ == chorusAvg ? comm_->nranks : 0; }

void Prims::send(const void* src, size_t n) {
  if (n == 0) return;
  waitSend();
  copyKernel(send_->slot(), nullptr, src, n * esz_);
  send_->post(n * esz_);
}

void Prims::recv(void* dst, size_t n) {
  if (n == 0) return;
  const char* in = waitRecv(n * esz_);
  copyKernel(dst, nullptr, in, n * esz_);
  recv_->release();
}

void Prims::copySend(const void* src, void* dst, size_t n) {
  if (n == 0) return;
  waitSend();
  copyKernel(send_->slot(), src == dst ? nullptr : dst, src, n * esz_);
  send_->post(n * esz_);
}

void Prims::recvCopySend(void* dst, size_t n) {
  if (n == 0) return;
  const char* in = waitRecv(n * esz_);
  waitSend();
  copyKernel(send_->slot(), dst, in, n * esz_);
  send_->post(n * esz_);
  recv_->release();
}

void Prims::recvReduceSend(const void* src, size_t n) {
  if (n == 0) return;
  const char* in = waitRecv(n * esz_);
  waitSend();
  reduceKernel(type_, op_, n, in, src, send_->slot(), nullptr, 0);
  send_->post(n * esz_);
  recv_->release();
}

void Prims::recvReduceCopy(const void* src, void* dst, size_t n, bool final) {
  if (n == 0) return;
  const char* in = waitRecv(n * esz_);
  reduceKernel(type_, op_, n, in, src, dst, nullptr, divisor(final));
  recv_->release();
}

void Prims::recvReduceCopySend(const void* src, void* dst, size_t n, bool final) {
  if (n == 0) return;
  const char* in = waitRecv(n * esz_);
  waitSend();
  reduceKernel(type_, op_, n, in, src, dst, send_->slot(), divisor(final));
  send_->post(n * esz_);
  recv_->release();
}

}  // namespace chorus
