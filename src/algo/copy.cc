// Single-copy Broadcast and AllGather on one node (Algo::kCma, "cma"): every byte is copied once,
// straight from the buffer of the rank that holds it into the buffer of the rank that needs it,
// instead of twice through the FIFOs (into a slot, out of it).
//
// The mechanism is cross-memory attach: process_vm_readv reads another process's memory in one
// kernel copy (Open MPI's smsc/cma does the same). Ranks that are threads of one process read
// each other's buffers with memcpy. The alternatives: XPMEM (maps a peer's pages, no copy per
// call; not in the stock kernel), and buffers allocated in shared memory (would need the user's
// buffers to come from a Chorus allocator, which the API does not have). So cross-memory attach.
//
// One call, k = ++comm->copySeq, every rank of the communicator taking part:
//  1. publish: the buffer peers access (the root's sendbuff and the others' recvbuff for
//     Broadcast, every rank's block for AllGather) in the segment header's CopyPost, then seq = k
//     << 2 | status (release), ringing sleepers;
//  2. wait until every peer's seq shows k (Waiter: abort, death and timeout watched);
//  3. if every rank's status says it can reach every peer: copy; otherwise every
//     rank runs the FIFO algorithm instead (they all saw the same statuses, so they agree);
//  4. done = k, ringing sleepers; wait until every peer's done shows k: only then may a buffer
//     that peers read be reused or freed, and only then may a rank publish call k + 1.
// Because of step 4, a peer's seq and done can only show k or k - 1 while a rank waits in call
// k, so equality is the test.
//
// Status: whether this rank may read its peers. Cross-memory attach needs ptrace access to the
// peer: the kernel refuses it (EPERM) under Yama's ptrace_scope 1 between siblings, and seccomp
// profiles may refuse the system call (EPERM, ENOSYS); ranks in different pid namespaces do not
// see each other's pids (the probe below then reads something other than the peer's segment). On
// its first single-copy call a rank that has peers in other processes declares any process of its
// user a permitted tracer (PR_SET_PTRACER_ANY, as Open MPI does; CHORUS_CMA=0 turns the path off)
// and reports "not yet"; that call runs the FIFO algorithm. On the next one every peer has made the
// same declaration (its step 1 came after it), so the rank probes each peer once, reading the magic
// word of its segment through cross-memory attach and comparing it with the one it sees in shared
// memory, and reports usable or refused. A refusal anywhere clears Shape::singleCopy on every rank
// (they all see it in the same call) and drops the plans, so the tuner stops choosing this path;
// the decision costs no system call afterwards.
#include <errno.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "algo/algo.h"
#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"

namespace chorus {

namespace {

enum CopyState : uint8_t { kUntried = 0, kArmed = 1, kUsable = 2, kRefused = 3 };
enum Status : uint64_t { kNotYet = 0, kCanRead = 1, kCannot = 2 };

bool samePid(const chorusComm* comm, int p) {
  return comm->peers[size_t(p)].pid == comm->peers[size_t(comm->rank)].pid;
}

// What this rank reports in this call (advancing its state: see the top of the file).
Status prepare(chorusComm* comm) {
  auto& st = comm->copyState;
  if (st == kUntried) {
    bool others = false;
    for (int p = 0; p < comm->nranks; ++p) others = others || !samePid(comm, p);
    const char* env = getenv("CHORUS_CMA");  // once per communicator
    if (env != nullptr && strcmp(env, "0") == 0) {
      st = kRefused;
    } else if (!others) {
      st = kUsable;  // memcpy between threads
    } else {
#ifdef PR_SET_PTRACER
      prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // fails harmlessly without Yama
#endif
      st = kArmed;
      return kNotYet;
    }
  } else if (st == kArmed) {
    st = kUsable;
    for (int p = 0; p < comm->nranks && st == kUsable; ++p) {
      if (samePid(comm, p)) continue;
      uint64_t word = 0;
      iovec local{&word, sizeof(word)};
      iovec remote{reinterpret_cast<void*>(comm->peers[size_t(p)].segAddr), sizeof(word)};
      // The word must be the peer's segment magic as this rank sees it through shared memory:
      // a pid from another pid namespace (a container) names some other process.
      const ssize_t got =
          process_vm_readv(pid_t(comm->peers[size_t(p)].pid), &local, 1, &remote, 1, 0);
      if (got != ssize_t(sizeof(word)) || word != comm->peerSegments[size_t(p)].header()->magic) {
        if (got == ssize_t(sizeof(word))) errno = ESRCH;
        CHORUS_WARN(comm->rank,
                    "cross-memory attach to rank %d refused (%s): single-copy "
                    "collectives off for this communicator",
                    p, strerror(errno));
        st = kRefused;
      }
    }
  }
  return st == kUsable ? kCanRead : st == kRefused ? kCannot : kNotYet;
}

void ringPeers(chorusComm* comm) {
  // One fence orders the publication before every `sleeping` load (transport/fifo.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    Doorbell* d = &comm->peerSegments[size_t(p)].header()->bell;
    if (d->sleeping.load(std::memory_order_relaxed) != 0) ringDoorbell(d);
  }
}

// Waits until every peer's `field` (seq >> 2 or done) equals k.
template <typename Get>
void waitAll(chorusComm* comm, uint64_t k, const char* what, Get get) {
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    const CopyPost& c = comm->peerSegments[size_t(p)].header()->copy;
    if (get(c) != k) {
      Waiter w(comm, p, what, /*fifoWait=*/true);
      while (get(c) != k) w.pause();
    }
  }
}

