#include "bootstrap/bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "base/siphash.h"
#include "base/test_hook.h"
#include "base/thread_name.h"

namespace chorus {

namespace wire {

uint64_t proofFor(const uint8_t secret[16], const uint8_t nonce[16], char role) {
  uint8_t msg[17];
  memcpy(msg, nonce, 16);
  msg[16] = uint8_t(role);
  return sipHash24(secret, msg, sizeof(msg));
}

bool parseChallenge(const void* bytes, size_t len, uint8_t nonce[16]) {
  Challenge c;
  if (len != sizeof(c)) return false;
  memcpy(&c, bytes, sizeof(c));
  if (c.magic != kChallengeMagic || c.version != kProtocolVersion) return false;
  memcpy(nonce, c.nonce, 16);
  return true;
}

HelloCheck checkHello(const void* bytes, size_t len, const uint8_t secret[16],
                      const uint8_t nonce[16], int expectedNranks) {
  HelloCheck r{HelloStatus::kNeedMore, 0, 0};
  if (len < sizeof(Hello)) return r;
  Hello h;
  memcpy(&h, bytes, sizeof(h));
  r.rank = h.rank;
  r.nranks = h.nranks;
  if (h.magic != kHelloMagic) {
    r.status = HelloStatus::kJunk;
  } else if (h.proof != proofFor(secret, nonce, 'C')) {
    r.status = HelloStatus::kWrongProof;
  } else if (expectedNranks < 0 && (h.nranks == 0 || h.nranks > kMaxRanks)) {
    r.status = HelloStatus::kBadNranks;
  } else if ((expectedNranks >= 0 && int64_t(h.nranks) != expectedNranks) || h.rank >= h.nranks) {
    r.status = HelloStatus::kWrongComm;
  } else {
    r.status = HelloStatus::kAccepted;
  }
  return r;
}

const char* helloStatusName(HelloStatus s) {
  switch (s) {
    case HelloStatus::kNeedMore:
      return "incomplete hello";
    case HelloStatus::kJunk:
      return "not a Chorus hello (junk)";
    case HelloStatus::kWrongProof:
      return "wrong secret proof";
    case HelloStatus::kBadNranks:
      return "bad nranks";
    case HelloStatus::kWrongComm:
      return "rank or nranks do not match the communicator";
    case HelloStatus::kAccepted:
      return "accepted";
  }
  return "?";
}

uint32_t RoundReader::word() const {
  uint32_t w = 0;
  memcpy(&w, buf_.data(), 4);
  return w;
}

size_t RoundReader::want() const {
  if (oversized_) return 0;
  if (got_ < 4) return 4 - got_;
  return 4 + size_t(length()) - got_;
}

bool RoundReader::advance(size_t n) {
  got_ += std::min(n, want());
  if (got_ == 4 && buf_.size() == 4) {
    if (length() > kMaxRoundBytes) {
      oversized_ = true;
      return false;
    }
    buf_.resize(4 + size_t(length()));
  }
  return true;
}

void RoundReader::reset() {
  got_ = 0;
  oversized_ = false;
  buf_.assign(4, 0);
}

std::vector<char> encodeRound(uint32_t flags, const void* a, size_t na, const void* b, size_t nb) {
  const uint32_t word = uint32_t(na + nb) | flags;
  std::vector<char> msg(4 + na + nb);
  memcpy(msg.data(), &word, 4);
  if (na > 0) memcpy(msg.data() + 4, a, na);
  if (nb > 0) memcpy(msg.data() + 4 + na, b, nb);
  return msg;
}

bool parseAbandon(const void* payload, size_t len, int nranks, int* cause, std::string* text) {
  int32_t c = -1;
  if (len < sizeof(c)) return false;
  memcpy(&c, payload, sizeof(c));
  *cause = c >= 0 && c < nranks ? int(c) : -1;
  const char* p = static_cast<const char*>(payload) + sizeof(c);
  text->assign(p, std::min(len - sizeof(c), size_t(kMaxFailureText)));
  for (char& ch : *text)
    if (ch < 0x20 || ch > 0x7e) ch = '?';
  return true;
}

bool assembleRound(const std::vector<const RoundReader*>& ranks, std::vector<char>* out,
                   int* mismatch) {
  out->clear();
  if (ranks.empty()) return true;
  const uint32_t len = ranks[0]->length();
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]->complete() || ranks[r]->length() != len ||
        ranks[r]->flags() != ranks[0]->flags()) {
      *mismatch = int(r);
      return false;
    }
  }
  out->reserve(size_t(len) * ranks.size());
  for (const RoundReader* r : ranks) out->insert(out->end(), r->payload(), r->payload() + len);
  return true;
}

