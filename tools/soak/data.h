// chorus-soak: the random operations and their inputs and checks (tools/soak/README.md).
//
// Every value a rank sends is a function of (the operation's salt, the rank, the position), so
// each rank can compute what every other rank sent and check its own result without any data
// from them. Reductions use small integers that are exact in every datatype (sums stay within
// +-24 for 8 ranks, products within +-3, an average is a sum that is a multiple of nranks), copy
// collectives use arbitrary bytes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>

#include "chorus/chorus.h"

namespace soak {

uint64_t mix64(uint64_t x);
inline uint64_t mix(uint64_t a, uint64_t b) {
  return mix64(a ^ mix64(b));
}
inline uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  return mix(mix(a, b), c);
}

// A generator every rank of a communicator runs from the same seed: same draws, same order.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    s += 0x9e3779b97f4a7c15ULL;
    return mix64(s);
  }
  size_t below(size_t n) { return n == 0 ? 0 : size_t(next() % n); }
  bool chance(double p) { return double(next() >> 11) * 0x1.0p-53 < p; }
};

enum Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSendRecv,
  kNumColl
};
const char* collName(int c);

struct OpDesc {
  Coll coll = kAllReduce;
  chorusDataType_t type = chorusFloat32;
  chorusRedOp_t op = chorusSum;
  int root = 0;
  size_t count = 0;  // as passed to the call (per rank for the gathers and scatters)
  bool inPlace = false;
  int shift = 0;  // SendRecv: send to rank + shift, receive from rank - shift
  uint64_t salt = 0;
  std::string describe() const;
};

// Draws one operation for an n-rank communicator; its buffers stay within maxBytes.
OpDesc drawOp(Rng& r, int n, size_t maxBytes);
// Collective c on about `bytes` bytes per buffer (the rest drawn).
OpDesc makeOp(Rng& r, Coll c, int n, size_t bytes);
// An operation that needs every rank's input (AllReduce, AllGather, AlltoAll, ReduceScatter).
OpDesc drawAllInputOp(Rng& r, int n);
size_t drawBytes(Rng& r, size_t maxBytes);

// Memory of its own (mmap), with a guard after the used bytes: big buffers go back to the
// system when freed, so that the RSS measured is the library's.
class Buf {
 public:
  Buf() = default;
  explicit Buf(size_t bytes);
  Buf(Buf&& o) noexcept;
  Buf& operator=(Buf&& o) noexcept;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf();
  uint8_t* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  bool guardIntact() const;

 private:
  uint8_t* p_ = nullptr;
  size_t bytes_ = 0, mapped_ = 0;
};

// One operation's buffers on one rank, filled with its inputs.
struct Prepared {
  OpDesc d;
  int me = 0, n = 1;
  Buf a, b;  // a: send (or the only buffer in place), b: receive
  const void* send = nullptr;
  void* recv = nullptr;
};
Prepared prepare(const OpDesc& d, int me, int n);
// Issues the operation (Send/Recv as a group of its own unless inside one already).
chorusResult_t issue(Prepared& p, chorusComm_t comm, chorusStream_t stream);
// Empty when the results (and the untouched send buffer and guards) are right; else what is
// wrong, with the first differing element.
std::string verify(const Prepared& p);
size_t bytesMoved(const OpDesc& d, int n);

}  // namespace soak
