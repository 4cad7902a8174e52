// The loopback transport: ranks that are threads of one process, with FIFOs in heap memory this
// transport allocates itself (not the segments'). Written against the transport interface only
// (comm/transport.h), as the proof of what a new transport has to write; only CHORUS_TRANSPORT=
// loopback selects it (tests/test_transport.cc).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/transport.h"

namespace chorus {

// FIFO blocks allocated and not yet freed, in this process (tests check that they are freed).
long loopbackBlocksLive();

std::unique_ptr<Transport> createLoopbackTransport(chorusComm* c, int row,
                                                   const uint8_t secret[16]);

}  // namespace chorus
