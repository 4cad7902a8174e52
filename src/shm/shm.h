// Shared memory inside a node (a row of the transport table, core/transports.cc): a rank posts
// straight into its peer's receive FIFO, in the peer's segment (transport/segment.h), mapped by
// init's segment phase (same process: the peer's memory itself). No proxy, no copy but the
// primitive's own.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/transport.h"

namespace chorus {

std::unique_ptr<Transport> createShmTransport(chorusComm* c, int row, const uint8_t secret[16]);

}  // namespace chorus
