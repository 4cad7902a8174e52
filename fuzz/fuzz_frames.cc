// The receive side of a TCP data connection (chorus::tcpwire::FrameReader): frames
// {u64 length, payload} arriving in pieces of any size, as the proxy reads them into slots.
//
// Input: [maxPayload u16][piece sizes: 8 bytes][stream bytes...]. The stream is fed in pieces
// (sizes cycling through the 8 given, 0 read as 1), each no larger than what the reader wants,
// exactly as TcpLinks::progressIn (net/tcp_proxy.cc) does. Invariants: writes stay inside the
// slot, a complete frame's payload is exactly the bytes that followed its header, and a length
// above maxPayload is refused before any payload is read. Bit 63 of the length word (the
// message-start marker, transport/fifo.h kSlotMessageStart) is carried along (word()) and is not
// part of the length.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "net/tcp_wire.h"

using chorus::tcpwire::FrameReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 10) return 0;
  uint16_t max16;
  std::memcpy(&max16, data, 2);
  const size_t maxPayload = max16 % 4097;
  const uint8_t* pieces = data + 2;
  const uint8_t* stream = data + 10;
  const size_t len = size - 10;

  FrameReader r(maxPayload);
  std::vector<char> slot(maxPayload + 1, 0);
  size_t pos = 0, piece = 0, frameStart = 0;
  while (pos < len) {
    size_t chunk = pieces[piece++ % 8];
    if (chunk == 0) chunk = 1;
    const bool header = r.inHeader();
    const size_t want = header ? r.headerWant() : r.payloadWant();
    FUZZ_CHECK(want > 0);
    chunk = std::min({chunk, want, len - pos});
    if (header) {
      FUZZ_CHECK(r.payloadOffset() == 0);
      std::memcpy(r.headerDest(), stream + pos, chunk);
    } else {
      FUZZ_CHECK(r.payloadOffset() + chunk <= maxPayload);  // inside the slot
      std::memcpy(slot.data() + r.payloadOffset(), stream + pos, chunk);
    }
    pos += chunk;
    const FrameReader::Status st = r.advance(chunk);
    if (st == FrameReader::Status::kBadLength) {
      uint64_t announced;
      std::memcpy(&announced, stream + frameStart, 8);
      announced &= ~FrameReader::kFrameMarker;  // the message-start marker is no length
      FUZZ_CHECK(announced > maxPayload);
      FUZZ_CHECK(pos == frameStart + 8);  // refused right after the header
      return 0;
    }
    if (st == FrameReader::Status::kComplete) {
      uint64_t word;
      std::memcpy(&word, stream + frameStart, 8);
      const uint64_t announced = word & ~FrameReader::kFrameMarker;
      FUZZ_CHECK(r.word() == word);  // the marker travels with the slot
      FUZZ_CHECK(r.length() == announced && announced <= maxPayload);
      FUZZ_CHECK(pos == frameStart + 8 + announced);
      FUZZ_CHECK(std::memcmp(slot.data(), stream + frameStart + 8, announced) == 0);
      r.next();
      frameStart = pos;
    }
  }
  return 0;
}
