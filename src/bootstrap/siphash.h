// SipHash-2-4, a keyed pseudo-random function (Aumasson & Bernstein), used to prove knowledge of
// the communicator secret without sending it: proof = SipHash(secret, nonce || role).
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

uint64_t sipHash24(const uint8_t key[16], const void* data, size_t len);

}  // namespace chorus
