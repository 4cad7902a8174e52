// Bootstrap: the unique id, the root that rendezvous every rank, and the out-of-band allgather
// and barrier the communicator uses to exchange setup information.
//
// Protocol (all integers little-endian, host order on this platform):
//   root -> client  Challenge {magic, version, nonce[16]}
//   client -> root  Hello {magic, rank, nranks, pad, proof = SipHash(secret, nonce || 'C')}
//   root -> client  proof = SipHash(secret, nonce || 'R')          (mutual authentication)
// then rounds: every rank sends {u32 len, payload}; once all have, the root returns the
// concatenation of the nranks payloads (all must have the same length) to every rank.
// A connection that sends junk, a wrong proof, or nothing within the handshake deadline is closed
// and logged; the root keeps serving real peers. The secret never travels.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "bootstrap/socket.h"
#include "chorus/chorus.h"

namespace chorus {

struct IdData {
  uint32_t magic;
  uint32_t addrLen;
  uint8_t addr[28];  // sockaddr_in or sockaddr_in6
  uint8_t secret[16];
};
static_assert(sizeof(IdData) <= CHORUS_UNIQUE_ID_BYTES);

constexpr uint32_t kIdMagic = 0x44494843;  // "CHID"

IdData decodeId(const chorusUniqueId& id);  // throws chorusInvalidArgument if not an id
chorusUniqueId encodeId(const SockAddr& root, const uint8_t secret[16]);

// Starts a root listening on `addr` (port 0: ephemeral) in a detached thread, and returns the id.
chorusUniqueId startRoot(SockAddr addr, const uint8_t secret[16]);

// Seconds a rank waits for all others to join (CHORUS_BOOTSTRAP_TIMEOUT, default 120).
double bootstrapTimeout();

class Bootstrap {
 public:
  Bootstrap(const chorusUniqueId& id, int rank, int nranks, const std::atomic<bool>* abortFlag);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  // all must hold nranks * size bytes; on return all[r*size..] holds rank r's contribution.
  void allGather(const void* mine, size_t size, void* all, Deadline deadline = noDeadline());
  void barrier(Deadline deadline = noDeadline());
  void close();

 private:
  int fd_ = -1;
  int rank_, nranks_;
  const std::atomic<bool>* abortFlag_;
};

}  // namespace chorus
