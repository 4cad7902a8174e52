// The rank's side of the handshake: the root's challenge (chorus::wire::parseChallenge) and its
// 8-byte proof. Input: [challenge-ish bytes][8 bytes of reply] (any length).
#include <cstdint>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "fuzz_check.h"

using namespace chorus::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint8_t secret[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
  uint8_t nonce[16];
  std::memset(nonce, 0x5a, sizeof nonce);
  const size_t n = std::min(size, sizeof(Challenge));
  const bool ok = parseChallenge(data, n, nonce);
  if (n != sizeof(Challenge)) {
    FUZZ_CHECK(!ok);
    return 0;
  }
  Challenge c;
  std::memcpy(&c, data, sizeof c);
  FUZZ_CHECK(ok == (c.magic == kChallengeMagic && c.version == kProtocolVersion));
  if (!ok) return 0;
  FUZZ_CHECK(std::memcmp(nonce, c.nonce, 16) == 0);
  // The client answers with proofFor(.., 'C') and accepts the root's reply only if it is the
  // 'R' proof; the two roles must never coincide.
  FUZZ_CHECK(proofFor(secret, nonce, 'C') != proofFor(secret, nonce, 'R'));
  if (size >= sizeof(Challenge) + 8) {
    uint64_t reply;
    std::memcpy(&reply, data + sizeof(Challenge), 8);
    if (reply == proofFor(secret, nonce, 'R')) return 0;  // accepted: only the real proof
  }
  return 0;
}
