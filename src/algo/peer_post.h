// What the collectives that reach into their peers' buffers share (single copy, algo/copy.cc;
// zero copy, algo/zerocopy.cc): each rank posts one block per call in its segment header
// (transport/segment.h: CopyPost, RegPost; words seq, done and quit), rings its peers, waits for
// theirs, and on a failure withdraws its buffers from same-process peers before it returns.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>

#include "base/clock.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "transport/doorbell.h"

namespace chorus {

inline bool samePid(const chorusComm* comm, int p) {
  return comm->peers[size_t(p)].pid == comm->peers[size_t(comm->rank)].pid;
}

// Wakes every same-node peer asleep on its doorbell, after this rank published its post.
inline void ringPeers(chorusComm* comm) {
  // One fence orders the publication before every `sleeping` load (transport/fifo.h postFence;
  // a compiler barrier where every same-node peer arms with the heavy barrier: lightPosts).
  orderPost(comm->lightPosts);
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    Doorbell* d = comm->doorbellOf(p);
    if (d->sleeping.load(std::memory_order_relaxed) != 0) ringDoorbell(d);
  }
}

// Waits until `ready(peer's post)` holds for every peer (Waiter: abort, death, timeout).
template <typename Post, typename Ready>
void waitAllPosts(chorusComm* comm, Post SegmentHeader::*post, const char* what, Ready ready) {
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    const Post& c = comm->segmentOf(p).header()->*post;
    if (!ready(c)) {
      Waiter w(comm, p, what, /*fifoWait=*/true);
      while (!ready(c)) w.pause();
    }
  }
}

// Threads of one process touch each other's buffers directly. A call that fails must not return
// while such a peer may still do so: the caller may free its buffers at once, and the peer would
// then fault instead of failing. Held for the whole of a call k: if it ends in a failure, this
// rank withdraws its buffers from call k (seq = k << 2 | `withdrawn`: a peer that has not yet
// looked at them falls back), says it touches nothing more of call k (quit = k), and waits (5 s
// at most; an error path) until every same-process peer that joined call k finished it (its
// done >= `finished`) or gave up on it. The withdrawal and the peer's publication are both
// sequentially consistent, then each reads the other's word: at least one of them sees the
// other's store (so a peer not seen joining saw the withdrawal).
template <typename Post>
class SameProcessAccess {
 public:
  SameProcessAccess(chorusComm* comm, Post SegmentHeader::*post, uint64_t k, uint64_t withdrawn,
                    uint64_t finished)
      : comm_(comm),
        post_(post),
        k_(k),
        withdrawn_(withdrawn),
        finished_(finished),
        exceptions_(std::uncaught_exceptions()) {}
  SameProcessAccess(const SameProcessAccess&) = delete;
  SameProcessAccess& operator=(const SameProcessAccess&) = delete;
  ~SameProcessAccess() {
    if (std::uncaught_exceptions() <= exceptions_) return;
    Post& mine = comm_->mySegment.header()->*post_;
    mine.seq.store(k_ << 2 | withdrawn_, std::memory_order_seq_cst);
    mine.quit.store(k_, std::memory_order_release);
    const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
    for (int p = 0; p < comm_->nranks; ++p) {
      if (p == comm_->rank || !samePid(comm_, p)) continue;
      const Post& h = comm_->segmentOf(p).header()->*post_;
      auto settled = [&] {
        return h.seq.load(std::memory_order_seq_cst) >> 2 < k_ ||
               h.done.load(std::memory_order_acquire) >= finished_ ||
               h.quit.load(std::memory_order_acquire) >= k_;
      };
      while (!settled() && Clock::now() < until) usleep(100);
    }
  }

 private:
  chorusComm* comm_;
  Post SegmentHeader::*post_;
  uint64_t k_, withdrawn_, finished_;
  int exceptions_;
};

}  // namespace chorus
