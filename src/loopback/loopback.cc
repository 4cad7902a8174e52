#include "loopback/loopback.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "comm/comm.h"

namespace chorus {

namespace {

std::atomic<long> blocksLive{0};

// A rank's address: its process, its host, and its block of receive FIFOs: a reference count
// (one per rank of its process, each dropped by that rank's close), then one FIFO (control
// word, kNSteps slots) per (protocol, channel, sender).
struct Address {
  int32_t pid;
  uint64_t hostHash;
  char* block;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(chorusComm* c, int row) : c_(c), row_(size_t(row)) {}
  ~LoopbackTransport() override {
    for (char* b : known_) drop(b);
  }

  void address(uint8_t* addr) override {
    // A page for the block's count, then per FIFO a page for its control line and the slots,
    // which start on a page as fifo.h places them.
    size_t bytes = kSlotPage;
    for (int pr = 0; pr < 2; ++pr) {
      stride_[pr] = kSlotPage + fifoSlotsBytes(c_->slotBytes[pr]);
      setBytes_[pr] = size_t(c_->nchannels) * size_t(c_->nranks) * stride_[pr];
      bytes += setBytes_[pr];
    }
    char* b = static_cast<char*>(std::aligned_alloc(kSlotPage, bytes));
    if (b == nullptr) throw std::bad_alloc();
    memset(b, 0, bytes);
    const uint64_t host = c_->peers[size_t(c_->rank)].hostHash;
    int sameProcess = 0;
    for (const PeerInfo& p : c_->peers) sameProcess += p.pid == getpid() && p.hostHash == host;
    new (b) std::atomic<int>(sameProcess);
    blocksLive.fetch_add(1);
    const Address a{int32_t(getpid()), host, b};
    memcpy(addr, &a, sizeof(a));
  }

  bool reaches(int peer) const override {
    const Address a = addressOf(peer);
    return a.block != nullptr && a.pid == getpid() && a.hostHash == addressOf(c_->rank).hostHash;
  }

  // Every block of this process is known from here on, used or not: each rank drops one
  // reference of each, so the last rank to close frees it.
  void connect(const std::vector<int>&) override {
    for (int p = 0; p < c_->nranks; ++p)
      if (reaches(p)) known_.push_back(addressOf(p).block);
  }

  void bind(int proto, int channel, int peer, SendConn* s, RecvConn* r) override {
    r->ctrl = ctrl(addressOf(c_->rank).block, proto, channel, peer);
    r->slots = reinterpret_cast<char*>(r->ctrl) + kSlotPage;
    s->ctrl = ctrl(addressOf(peer).block, proto, channel, c_->rank);
    s->slots = reinterpret_cast<char*>(s->ctrl) + kSlotPage;
    s->slotBytes = r->slotBytes = c_->slotBytes[proto];
    // The ranks sleep on their doorbell (comm/wait.cc).
    s->wakee = r->wakee = c_->doorbellOf(peer);
    r->timed = true;  // a sender of this machine: its time stamps are comparable
  }

 private:
  Address addressOf(int rank) const {
    Address a;
    memcpy(&a, c_->peers[size_t(rank)].addr[row_], sizeof(a));
    return a;
  }
  FifoCtrl* ctrl(char* block, int proto, int channel, int sender) const {
    const size_t off = kSlotPage + (proto == 1 ? setBytes_[0] : 0) +
                       stride_[proto] * (size_t(channel) * size_t(c_->nranks) + size_t(sender));
    return reinterpret_cast<FifoCtrl*>(block + off);
  }
  static void drop(char* b) {
    if (reinterpret_cast<std::atomic<int>*>(b)->fetch_sub(1) != 1) return;
    std::free(b);
    blocksLive.fetch_sub(1);
  }

  chorusComm* c_;
  size_t row_;
  size_t stride_[2] = {0, 0}, setBytes_[2] = {0, 0};
  std::vector<char*> known_;
};

}  // namespace

long loopbackBlocksLive() {
  return blocksLive.load();
}

std::unique_ptr<Transport> createLoopbackTransport(chorusComm* c, int row, const uint8_t*) {
  return std::make_unique<LoopbackTransport>(c, row);
}

}  // namespace chorus
