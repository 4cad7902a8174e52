// A data listener's verdict on what a connecting peer sent (chorus::tcpwire::checkDataHello).
//
// Input: [flags u8][myRank i32][hello bytes...]. flags bit 0 patches a valid proof into the
// hello (SipHash cannot be guessed, and the rank/channel checks behind it must be reached too);
// bit 1 patches the magic.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "net/tcp_wire.h"

using namespace chorus::tcpwire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  static const uint8_t secret[16] = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  static const uint8_t nonce[16] = {0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61,
                                    0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69};
  const uint8_t flags = data[0];
  int32_t myRank;
  std::memcpy(&myRank, data + 1, 4);
  std::vector<uint8_t> bytes(data + 5, data + size);
  if ((flags & 1) && bytes.size() >= sizeof(DataHello)) {
    const uint64_t proof = dataProof(secret, nonce, 'D');
    std::memcpy(bytes.data() + offsetof(DataHello, proof), &proof, 8);
  }
  if ((flags & 2) && bytes.size() >= 4) std::memcpy(bytes.data(), &kDataMagic, 4);

  const DataHelloCheck c = checkDataHello(bytes.data(), bytes.size(), secret, nonce, myRank);
  FUZZ_CHECK(dataHelloStatusName(c.status) != nullptr);
  FUZZ_CHECK((bytes.size() < sizeof(DataHello)) == (c.status == DataHelloStatus::kNeedMore));
  if (c.status == DataHelloStatus::kAccepted) {
    DataHello h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    FUZZ_CHECK(h.magic == kDataMagic);
    FUZZ_CHECK(h.proof == dataProof(secret, nonce, 'D'));
    FUZZ_CHECK(c.rank >= 0 && c.rank < myRank);  // only lower ranks connect
    FUZZ_CHECK((c.channel == kControlChannel && c.sock == 0) ||
               (c.channel >= 0 && c.channel < kMaxChannels && c.sock >= 0 && c.sock < kMaxSocks));
  }
  // The verdict depends on the first sizeof(DataHello) bytes only; a proof for another role
  // or nonce never passes.
  for (size_t k = 0; k < std::min(bytes.size(), sizeof(DataHello)); ++k)
    FUZZ_CHECK(checkDataHello(bytes.data(), k, secret, nonce, myRank).status ==
               DataHelloStatus::kNeedMore);
  if (bytes.size() > sizeof(DataHello))
    FUZZ_CHECK(checkDataHello(bytes.data(), sizeof(DataHello), secret, nonce, myRank).status ==
               c.status);
  // The same bytes cannot pass under two nonces (a proof answers one challenge only). Checked
  // only when they pass under ours: libFuzzer's comparison tracing learns the proof any
  // dataProof() comparison expects, so it can forge the one for otherNonce, but not both.
  if (c.status == DataHelloStatus::kAccepted) {
    uint8_t otherNonce[16];
    std::memcpy(otherNonce, nonce, 16);
    otherNonce[15] ^= 0x80;
    FUZZ_CHECK(checkDataHello(bytes.data(), bytes.size(), secret, otherNonce, myRank).status !=
               DataHelloStatus::kAccepted);
  }
  return 0;
}
