// The root's verdict on what a connecting peer sent (chorus::wire::checkHello).
//
// Input: [flags u8][expectedNranks i32][hello bytes...]. flags bit 0 patches a valid proof into
// the hello (SipHash cannot be guessed by a fuzzer, and the checks after it must be reached
// too); bit 1 patches the hello magic.
#include <cstdint>
#include <cstring>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "fuzz_check.h"

using namespace chorus::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  static const uint8_t secret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  static const uint8_t nonce[16] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
                                    0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};
  const uint8_t flags = data[0];
  int32_t expected;
  std::memcpy(&expected, data + 1, 4);
  std::vector<uint8_t> bytes(data + 5, data + size);
  if ((flags & 1) && bytes.size() >= sizeof(Hello)) {
    const uint64_t proof = proofFor(secret, nonce, 'C');
    std::memcpy(bytes.data() + offsetof(Hello, proof), &proof, 8);
  }
  if ((flags & 2) && bytes.size() >= 4) std::memcpy(bytes.data(), &kHelloMagic, 4);

  const HelloCheck h = checkHello(bytes.data(), bytes.size(), secret, nonce, expected);
  FUZZ_CHECK(helloStatusName(h.status) != nullptr);
  if (bytes.size() < sizeof(Hello)) FUZZ_CHECK(h.status == HelloStatus::kNeedMore);
  if (bytes.size() >= sizeof(Hello)) FUZZ_CHECK(h.status != HelloStatus::kNeedMore);
  if (h.status == HelloStatus::kAccepted) {
    Hello hello;
    std::memcpy(&hello, bytes.data(), sizeof(hello));
    FUZZ_CHECK(hello.magic == kHelloMagic);
    FUZZ_CHECK(hello.proof == proofFor(secret, nonce, 'C'));
    FUZZ_CHECK(h.rank < h.nranks);
    if (expected < 0)
      FUZZ_CHECK(h.nranks >= 1 && h.nranks <= kMaxRanks);
    else
      FUZZ_CHECK(int64_t(h.nranks) == expected);
  }
  // Every prefix of an incomplete hello is "need more"; the verdict only depends on the first
  // sizeof(Hello) bytes (the root never reads further).
  for (size_t k = 0; k < std::min(bytes.size(), sizeof(Hello)); ++k)
    FUZZ_CHECK(checkHello(bytes.data(), k, secret, nonce, expected).status ==
               HelloStatus::kNeedMore);
  if (bytes.size() > sizeof(Hello))
    FUZZ_CHECK(checkHello(bytes.data(), sizeof(Hello), secret, nonce, expected).status == h.status);
  return 0;
}
