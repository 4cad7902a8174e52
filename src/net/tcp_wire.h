// The TCP transport's wire format (src/net/data_listener.cc, tcp_links.cc, tcp_proxy.cc and
// tcp_control.cc), as pure functions so that every parser of bytes from the network can be
// fuzzed on its own (fuzz/fuzz_data_hello.cc, fuzz/fuzz_frames.cc, fuzz/fuzz_notice.cc).
//
// A connection to a rank's data listener:
//   listener -> connector   16-byte nonce
//   connector -> listener   DataHello {magic, rank, channel, sock, SipHash(secret, nonce || 'D')}
//   listener -> connector   u64 SipHash(secret, nonce || 'E')
// then, on a data connection (channel >= 0), frames {u64 payload bytes, payload} of at most one
// slot; on the control connection (channel kControlChannel, one per pair of ranks), notices
// {u32 magic, u32 kind, i32 cause, u32 text bytes, text}: failures, departures, shrink messages,
// and status queries with their answers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::tcpwire {

constexpr uint32_t kDataMagic = 0x41544443;    // "CDTA"
constexpr uint32_t kNoticeMagic = 0x43544e43;  // "CNTC"
constexpr int32_t kControlChannel = -1;        // the hello of a control connection
constexpr int32_t kMaxChannels = 64;
constexpr int32_t kMaxSocks = 16;
constexpr uint32_t kMaxNoticeText = 512;

struct DataHello {
  uint32_t magic;
  int32_t rank;
  int32_t channel;
  int32_t sock;
  uint64_t proof;
};

// SipHash-2-4(secret, nonce || role): 'D' proves the connecting rank, 'E' the listener.
uint64_t dataProof(const uint8_t secret[16], const uint8_t nonce[16], char role);

enum class DataHelloStatus {
  kNeedMore,    // fewer than sizeof(DataHello) bytes
  kJunk,        // not a data hello
  kWrongProof,  // does not prove the secret
  kBadRank,     // not a rank that connects to this one (only lower ranks do)
  kBadLink,     // channel or socket index out of range
  kAccepted,
};
struct DataHelloCheck {
  DataHelloStatus status;
  int32_t rank, channel, sock;
};
// The listener's verdict on the first bytes of a connection (only the first sizeof(DataHello)
// bytes are looked at). Accepted: rank in [0, myRank), and channel in [0, kMaxChannels) with sock
// in [0, kMaxSocks), or channel kControlChannel with sock 0.
DataHelloCheck checkDataHello(const void* bytes, size_t len, const uint8_t secret[16],
                              const uint8_t nonce[16], int myRank);
const char* dataHelloStatusName(DataHelloStatus s);

// Receive side of a data connection: frames {u64 length, payload}, length <= maxPayload, read
// (bit 63 of the length word is the slot's message-start marker, transport/fifo.h
// kSlotMessageStart, carried along and not part of the length)
// in pieces. While inHeader(), recv() up to headerWant() bytes into headerDest(); then up to
// payloadWant() bytes into the slot at payloadOffset(); advance() by what arrived.
class FrameReader {
 public:
  enum class Status { kMore, kComplete, kBadLength };
  explicit FrameReader(size_t maxPayload) : max_(maxPayload) {}
  bool inHeader() const { return got_ < 8; }
  char* headerDest() { return reinterpret_cast<char*>(&length_) + got_; }
  size_t headerWant() const { return got_ < 8 ? 8 - got_ : 0; }
  size_t payloadOffset() const { return got_ < 8 ? 0 : got_ - 8; }
  size_t payloadWant() const;
  // kComplete: a whole frame is in (length() bytes of payload); call next() once it is used.
  // kBadLength: the header announced more than maxPayload (the stream is unusable).
  Status advance(size_t n);
  uint64_t length() const { return length_ & ~kFrameMarker; }
  // The slot's size word as the sender's FIFO had it: the length and the marker bit.
  uint64_t word() const { return length_; }
  static constexpr uint64_t kFrameMarker = uint64_t(1) << 63;
  void next() { got_ = 0, length_ = 0; }

 private:
  size_t max_;
  uint64_t length_ = 0;
  size_t got_ = 0;
};

// Control notices.
enum class NoticeKind : uint32_t {
  kFailed = 1,  // rank `cause` failed (a timeout, a mismatch, an abort...); text: why
  kDied = 2,    // rank `cause` died, as the sender saw it
  kShrink = 3,  // chorusCommShrink's agreement: `cause` is the sender, the text a message of
                // core/shrink_wire.h (binary, up to kMaxShrinkBytes, kept as is)
  kLeft = 4,    // rank `cause` (the sender) destroyed its communicator after every slot it posted
                // was written to its sockets: its end of file is a departure, not a failure
  kStatusQuery = 5,  // rank `cause` (the sender) timed out and asks for this rank's state; no text
  kStatus = 6,       // the answer: `cause` is the sender, the text its state (encodeStatus)
};
constexpr uint32_t kMaxShrinkBytes = 4096;
struct NoticeHeader {
  uint32_t magic;
  uint32_t kind;
  int32_t cause;
  uint32_t textBytes;
};
// The bytes of one notice (text cut to kMaxNoticeText bytes).
std::string encodeNotice(NoticeKind kind, int32_t cause, const std::string& text);

struct NoticeParse {
  enum class Status { kNeedMore, kBad, kNotice } status = Status::kNeedMore;
  size_t consumed = 0;  // bytes of the notice (kNotice)
  NoticeKind kind = NoticeKind::kFailed;
  int32_t cause = -1;
  std::string text;  // printable ASCII only (anything else becomes '?'); kShrink: raw bytes
};
// A kShrink notice carrying `bytes` (at most kMaxShrinkBytes) from rank `sender`.
std::string encodeShrinkNotice(int32_t sender, const std::string& bytes);

// A rank's state, as a kStatus notice carries it (liveness across nodes, comm/hang_report.cc):
// the peer + 1 it waits for in a long wait (0: not waiting), the age of its last sign of life in
// ms (-1: unknown), the operation of that wait (sequence number; kind + 1, 0: none) and its
// failure flag (cause + 1, 0: healthy). Sent as printable text:
// "w=<int> age=<int> seq=<uint> op=<uint> failed=<int>".
struct StatusBody {
  int32_t waitingFor = 0;
  int64_t aliveAgeMs = -1;
  uint64_t seq = 0;
  uint32_t op = 0;
  int32_t failed = 0;
};
std::string encodeStatus(int32_t sender, const StatusBody& body);
// The body of a kStatus notice's text; false if it is not exactly that form, or a field is out
// of range (waitingFor and failed in [0, nranks], aliveAgeMs in [-1, 2^40], seq < 2^62,
// op <= 255).
bool parseStatusText(const std::string& text, int nranks, StatusBody* body);

// The first notice in `bytes`. kBad: wrong magic, unknown kind, cause outside [0, nranks), text
// longer than kMaxNoticeText (kMaxShrinkBytes for kShrink), or a kStatusQuery with text.
NoticeParse parseNotice(const void* bytes, size_t len, int nranks);

}  // namespace chorus::tcpwire
