#include "transport/tcp_wire.h"

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
  return size_t(length_) - (got_ - 8);
}

FrameReader::Status FrameReader::advance(size_t n) {
  if (got_ < 8) {
    got_ += n < 8 - got_ ? n : 8 - got_;
    if (got_ < 8) return Status::kMore;
    if (length_ > max_) return Status::kBadLength;
    return length_ == 0 ? Status::kComplete : Status::kMore;
  }
  if (length_ > max_) return Status::kBadLength;
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

NoticeParse parseNotice(const void* bytes, size_t len, int nranks) {
  NoticeParse r;
  if (len < sizeof(NoticeHeader)) return r;
  NoticeHeader h;
  memcpy(&h, bytes, sizeof(h));
  const bool shrink = h.kind == uint32_t(NoticeKind::kShrink);
  if (h.magic != kNoticeMagic ||
      (h.kind != uint32_t(NoticeKind::kFailed) && h.kind != uint32_t(NoticeKind::kDied) &&
       h.kind != uint32_t(NoticeKind::kLeft) && !shrink) ||
      h.cause < 0 || h.cause >= nranks ||
      h.textBytes > (shrink ? kMaxShrinkBytes : kMaxNoticeText)) {
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
