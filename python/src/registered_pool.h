// RegisteredPool: torch CPU tensors in Chorus registered memory for one chorus process group
// (chorus.torch.registered_empty, and FSDP2's communication buffers through
// chorus.torch.FSDPAllGather / FSDPReduceScatter). A collective whose buffers all come from the
// pools of its group's ranks runs zero-copy (src/algo/zerocopy.cc).
//
// Blocks are chorusMemAlloc memory registered with the group's communicator. Registration and
// deregistration are collective (every rank, same order), while a tensor dies whenever its last
// reference goes (on any thread, at a time that may differ between ranks), so the pool never
// deregisters a block while the group lives: a tensor's death returns its block to the pool's
// free list, and a later request of the same (page-rounded) size reuses it. Every request is
// collective: the ranks agree (a 4-byte MAX all-reduce) whether any of them lacks a free block of
// that size; if one does, every rank allocates and registers a new one, so the registrations stay
// in the same order everywhere. The pool grows to the most buffers of each size alive at once
// and no further.
//
// When the group is destroyed (destroy_process_group, or the backend's destructor) the
// communicator goes, which releases every registration with it, and the pool closes: free blocks
// are freed now, blocks still held by tensors when those tensors die (they stay valid as
// ordinary memory).
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "chorus/chorus.h"

namespace chorus_torch {

// One chorusMemAlloc block; freed with the last reference (the pool's or a tensor's).
struct RegisteredBlock {
  RegisteredBlock(void* p, size_t n);
  ~RegisteredBlock();
  RegisteredBlock(const RegisteredBlock&) = delete;
  RegisteredBlock& operator=(const RegisteredBlock&) = delete;
  void* ptr;
  size_t bytes;
};

// What a pool holds, for tests and users (chorus.torch.registered_pool_stats).
struct RegisteredPoolStats {
  int64_t blocks = 0;      // blocks made, each registered once (chorusCommRegister)
  int64_t freeBlocks = 0;  // on the free list now
  int64_t bytes = 0;       // of all blocks made
  int64_t reuses = 0;      // requests served from the free list
  bool open = true;        // false once the group is destroyed
};

class RegisteredPool {
 public:
  // Blocks are rounded up to this (chorusMemAlloc's page alignment): a size class.
  static constexpr size_t kGranule = 4096;

  // Step 1 of a request: a free block of `bytes` (rounded), taken off the free list, or null.
  std::shared_ptr<RegisteredBlock> takeFree(size_t bytes);
  // Step 3: a new block of `bytes` (rounded) registered with `comm` (collective).
  std::shared_ptr<RegisteredBlock> allocateRegistered(chorusComm_t comm, size_t bytes);
  // Puts a block back on the free list (a request that another rank could not serve).
  void putBack(std::shared_ptr<RegisteredBlock> block);
  // A 1-D uint8 tensor of `bytes` on `block`; its death returns the block to this pool.
  at::Tensor tensorOn(const std::shared_ptr<RegisteredBlock>& block, size_t bytes);
  // The group is gone (its communicator destroyed): free blocks are freed now, blocks in use when
  // their tensors die.
  void close();
  RegisteredPoolStats stats();

  static size_t rounded(size_t bytes);
  // chorusMemAlloc blocks of every pool not yet freed (tests: nothing leaks after destroy).
  static int64_t liveBlocks();

 private:
  struct State {
    std::mutex mutex;  // taken by requests and by tensor deaths (any thread)
    bool open = true;
    std::multimap<size_t, std::shared_ptr<RegisteredBlock>> free;  // by rounded size
    int64_t blocks = 0, bytes = 0, reuses = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace chorus_torch