bool tryDecodeId(const void* bytes, size_t len, IdData* out) {
  if (len < sizeof(IdData)) return false;
  memcpy(out, bytes, sizeof(IdData));
  return out->magic == kIdMagic &&
         (out->addrLen == sizeof(sockaddr_in) || out->addrLen == sizeof(sockaddr_in6));
}

}  // namespace wire

namespace {

using namespace wire;

double handshakeTimeout() {
  return double(envInt("CHORUS_HANDSHAKE_TIMEOUT_MS", 5000)) / 1000.0;
}

// The root: a detached thread that owns the listener and, after everyone joined, one socket per
// rank. It exits when every rank has disconnected, or tears everything down when a rank vanishes
// in the middle of a round (so the others fail instead of waiting).
class Root {
 public:
  // Reads its settings here, on the caller's thread: the root thread reads no environment (a
  // program's setenv while it ran, chorus-tune's between the inits of its communicators, freed
  // the array its getenv walked: SIGSEGV in the root thread).
  Root(int listenFd, const uint8_t secret[16])
      : listenFd_(listenFd), handshakeSeconds_(handshakeTimeout()) {
    memcpy(secret_, secret, 16);
  }
  void run() {
    try {  // the root thread's top: nothing reaches std::terminate
      join();
      serveRounds();
    } catch (...) {
      const Failure e = caughtFailure(-1, "serving the bootstrap root");
      CHORUS_WARN(-1, "bootstrap root: %s", e.message.c_str());
      if (!told_) tellFailure(e.cause, "the bootstrap root failed: " + e.message);
    }
    if (listenFd_ >= 0) ::close(listenFd_);
    for (auto& r : ranks_)
      if (r.fd >= 0) ::close(r.fd);
    for (auto& p : pending_)
      if (p.fd >= 0) ::close(p.fd);
  }

 private:
  struct Pending {
    int fd;
    Deadline deadline;
    uint8_t nonce[16];
    Hello hello;
    size_t got;
  };
  struct RankConn {
    int fd = -1;
    uint32_t pid = 0;
    RoundReader round;
    bool closed = false;
  };

  void reject(Pending& p, const char* why) {
    CHORUS_WARN(-1, "bootstrap root: closing connection: %s", why);
    ::close(p.fd);
    p.fd = -1;
  }

  // Reads what a pending connection sent and decides on it. Returns true when it joined.
  bool progressPending(Pending& p) {
    ssize_t n = recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
      reject(p, "closed during the handshake");
      return false;
    }
    p.got += size_t(n);
    const HelloCheck h = checkHello(&p.hello, p.got, secret_, p.nonce, nranks_);
    switch (h.status) {
      case HelloStatus::kNeedMore:
        return false;
      case HelloStatus::kJunk:
      case HelloStatus::kWrongProof:
      case HelloStatus::kBadNranks:
        reject(p, helloStatusName(h.status));
        return false;
      case HelloStatus::kWrongComm:
      case HelloStatus::kAccepted:
        break;
    }
    if (h.status == HelloStatus::kAccepted && nranks_ < 0) {
      nranks_ = int(h.nranks);
      ranks_.resize(size_t(nranks_));
    }
    if (h.status == HelloStatus::kWrongComm || ranks_[h.rank].fd >= 0) {
      CHORUS_WARN(-1, "bootstrap root: rank %u/%u rejected (expected nranks %d%s)", h.rank,
                  h.nranks, nranks_,
                  h.status == HelloStatus::kAccepted ? ", rank already joined" : "");
      ::close(p.fd);
      p.fd = -1;
      return false;
    }
    uint64_t reply = proofFor(secret_, p.nonce, 'R');
    if (send(p.fd, &reply, sizeof(reply), MSG_NOSIGNAL) != sizeof(reply)) {
      reject(p, "cannot answer");
      return false;
    }
    ranks_[h.rank].fd = p.fd;
    ranks_[h.rank].pid = p.hello.pid;
    p.fd = -1;
    return true;
  }

