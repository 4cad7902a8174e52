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
// One call, k = ++CmaState::seq, every rank of the communicator taking part:
//  1. publish: the buffer peers access (the root's sendbuff and the others' recvbuff for
//     Broadcast, every rank's block for AllGather) in the segment header's CopyPost, then seq = k
//     << 2 | status (release), ringing sleepers;
//  2. wait until every peer's seq shows k (Waiter: abort, death and timeout watched);
//  3. if every rank's status says it can reach every peer: copy; otherwise every
//     rank runs the FIFO algorithm instead (they all saw the same statuses, so they agree);
//  4. done = 2k, ringing sleepers; wait until every peer's done shows 2k: only then may a buffer
//     that peers read be reused or freed, and only then may a rank publish call k + 1.
// Because of step 4, a peer's seq can only show k or k - 1 while a rank waits in call k, so
// equality is its test; done only grows (2k - 1 marks the end of the AllReduce's first step).
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
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "algo/algo.h"
#include "algo/peer_post.h"
#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "prims/prims.h"
#include "reduce/reduce.h"

namespace chorus {

namespace {

// AllReduce: the elements of a peer's block read into scratch and reduced at a time (the
// scratch stays in the core's L2).
constexpr size_t kCmaReduceChunk = size_t(128) << 10;

enum CopyState : uint8_t { kUntried = 0, kArmed = 1, kUsable = 2, kRefused = 3 };
enum Status : uint64_t { kNotYet = 0, kCanRead = 1, kCannot = 2 };

// What the single-copy collectives keep per communicator (Algo::kCma's state).
struct CmaState final : AlgoState {
  uint64_t seq = 0;             // single-copy collectives run so far
  CopyState attach = kUntried;  // cross-memory attach: untried, armed, usable, refused
  // CHORUS_CMA=0: cross-memory attach off (read when the communicator is set up).
  const bool off = [] {
    const char* env = getenv("CHORUS_CMA");
    return env != nullptr && strcmp(env, "0") == 0;
  }();
};
CmaState& cmaState(chorusComm* comm) {
  return algoState<CmaState>(comm, Algo::kCma);
}

// What this rank reports in this call (advancing its state: see the top of the file).
Status prepare(chorusComm* comm) {
  CopyState& st = cmaState(comm).attach;
  if (st == kUntried) {
    bool others = false;
    for (int p = 0; p < comm->nranks; ++p) others = others || !samePid(comm, p);
    if (cmaState(comm).off) {
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
      if (got != ssize_t(sizeof(word)) || word != comm->segmentOf(p).header()->magic) {
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
  // Sequentially consistent: a same-process peer whose call fails withdraws its buffer with a
  // store of its own and then reads this word (SameProcessAccess).
  post.seq.store(k << 2 | uint64_t(mine), std::memory_order_seq_cst);
  ringPeers(comm);
  waitAllPosts(comm, &SegmentHeader::copy, what,
               [k](const CopyPost& c) { return c.seq.load(std::memory_order_acquire) >> 2 == k; });
  bool all = mine == kCanRead, refused = mine == kCannot;
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    const uint64_t s = comm->segmentOf(p).header()->copy.seq.load(std::memory_order_seq_cst) & 3;
    all = all && s == kCanRead;
    refused = refused || s == kCannot;
  }
  if (refused && comm->shape.get().singleCopy) {  // every rank sees this in the same call
    comm->shape.change([](Shape& s) { s.singleCopy = false; });
  }
  return all;
}

// Publishes done = `mark` and waits until every peer's done reaches it. A peer's done only
// grows, and cannot pass 2k before this rank publishes 2k: so `>=` and no lost wake-up.
void reach(chorusComm* comm, uint64_t mark, const char* what) {
  comm->mySegment.header()->copy.done.store(mark, std::memory_order_release);
  ringPeers(comm);
  waitAllPosts(comm, &SegmentHeader::copy, what, [mark](const CopyPost& c) {
    return c.done.load(std::memory_order_acquire) >= mark;
  });
}

// Step 4.
void finish(chorusComm* comm, uint64_t k, const char* what) {
  reach(comm, 2 * k, what);
}

// A failed single-copy call withdraws its buffer (status kCannot) and waits for same-process
// peers that joined it until their done shows 2k (algo/peer_post.h).
SameProcessAccess<CopyPost> holdAccess(chorusComm* comm, uint64_t k) {
  return {comm, &SegmentHeader::copy, k, uint64_t(kCannot), 2 * k};
}

uint64_t peerAddr(const chorusComm* comm, int p) {
  return comm->segmentOf(p).header()->copy.addr.load(std::memory_order_relaxed);
}

}  // namespace

// The copying is shared so that it ends at the same time on every core: the root writes the
// first `head` bytes (whole pages) into every receiver, each receiver reads the rest. The root's
// work is its own out-of-place copy L (0 in place) plus (n-1) head, a receiver's is bytes - head:
// equal for head = (bytes - L) / n. So in place the root writes 1/n into each receiver (both cores
// copy; 2 ranks at 2 MiB: 52 us against 192 when the receiver reads it all, each core's buffers
// then fitting its L2); out of place the root copies its own buffer and writes a quarter of a
// share (below). The root publishes `head`.
void cmaBroadcast(chorusComm* comm, const OpDesc& op) {
  const size_t bytes = op.count * chorusTypeSize(op.type);
  if (bytes == 0) return;  // every rank knows: nothing to agree on
  const uint64_t k = ++cmaState(comm).seq;
  const auto access = holdAccess(comm, k);
  const bool root = comm->rank == op.root;
  if (root) {
    // Out of place the root also copies its own buffer, at about 3/4 of a kernel copy's cost
    // per byte while the receivers read (2 ranks, docs/performance.md): counting it so still
    // leaves the root a quarter of a share to write. Not where ranks outnumber cores: there the
    // root's extra writes delay the ranks that share its core.
    const size_t own = op.recvbuff == op.sendbuff ? 0
                       : comm->moreRanksThanCpus  ? bytes
                                                  : bytes - bytes / 4;
    const size_t head = (bytes - own) / size_t(comm->nranks) / 4096 * 4096;
    comm->mySegment.header()->copy.head.store(head, std::memory_order_relaxed);
  }
  if (publish(comm, k, root ? op.sendbuff : op.recvbuff, "Broadcast")) {
    if (root) {
      const size_t head = comm->mySegment.header()->copy.head.load(std::memory_order_relaxed);
      for (int i = 1; i < comm->nranks; ++i) {
        const int p = (comm->rank + i) % comm->nranks;
        copyPeer(comm, p, peerAddr(comm, p), const_cast<void*>(op.sendbuff), head, /*read=*/false,
                 "Broadcast");
      }
      if (op.recvbuff != op.sendbuff) memcpy(op.recvbuff, op.sendbuff, bytes);
    } else {
      // Published before the root's seq (release), read after it (acquire in publish).
      const size_t head = std::min<size_t>(
          bytes, comm->segmentOf(op.root).header()->copy.head.load(std::memory_order_relaxed));
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
  const uint64_t k = ++cmaState(comm).seq;
  const auto access = holdAccess(comm, k);
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

// AllReduce: rank r owns block r (64-byte aligned shares of the elements). Step 1: it reduces
// block r of every rank's sendbuff into block r of its recvbuff, reading the peers' blocks in
// chunks through a scratch buffer that stays in its cache (between threads: straight from the
// peer's buffer). After every rank has done so (done = 2k - 1), step 2: it reads every peer's
// reduced block from the peer's recvbuff. Per rank: (n-1)/n of the data read twice across
// processes and reduced once, against the ring's four passes through the FIFOs (copy in, reduce
// out; copy in, copy out). Each block is reduced by one rank and copied by the others, so every
// rank holds the same bits. In place, step 1 changes only the owner's block of a buffer that
// peers read other blocks of, and step 2 starts after every step 1.
void cmaAllReduce(chorusComm* comm, const OpDesc& op) {
  const size_t tsize = chorusTypeSize(op.type);
  if (op.count == 0) return;
  const int n = comm->nranks, me = comm->rank;
  const uint64_t k = ++cmaState(comm).seq;
  const auto access = holdAccess(comm, k);
  const size_t align = std::max<size_t>(1, 64 / tsize);
  const LineBlocks blocks(op.count, n, tsize);
  comm->mySegment.header()->copy.out.store(reinterpret_cast<uint64_t>(op.recvbuff),
                                           std::memory_order_relaxed);
  if (!publish(comm, k, op.sendbuff, "AllReduce")) {
    ringAllReduce(comm, op, Work{0, Proto::kSimple, 0, op.count});
    finish(comm, k, "AllReduce");
    return;
  }
  const size_t b0 = blocks.begin(me), b1 = blocks.begin(me + 1);
  char* out = static_cast<char*>(op.recvbuff);
  const char* own = static_cast<const char*>(op.sendbuff);
  const int divisor = op.op == chorusAvg ? n : 0;
  std::vector<char>& scratch = comm->scratch->channel[0];
  const size_t chunk =
      std::max(align, std::min(kCmaReduceChunk, scratch.size() - 64) / tsize / align * align);
  char* tmp = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~63ull);
  for (size_t c0 = b0; c0 < b1; c0 += chunk) {
    const size_t cnt = std::min(chunk, b1 - c0);
    const size_t at = c0 * tsize;
    int done = 0;  // peers reduced into out so far
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const uint64_t src = peerAddr(comm, p) + at;
      const void* in = reinterpret_cast<const void*>(src);
      if (!samePid(comm, p)) {
        copyPeer(comm, p, src, tmp, cnt * tsize, /*read=*/true, "AllReduce");
        in = tmp;
      }
      ++done;
      reduceKernel(op.type, op.op, cnt, done == 1 ? own + at : out + at, in, out + at, nullptr,
                   done == n - 1 ? divisor : 0);
    }
  }
  reach(comm, 2 * k - 1, "AllReduce");
  for (int i = 1; i < n; ++i) {
    const int p = (me + i) % n;
    const size_t p0 = blocks.begin(p), p1 = blocks.begin(p + 1);
    const uint64_t theirs = comm->segmentOf(p).header()->copy.out.load(std::memory_order_relaxed);
    copyPeer(comm, p, theirs + p0 * tsize, out + p0 * tsize, (p1 - p0) * tsize, /*read=*/true,
             "AllReduce");
  }
  finish(comm, k, "AllReduce");
}

namespace {
// What a byte copied by cross-memory attach costs against a byte through the FIFOs (copied into
// a slot and out of it, on both cores at once): the kernel pins and unpins every page it copies
// (perf, 2 MiB AllGather: get_user_pages, follow_page_pte, unpin_user_pages and their locks take
// twice the cycles of the copy itself), so the single copy runs at about half the FIFO
// pipeline's pace. Measured on 2 ranks, 8 KiB-32 MiB, and 4 ranks on 2 cores, 32 KiB-32 MiB:
// the chain and the ring 1.7-3x faster at every size, in place and out of place.
constexpr double kCmaCopyCost = 2.0;
// The single-copy AllReduce (two kernel copies and one reduction against the ring's copy,
// reduce-and-copy, copy through the FIFOs). Measured on 2 ranks on 2026-11-24 at 0.78-0.86 of
// the ring's time per byte at 2-8 MiB; measured again on 2026-11-26 (docs/performance.md,
// "Single copy against the FIFO path, again"), the ring and the tree, several times faster since,
// take a half to a third of its time at 128 KiB-32 MiB, the kernel's page pinning being what the
// single copy pays on top of its copies. So, as for Broadcast and AllGather, the ring's bytes at
// kCmaCopyCost times their price: the tuner no longer picks it.
constexpr double kCmaAllReduceByteRatio = kCmaCopyCost;
constexpr double kCmaAllReduceSetupUs = 36.0;
// Fixed cost of a single-copy Broadcast / AllGather beyond its two hand-offs (a system call per
// peer, the page walk): forced against the chain at 2 KiB, 2 ranks, 1.50 against 0.15 us
// (docs/performance.md, "Single copy against the FIFO path, again").
constexpr double kCmaSetupUs = 1.35;

bool cmaRunsOn(OpKind kind, const Shape& s) {
  return oneNodeOnly(kind, s) && s.singleCopy;
}
// Publish the buffer, every peer says it has read; each step waits for every peer (the chain's
// root waits for nobody), so n - 1 wake-ups per step on a loaded node (measured at 4 ranks on 2
// cores: 4-5 us at 8 B where the chain takes 0.5 us).
double cmaHops(OpKind kind, const Shape& s, size_t) {
  return (kind == OpKind::kAllReduce ? 3.0 : 2.0) * (double(s.nranks) - 1);
}
// Broadcast / AllGather: the chain's and the ring's bytes at kCmaCopyCost times their price, so
// the tuner leaves them to the FIFOs (CHORUS_ALGO=cma still runs them).
double cmaBytes(OpKind kind, int n) {
  const double nn = double(n);
  if (kind == OpKind::kAllReduce) return kCmaAllReduceByteRatio * 2.0 * (nn - 1) / nn;
  return kCmaCopyCost * (kind == OpKind::kAllGather ? (nn - 1) / nn : 1.0);
}
// Every step waits for every rank to be scheduled, and half of them are not (measured at 4
// ranks on 2 cores, docs/performance.md: the chain and the ring beat it at 32 KiB, not from
// 128 KiB): each of its wake-ups counts twice.
double cmaWakeups(const Shape&) {
  return 2.0;
}
double cmaSetup(OpKind kind) {
  return kind == OpKind::kAllReduce ? kCmaAllReduceSetupUs : kCmaSetupUs;
}
}  // namespace

extern const AlgoDesc kCmaAlgo = {
    .name = "cma",
    .serves =
        kindBit(OpKind::kAllReduce) | kindBit(OpKind::kAllGather) | kindBit(OpKind::kBroadcast),
    .protos = kSimpleOnly,
    .runsOn = cmaRunsOn,
    .hops = cmaHops,
    .byteFactor = cmaBytes,
    .wakeups = cmaWakeups,
    .setupUs = cmaSetup,
    .run = entries({{OpKind::kAllReduce,
                     [](chorusComm* c, const OpDesc& op, const Work&) { cmaAllReduce(c, op); }},
                    {OpKind::kAllGather,
                     [](chorusComm* c, const OpDesc& op, const Work&) { cmaAllGather(c, op); }},
                    {OpKind::kBroadcast,
                     [](chorusComm* c, const OpDesc& op, const Work&) { cmaBroadcast(c, op); }}}),
    .createState = [](chorusComm*) -> AlgoState* { return new CmaState; },
};

}  // namespace chorus