// Copies `bytes` between `local` here and `remote` in rank p's process (to here when `read`).
void copyPeer(chorusComm* comm, int p, uint64_t remote, void* local, size_t bytes, bool read,
              const char* what) {
  if (bytes == 0) return;
  if (samePid(comm, p)) {
    if (read)
      memcpy(local, reinterpret_cast<const void*>(remote), bytes);
    else
      memcpy(reinterpret_cast<void*>(remote), local, bytes);
    return;
  }
  char* here = static_cast<char*>(local);
  size_t done = 0;
  while (done < bytes) {
    iovec l{here + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    const pid_t pid = pid_t(comm->peers[size_t(p)].pid);
    const ssize_t got =
        read ? process_vm_readv(pid, &l, 1, &r, 1, 0) : process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (got > 0) {
      done += size_t(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    const int err = got < 0 ? errno : EIO;
    Waiter w(comm, p, what);
    w.checkNow();  // a dead or failed peer is named as such
    if (err == ESRCH) {
      // The peer's memory is gone: it is exiting, and is not a zombie yet (processAlive still
      // says alive). The waiter names it as dead within moments; bounded all the same.
      const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
      while (Clock::now() < until) w.pause();
      fail(chorusRemoteError, "rank %d: %s: peer rank %d (pid %d) is gone (its memory is)",
           comm->rank, what, p, int(comm->peers[size_t(p)].pid));
    }
    fail(chorusSystemError, "rank %d: %s: %s %zu bytes of rank %d's buffer failed: %s", comm->rank,
         what, read ? "reading" : "writing", bytes - done, p, strerror(err));
  }
}

// Steps 1-2; returns whether every rank can read (else: run the FIFO algorithm).
bool publish(chorusComm* comm, uint64_t k, const void* addr, const char* what) {
  const Status mine = prepare(comm);
  CopyPost& post = comm->mySegment.header()->copy;
  post.addr.store(reinterpret_cast<uint64_t>(addr), std::memory_order_relaxed);
  post.seq.store(k << 2 | uint64_t(mine), std::memory_order_release);
  ringPeers(comm);
  waitAll(comm, k, what,
          [](const CopyPost& c) { return c.seq.load(std::memory_order_acquire) >> 2; });
  bool all = mine == kCanRead, refused = mine == kCannot;
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    const uint64_t s =
        comm->peerSegments[size_t(p)].header()->copy.seq.load(std::memory_order_relaxed) & 3;
    all = all && s == kCanRead;
    refused = refused || s == kCannot;
  }
  if (refused && comm->shape.singleCopy) {  // every rank sees this in the same call
    comm->shape.singleCopy = false;
    comm->plans.clear();
  }
  return all;
}

// Step 4.
void finish(chorusComm* comm, uint64_t k, const char* what) {
  comm->mySegment.header()->copy.done.store(k, std::memory_order_release);
  ringPeers(comm);
  waitAll(comm, k, what, [](const CopyPost& c) { return c.done.load(std::memory_order_acquire); });
}

uint64_t peerAddr(const chorusComm* comm, int p) {
  return comm->peerSegments[size_t(p)].header()->copy.addr.load(std::memory_order_relaxed);
}

}  // namespace

// The root and the others share the copying, so that every core works (a FIFO broadcast keeps
// two cores busy too: the root fills slots while the receiver empties them): the root writes the
// first 1/n of the data (whole pages) into every other rank's buffer, each of them reads the rest.
void cmaBroadcast(chorusComm* comm, const OpDesc& op) {
  const size_t bytes = op.count * chorusTypeSize(op.type);
  if (bytes == 0) return;  // every rank knows: nothing to agree on
  const uint64_t k = ++comm->copySeq;
  const bool root = comm->rank == op.root;
  const size_t head = bytes / size_t(comm->nranks) / 4096 * 4096;  // the root's share
  if (publish(comm, k, root ? op.sendbuff : op.recvbuff, "Broadcast")) {
    if (root) {
      for (int i = 1; i < comm->nranks; ++i) {
        const int p = (comm->rank + i) % comm->nranks;
        copyPeer(comm, p, peerAddr(comm, p), const_cast<void*>(op.sendbuff), head, /*read=*/false,
                 "Broadcast");
      }
      if (op.recvbuff != op.sendbuff) memcpy(op.recvbuff, op.sendbuff, bytes);
    } else {
      copyPeer(comm, op.root, peerAddr(comm, op.root) + head,
               static_cast<char*>(op.recvbuff) + head, bytes - head, /*read=*/true, "Broadcast");
    }
  } else {
    chainBroadcast(comm, op, Work{0, Proto::kSimple, 0, op.count});
  }
  finish(comm, k, "Broadcast");
}

void cmaAllGather(chorusComm* comm, const OpDesc& op) {
  const size_t block = op.count * chorusTypeSize(op.type);
  if (block == 0) return;
  const uint64_t k = ++comm->copySeq;
  const int n = comm->nranks, me = comm->rank;
  if (publish(comm, k, op.sendbuff, "AllGather")) {
    char* out = static_cast<char*>(op.recvbuff);
    // Start after this rank, so that the readers of one block are spread over time.
    for (int i = 1; i < n; ++i) {
      const int p = (me + i) % n;
      copyPeer(comm, p, peerAddr(comm, p), out + size_t(p) * block, block, /*read=*/true,
               "AllGather");
    }
    if (out + size_t(me) * block != op.sendbuff)
      memcpy(out + size_t(me) * block, op.sendbuff, block);
  } else {
    ringAllGather(comm, op, Work{0, Proto::kSimple, 0, op.count});
  }
  finish(comm, k, "AllGather");
}

}  // namespace chorus