  void join() {
    Deadline joinDeadline = deadlineIn(bootstrapTimeout());
    int joined = 0;
    while (nranks_ < 0 || joined < nranks_) {
      if (Clock::now() > joinDeadline) {
        std::string missing;
        for (int r = 0; r < nranks_; ++r)
          if (ranks_[size_t(r)].fd < 0) missing += (missing.empty() ? "" : ",") + std::to_string(r);
        const std::string why = format(
            "only %d of %d ranks joined within %.0f s (CHORUS_BOOTSTRAP_TIMEOUT); missing: "
            "%s %s",
            joined, nranks_, bootstrapTimeout(),
            missing.find(',') == std::string::npos ? "rank" : "ranks", missing.c_str());
        tellFailure(-1, why);
        throw Failure{chorusTimeout, why};
      }
      std::vector<pollfd> fds;
      fds.push_back({listenFd_, POLLIN, 0});
      for (auto& p : pending_) fds.push_back({p.fd, POLLIN, 0});
      poll(fds.data(), fds.size(), 100);
      // Only the connections polled above: acceptOne() appends after them.
      const size_t polled = fds.size() - 1;
      for (size_t i = 0; i < polled; ++i) {
        Pending& p = pending_[i];
        if (Clock::now() > p.deadline) {
          reject(p, "no valid handshake before the deadline");
          continue;
        }
        if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (progressPending(p)) ++joined;
      }
      if (fds[0].revents & POLLIN) acceptOne();
      std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
    }
    ::close(listenFd_);
    listenFd_ = -1;
    for (auto& p : pending_) reject(p, "communicator complete");
    pending_.clear();
  }

  void acceptOne() {
    while (true) {
      int fd = accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      Pending p{};
      p.fd = fd;
      p.deadline = deadlineIn(handshakeSeconds_);
      fillRandom(p.nonce, sizeof(p.nonce));
      Challenge c{kChallengeMagic, kProtocolVersion, {}};
      memcpy(c.nonce, p.nonce, 16);
      if (send(fd, &c, sizeof(c), MSG_NOSIGNAL) != sizeof(c)) {
        ::close(fd);
        continue;
      }
      pending_.push_back(p);
    }
  }

  // Tells every rank still connected (best effort, at most ~1 s in all) why the communicator
  // cannot form: RoundReply{kReplyFailed, cause} and the text. Once.
  // f(r, conn) for every rank, those of other processes first: once a rank of this process has
  // the root's answer or notice, its process may finish and exit, which ends this thread before
  // the others hear it.
  template <class F>
  void otherProcessesFirst(F&& f) {
    const uint32_t self = uint32_t(getpid());
    for (int pass = 0; pass < 2; ++pass)
      for (int r = 0; r < int(ranks_.size()); ++r)
        if ((ranks_[size_t(r)].pid == self) == (pass == 1)) f(r, ranks_[size_t(r)]);
  }

