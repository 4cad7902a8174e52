// TCP's row of the transport table (core/transports.cc): the data listener, open from the
// transport's creation (before the bootstrap) until the links exist; its address in the peer
// record; the links (TcpLinks) to the ranks of other nodes, which also run the control
// channel to them.
#include <cstring>

#include "base/debug.h"
#include "comm/comm.h"
#include "net/data_listener.h"
#include "net/tcp.h"

namespace chorus {

namespace {

static_assert(sizeof(sockaddr_in6) + sizeof(uint32_t) <= kTransportAddrBytes);

class TcpRow final : public Transport {
 public:
  TcpRow(chorusComm* c, int row, const uint8_t secret[16]) : c_(c), row_(size_t(row)) {
    memcpy(secret_, secret, sizeof(secret_));
    addr_ = pickLocalAddress();
    // Every rank opens its data listener first (it authenticates connections from then on).
    if (c->nranks > 1) {
      listener_ = std::make_unique<DataListener>(&addr_, secret, c->rank, &c->abortFlag);
      CHORUS_INFO(c->rank, "data listener on %s", addr_.str().c_str());
    }
  }
  void address(uint8_t* addr) override {
    const uint32_t len = uint32_t(addr_.len);
    memcpy(addr, &addr_.ss, len);
    memcpy(addr + sizeof(sockaddr_in6), &len, sizeof(len));
  }
  bool reaches(int peer) const override { return c_->isRemote(peer); }
  void connect(const std::vector<int>& peers) override {
    if (!peers.empty()) {
      std::vector<SockAddr> addrs(static_cast<size_t>(c_->nranks));
      for (int p = 0; p < c_->nranks; ++p) {
        const uint8_t* a = c_->peers[size_t(p)].addr[row_];
        uint32_t len;
        memcpy(&len, a + sizeof(sockaddr_in6), sizeof(len));
        memcpy(&addrs[size_t(p)].ss, a, len);
        addrs[size_t(p)].len = socklen_t(len);
      }
      links_ = std::make_unique<TcpLinks>(c_, *listener_, addrs, secret_);
    }
    listener_.reset();  // the links exist: no more connections to accept
  }
  uint8_t protocols() const override { return kTcpProtocols; }
  void bind(int, int channel, int peer, SendConn* s, RecvConn*) override {
    links_->bindSendConn(peer, channel, s);  // Simple: init binds only what protocols() says
  }
  PeerControl* control() override { return links_.get(); }

 private:
  chorusComm* c_;
  size_t row_;
  uint8_t secret_[16];
  SockAddr addr_;
  std::unique_ptr<DataListener> listener_;
  std::unique_ptr<TcpLinks> links_;
};

}  // namespace

std::unique_ptr<Transport> createTcpTransport(chorusComm* c, int row, const uint8_t secret[16]) {
  return std::make_unique<TcpRow>(c, row, secret);
}

}  // namespace chorus
