#include "base/siphash.h"

#include <cstring>

namespace chorus {

namespace {
inline uint64_t rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
struct State {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
};
}  // namespace

uint64_t sipHash24(const uint8_t key[16], const void* data, size_t len) {
  const uint8_t* in = static_cast<const uint8_t*>(data);
  uint64_t k0 = load64(key), k1 = load64(key + 8);
  State s{0x736f6d6570736575ULL ^ k0, 0x646f72616e646f6dULL ^ k1, 0x6c7967656e657261ULL ^ k0,
          0x7465646279746573ULL ^ k1};
  size_t full = len & ~size_t(7);
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = load64(in + i);
    s.v3 ^= m;
    s.round();
    s.round();
    s.v0 ^= m;
  }
  uint64_t b = uint64_t(len) << 56;
  for (size_t i = 0; i < (len & 7); ++i) b |= uint64_t(in[full + i]) << (8 * i);
  s.v3 ^= b;
  s.round();
  s.round();
  s.v0 ^= b;
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace chorus