  void tellFailure(int cause, const std::string& why) noexcept {
    told_ = true;
    try {
      const std::string text = why.substr(0, kMaxFailureText);
      RoundReply h{kReplyFailed, int32_t(cause), uint32_t(text.size()), 0};
      std::string msg(reinterpret_cast<const char*>(&h), sizeof(h));
      msg += text;
      const Deadline until = deadlineIn(1);
      // A rank of this process that read the notice first could fail its init and exit before
      // the others were told: they then named this process's rank, not the cause (1 launch in
      // about 150 of a rank killed in round 3 beside busy processes).
      otherProcessesFirst([&](int r, RankConn& c) {
        if (c.fd < 0 || c.closed || r == cause) return;
        try {
          sendAll(c.fd, msg.data(), msg.size(), until, nullptr, "bootstrap root notice");
        } catch (...) {  // that rank is gone too: nothing to tell it
        }
      });
    } catch (...) {  // out of memory: the connections still close
    }
  }

  // Fails the communicator's bootstrap because of rank `cause` (-1: none): every other rank is
  // told, then the root closes everything.
  [[noreturn]] void failAll(int cause, const std::string& why) {
    CHORUS_WARN(-1, "bootstrap root: %s", why.c_str());
    tellFailure(cause, why);
    throw Failure{chorusRemoteError, why, cause};
  }

  // A rank's setup failed outside a round: it says why (parseAbandon) and which rank its failure
  // names; the others read that instead of "left".
  [[noreturn]] void abandoned(int r) {
    const RoundReader& rr = ranks_[size_t(r)].round;
    int cause = -1;
    std::string why;
    if (!parseAbandon(rr.payload(), rr.length(), nranks_, &cause, &why))
      lost(r, "during the communicator's setup");
    failAll(cause >= 0 ? cause : r, why);
  }

  // A rank's connection closed while the communicator still needs it.
  [[noreturn]] void lost(int r, const char* when) {
    failAll(r, format("rank %d (pid %u) left %s: its connection to the bootstrap root closed "
                      "(the process died, was killed, or its init failed)",
                      r, ranks_[size_t(r)].pid, when));
  }

  void serveRounds() {
    const int n = nranks_;
    // Allocated once: this thread wakes every second for the communicator's whole life.
    std::vector<pollfd> fds(static_cast<size_t>(n));
    while (true) {
      int open = 0;
      for (int r = 0; r < n; ++r) {
        fds[size_t(r)] = {ranks_[size_t(r)].closed ? -1 : ranks_[size_t(r)].fd, POLLIN, 0};
        open += ranks_[size_t(r)].closed ? 0 : 1;
      }
      if (open == 0) return;
      poll(fds.data(), fds.size(), 1000);
      bool anyStarted = false, anyClosed = false;
      for (int r = 0; r < n; ++r) {
        RankConn& c = ranks_[size_t(r)];
        if (!c.closed && (fds[size_t(r)].revents & (POLLIN | POLLHUP | POLLERR))) readSome(r);
        anyStarted = anyStarted || c.round.started();
        anyClosed = anyClosed || c.closed;
      }
      for (int r = 0; r < n; ++r) {
        const RoundReader& rr = ranks_[size_t(r)].round;
        if (rr.complete() && (rr.flags() & kRoundAbandons)) abandoned(r);
      }
      // In a round every rank is needed; until the setup's last round (kRoundForms) is answered
      // too, as the ranks set up their links between rounds.
      if (anyClosed && (anyStarted || !formed_)) {
        for (int r = 0; r < n; ++r)
          if (ranks_[size_t(r)].closed)
            lost(r,
                 anyStarted ? "during the bootstrap exchange" : "during the communicator's setup");
      }
      bool complete = true;
      for (auto& c : ranks_) complete = complete && c.round.complete();
      if (complete) respond();
    }
  }

  void readSome(int r) {
    RankConn& c = ranks_[size_t(r)];
    const size_t want = c.round.want();
    if (want == 0) {
      // Its part of the round is in: the only thing it can still send is the end of its
      // connection (a rank sends nothing more before the answer).
      char b;
      const ssize_t k = recv(c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) c.closed = true;
      return;
    }
    ssize_t k = recv(c.fd, c.round.dest(), want, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
      c.closed = true;
      return;
    }
    if (!c.round.advance(size_t(k)))
      failAll(r, "rank " + std::to_string(r) + " sent an oversized bootstrap round");
  }

