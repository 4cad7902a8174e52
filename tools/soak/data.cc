#include "data.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <new>
#include <utility>

namespace soak {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

const char* collName(int c) {
  static const char* const names[] = {"AllReduce", "Broadcast",  "Reduce",
                                      "AllGather", "ReduceScat", "AlltoAll",
                                      "Gather",    "Scatter",    "SendRecv"};
  return c >= 0 && c < kNumColl ? names[c] : "?";
}

namespace {

const char* typeName(chorusDataType_t t) {
  static const char* const names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                      "uint64", "float16", "float32", "float64", "bfloat16"};
  return int(t) >= 0 && int(t) < chorusNumTypes ? names[t] : "?";
}
const char* opName(chorusRedOp_t o) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return int(o) >= 0 && int(o) < chorusNumOps ? names[o] : "?";
}

bool isReduction(Coll c) {
  return c == kAllReduce || c == kReduce || c == kReduceScatter;
}
bool isSignedType(chorusDataType_t t) {
  return t != chorusUint8 && t != chorusUint32 && t != chorusUint64;
}

// float16 / bfloat16 of small integers (exact values only: no rounding is ever needed).
uint16_t toHalf(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  if ((b & 0x7fffffffu) == 0) return sign;
  const int e = int((b >> 23) & 0xff) - 127 + 15;
  return uint16_t(sign | (uint32_t(e) << 10) | ((b & 0x7fffffu) >> 13));
}
double fromHalf(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 0x3ff;
  double v;
  if (e == 0)
    v = std::ldexp(double(m), -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = std::ldexp(double(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}
uint16_t toBf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return uint16_t(b >> 16);
}
double fromBf16(uint16_t h) {
  const uint32_t b = uint32_t(h) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

void store(void* p, size_t i, chorusDataType_t t, int64_t v) {
  switch (t) {
    case chorusInt8:
      static_cast<int8_t*>(p)[i] = int8_t(v);
      break;
    case chorusUint8:
      static_cast<uint8_t*>(p)[i] = uint8_t(v);
      break;
    case chorusInt32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      break;
    case chorusUint32:
      static_cast<uint32_t*>(p)[i] = uint32_t(v);
      break;
    case chorusInt64:
      static_cast<int64_t*>(p)[i] = v;
      break;
    case chorusUint64:
      static_cast<uint64_t*>(p)[i] = uint64_t(v);
      break;
    case chorusFloat16:
      static_cast<uint16_t*>(p)[i] = toHalf(float(v));
      break;
    case chorusFloat32:
      static_cast<float*>(p)[i] = float(v);
      break;
    case chorusFloat64:
      static_cast<double*>(p)[i] = double(v);
      break;
    case chorusBfloat16:
      static_cast<uint16_t*>(p)[i] = toBf16(float(v));
      break;
    default:
      break;
  }
}
double load(const void* p, size_t i, chorusDataType_t t) {
  switch (t) {
    case chorusInt8:
      return static_cast<const int8_t*>(p)[i];
    case chorusUint8:
      return static_cast<const uint8_t*>(p)[i];
    case chorusInt32:
      return static_cast<const int32_t*>(p)[i];
    case chorusUint32:
      return static_cast<const uint32_t*>(p)[i];
    case chorusInt64:
      return double(static_cast<const int64_t*>(p)[i]);
    case chorusUint64:
      return double(static_cast<const uint64_t*>(p)[i]);
    case chorusFloat16:
      return fromHalf(static_cast<const uint16_t*>(p)[i]);
    case chorusFloat32:
      return static_cast<const float*>(p)[i];
    case chorusFloat64:
      return static_cast<const double*>(p)[i];
    case chorusBfloat16:
      return fromBf16(static_cast<const uint16_t*>(p)[i]);
    default:
      return NAN;
  }
}

// Rank `rank`'s input element i of a reduction (i indexes its whole send buffer).
int64_t redValue(const OpDesc& d, int n, int rank, size_t i) {
  const uint64_t h = mix(d.salt + uint64_t(rank) * 0x100000001b3ULL, i);
  const bool sgn = isSignedType(d.type);
  switch (d.op) {
    case chorusSum:
      return sgn ? int64_t(h % 7) - 3 : int64_t(h % 4);
    case chorusProd: {
      // One rank per element holds 1..3, the others +-1: the product stays within +-3.
      const int special = int(mix(d.salt ^ 0x5bd1e995u, i) % uint64_t(n));
      if (rank == special) return 1 + int64_t(h % 3);
      return (sgn && (h & 1)) ? -1 : 1;
    }
    case chorusMax:
    case chorusMin:
      return sgn ? int64_t(h % 17) - 8 : int64_t(h % 16);
    case chorusAvg: {
      // Ranks > 0 hold 0 or 1; rank 0 makes the sum n * M with M in 1..3 (never negative).
      if (rank > 0) return int64_t(h & 1);
      const int64_t m = 1 + int64_t(mix(d.salt ^ 0x27d4eb2fu, i) % 3);
      int64_t rest = 0;
      for (int r = 1; r < n; ++r)
        rest += int64_t(mix(d.salt + uint64_t(r) * 0x100000001b3ULL, i) & 1);
      return int64_t(n) * m - rest;
    }
    default:
      return 0;
  }
}

double expectedReduction(const OpDesc& d, int n, size_t i) {
  int64_t acc = redValue(d, n, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = redValue(d, n, r, i);
    switch (d.op) {
      case chorusSum:
      case chorusAvg:
        acc += v;
        break;
      case chorusProd:
        acc *= v;
        break;
      case chorusMax:
        acc = std::max(acc, v);
        break;
      case chorusMin:
        acc = std::min(acc, v);
        break;
      default:
        break;
    }
  }
  if (d.op == chorusAvg) acc /= n;
  return double(acc);
}

// Copy collectives: byte `pos` of what rank `rank` contributes.
struct ByteGen {
  uint64_t base;
  uint64_t word = 0, idx = ~0ULL;
  ByteGen(uint64_t salt, int rank) : base(salt ^ (uint64_t(rank + 1) * 0xff51afd7ed558ccdULL)) {}
  uint8_t at(uint64_t pos) {
    if ((pos >> 3) != idx) {
      idx = pos >> 3;
      word = mix(base, idx);
    }
    return uint8_t(word >> ((pos & 7) * 8));
  }
};

void fillBytes(uint8_t* p, size_t n, uint64_t salt, int rank, uint64_t pos0) {
  ByteGen g(salt, rank);
  for (size_t i = 0; i < n; ++i) p[i] = g.at(pos0 + i);
}
// Index of the first byte that differs, or -1.
long long checkBytes(const uint8_t* p, size_t n, uint64_t salt, int rank, uint64_t pos0) {
  ByteGen g(salt, rank);
  for (size_t i = 0; i < n; ++i)
    if (p[i] != g.at(pos0 + i)) return (long long)i;
  return -1;
}
void fillRed(void* p, size_t count, const OpDesc& d, int n, int rank, size_t first) {
  for (size_t i = 0; i < count; ++i) store(p, i, d.type, redValue(d, n, rank, first + i));
}
constexpr uint8_t kJunk = 0xEE;
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0x5A;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

std::string checkRed(const void* out, size_t count, const OpDesc& d, int n, size_t first,
                     const char* what) {
  for (size_t i = 0; i < count; ++i) {
    const double want = expectedReduction(d, n, first + i), got = load(out, i, d.type);
    if (!(got == want)) return fmt("%s element %zu: got %g, expected %g", what, i, got, want);
  }
  return "";
}
std::string checkBlock(const uint8_t* out, size_t nbytes, uint64_t salt, int rank, uint64_t pos0,
                       const char* what, int block) {
  const long long at = checkBytes(out, nbytes, salt, rank, pos0);
  if (at < 0) return "";
  ByteGen g(salt, rank);
  return fmt("%s block %d byte %lld: got 0x%02x, expected 0x%02x (rank %d's data)", what, block, at,
             out[at], g.at(pos0 + uint64_t(at)), rank);
}

}  // namespace

std::string OpDesc::describe() const {
  return fmt("%s count=%zu type=%s op=%s root=%d inplace=%d shift=%d salt=%016llx", collName(coll),
             count, typeName(type), opName(op), root, int(inPlace), shift,
             (unsigned long long)salt);
}

size_t drawBytes(Rng& r, size_t maxBytes) {
  const size_t u = r.below(1000);
  auto logUniform = [&](double lo, double hi) {
    hi = std::min(hi, double(maxBytes));
    if (hi <= lo) return size_t(hi);
    return size_t(lo * std::exp(double(r.below(1u << 20)) / double(1u << 20) * std::log(hi / lo)));
  };
  if (u < 50) return 0;
  if (u < 720) return r.below(4097);
  if (u < 920) return logUniform(4096, 1 << 20);
  if (u < 980) return logUniform(1 << 20, 8 << 20);
  return logUniform(8 << 20, double(maxBytes));
}

OpDesc makeOp(Rng& r, Coll c, int n, size_t bytes) {
  OpDesc d;
  d.coll = c;
  d.type = chorusDataType_t(r.below(chorusNumTypes));
  d.op = chorusRedOp_t(r.below(chorusNumOps));
  d.root = int(r.below(size_t(n)));
  const size_t ts = chorusTypeSize(d.type);
  const bool perRank =
      c == kAllGather || c == kReduceScatter || c == kAlltoAll || c == kGather || c == kScatter;
  d.count = bytes / ts / (perRank ? size_t(n) : 1);
  const bool inPlaceOk =
      c == kAllReduce || c == kBroadcast || c == kReduce || c == kAllGather || c == kReduceScatter;
  d.inPlace = inPlaceOk && r.chance(0.35);
  d.shift = n > 1 ? 1 + int(r.below(size_t(n - 1))) : 0;
  d.salt = r.next();
  return d;
}

OpDesc drawOp(Rng& r, int n, size_t maxBytes) {
  static const int weights[kNumColl] = {24, 10, 10, 12, 12, 8, 6, 6, 12};
  int total = 0;
  for (int w : weights) total += w;
  int pick = int(r.below(size_t(total)));
  Coll c = kAllReduce;
  for (int k = 0; k < kNumColl; ++k) {
    if (pick < weights[k]) {
      c = Coll(k);
      break;
    }
    pick -= weights[k];
  }
  const size_t bytes = drawBytes(r, maxBytes);
  return makeOp(r, c, n, bytes);
}

OpDesc drawAllInputOp(Rng& r, int n) {
  static const Coll colls[] = {kAllReduce, kAllGather, kAlltoAll, kReduceScatter};
  OpDesc d;
  d.coll = colls[r.below(4)];
  d.type = chorusDataType_t(r.below(chorusNumTypes));
  d.op = chorusRedOp_t(r.below(chorusNumOps));
  d.count = 1 + r.below(4096);
  if (d.coll != kAllReduce) d.count = std::max<size_t>(1, d.count / size_t(n));
  d.salt = r.next();
  return d;
}

size_t bytesMoved(const OpDesc& d, int n) {
  const size_t ts = chorusTypeSize(d.type);
  switch (d.coll) {
    case kAllGather:
    case kReduceScatter:
    case kAlltoAll:
    case kGather:
    case kScatter:
      return d.count * ts * size_t(n);
    default:
      return d.count * ts;
  }
}

Buf::Buf(size_t bytes) : bytes_(bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  mapped_ = (bytes + kGuard + page - 1) / page * page;
  void* m = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  p_ = static_cast<uint8_t*>(m);
  memset(p_ + bytes_, kGuardByte, kGuard);
}
Buf::Buf(Buf&& o) noexcept {
  *this = std::move(o);
}
Buf& Buf::operator=(Buf&& o) noexcept {
  if (this != &o) {
    if (p_) munmap(p_, mapped_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
  }
  return *this;
}
Buf::~Buf() {
  if (p_) munmap(p_, mapped_);
}
bool Buf::guardIntact() const {
  for (size_t i = 0; i < kGuard; ++i)
    if (p_[bytes_ + i] != kGuardByte) return false;
  return true;
}

Prepared prepare(const OpDesc& d, int me, int n) {
  Prepared p;
  p.d = d;
  p.me = me;
  p.n = n;
  const size_t ts = chorusTypeSize(d.type), c = d.count, blk = c * ts;
  const size_t nn = size_t(n);
  switch (d.coll) {
    case kAllReduce:
    case kReduce:
      p.a = Buf(blk);
      fillRed(p.a.data(), c, d, n, me, 0);
      if (!d.inPlace) {
        p.b = Buf(blk);
        memset(p.b.data(), kJunk, blk);
      }
      break;
    case kBroadcast:
      p.a = Buf(blk);
      if (me == d.root)
        fillBytes(p.a.data(), blk, d.salt, d.root, 0);
      else
        memset(p.a.data(), kJunk, blk);
      if (!d.inPlace) {
        p.b = Buf(blk);
        memset(p.b.data(), kJunk, blk);
      }
      break;
    case kAllGather:
      if (d.inPlace) {
        p.a = Buf(blk * nn);
        memset(p.a.data(), kJunk, blk * nn);
        fillBytes(p.a.data() + size_t(me) * blk, blk, d.salt, me, 0);
      } else {
        p.a = Buf(blk);
        fillBytes(p.a.data(), blk, d.salt, me, 0);
        p.b = Buf(blk * nn);
        memset(p.b.data(), kJunk, blk * nn);
      }
      break;
    case kReduceScatter:
      p.a = Buf(blk * nn);
      fillRed(p.a.data(), c * nn, d, n, me, 0);
      if (!d.inPlace) {
        p.b = Buf(blk);
        memset(p.b.data(), kJunk, blk);
      }
      break;
    case kAlltoAll:
      p.a = Buf(blk * nn);
      fillBytes(p.a.data(), blk * nn, d.salt, me, 0);
      p.b = Buf(blk * nn);
      memset(p.b.data(), kJunk, blk * nn);
      break;
    case kGather:
      p.a = Buf(blk);
      fillBytes(p.a.data(), blk, d.salt, me, 0);
      if (me == d.root) {
        p.b = Buf(blk * nn);
        memset(p.b.data(), kJunk, blk * nn);
      }
      break;
    case kScatter:
      if (me == d.root) {
        p.a = Buf(blk * nn);
        fillBytes(p.a.data(), blk * nn, d.salt, me, 0);
      }
      p.b = Buf(blk);
      memset(p.b.data(), kJunk, blk);
      break;
    case kSendRecv:
      p.a = Buf(blk);
      fillBytes(p.a.data(), blk, d.salt, me, 0);
      p.b = Buf(blk);
      memset(p.b.data(), kJunk, blk);
      break;
    default:
      break;
  }
  p.send = p.a.data();
  p.recv = d.inPlace ? p.a.data() : p.b.data();
  if (d.inPlace && d.coll == kAllGather) p.send = p.a.data() + size_t(me) * blk;
  if (d.inPlace && d.coll == kReduceScatter) p.recv = p.a.data() + size_t(me) * blk;
  return p;
}

chorusResult_t issue(Prepared& p, chorusComm_t comm, chorusStream_t s) {
  const OpDesc& d = p.d;
  switch (d.coll) {
    case kAllReduce:
      return chorusAllReduce(p.send, p.recv, d.count, d.type, d.op, comm, s);
    case kBroadcast:
      return chorusBroadcast(p.send, p.recv, d.count, d.type, d.root, comm, s);
    case kReduce:
      return chorusReduce(p.send, p.recv, d.count, d.type, d.op, d.root, comm, s);
    case kAllGather:
      return chorusAllGather(p.send, p.recv, d.count, d.type, comm, s);
    case kReduceScatter:
      return chorusReduceScatter(p.send, p.recv, d.count, d.type, d.op, comm, s);
    case kAlltoAll:
      return chorusAlltoAll(p.send, p.recv, d.count, d.type, comm, s);
    case kGather:
      return chorusGather(p.send, p.recv, d.count, d.type, d.root, comm, s);
    case kScatter:
      return chorusScatter(p.send, p.recv, d.count, d.type, d.root, comm, s);
    case kSendRecv: {
      const int to = (p.me + d.shift) % p.n, from = (p.me - d.shift + p.n) % p.n;
      chorusResult_t rc = chorusGroupStart();
      if (rc != chorusSuccess) return rc;
      const chorusResult_t r1 = chorusSend(p.send, d.count, d.type, to, comm, s);
      const chorusResult_t r2 = chorusRecv(p.recv, d.count, d.type, from, comm, s);
      rc = chorusGroupEnd();
      return r1 != chorusSuccess ? r1 : r2 != chorusSuccess ? r2 : rc;
    }
    default:
      return chorusInvalidArgument;
  }
}

std::string verify(const Prepared& p) {
  const OpDesc& d = p.d;
  const int me = p.me, n = p.n;
  const size_t ts = chorusTypeSize(d.type), c = d.count, blk = c * ts, nn = size_t(n);
  std::string e;
  if (p.a.data() && !p.a.guardIntact()) return "written past the end of the send buffer";
  if (p.b.data() && !p.b.guardIntact()) return "written past the end of the receive buffer";
  const uint8_t* out = static_cast<const uint8_t*>(p.recv);
  // The send buffer of an out-of-place operation must come back untouched.
  if (!d.inPlace && p.a.data()) {
    if (isReduction(d.coll)) {
      const size_t cnt = d.coll == kReduceScatter ? c * nn : c;
      for (size_t i = 0; i < cnt; ++i)
        if (!(load(p.a.data(), i, d.type) == double(redValue(d, n, me, i))))
          return fmt("send buffer changed at element %zu", i);
    } else if (d.coll != kBroadcast || me == d.root) {
      const size_t nb = (d.coll == kAlltoAll || d.coll == kScatter) ? blk * nn : blk;
      if (checkBytes(p.a.data(), nb, d.salt, me, 0) >= 0) return "send buffer changed";
    }
  }
  switch (d.coll) {
    case kAllReduce:
      return checkRed(out, c, d, n, 0, "result");
    case kReduce:
      return me == d.root ? checkRed(out, c, d, n, 0, "root's result") : "";
    case kReduceScatter:
      return checkRed(out, c, d, n, size_t(me) * c, "result");
    case kBroadcast:
      return checkBlock(out, blk, d.salt, d.root, 0, "result", 0);
    case kAllGather:
    case kGather:
      if (d.coll == kGather && me != d.root) return "";
      for (int r = 0; r < n; ++r)
        if (!(e = checkBlock(out + size_t(r) * blk, blk, d.salt, r, 0, "result", r)).empty())
          return e;
      return "";
    case kAlltoAll:
      for (int r = 0; r < n; ++r)
        if (!(e = checkBlock(out + size_t(r) * blk, blk, d.salt, r, uint64_t(me) * blk, "result",
                             r))
                 .empty())
          return e;
      return "";
    case kScatter:
      return checkBlock(out, blk, d.salt, d.root, uint64_t(me) * blk, "result", 0);
    case kSendRecv:
      return checkBlock(out, blk, d.salt, (me - d.shift + n) % n, 0, "received", 0);
    default:
      return "unknown collective";
  }
}

}  // namespace soak
