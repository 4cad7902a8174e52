// Bootstrap: the unique id, the root that rendezvous every rank, and the out-of-band allgather
// and barrier the communicator uses to exchange setup information.
//
// Protocol (all integers little-endian, host order on this platform):
//   root -> client  Challenge {magic, version, nonce[16]}
//   client -> root  Hello {magic, rank, nranks, pad, proof = SipHash(secret, nonce || 'C')}
//   root -> client  proof = SipHash(secret, nonce || 'R')          (mutual authentication)
// then rounds: every rank sends {u32 len, payload}; once all have, the root returns
// RoundReply{kReplyOk, -1, len} and the concatenation of the nranks payloads (all must have the
// same length) to every rank. When a rank's connection closes (its process died, or its init
// failed) while the others exchange, or a round is wrong, the root sends every other rank
// RoundReply{kReplyFailed, cause, textLen} and a text naming the cause rank, then closes.
// The length word's top bits are flags: kRoundForms marks the round that ends a communicator's
// setup (every rank sets it in the same round); until that round is answered, a rank whose
// connection closes even between rounds is lost (so that the ranks setting up their links hear
// of it), and after it a close is a departure. kRoundAbandons replaces a rank's part of a round:
// {i32 cause, text}, sent by a rank whose setup failed outside a round before it closes, which
// the root relays to every other rank as its notice (cause: the rank the failure names).
// A connection that sends junk, a wrong proof, or nothing within the handshake deadline is closed
// and logged; the root keeps serving real peers. The secret never travels.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "bootstrap/socket.h"
#include "chorus/chorus.h"

namespace chorus {

struct IdData {
  uint32_t magic;
  uint32_t addrLen;
  uint8_t addr[28];  // sockaddr_in or sockaddr_in6
  uint8_t secret[16];
  uint32_t rootRankPlus1;  // the rank whose process hosts the root, + 1 (0: not known)
};
static_assert(sizeof(IdData) <= CHORUS_UNIQUE_ID_BYTES);

constexpr uint32_t kIdMagic = 0x44494843;  // "CHID"

// The wire format and its parsers: pure functions over bytes (no sockets, no clocks), so that
// the root and the ranks share them and fuzz/ can feed them arbitrary input.
namespace wire {

constexpr uint32_t kChallengeMagic = 0x4c414843;  // "CHAL"
constexpr uint32_t kHelloMagic = 0x4c454843;      // "CHEL"
constexpr uint32_t kProtocolVersion = 3;          // 3: the length word's flags (kRoundForms)
constexpr uint32_t kReplyOk = 0x4b4f5243;         // "CROK"
constexpr uint32_t kReplyFailed = 0x4c465243;     // "CRFL"
constexpr uint32_t kMaxFailureText = 1024;
constexpr uint32_t kMaxRoundBytes = 64u << 20;  // larger rounds fail the communicator
constexpr uint32_t kRoundForms = 1u << 31;      // in the length word: the setup's last round
constexpr uint32_t kRoundAbandons = 1u << 30;   // in the length word: {i32 cause, text} instead
constexpr uint32_t kRoundFlags = kRoundForms | kRoundAbandons;
constexpr uint32_t kMaxRanks = 1u << 20;

struct Challenge {
  uint32_t magic;
  uint32_t version;
  uint8_t nonce[16];
};
struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t nranks;
  uint32_t pid;  // the rank's process: the root answers ranks of its own process last
  uint64_t proof;
};

struct RoundReply {
  uint32_t magic;  // kReplyOk or kReplyFailed
  int32_t cause;   // kReplyFailed: the rank that was lost or sent a bad round (-1: none)
  uint32_t len;    // bytes that follow: the round's payloads, or the failure's text
  uint32_t pad;
};

// SipHash-2-4(secret, nonce || role); role 'C' proves the client, 'R' the root.
uint64_t proofFor(const uint8_t secret[16], const uint8_t nonce[16], char role);

// Client side: the root's first message. False if it is not a Chorus root of this version
// (len must be sizeof(Challenge); the nonce is copied out on success).
bool parseChallenge(const void* bytes, size_t len, uint8_t nonce[16]);

// Root side: what the bytes a connecting peer sent so far (at most sizeof(Hello)) amount to.
enum class HelloStatus {
  kNeedMore,    // fewer than sizeof(Hello) bytes
  kJunk,        // not a Chorus hello
  kWrongProof,  // does not prove the secret
  kBadNranks,   // first peer with nranks 0 or above kMaxRanks
  kWrongComm,   // nranks differs from the communicator's, or rank out of range
  kAccepted,    // proves the secret; rank / nranks are valid for the communicator
};
struct HelloCheck {
  HelloStatus status;
  uint32_t rank;
  uint32_t nranks;
};
// expectedNranks < 0: nobody joined yet, the first valid hello sets it.
HelloCheck checkHello(const void* bytes, size_t len, const uint8_t secret[16],
                      const uint8_t nonce[16], int expectedNranks);
const char* helloStatusName(HelloStatus s);

// One rank's message of a round, {u32 len, payload}, received in pieces: recv() into dest(),
// up to want() bytes, then advance() by what arrived.
class RoundReader {
 public:
  RoundReader() : buf_(4) {}
  size_t want() const;  // bytes still missing (0: complete)
  char* dest() { return buf_.data() + got_; }
  // False when the announced length exceeds kMaxRoundBytes (nothing is allocated for it; the
  // reader then wants nothing more and never completes).
  bool advance(size_t n);
  bool complete() const { return !oversized_ && got_ >= 4 && got_ == 4 + size_t(length()); }
  bool started() const { return got_ > 0; }
  // The length word, valid once 4 bytes arrived: the payload's bytes, and the flags
  // (kRoundForms, kRoundAbandons).
  uint32_t length() const { return word() & ~kRoundFlags; }
  uint32_t flags() const { return word() & kRoundFlags; }
  const char* payload() const { return buf_.data() + 4; }
  void reset();

