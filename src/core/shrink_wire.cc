#include "core/shrink_wire.h"

#include <cstring>

#include "bootstrap/bootstrap.h"

namespace chorus::shrinkwire {

namespace {
struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t seq;
  int32_t sender;
  uint32_t nexcl;
};
static_assert(sizeof(Header) == kHeaderBytes);
}  // namespace

std::string encode(const Message& m) {
  Header h{kMagic, kVersion, uint16_t(m.kind), m.seq, m.sender, uint32_t(m.excl.size())};
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(reinterpret_cast<const char*>(m.excl.data()), 4 * m.excl.size());
  if (m.kind == Kind::kDecision) out.append(m.id.internal, sizeof(m.id.internal));
  return out;
}

const char* statusName(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kShort:
      return "truncated";
    case Status::kLong:
      return "trailing bytes";
    case Status::kBadMagic:
      return "not a shrink message of this version";
    case Status::kBadKind:
      return "unknown kind";
    case Status::kBadSender:
      return "sender out of range";
    case Status::kTooMany:
      return "too many excluded ranks";
    case Status::kBadRank:
      return "excluded rank out of range or not increasing";
    case Status::kBadId:
      return "decision without a valid unique id";
  }
  return "?";
}

Status parse(const void* bytes, size_t len, int nranks, Message* out) {
  if (len < sizeof(Header)) return Status::kShort;
  Header h;
  memcpy(&h, bytes, sizeof(h));
  if (h.magic != kMagic || h.version != kVersion) return Status::kBadMagic;
  if (h.kind != uint16_t(Kind::kView) && h.kind != uint16_t(Kind::kDecision))
    return Status::kBadKind;
  if (h.sender < 0 || h.sender >= nranks) return Status::kBadSender;
  if (h.nexcl > kMaxExclude || int64_t(h.nexcl) > int64_t(nranks)) return Status::kTooMany;
  const size_t want = sizeof(h) + 4 * size_t(h.nexcl) +
                      (h.kind == uint16_t(Kind::kDecision) ? CHORUS_UNIQUE_ID_BYTES : 0);
  if (len < want) return Status::kShort;
  if (len > want) return Status::kLong;
  const char* p = static_cast<const char*>(bytes) + sizeof(h);
  out->excl.resize(h.nexcl);
  if (h.nexcl) memcpy(out->excl.data(), p, 4 * size_t(h.nexcl));
  for (size_t i = 0; i < out->excl.size(); ++i) {
    const int32_t r = out->excl[i];
    if (r < 0 || r >= nranks || (i > 0 && r <= out->excl[i - 1])) return Status::kBadRank;
  }
  out->kind = Kind(h.kind);
  out->seq = h.seq;
  out->sender = h.sender;
  if (out->kind == Kind::kDecision) {
    memcpy(out->id.internal, p + 4 * size_t(h.nexcl), sizeof(out->id.internal));
    IdData d;
    if (!wire::tryDecodeId(out->id.internal, sizeof(out->id.internal), &d)) return Status::kBadId;
  }
  return Status::kOk;
}

}  // namespace chorus::shrinkwire