  void respond() {
    std::vector<const RoundReader*> rounds;
    for (auto& c : ranks_) rounds.push_back(&c.round);
    std::vector<char> out;
    int bad = 0;
    if (!assembleRound(rounds, &out, &bad))
      failAll(-1, "ranks 0 and " + std::to_string(bad) + " exchange different sizes (" +
                      std::to_string(ranks_[0].round.length()) + " vs " +
                      std::to_string(ranks_[size_t(bad)].round.length()) + " bytes)");
    const RoundReply ok{kReplyOk, -1, uint32_t(out.size()), 0};
    const bool forms = (ranks_[0].round.flags() & kRoundForms) != 0;
    otherProcessesFirst([&](int r, RankConn& c) {
      try {
        sendAll(c.fd, &ok, sizeof(ok), deadlineIn(60), nullptr, "bootstrap root reply");
        sendAll(c.fd, out.data(), out.size(), deadlineIn(60), nullptr, "bootstrap root reply");
      } catch (const Failure&) {
        c.closed = true;
        lost(r, "before the bootstrap root's answer reached it");
      }
      c.round.reset();
    });
    formed_ = formed_ || forms;
  }

  int listenFd_;
  uint8_t secret_[16];
  double handshakeSeconds_;  // CHORUS_HANDSHAKE_TIMEOUT_MS
  int nranks_ = -1;
  bool told_ = false;
  bool formed_ = false;  // the setup's last round was answered: a close is a departure
  std::vector<Pending> pending_;
  std::vector<RankConn> ranks_;
};

}  // namespace

double bootstrapTimeout() {
  return double(envInt("CHORUS_BOOTSTRAP_TIMEOUT", 120));
}

IdData decodeId(const chorusUniqueId& id) {
  IdData d;
  if (!wire::tryDecodeId(id.internal, sizeof(id.internal), &d))
    fail(chorusInvalidArgument, "commId is not a Chorus unique id (use chorusGetUniqueId)");
  return d;
}

chorusUniqueId encodeId(const SockAddr& root, const uint8_t secret[16], int rootRank) {
  chorusUniqueId id;
  memset(&id, 0, sizeof(id));
  IdData d{};
  d.magic = kIdMagic;
  d.addrLen = root.len;
  memcpy(d.addr, &root.ss, root.len);
  memcpy(d.secret, secret, 16);
  d.rootRankPlus1 = rootRank >= 0 ? uint32_t(rootRank) + 1 : 0;
  memcpy(id.internal, &d, sizeof(d));
  return id;
}

chorusUniqueId startRoot(SockAddr addr, const uint8_t secret[16], int rootRank) {
  int fd = listenOn(&addr);
  CHORUS_INFO(-1, "bootstrap root listening on %s", addr.str().c_str());
  Root* root = nullptr;
  try {
    root = new Root(fd, secret);
    std::thread([root] {
      nameThisThread("root");
      root->run();  // catches everything
      delete root;
    }).detach();
  } catch (...) {
    const Failure e = caughtFailure(rootRank, "starting the bootstrap root thread");
    if (root != nullptr) delete root;
    ::close(fd);
    throw e;
  }
  return encodeId(addr, secret, rootRank);
}

