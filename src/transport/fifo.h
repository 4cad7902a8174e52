// The connection between two ranks: a FIFO of kNSteps slots living in the receiver's memory
// (a shared-memory segment, or plain memory when both ranks are threads of one process).
//
// Slot s of step k is k % kNSteps. Each slot starts with a header {seq, bytes} followed by the
// data, so a small message and its flag share one cache line. Invariants: the sender alone
// writes slots and the receiver alone writes `head` (steps consumed so far); the sender fills a
// slot only while tail - head < kNSteps, writes the data and `bytes`, then publishes
// seq = step + 1 with release order; the receiver waits for seq == its step + 1 (acquire), reads,
// then publishes head with release once it no longer reads the slot. Sequence numbers only
// grow, so a slot's previous content (seq - kNSteps) is never mistaken for new data.
// Bit 63 of `bytes` (kSlotMessageStart) marks the first slot of a chorusSend/chorusRecvAny
// message (not a collective's data): an any-source receive matches only such a slot
// (algo/p2p.cc); the other bits are the slot's size.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/tsc.h"

namespace chorus {

constexpr int kNSteps = 8;
constexpr size_t kSlotHeaderBytes = 16;  // data starts here within a slot
// Where a slot sits in memory: slot i's header kSlotHeaderOffset + i * slotStride bytes into
// the FIFO's slots (which start on a page: FIFOs are page multiples in page-aligned memory), its
// data 16 bytes after it, and 16 bytes between its data's end and the next header. A copy or a
// reduction between a user buffer and a slot stalls when a load's address matches, in its low 12
// bits and within the 32 bytes a vector covers, a store still in flight to the other (4K
// aliasing: the CPU holds the load back as if it read the store's bytes). Measured on 2 ranks,
// ring AllReduce of 8 MiB: with the user's buffer 1-31 bytes on either side of the slot data (mod
// 4 KiB), 3x slower; 0 or at least 32 apart, full speed. A Simple slot holds whole pages, so
// slot i's data lies 2080 + 32 i bytes into a page (2080-2304 for the 8 slots): every user
// buffer aligned to 32 bytes (pages, tensors), or 16 bytes past a page (a large malloc), is at
// least 32 bytes from it. With slots 64 bytes apart and the first at the FIFO's start (until
// 2026-12-04), one slot of each FIFO sat 16 bytes past a page: a page-aligned 8 MiB ran at 500
// or 850 us in place (680 or 1050 out of place), by the parity of the small calls made before
// it, which set the slot each chunk used. Whole pages per slot (2026-12-04, the first fix) cost
// a page per slot: a third more /dev/shm at 16 KiB slots, which a container's 64 MiB felt.
constexpr size_t kSlotPage = 4096;
constexpr size_t kSlotHeaderOffset = 2064;
constexpr size_t kSlotGap = kSlotHeaderBytes + 16;  // header + 16 spare: slot i's data 32 i later
constexpr uint64_t kSlotMessageStart = uint64_t(1) << 63;  // in SlotHeader::bytes (see above)
// Bits 40-62 of the size word: where the sender timed its post (SendConn::post with a stamp),
// the low 23 bits of its time-stamp counter (base/tsc.h; 3 ms at 2.6 GHz), else 0. Bits 0-39:
// the payload size.
constexpr int kSlotStampShift = 40;
constexpr uint64_t kSlotStampMask = (uint64_t(1) << 23) - 1;
constexpr uint64_t kSlotSizeMask = (uint64_t(1) << kSlotStampShift) - 1;
// The payload size a slot's size word holds (without the marker and the stamp).
constexpr uint64_t slotBytesOf(uint64_t word) {
  return word & kSlotSizeMask;
}

struct SlotHeader {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> bytes;
};

// A rank that has stopped polling sleeps on its doorbell (a futex word in its segment header)
// after counting itself in `sleeping`; whoever publishes something it may wait for (data into
// one of its FIFOs, a free slot in a FIFO it sends to) rings the bell when `sleeping` is not 0.
// One doorbell per rank serves every FIFO and channel, so a wait for any of several events
// (a tree's children and parent) can sleep too.
struct Doorbell {
  alignas(64) std::atomic<uint32_t> sleeping;  // armed waiters of this rank
  std::atomic<uint32_t> bell;
  // 1: the owner runs a process-wide barrier across processes (membarrier's global expedited
  // command) each time a wait arms, so that a publisher whose process is registered for it
  // needs no fence of its own (postFence). Set by the owner when it makes its segment, before
  // any peer can see it; 0 where membarrier is missing or the node has more ranks than cores
  // (whose waits sleep often: a barrier each would cost more than the fences it saves).
  std::atomic<uint32_t> heavyArm;
};

// Whether this process is registered for membarrier's global expedited barrier
// (transport/doorbell.cc registerHeavyBarrier: once, before any communicator runs).
bool heavyBarrierRegistered();

// Orders the caller's publication (a seq or head store) before its load of `sleeping` in d:
// either a sleeper sees the publication when it re-checks, or the publisher sees it armed. A
// full fence waits for the publication's store to leave the core (with the line held by the
// peer, one crossing: a sixth of a short Broadcast). Where the sleeper runs the heavy barrier
// when it arms (d->heavyArm) and this process is registered for it, a compiler barrier does:
// the heavy barrier makes every registered thread pass a full barrier, so the publisher's
// store is visible by the sleeper's re-check unless its load came after that barrier and saw
// the sleeper armed (the asymmetric Dekker of membarrier(2)).
// `light`: every sleeper concerned arms with the heavy barrier and this process is registered.
inline void orderPost(bool light) {
  if (light)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void postFence(const Doorbell* d) {
  orderPost(d->heavyArm.load(std::memory_order_relaxed) != 0 && heavyBarrierRegistered());
}

// Wakes the doorbell's sleepers, if any (postFence orders the caller's publication first; the
// sleeper orders its `sleeping` increment before it reads the bell and re-checks its condition,
// transport/doorbell.cc).
void ringDoorbell(Doorbell* d);
inline void notifySleeper(Doorbell* d) {
  if (d == nullptr) return;
  postFence(d);
  if (d->sleeping.load(std::memory_order_relaxed) != 0) ringDoorbell(d);
}

struct FifoCtrl {
  alignas(64) std::atomic<uint64_t> head;
  // 1: the receiver asks the sender to write its Simple slots with streaming stores, for calls
  // that let the link choose (RecvConn::noteHandoff). Its own line, written only when the wish
  // changes, so that the sender's read at the start of a call hits its own cache.
  alignas(64) std::atomic<uint32_t> streamWish;
};

// How a receiver judges a link from the sender's time stamps (RecvConn::noteHandoff): a
// hand-off it waited for takes `fastCounts` counts or fewer where the two cores share a cache.
// Measured on this project's VM (2 ranks, ReduceScatter and AllReduce of 512 KiB-8 MiB, the
// stamp taken once the data's stores were visible: base/tsc.h tscAfterStores): 45-130 ns where
// they share one (a quarter of the hand-offs over 80-110), and where they do not a median of
// 230-280 ns with a tenth to a quarter of them under 130. Hence the median of a window against
// kFastNs.
struct HandoffJudge {
  static constexpr double kFastNs = 160;
  // For a counter of `countsPerNs` (base/tsc.h tscPerNs).
  static HandoffJudge forCounter(double countsPerNs) {
    return HandoffJudge{uint64_t(kFastNs * countsPerNs)};
  }
  uint64_t fastCounts = 0;                    // 0: the link's hand-offs are not timed
  static constexpr uint32_t kWindow = 16;     // hand-offs judged at a time
  static constexpr uint32_t kFastNeeded = 8;  // of them as fast as fastCounts: a shared cache
};

// The distance between two slots' headers (slotBytes is a multiple of 64).
inline size_t slotStride(size_t slotBytes) {
  return slotBytes + kSlotGap;
}
// The bytes a FIFO's kNSteps slots take, from the page they start on: whole pages.
inline size_t fifoSlotsBytes(size_t slotBytes) {
  return (kSlotHeaderOffset + size_t(kNSteps) * slotStride(slotBytes) + kSlotPage - 1) / kSlotPage *
         kSlotPage;
}
// Slot s's header in a FIFO whose slots start at `slots` (page-aligned).
inline char* slotAt(char* slots, uint64_t s, size_t slotBytes) {
  return slots + kSlotHeaderOffset + (s % kNSteps) * slotStride(slotBytes);
}

// The sender's view of a peer's FIFO.
struct SendConn {
  FifoCtrl* ctrl = nullptr;
  char* slots = nullptr;
  size_t slotBytes = 0;
  uint64_t tail = 0;        // steps posted so far
  uint64_t cachedHead = 0;  // last value read from ctrl->head
  int peer = -1;
  int wakeFd = -1;            // eventfd of a proxy that drains this FIFO (TCP), else -1
  Doorbell* wakee = nullptr;  // the receiving rank's doorbell (same node), else nullptr

  bool slotFree() {
    if (tail - cachedHead < uint64_t(kNSteps)) return true;
    cachedHead = ctrl->head.load(std::memory_order_acquire);
    return tail - cachedHead < uint64_t(kNSteps);
  }
  SlotHeader* header() const {
    return reinterpret_cast<SlotHeader*>(slotAt(slots, tail, slotBytes));
  }
  char* slot() const { return reinterpret_cast<char*>(header()) + kSlotHeaderBytes; }
  // `bytes` may carry kSlotMessageStart. `stamp`: the time-stamp counter's low bits go with it
  // (a receiver that waited for this post then knows how long it took to see it).
  void post(uint64_t bytes, bool stamp = false) {
    SlotHeader* h = header();
    if (stamp) bytes |= (tscAfterStores() & kSlotStampMask) << kSlotStampShift;
    h->bytes.store(bytes, std::memory_order_relaxed);
    h->seq.store(++tail, std::memory_order_release);
    notify();
  }
  // Whether the receiver asks for streamed slots (RecvConn::noteHandoff).
  bool streamWished() const { return ctrl->streamWish.load(std::memory_order_relaxed) != 0; }
  // After a post: wakes a receiver asleep on this FIFO, or the proxy that drains it.
  void notify() {
    notifySleeper(wakee);
    if (wakeFd >= 0) wakeProxy();
  }
  void wakeProxy() const;
};

// The receiver's view of its own FIFO from one peer.
struct RecvConn {
  FifoCtrl* ctrl = nullptr;
  char* slots = nullptr;
  size_t slotBytes = 0;
  uint64_t head = 0;  // steps consumed so far
  int peer = -1;
  Doorbell* wakee = nullptr;  // the sending rank's doorbell (same node), else nullptr
  // The sender is a rank of this machine writing straight into the slots (shared memory or
  // threads of one process), so its time stamps are comparable with this rank's.
  bool timed = false;
  uint32_t judged = 0, fast = 0;  // hand-offs of the current window, and how many were fast

  SlotHeader* header() const {
    return reinterpret_cast<SlotHeader*>(slotAt(slots, head, slotBytes));
  }
  bool dataReady() const { return header()->seq.load(std::memory_order_acquire) == head + 1; }
  const char* slot() const { return reinterpret_cast<const char*>(header()) + kSlotHeaderBytes; }
  size_t slotSize() const {
    return size_t(slotBytesOf(header()->bytes.load(std::memory_order_relaxed)));
  }
  // The header's size word with its marker bit (not the stamp), for a proxy that forwards it.
  uint64_t slotWord() const {
    return header()->bytes.load(std::memory_order_relaxed) & (kSlotSizeMask | kSlotMessageStart);
  }
  // After a wait that spun until the slot was ready (dataReady): how long the sender's post took
  // to reach this core, from its stamp. A window of kWindow such hand-offs with fewer than
  // kFastNeeded under judge.fastCounts says the two cores share no cache: the receiver then
  // wishes streamed slots (FifoCtrl::streamWish), and cached ones again when a window is fast.
  // A delta that is negative (counters out of step) or large (a wait that began after the post)
  // counts as slow. Nothing where the sender's stamps are not comparable (!timed).
  void noteHandoff(const HandoffJudge& judge) {
    if (!timed) return;
    const uint64_t word = header()->bytes.load(std::memory_order_relaxed);
    const uint64_t stamp = (word >> kSlotStampShift) & kSlotStampMask;
    if (stamp == 0) return;  // not stamped
    const uint64_t delta = (tscNow() - stamp) & kSlotStampMask;
    fast += delta <= judge.fastCounts ? 1 : 0;
    if (++judged < HandoffJudge::kWindow) return;
    const uint32_t w = fast < HandoffJudge::kFastNeeded ? 1 : 0;
    judged = fast = 0;
    if (ctrl->streamWish.load(std::memory_order_relaxed) != w)
      ctrl->streamWish.store(w, std::memory_order_relaxed);
  }
  // Whether the slot (dataReady) starts a point-to-point message.
  bool slotStartsMessage() const {
    return (header()->bytes.load(std::memory_order_relaxed) & kSlotMessageStart) != 0;
  }
  void release() {
    ++head;
    ctrl->head.store(head, std::memory_order_release);
    notifySleeper(wakee);
    // The next slot's header (and a small message with it): a sender running ahead has written
    // it already, and the line then crosses from its core while this rank finishes the call.
    const char* next = reinterpret_cast<const char*>(header());
    __builtin_prefetch(next);
    __builtin_prefetch(next + 64);
    __builtin_prefetch(next + 128);
  }
};

}  // namespace chorus
