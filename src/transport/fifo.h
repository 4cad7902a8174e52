// The connection between two ranks: a FIFO of kNSteps slots living in the receiver's memory
// (a shared-memory segment, or plain memory when both ranks are threads of one process).
//
// Invariants: the sender alone writes `tail` (slots posted so far) and the receiver alone writes
// `head` (slots consumed so far); 0 <= tail - head <= kNSteps. Slot i of step s is
// s % kNSteps. The sender fills slot data and sizes[slot] before publishing tail with release
// order; the receiver reads them after an acquire load of tail, and publishes head with release
// once it no longer reads the slot. Counters only grow, so they never wrap in practice.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace chorus {

constexpr int kNSteps = 8;

struct FifoCtrl {
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> sizes[kNSteps];
};

// The sender's view of a peer's FIFO.
struct SendConn {
  FifoCtrl* ctrl = nullptr;
  char* data = nullptr;
  size_t slotBytes = 0;
  uint64_t tail = 0;  // our copy of ctrl->tail
  int peer = -1;

  bool slotFree() const {
    return tail - ctrl->head.load(std::memory_order_acquire) < uint64_t(kNSteps);
  }
  char* slot() const { return data + (tail % kNSteps) * slotBytes; }
  void post(size_t bytes) {
    ctrl->sizes[tail % kNSteps].store(bytes, std::memory_order_relaxed);
    ++tail;
    ctrl->tail.store(tail, std::memory_order_release);
  }
};

// The receiver's view of its own FIFO from one peer.
struct RecvConn {
  FifoCtrl* ctrl = nullptr;
  char* data = nullptr;
  size_t slotBytes = 0;
  uint64_t head = 0;  // our copy of ctrl->head
  int peer = -1;

  bool dataReady() const { return ctrl->tail.load(std::memory_order_acquire) > head; }
  const char* slot() const { return data + (head % kNSteps) * slotBytes; }
  size_t slotSize() const { return ctrl->sizes[head % kNSteps].load(std::memory_order_relaxed); }
  void release() {
    ++head;
    ctrl->head.store(head, std::memory_order_release);
  }
};

}  // namespace chorus
