// RegisteredPool (registered_pool.h): blocks of chorusMemAlloc memory registered with a group's
// communicator, handed out as torch tensors and taken back when those tensors die.
#include "registered_pool.h"

#include <algorithm>
#include <utility>

#include "errors.h"

namespace chorus_torch {

namespace {
std::atomic<int64_t> gLiveBlocks{0};
}  // namespace

RegisteredBlock::RegisteredBlock(void* p, size_t n) : ptr(p), bytes(n) {
  gLiveBlocks.fetch_add(1, std::memory_order_relaxed);
}

RegisteredBlock::~RegisteredBlock() {
  // The communicator that registered it is destroyed first (the pool closes after it), or the
  // block outlived it in a tensor: either way it is no longer registered.
  chorusMemFree(ptr);
  gLiveBlocks.fetch_sub(1, std::memory_order_relaxed);
}

size_t RegisteredPool::rounded(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
}

int64_t RegisteredPool::liveBlocks() {
  return gLiveBlocks.load(std::memory_order_relaxed);
}

std::shared_ptr<RegisteredBlock> RegisteredPool::takeFree(size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  TORCH_CHECK(state_->open, "chorus registered memory: the process group is destroyed");
  auto it = state_->free.find(rounded(bytes));
  if (it == state_->free.end()) return nullptr;
  std::shared_ptr<RegisteredBlock> b = std::move(it->second);
  state_->free.erase(it);
  ++state_->reuses;
  return b;
}

std::shared_ptr<RegisteredBlock> RegisteredPool::allocateRegistered(chorusComm_t comm,
                                                                    size_t bytes) {
  const size_t n = rounded(bytes);
  void* p = nullptr;
  check(chorusMemAlloc(&p, n), nullptr, "registered memory (chorusMemAlloc)");
  auto block = std::make_shared<RegisteredBlock>(p, n);
  void* handle = nullptr;
  // Collective; the handle is not kept: the registration ends with the communicator.
  check(chorusCommRegister(comm, p, n, &handle), comm, "registered memory (chorusCommRegister)");
  std::lock_guard<std::mutex> lock(state_->mutex);
  ++state_->blocks;
  state_->bytes += int64_t(n);
  return block;
}

void RegisteredPool::putBack(std::shared_ptr<RegisteredBlock> block) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  --state_->reuses;  // taken, then not used
  if (state_->open) state_->free.emplace(block->bytes, std::move(block));
}

at::Tensor RegisteredPool::tensorOn(const std::shared_ptr<RegisteredBlock>& block, size_t bytes) {
  std::shared_ptr<State> state = state_;
  std::shared_ptr<RegisteredBlock> held = block;
  // The deleter runs where the storage's last reference goes (any thread, GIL or not); it only
  // takes the pool's lock. After close() the block is dropped, and freed with its last reference.
  auto back = [state, held](void*) mutable {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->open) state->free.emplace(held->bytes, std::move(held));
    held.reset();
  };
  return at::from_blob(block->ptr, {int64_t(bytes)}, back, at::TensorOptions().dtype(at::kByte));
}

void RegisteredPool::close() {
  std::multimap<size_t, std::shared_ptr<RegisteredBlock>> drop;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->open = false;
    drop.swap(state_->free);
  }
  // `drop` frees the free blocks here, outside the lock.
}

RegisteredPoolStats RegisteredPool::stats() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  RegisteredPoolStats s;
  s.blocks = state_->blocks;
  s.freeBlocks = int64_t(state_->free.size());
  s.bytes = state_->bytes;
  s.reuses = state_->reuses;
  s.open = state_->open;
  return s;
}

}  // namespace chorus_torch
