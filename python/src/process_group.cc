// ProcessGroupChorus (process_group.h): the group's life (its communicator made from the store or
// adopted, split, shrink, abort, shutdown), how an operation becomes Work on the engine, and the
// coalescing blocks. The operations themselves: collectives.cc and point_to_point.cc.
#include "process_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <vector>

#include "errors.h"
#include "timeouts.h"

namespace chorus_torch {

namespace {

// The unique id travels through the group's store: rank 0 sets, the others wait for it.
chorusComm_t initComm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout) {
  const std::string key = "chorus/unique_id";
  chorusUniqueId id;
  if (rank == 0) {
    check(chorusGetUniqueId(&id), nullptr, "init (chorusGetUniqueId)");
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> v = store->get(key);
    TORCH_CHECK(v.size() == sizeof(id.internal), "chorus init (rank ", rank,
                "): the store's unique id has ", v.size(), " bytes");
    memcpy(id.internal, v.data(), sizeof(id.internal));
  }
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.timeoutMs = timeoutMs(timeout);
  chorusComm_t comm = nullptr;
  check(chorusCommInitRankConfig(&comm, size, id, rank, &cfg), nullptr, "init");
  return comm;
}

int commRank(chorusComm_t comm) {
  int r = 0;
  check(chorusCommUserRank(comm, &r), comm, "chorusCommUserRank");
  return r;
}

int commSize(chorusComm_t comm) {
  int n = 0;
  check(chorusCommCount(comm, &n), comm, "chorusCommCount");
  return n;
}

}  // namespace

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : BackendBase(rank, size), store_(store) {
  start(initComm(store, rank, size, timeout), timeout);
}

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store,
                                       chorusComm_t comm, std::chrono::milliseconds timeout)
    : BackendBase(commRank(comm), commSize(comm)), store_(store) {
  start(comm, timeout);
}

void ProcessGroupChorus::start(chorusComm_t comm, std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  const char* a = getenv("CHORUS_TORCH_ASYNC");
  async_ = a != nullptr && atoi(a) != 0;
  engine_ = std::make_shared<Engine>(comm, async_);
  barrierToken_ = at::zeros({1}, at::kByte);
}

// destroy_process_group: the pending work runs, then the communicator goes (a departure, not a
// failure, for peers still finishing their last call).
void ProcessGroupChorus::shutdown() {
  if (destroyed_) return;
  engine_->stop();
  forgetGlobalRanks();
  if (engine_->comm() != nullptr) chorusCommDestroy(engine_->comm());
  pool_->close();  // after the communicator: its registrations went with it
  destroyed_ = true;
}

ProcessGroupChorus::~ProcessGroupChorus() {
  try {
    ProcessGroupChorus::shutdown();    // qualified: no virtual call from a destructor
  } catch (const std::exception& e) {  // a destructor must not throw
    std::fprintf(stderr, "chorus: destroying the process group (rank %d): %s\n", rank_, e.what());
  } catch (...) {
    std::fprintf(stderr, "chorus: destroying the process group (rank %d) failed\n", rank_);
  }
}

void ProcessGroupChorus::abortComm() {
  chorusComm_t comm = engine_->comm();
  if (comm == nullptr) return;
  forgetGlobalRanks();
  chorusCommAbort(comm);
  engine_->forgetComm();  // later calls fail on a null communicator; nothing destroys it again
  pool_->close();         // its registrations went with the communicator
}

// One request of registered memory (registered_pool.h): a free block of this size if this rank
// has one, then, in issue order, the agreement whether every rank has one; if not, every rank
// allocates and registers a new block (and puts back the one it took).
at::Tensor ProcessGroupChorus::registeredEmpty(size_t bytes) {
  chorusComm_t comm = engine_->comm();
  TORCH_CHECK(comm != nullptr, "chorus registered memory (rank ", rank_,
              "): the group's communicator is aborted");
  auto block = std::make_shared<std::shared_ptr<RegisteredBlock>>(pool_->takeFree(bytes));
  std::shared_ptr<RegisteredPool> pool = pool_;
  auto work = makeWork(c10d::OpType::UNKNOWN, {});
  engine_->submit(work, [comm, pool, block, bytes] {
    int32_t missing = *block ? 0 : 1;
    check(chorusAllReduce(&missing, &missing, 1, chorusInt32, chorusMax, comm, nullptr), comm,
          "registered memory (agreement)");
    if (missing == 0) return;
    if (*block) pool->putBack(std::move(*block));
    *block = pool->allocateRegistered(comm, bytes);
  });
  try {
    work->wait();
  } catch (...) {
    if (*block) pool_->putBack(std::move(*block));  // still registered: keep it for later
    throw;
  }
  return pool_->tensorOn(*block, bytes);
}

