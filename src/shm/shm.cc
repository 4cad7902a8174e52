#include "shm/shm.h"

#include "comm/comm.h"

namespace chorus {

namespace {

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(chorusComm* c) : c_(c) {}
  // Every rank of this node: its segment is mapped (core/init.cc's segment phase).
  bool reaches(int peer) const override { return !c_->isRemote(peer); }
  void connect(const std::vector<int>&) override {}
  void bind(int proto, int channel, int peer, SendConn* s, RecvConn* r) override {
    const Segment& peerSeg = c_->segmentOf(peer);
    s->ctrl = peerSeg.fifoCtrl(proto, channel, c_->rank);
    s->slots = peerSeg.fifoData(proto, channel, c_->rank);
    s->slotBytes = c_->slotBytes[proto];
    // Posts wake the peer if it sleeps waiting for data; releases wake it waiting for a free
    // slot.
    s->wakee = r->wakee = c_->doorbellOf(peer);
    r->timed = true;  // a sender of this machine: its time stamps are comparable
  }

 private:
  chorusComm* c_;
};

}  // namespace

std::unique_ptr<Transport> createShmTransport(chorusComm* c, int, const uint8_t*) {
  return std::make_unique<ShmTransport>(c);
}

}  // namespace chorus
