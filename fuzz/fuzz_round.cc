// The root's round reader (chorus::wire::RoundReader), its answer (assembleRound) and an
// abandoning rank's payload (parseAbandon), fed the way the root feeds them: pieces of each
// rank's byte stream in any interleaving, the length word's flags (kRoundFlags) included.
//
// Input: [flags: nranks-1 in the low 2 bits, 0x80 big rounds] then steps of [rank u8][piece length
// u8][piece bytes...].
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "fuzz_check.h"

using namespace chorus::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int n = 1 + (data[0] & 3);
  std::vector<RoundReader> readers(static_cast<size_t>(n));
  std::vector<std::vector<uint8_t>> sent(static_cast<size_t>(n));  // what each rank sent
  size_t pos = 1;
  while (pos + 2 <= size) {
    const int r = data[pos] % n;
    size_t len = data[pos + 1];
    pos += 2;
    len = std::min(len, size - pos);
    RoundReader& rr = readers[size_t(r)];
    size_t left = len;
    const uint8_t* p = data + pos;
    while (left > 0) {
      const size_t want = rr.want();
      if (want == 0) break;  // complete (waits for the others) or refused
      auto& mine = sent[size_t(r)];
      // Header bytes one at a time; unless flag 0x80 is set, an announced length over 64 KiB is
      // cut to its low 16 bits (big rounds cost big allocations: they would slow the fuzzer
      // down for nothing; the limit and the refusal are still reached with the flag).
      const size_t k = mine.size() < 4 ? 1 : std::min(want, left);
      uint8_t byte = *p;
      if (mine.size() == 3 && !(data[0] & 0x80)) {
        const uint32_t raw = uint32_t(mine[0]) | uint32_t(mine[1]) << 8 | uint32_t(mine[2]) << 16 |
                             uint32_t(byte) << 24;
        uint32_t len = raw & ~kRoundFlags;
        if (len > 65536 && len <= kMaxRoundBytes) {
          len = (len & 0xffff) | (raw & kRoundFlags);  // the flags kept
          for (int b = 0; b < 3; ++b) mine[size_t(b)] = uint8_t(len >> (8 * b));
          std::memcpy(rr.dest() - 3, mine.data(), 3);  // rewrite what the reader holds
          byte = uint8_t(len >> 24);
        }
      }
      if (k == 1) {
        std::memcpy(rr.dest(), &byte, 1);
        mine.push_back(byte);
      } else {
        std::memcpy(rr.dest(), p, k);  // ASan: dest() must have room for want() bytes
        mine.insert(mine.end(), p, p + k);
      }
      p += k;
      left -= k;
      if (!rr.advance(k)) {
        // Refused: only for an announced length over the limit; the reader then wants nothing.
        FUZZ_CHECK(rr.length() > kMaxRoundBytes);
        FUZZ_CHECK(rr.want() == 0 && !rr.complete());
        return 0;  // the root fails the communicator
      }
    }
    pos += len;
    if (rr.started()) FUZZ_CHECK(sent[size_t(r)].size() >= 1);
    if (rr.complete()) {
      uint32_t word;
      std::memcpy(&word, sent[size_t(r)].data(), 4);
      const uint32_t announced = word & ~kRoundFlags;
      FUZZ_CHECK(rr.length() == announced);
      FUZZ_CHECK(rr.flags() == (word & kRoundFlags));
      FUZZ_CHECK(sent[size_t(r)].size() == 4 + size_t(announced));
      FUZZ_CHECK(announced == 0 ||
                 std::memcmp(rr.payload(), sent[size_t(r)].data() + 4, announced) == 0);
      if (rr.flags() & kRoundAbandons) {  // the root relays it and fails the communicator
        int cause = -2;
        std::string text;
        const bool parsed = parseAbandon(rr.payload(), rr.length(), n, &cause, &text);
        FUZZ_CHECK(parsed == (rr.length() >= 4));
        if (parsed) {
          FUZZ_CHECK(cause >= -1 && cause < n);
          FUZZ_CHECK(text.size() <= kMaxFailureText && text.size() <= rr.length() - 4);
          for (char ch : text) FUZZ_CHECK(ch >= 0x20 && ch <= 0x7e);
        }
        return 0;
      }
    }
    bool all = true;
    for (auto& x : readers) all = all && x.complete();
    if (!all) continue;
    std::vector<const RoundReader*> ptrs;
    for (auto& x : readers) ptrs.push_back(&x);
    std::vector<char> out;
    int bad = -1;
    const bool ok = assembleRound(ptrs, &out, &bad);
    bool same = true;
    for (auto& x : readers)
      same = same && x.length() == readers[0].length() && x.flags() == readers[0].flags();
    FUZZ_CHECK(ok == same);
    if (ok) {
      FUZZ_CHECK(out.size() == size_t(n) * readers[0].length());
      for (int q = 0; q < n && readers[0].length() > 0; ++q)
        FUZZ_CHECK(std::memcmp(out.data() + size_t(q) * readers[0].length(),
                               readers[size_t(q)].payload(), readers[0].length()) == 0);
    } else {
      FUZZ_CHECK(bad > 0 && bad < n);
      FUZZ_CHECK(readers[size_t(bad)].length() != readers[0].length() ||
                 readers[size_t(bad)].flags() != readers[0].flags());
      return 0;  // the root fails the communicator
    }
    for (auto& x : readers) x.reset();
    for (auto& s : sent) s.clear();
  }
  return 0;
}
