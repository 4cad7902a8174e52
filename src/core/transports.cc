#include "core/transports.h"

#include <iterator>

#include "loopback/loopback.h"
#include "net/tcp.h"
#include "shm/shm.h"

namespace chorus {

namespace {

// A new transport: its folder, and one row here.
constexpr TransportRow kTransports[] = {
    {"shm", false, true, createShmTransport},
    {"tcp", false, false, createTcpTransport},
    {"loopback", true, false, createLoopbackTransport},
};
static_assert(std::size(kTransports) <= size_t(kMaxTransports));

}  // namespace

std::span<const TransportRow> transportTable() {
  return kTransports;
}

}  // namespace chorus