 private:
  uint32_t word() const;
  std::vector<char> buf_;
  size_t got_ = 0;
  bool oversized_ = false;
};

// The root's answer to a complete round: the payloads in rank order. False (and *mismatch set
// to the first rank whose length or flags differ from rank 0's) when they differ.
bool assembleRound(const std::vector<const RoundReader*>& ranks, std::vector<char>* out,
                   int* mismatch);

// One rank's message of a round: the length word (the payload's bytes | flags), then `a` and
// `b` (the payload in one or two pieces).
std::vector<char> encodeRound(uint32_t flags, const void* a, size_t na, const void* b = nullptr,
                              size_t nb = 0);

// An abandoning rank's payload {i32 cause, text}: the cause (-1 when outside 0..nranks-1) and
// the text, cut to kMaxFailureText bytes, with every byte outside printable ASCII made '?'.
// False when the payload is shorter than the cause.
bool parseAbandon(const void* payload, size_t len, int nranks, int* cause, std::string* text);

// Decodes an id's bytes without throwing; false if they are not a Chorus unique id.
bool tryDecodeId(const void* bytes, size_t len, IdData* out);

}  // namespace wire

IdData decodeId(const chorusUniqueId& id);  // throws chorusInvalidArgument if not an id
// rootRank: the rank whose process hosts the root, when the caller knows it (-1: not known); a
// rank that loses the root's connection then names that rank.
chorusUniqueId encodeId(const SockAddr& root, const uint8_t secret[16], int rootRank = -1);

// Starts a root listening on `addr` (port 0: ephemeral) in a detached thread, and returns the id.
chorusUniqueId startRoot(SockAddr addr, const uint8_t secret[16], int rootRank = -1);

// Seconds a rank waits for all others to join (CHORUS_BOOTSTRAP_TIMEOUT, default 120).
double bootstrapTimeout();

class Bootstrap {
 public:
  // joinSeconds < 0: CHORUS_BOOTSTRAP_TIMEOUT.
  Bootstrap(const chorusUniqueId& id, int rank, int nranks, const std::atomic<bool>* abortFlag,
            double joinSeconds = -1);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  // all must hold nranks * size bytes; on return all[r*size..] holds rank r's contribution.
  void allGather(const void* mine, size_t size, void* all, Deadline deadline = noDeadline());
  void barrier(Deadline deadline = noDeadline());
  // Between rounds (a setup step that waits on other ranks): throws a chorusRemoteError when the
  // root told this rank that the communicator cannot form (naming the rank it lost), or when the
  // root's connection closed (naming the root's rank: its process is gone). Reads nothing else.
  void checkRoot();
  // The round that ends the communicator's setup (a barrier with kRoundForms): from then on a
  // rank that closes its connection between rounds has left, not failed.
  void formed(Deadline deadline);
  // After this rank's setup failed outside a round because of another rank, which may itself have
  // failed because of a third (closing its connections): the root saw the first rank go. Waits up
  // to `seconds` for the root's notice or its end and throws what it says (as checkRoot); returns
  // when it says nothing, or when this rank already reported the root's word.
  void awaitVerdict(double seconds);
  // This rank's setup failed outside a round: tells the root why (cause: the rank the failure
  // names; -1: this rank's own failure) before closing, so that the others read this rank's reason
  // instead of "left". Best effort (0.2 s at most); nothing when the root's word was already read.
  void abandon(int cause, const std::string& why);
  void close();

 private:
  // allGather with the length word's flags; barrierWith, a barrier with them.
  void exchange(const void* mine, size_t size, void* all, Deadline deadline, uint32_t flags);
  void barrierWith(Deadline deadline, uint32_t flags);
  // A failure of the round's I/O (`e`), as this rank reports it: the root's notice naming the
  // rank that was lost when it sent one, else the root's loss (naming its rank when known).
  [[noreturn]] void roundFailed(const Failure& e);
  [[noreturn]] void rootNotice(const wire::RoundReply& h);  // reads the text after h, throws
  int fd_ = -1;
  int rank_, nranks_;
  int rootRank_ = -1;
  int round_ = 0;         // allGather calls so far (the test hook's stage)
  int stallRound_ = 0;    // CHORUS_TEST_BOOTSTRAP_STALL: stop in this round (0: never)
  bool inRound_ = false;  // between sending a part and reading the answer (or failing in it)
  bool heard_ = false;    // a failure with the root's word (its notice or its end) was thrown
  const std::atomic<bool>* abortFlag_;
};

}  // namespace chorus
