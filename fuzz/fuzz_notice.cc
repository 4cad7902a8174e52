// Failure notices on a TCP control connection (chorus::tcpwire::parseNotice), as the proxy reads
// them: bytes appended in pieces, whole notices taken from the front.
//
// Input: [nranks u8][stream bytes...]. Invariants: a notice is only reported once all of its
// bytes are there (every prefix is "need more" or the same "bad"), its cause is a rank of the
// communicator, its text is printable and within the limit, and encodeNotice round-trips
// (kShrink notices: binary text kept byte for byte, encodeShrinkNotice round-trips); a status
// query has no text, and a status answer's text that parses is in range and round-trips.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "net/tcp_wire.h"

using namespace chorus::tcpwire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int nranks = 1 + data[0] % 64;
  std::string buf(reinterpret_cast<const char*>(data + 1), size - 1);
  int notices = 0;
  while (!buf.empty() && notices < 1000) {
    const NoticeParse p = parseNotice(buf.data(), buf.size(), nranks);
    if (p.status == NoticeParse::Status::kNeedMore) {
      FUZZ_CHECK(p.consumed == 0);
      break;
    }
    if (p.status == NoticeParse::Status::kBad) {
      FUZZ_CHECK(buf.size() >= sizeof(NoticeHeader));
      // Any longer input with the same header is bad too.
      FUZZ_CHECK(parseNotice((buf + "xyz").data(), buf.size() + 3, nranks).status ==
                 NoticeParse::Status::kBad);
      break;
    }
    FUZZ_CHECK(p.consumed >= sizeof(NoticeHeader) && p.consumed <= buf.size());
    FUZZ_CHECK(p.consumed - sizeof(NoticeHeader) == p.text.size());
    FUZZ_CHECK(p.cause >= 0 && p.cause < nranks);
    FUZZ_CHECK(p.kind == NoticeKind::kFailed || p.kind == NoticeKind::kDied ||
               p.kind == NoticeKind::kLeft || p.kind == NoticeKind::kShrink ||
               p.kind == NoticeKind::kStatusQuery || p.kind == NoticeKind::kStatus);
    if (p.kind == NoticeKind::kStatusQuery) FUZZ_CHECK(p.text.empty());
    // A status answer's text (liveness across nodes): parsed strictly; what parses is in range
    // and round-trips through encodeStatus.
    StatusBody sb;
    if (parseStatusText(p.text, nranks, &sb)) {
      FUZZ_CHECK(sb.waitingFor >= 0 && sb.waitingFor <= nranks);
      FUZZ_CHECK(sb.failed >= 0 && sb.failed <= nranks);
      FUZZ_CHECK(sb.aliveAgeMs >= -1 && sb.op <= 255);
      const std::string enc = encodeStatus(p.cause, sb);
      const NoticeParse e = parseNotice(enc.data(), enc.size(), nranks);
      StatusBody again;
      FUZZ_CHECK(e.status == NoticeParse::Status::kNotice && e.kind == NoticeKind::kStatus);
      FUZZ_CHECK(parseStatusText(e.text, nranks, &again));
      FUZZ_CHECK(again.waitingFor == sb.waitingFor && again.aliveAgeMs == sb.aliveAgeMs &&
                 again.seq == sb.seq && again.op == sb.op && again.failed == sb.failed);
    }
    if (p.kind == NoticeKind::kShrink) {
      // Shrink messages are binary (parsed again by fuzz_shrink): kept byte for byte.
      FUZZ_CHECK(p.text.size() <= kMaxShrinkBytes);
      FUZZ_CHECK(p.text == buf.substr(sizeof(NoticeHeader), p.text.size()));
      const std::string again = encodeShrinkNotice(p.cause, p.text);
      FUZZ_CHECK(again == buf.substr(0, p.consumed));
      buf.erase(0, p.consumed);
      ++notices;
      continue;
    }
    FUZZ_CHECK(p.text.size() <= kMaxNoticeText);
    for (char c : p.text) FUZZ_CHECK(c >= 0x20 && c <= 0x7e);
    for (size_t k = 0; k < p.consumed; ++k)
      FUZZ_CHECK(parseNotice(buf.data(), k, nranks).status != NoticeParse::Status::kNotice);
    // Round trip: the printable text survives encode + parse unchanged.
    const std::string again = encodeNotice(p.kind, p.cause, p.text);
    const NoticeParse q = parseNotice(again.data(), again.size(), nranks);
    FUZZ_CHECK(q.status == NoticeParse::Status::kNotice && q.consumed == again.size());
    FUZZ_CHECK(q.kind == p.kind && q.cause == p.cause && q.text == p.text);
    buf.erase(0, p.consumed);
    ++notices;
  }
  return 0;
}
