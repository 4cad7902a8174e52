// chorusCommShrink's agreement messages (chorus::shrinkwire::parse, src/core/shrink_wire.h), as
// a rank reads them from a peer's mailbox or a kShrink notice: whole messages of any length.
//
// Input: [nranks u16][message bytes...]. Invariants: an accepted message has a sender in
// [0, nranks), at most min(nranks, kMaxExclude) excluded ranks, strictly increasing and in
// range, a decision's id decodes, its length is exact (a byte more or less is refused), and
// encode() gives back the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "bootstrap/bootstrap.h"
#include "core/shrink_wire.h"
#include "fuzz_check.h"

using namespace chorus::shrinkwire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint16_t v;
  memcpy(&v, data, 2);
  const int nranks = 1 + v % 2048;
  const std::string bytes(reinterpret_cast<const char*>(data + 2), size - 2);
  Message m;
  const Status st = parse(bytes.data(), bytes.size(), nranks, &m);
  if (st != Status::kOk) {
    FUZZ_CHECK(statusName(st) != nullptr);
    return 0;
  }
  FUZZ_CHECK(m.sender >= 0 && m.sender < nranks);
  FUZZ_CHECK(m.kind == Kind::kView || m.kind == Kind::kDecision);
  FUZZ_CHECK(m.excl.size() <= kMaxExclude && m.excl.size() <= size_t(nranks));
  for (size_t i = 0; i < m.excl.size(); ++i) {
    FUZZ_CHECK(m.excl[i] >= 0 && m.excl[i] < nranks);
    if (i) FUZZ_CHECK(m.excl[i] > m.excl[i - 1]);
  }
  if (m.kind == Kind::kDecision) {
    chorus::IdData d;
    FUZZ_CHECK(chorus::wire::tryDecodeId(m.id.internal, sizeof(m.id.internal), &d));
  }
  FUZZ_CHECK(bytes.size() <= kMaxBytes);
  FUZZ_CHECK(encode(m) == bytes);
  Message other;
  FUZZ_CHECK(parse(bytes.data(), bytes.size() - 1, nranks, &other) != Status::kOk);
  const std::string longer = bytes + "x";
  FUZZ_CHECK(parse(longer.data(), longer.size(), nranks, &other) == Status::kLong);
  return 0;
}
