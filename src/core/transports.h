// The table of transports (comm/transport.h), one row each, in the order init tries them for a
// peer: the first row whose transport reaches the peer carries its FIFOs.
#pragma once

#include <span>

#include "comm/transport.h"

namespace chorus {

std::span<const TransportRow> transportTable();

}  // namespace chorus
