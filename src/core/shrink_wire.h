// The messages of chorusCommShrink's agreement (src/core/shrink.cc), as pure functions over
// bytes so that fuzz/fuzz_shrink.cc can feed them anything.
//
// Every rank of the parent communicator that takes part publishes messages to all its peers over
// the parent's own channels: same-node peers read them from a mailbox in the rank's segment
// header (transport/segment.h, ShrinkBox), peers on other nodes receive them as kShrink notices
// on the TCP control connections (net/tcp_wire.h). A message (little-endian):
//   {u32 magic "CSHR", u16 version, u16 kind, u32 seq, i32 sender, u32 nexcl,
//    i32 excl[nexcl] (strictly increasing ranks of the parent), id[128] (kDecision only)}
//   kView:     the sender takes part in shrink call number `seq` on this parent and holds these
//              ranks for gone (the exclude list passed, and those it knows died or left).
//   kDecision: the leader's (the lowest rank nobody holds for gone) answer: the union of every
//              view, and the unique id of the new communicator's bootstrap root.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::shrinkwire {

constexpr uint32_t kMagic = 0x52485343;  // "CSHR"
constexpr uint16_t kVersion = 1;
constexpr uint32_t kMaxExclude = 512;  // ranks one shrink may drop (the mailbox holds 3 KiB)
constexpr size_t kHeaderBytes = 20;
constexpr size_t kMaxBytes = kHeaderBytes + 4 * kMaxExclude + CHORUS_UNIQUE_ID_BYTES;

enum class Kind : uint16_t { kView = 1, kDecision = 2 };

struct Message {
  Kind kind = Kind::kView;
  uint32_t seq = 0;
  int32_t sender = -1;
  std::vector<int32_t> excl;  // strictly increasing, each in [0, nranks)
  chorusUniqueId id{};        // kDecision only
};

// The bytes of a message (excl must already be sorted and unique).
std::string encode(const Message& m);

enum class Status {
  kOk,
  kShort,     // fewer bytes than the header, or than the header announces
  kLong,      // more bytes than the header announces
  kBadMagic,  // not a shrink message, or another version
  kBadKind,
  kBadSender,  // outside [0, nranks)
  kTooMany,    // nexcl above kMaxExclude or nranks
  kBadRank,    // an excluded rank outside [0, nranks), or not strictly increasing
  kBadId,      // a decision whose id is not a Chorus unique id
};
const char* statusName(Status s);

// Parses exactly `len` bytes (one whole message) for a parent of `nranks` ranks.
Status parse(const void* bytes, size_t len, int nranks, Message* out);

}  // namespace chorus::shrinkwire