Bootstrap::Bootstrap(const chorusUniqueId& id, int rank, int nranks,
                     const std::atomic<bool>* abortFlag, double joinSeconds)
    : rank_(rank), nranks_(nranks), abortFlag_(abortFlag) {
  IdData d = decodeId(id);
  rootRank_ =
      d.rootRankPlus1 > 0 && d.rootRankPlus1 <= uint32_t(nranks) ? int(d.rootRankPlus1) - 1 : -1;
  // CHORUS_TEST_BOOTSTRAP_STALL=rank:round (tests only): that rank stops for good inside its
  // round-th exchange, its part sent, so that a test can kill it there.
  stallRound_ = testHookFor("CHORUS_TEST_BOOTSTRAP_STALL", rank);
  SockAddr root;
  memcpy(&root.ss, d.addr, d.addrLen);
  root.len = d.addrLen;
  Deadline deadline = deadlineIn(joinSeconds >= 0 ? joinSeconds : bootstrapTimeout());
  while (true) {
    fd_ = connectTo(root, deadline, abortFlag_);
    try {
      Challenge c;
      recvAll(fd_, &c, sizeof(c), deadlineIn(handshakeTimeout() * 2), abortFlag_,
              "bootstrap handshake");
      uint8_t nonce[16];
      if (!parseChallenge(&c, sizeof(c), nonce))
        fail(chorusSystemError, "bootstrap root at %s is not a Chorus root (or another version)",
             root.str().c_str());
      Hello h{kHelloMagic, uint32_t(rank), uint32_t(nranks), uint32_t(getpid()),
              proofFor(d.secret, nonce, 'C')};
      sendAll(fd_, &h, sizeof(h), deadline, abortFlag_, "bootstrap hello");
      uint64_t reply = 0;
      recvAll(fd_, &reply, sizeof(reply), deadline, abortFlag_, "bootstrap join");
      if (reply != proofFor(d.secret, nonce, 'R'))
        fail(chorusSystemError, "bootstrap root at %s failed to prove the secret",
             root.str().c_str());
      return;
    } catch (const Failure& e) {
      ::close(fd_);
      fd_ = -1;
      if (e.code == chorusRemoteError && Clock::now() < deadline) {
        // The root closed us (e.g. a stale root on a reused port); try again.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      fail(e.code, "rank %d: cannot join the communicator at %s: %s", rank, root.str().c_str(),
           e.message.c_str());
    }
  }
}

Bootstrap::~Bootstrap() {
  close();
}

void Bootstrap::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Bootstrap::allGather(const void* mine, size_t size, void* all, Deadline deadline) {
  exchange(mine, size, all, deadline, 0);
}

void Bootstrap::formed(Deadline deadline) {
  barrierWith(deadline, kRoundForms);
}

void Bootstrap::exchange(const void* mine, size_t size, void* all, Deadline deadline,
                         uint32_t flags) {
  if (fd_ < 0) fail(chorusInvalidUsage, "rank %d: bootstrap already closed", rank_);
  if (size > kMaxRoundBytes)
    fail(chorusInvalidUsage, "rank %d: a bootstrap round of %zu bytes (at most %u)", rank_, size,
         kMaxRoundBytes);
  const std::vector<char> msg = encodeRound(flags, mine, size);
  ++round_;
  inRound_ = true;
  RoundReply h{};
  try {
    try {
      sendAll(fd_, msg.data(), msg.size(), deadline, abortFlag_, "bootstrap allgather");
    } catch (const Failure& e) {
      // The root may have closed after telling us why: read that first.
      recvAll(fd_, &h, sizeof(h), deadlineIn(0.2), abortFlag_, "bootstrap allgather");
      if (h.magic != kReplyFailed) throw;
    }
    if (stallRound_ == round_) {
      fprintf(stderr, "CHORUS_TEST_BOOTSTRAP_STALL: rank %d stops in bootstrap round %d\n", rank_,
              round_);
      fflush(stderr);
      for (;;) pause();
    }
    if (h.magic == 0) recvAll(fd_, &h, sizeof(h), deadline, abortFlag_, "bootstrap allgather");
  } catch (const Failure& e) {
    // Timed out as the root gave up waiting for a rank (it tells which): read its notice.
    bool notice = false;
    if (e.code == chorusTimeout) try {
        recvAll(fd_, &h, sizeof(h), deadlineIn(1), abortFlag_, "bootstrap allgather");
        notice = h.magic == kReplyFailed;
      } catch (...) {
      }
    if (!notice) roundFailed(e);
  }
  if (h.magic == kReplyFailed) rootNotice(h);
  if (h.magic != kReplyOk || h.len != size * size_t(nranks_))
    fail(chorusSystemError,
         "rank %d: bootstrap allgather: the root answered %u bytes (magic %08x), expected %zu",
         rank_, h.len, h.magic, size * size_t(nranks_));
  try {
    recvAll(fd_, all, size * size_t(nranks_), deadline, abortFlag_, "bootstrap allgather");
  } catch (const Failure& e) {
    roundFailed(e);
  }
  inRound_ = false;
}

