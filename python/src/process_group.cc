// ProcessGroupChorus (process_group.h): the group's life (its communicator made from the store or
// adopted, split, shrink, abort, shutdown), how an operation becomes Work on the engine, and the
// coalescing blocks. The operations themselves: collectives.cc and point_to_point.cc.
#include "process_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

ProcessGroupChorus::~ProcessGroupChorus() {
  if (destroyed_) return;
  engine_->stop();
  forgetGlobalRanks();
  if (engine_->comm() != nullptr) chorusCommDestroy(engine_->comm());
}

void ProcessGroupChorus::abortComm() {
  chorusComm_t comm = engine_->comm();
  if (comm == nullptr) return;
  forgetGlobalRanks();
  chorusCommAbort(comm);
  engine_->forgetComm();  // later calls fail on a null communicator; nothing destroys it again
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

// destroy_process_group: the pending work runs, then the communicator goes (a departure, not a
// failure, for peers still finishing their last call).
void ProcessGroupChorus::shutdown() {
  if (destroyed_) return;
  engine_->stop();
  forgetGlobalRanks();
  if (engine_->comm() != nullptr) chorusCommDestroy(engine_->comm());
  destroyed_ = true;
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

void ProcessGroupChorus::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work> >& /*reqs*/) {
  engine_->flush();
}
#endif

}  // namespace chorus_torch