c10::intrusive_ptr<ChorusWork> ProcessGroupChorus::makeWork(c10d::OpType type,
                                                            std::vector<at::Tensor> outputs,
                                                            bool deferred) {
  return c10::make_intrusive<ChorusWork>(rank_, type, std::move(outputs), engine_, deferred);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::collective(c10d::OpType type,
                                                              std::vector<at::Tensor> outputs,
                                                              std::function<void()> job,
                                                              std::chrono::milliseconds timeout) {
  ++seq_;
  auto work = makeWork(type, std::move(outputs));
  engine_->submit(work, withTimeout(std::move(job), engine_->comm(), timeout, timeout_));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::completed(c10d::OpType type,
                                                             std::vector<at::Tensor> outputs) {
  auto work = makeWork(type, std::move(outputs));
  work->complete(nullptr);
  return work;
}

#if CHORUS_TORCH_BACKEND_API
void ProcessGroupChorus::startCoalescing() {}

// The operations issued since startCoalescing: collectives ran (or were queued) as they came;
// the deferred point-to-point ones start now, as one group. The returned Work completes with
// that group.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::endCoalescing() {
  auto work = makeWork(c10d::OpType::COALESCED, {}, /*deferred=*/true);
  engine_->defer(work, [] {});
  engine_->flush();
  return work;
}

c10::intrusive_ptr<BackendBase::Options> ProcessGroupChorus::getBackendOptions() {
  return c10::make_intrusive<Options>("chorus", timeout_);
}

void ProcessGroupChorus::setTimeout(std::chrono::milliseconds timeout) {
  check(chorusCommSetTimeout(engine_->comm(), timeoutMs(timeout)), engine_->comm(), "setTimeout");
  timeout_ = timeout;
}

void ProcessGroupChorus::abort() {
  abortComm();
}

at::Tensor ProcessGroupChorus::allocateTensor(long size, at::TensorOptions options) {
  TORCH_CHECK(size >= 0, "chorus allocateTensor: negative size ", size);
  TORCH_CHECK(!options.has_device() || options.device().is_cpu(),
              "chorus allocateTensor: registered memory is CPU memory, not ", options.device());
  const at::ScalarType type = c10::typeMetaToScalarType(options.dtype());
  const size_t bytes = size_t(size) * c10::elementSize(type);
  return registeredEmpty(bytes).view(type);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupChorus::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  // Every rank of this group calls with the (sorted) ranks of its own new group; disjoint groups
  // have distinct smallest ranks, which serve as colours. Ranks in none get no group.
  const bool member = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : CHORUS_SPLIT_NOCOLOR;
  const std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.timeoutMs = timeoutMs(timeout);
  chorusComm_t newComm = nullptr;
  engine_->flush();
  check(chorusCommSplit(engine_->comm(), color, rank_, &newComm, &cfg), engine_->comm(), "split");
  ++splits_;
  if (newComm == nullptr) return nullptr;
  return c10::make_intrusive<ProcessGroupChorus>(store, newComm, timeout);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupChorus::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<Options>& optsOverride) {
  std::vector<int> excluded;
  for (int64_t r : ranksToExclude) {
    if (r < 0 || r >= size_)
      refuse(rank_, "shrink", "rank to exclude " + std::to_string(r) + " is not in the group");
    excluded.push_back(int(r));
  }
  const std::chrono::milliseconds timeout = optsOverride ? optsOverride->timeout : timeout_;
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.timeoutMs = timeoutMs(timeout);
  chorusComm_t newComm = nullptr;
  const int flags = (shrinkFlags & 1) ? CHORUS_SHRINK_ABORT : CHORUS_SHRINK_DEFAULT;
  check(chorusCommShrink(engine_->comm(), excluded.data(), int(excluded.size()), &newComm, &cfg,
                         flags),
        engine_->comm(), "shrink");
  TORCH_CHECK(newComm != nullptr, "chorus shrink (rank ", rank_,
              "): this rank is among the excluded ones");
  auto store =
      c10::make_intrusive<c10d::PrefixStore>("shrink" + std::to_string(++splits_) + "/", store_);
  return c10::make_intrusive<ProcessGroupChorus>(store, newComm, timeout);
}
#else
void ProcessGroupChorus::startCoalescing() {}

void ProcessGroupChorus::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  engine_->flush();
}
#endif

}  // namespace chorus_torch