void Bootstrap::rootNotice(const RoundReply& h) {
  std::string text(std::min(h.len, kMaxFailureText), '\0');
  try {
    recvAll(fd_, text.data(), text.size(), deadlineIn(1), abortFlag_, "bootstrap allgather");
  } catch (const Failure&) {
    text = "(the root's notice was cut off)";
  }
  const int cause = h.cause >= 0 && h.cause < nranks_ ? h.cause : -1;
  heard_ = true;
  throw Failure{chorusRemoteError,
                format("rank %d: the communicator cannot form: %s (reported by the bootstrap "
                       "root)",
                       rank_, text.c_str()),
                cause};
}

void Bootstrap::checkRoot() {
  if (fd_ < 0) return;
  RoundReply h{};
  const ssize_t n = recv(fd_, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n > 0 && (size_t(n) < sizeof(h) || h.magic != kReplyFailed))
    return;  // part of a notice (looked at again next time), or bytes the next round reads
  if (n > 0) {
    recvAll(fd_, &h, sizeof(h), deadlineIn(1), abortFlag_, "bootstrap allgather");
    rootNotice(h);
  }
  roundFailed(Failure{
      chorusRemoteError,
      n == 0
          ? std::string("the bootstrap root closed its connection between rounds")
          : format("the bootstrap root's connection failed between rounds: %s", strerror(errno))});
}

void Bootstrap::roundFailed(const Failure& e) {
  if (e.code != chorusRemoteError)  // a timeout or an abort: as it is
    fail(e.code, "rank %d: %s (another rank failed or left)", rank_, e.message.c_str());
  heard_ = true;  // the root's end
  if (rootRank_ >= 0 && rootRank_ != rank_)
    throw Failure{chorusRemoteError,
                  format("rank %d: %s: the bootstrap root, in the process of rank %d, is gone "
                         "(rank %d died or failed)",
                         rank_, e.message.c_str(), rootRank_, rootRank_),
                  rootRank_};
  fail(chorusRemoteError,
       "rank %d: %s: the bootstrap root is gone (the process that created the unique id died or "
       "failed)",
       rank_, e.message.c_str());
}

void Bootstrap::awaitVerdict(double seconds) {
  if (fd_ < 0 || heard_ || inRound_) return;
  const Deadline until = deadlineIn(seconds);
  while (true) {
    checkRoot();  // throws the root's word
    if (Clock::now() >= until) return;
    pollfd p{fd_, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    poll(&p, 1, int(std::clamp<long long>(left, 1, 20)));
  }
}

void Bootstrap::abandon(int cause, const std::string& why) {
  if (fd_ < 0 || heard_ || inRound_) return;
  try {
    const int32_t c = cause;
    const std::vector<char> msg = encodeRound(kRoundAbandons, &c, sizeof(c), why.data(),
                                              std::min(why.size(), size_t(kMaxFailureText)));
    sendAll(fd_, msg.data(), msg.size(), deadlineIn(0.2), nullptr, "bootstrap abandon");
  } catch (...) {  // the root is gone or does not read: closing says "left" instead
  }
  close();
}

void Bootstrap::barrier(Deadline deadline) {
  barrierWith(deadline, 0);
}

void Bootstrap::barrierWith(Deadline deadline, uint32_t flags) {
  char c = 0;
  std::vector<char> all(static_cast<size_t>(nranks_));
  exchange(&c, 1, all.data(), deadline, flags);
}

}  // namespace chorus
