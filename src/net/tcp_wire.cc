#include "net/tcp_wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/siphash.h"

namespace chorus::tcpwire {

uint64_t dataProof(const uint8_t secret[16], const uint8_t nonce[16], char role) {
  uint8_t msg[17];
  memcpy(msg, nonce, 16);
  msg[16] = uint8_t(role);
  return sipHash24(secret, msg, sizeof(msg));
}

DataHelloCheck checkDataHello(const void* bytes, size_t len, const uint8_t secret[16],
                              const uint8_t nonce[16], int myRank) {
  DataHelloCheck r{DataHelloStatus::kNeedMore, -1, 0, 0};
  if (len < sizeof(DataHello)) return r;
  DataHello h;
  memcpy(&h, bytes, sizeof(h));
  r.rank = h.rank;
  r.channel = h.channel;
  r.sock = h.sock;
  const bool control = h.channel == kControlChannel && h.sock == 0;
  const bool data = h.channel >= 0 && h.channel < kMaxChannels && h.sock >= 0 && h.sock < kMaxSocks;
  if (h.magic != kDataMagic)
    r.status = DataHelloStatus::kJunk;
  else if (h.proof != dataProof(secret, nonce, 'D'))
    r.status = DataHelloStatus::kWrongProof;
  else if (h.rank < 0 || h.rank >= myRank)
    r.status = DataHelloStatus::kBadRank;
  else if (!control && !data)
    r.status = DataHelloStatus::kBadLink;
  else
    r.status = DataHelloStatus::kAccepted;
  return r;
}

const char* dataHelloStatusName(DataHelloStatus s) {
  switch (s) {
    case DataHelloStatus::kNeedMore:
      return "incomplete hello";
    case DataHelloStatus::kJunk:
      return "not a data hello (junk)";
    case DataHelloStatus::kWrongProof:
      return "wrong secret proof";
    case DataHelloStatus::kBadRank:
      return "rank that does not connect to this one";
    case DataHelloStatus::kBadLink:
      return "channel or socket out of range";
    case DataHelloStatus::kAccepted:
      return "accepted";
  }
  return "?";
}

size_t FrameReader::payloadWant() const {
  if (got_ < 8) return 0;
  return size_t(length()) - (got_ - 8);
}

FrameReader::Status FrameReader::advance(size_t n) {
  if (got_ < 8) {
    got_ += n < 8 - got_ ? n : 8 - got_;
    if (got_ < 8) return Status::kMore;
    if (length() > max_) return Status::kBadLength;
    return length() == 0 ? Status::kComplete : Status::kMore;
  }
  if (length() > max_) return Status::kBadLength;
  const size_t want = payloadWant();
  got_ += n < want ? n : want;
  return payloadWant() == 0 ? Status::kComplete : Status::kMore;
}

std::string encodeNotice(NoticeKind kind, int32_t cause, const std::string& text) {
  const size_t n = text.size() < kMaxNoticeText ? text.size() : kMaxNoticeText;
  NoticeHeader h{kNoticeMagic, uint32_t(kind), cause, uint32_t(n)};
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(text, 0, n);
  return out;
}

std::string encodeShrinkNotice(int32_t sender, const std::string& bytes) {
  const size_t n = bytes.size() < kMaxShrinkBytes ? bytes.size() : kMaxShrinkBytes;
  NoticeHeader h{kNoticeMagic, uint32_t(NoticeKind::kShrink), sender, uint32_t(n)};
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(bytes, 0, n);
  return out;
}

std::string encodeStatus(int32_t sender, const StatusBody& b) {
  char text[160];
  const int n = snprintf(text, sizeof(text), "w=%d age=%lld seq=%llu op=%u failed=%d",
                         int(b.waitingFor), (long long)std::min<int64_t>(b.aliveAgeMs, 1LL << 40),
                         (unsigned long long)std::min<uint64_t>(b.seq, 1ULL << 62), unsigned(b.op),
                         int(b.failed));
  return encodeNotice(NoticeKind::kStatus, sender, std::string(text, size_t(n)));
}

namespace {
// `key` then a decimal integer in [lo, hi] (at most 19 digits, '-' only if lo < 0) at *p; moves
// *p past it.
bool readField(const char** p, const char* end, const char* key, long long lo, long long hi,
               long long* out) {
  const size_t k = strlen(key);
  if (size_t(end - *p) < k || memcmp(*p, key, k) != 0) return false;
  const char* q = *p + k;
  const bool neg = q < end && *q == '-' && lo < 0;
  if (neg) ++q;
  const char* digits = q;
  unsigned long long v = 0;
  while (q < end && *q >= '0' && *q <= '9' && q - digits < 19) v = v * 10 + unsigned(*q++ - '0');
  if (q == digits || (q < end && *q >= '0' && *q <= '9')) return false;
  const long long x = neg ? -(long long)v : (long long)v;
  if (x < lo || x > hi) return false;
  *out = x;
  *p = q;
  return true;
}
}  // namespace

bool parseStatusText(const std::string& text, int nranks, StatusBody* body) {
  const char* p = text.data();
  const char* end = p + text.size();
  long long w, age, seq, op, failed;
  if (!readField(&p, end, "w=", 0, nranks, &w) ||
      !readField(&p, end, " age=", -1, 1LL << 40, &age) ||
      !readField(&p, end, " seq=", 0, 1LL << 62, &seq) ||
      !readField(&p, end, " op=", 0, 255, &op) ||
      !readField(&p, end, " failed=", 0, nranks, &failed) || p != end)
    return false;
  body->waitingFor = int32_t(w);
  body->aliveAgeMs = age;
  body->seq = uint64_t(seq);
  body->op = uint32_t(op);
  body->failed = int32_t(failed);
  return true;
}

NoticeParse parseNotice(const void* bytes, size_t len, int nranks) {
  NoticeParse r;
  if (len < sizeof(NoticeHeader)) return r;
  NoticeHeader h;
  memcpy(&h, bytes, sizeof(h));
  const bool shrink = h.kind == uint32_t(NoticeKind::kShrink);
  if (h.magic != kNoticeMagic || h.kind < uint32_t(NoticeKind::kFailed) ||
      h.kind > uint32_t(NoticeKind::kStatus) || h.cause < 0 || h.cause >= nranks ||
      h.textBytes > (shrink ? kMaxShrinkBytes : kMaxNoticeText) ||
      (h.kind == uint32_t(NoticeKind::kStatusQuery) && h.textBytes != 0)) {
    r.status = NoticeParse::Status::kBad;
    return r;
  }
  if (len < sizeof(h) + h.textBytes) return r;
  r.status = NoticeParse::Status::kNotice;
  r.consumed = sizeof(h) + h.textBytes;
  r.kind = NoticeKind(h.kind);
  r.cause = h.cause;
  r.text.assign(static_cast<const char*>(bytes) + sizeof(h), h.textBytes);
  if (shrink) return r;
  for (char& c : r.text)
    if (c < 0x20 || c > 0x7e) c = '?';
  return r;
}

}  // namespace chorus::tcpwire
