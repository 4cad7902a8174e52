// SipHash-2-4, a keyed pseudo-random function (Aumasson & Bernstein), used to prove knowledge of
// the communicator secret without sending it: proof = SipHash(secret, nonce || role).
// Kept hand-written (40 lines, allocation-free): Debian 12 has no stand-alone SipHash library and
// a crypto library for one short keyed hash would be a run-time dependency for little gain.
// tests/test_siphash.cc checks it against the reference implementation's 64 test vectors.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

uint64_t sipHash24(const uint8_t key[16], const void* data, size_t len);

}  // namespace chorus
