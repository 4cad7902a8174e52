// ProcessGroupChorus (process_group.h): argument checks, tensor <-> Chorus call mapping, the
// execution engine and the work objects.
#include "process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <vector>

namespace chorus_torch {

namespace {

// The global ranks (of torch's default group) of each group's communicator, for the error path:
// the library names ranks of the communicator, and a subgroup's rank 1 may be global rank 3.
std::mutex gGlobalRanksMu;
std::map<chorusComm_t, std::vector<int>> gGlobalRanks;

// "; the rank at fault is global rank G (group rank R)" once comm failed because of rank R, when
// the group's global ranks are known; else empty.
std::string faultSuffix(chorusComm_t comm) {
  int failed = -1;
  if (comm == nullptr || chorusCommGetFailedRank(comm, &failed) != chorusSuccess || failed < 0)
    return "";
  std::lock_guard<std::mutex> l(gGlobalRanksMu);
  auto it = gGlobalRanks.find(comm);
  if (it == gGlobalRanks.end() || size_t(failed) >= it->second.size()) return "";
  return "; the rank at fault is global rank " + std::to_string(it->second[size_t(failed)]) +
         " (group rank " + std::to_string(failed) + ")";
}

// Throws a c10::Error (RuntimeError in Python) for a failed Chorus call: the call, the result and
// the library's message, which names the rank and, for a failed peer, the peer and the cause (and
// that rank's global rank: chorus.torch.failed_rank reads it).
void check(chorusResult_t r, chorusComm_t comm, const char* what) {
  if (r == chorusSuccess) return;
  const std::string message = chorusGetLastError(comm);  // before anything else can replace it
  // A timeout says so in the words torch's own checks look for (" Timed out ").
  TORCH_CHECK(false, "chorus ", what, " failed: ", r == chorusTimeout ? "Timed out (" : "",
              chorusGetErrorString(r), r == chorusTimeout ? ")" : "", ": ", message,
              faultSuffix(comm));
}

[[noreturn]] void refuse(int rank, const char* op, const std::string& why) {
  TORCH_CHECK(false, "chorus ", op, " (rank ", rank, "): ", why);
}

chorusDataType_t reduceType(int rank, const char* op, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return chorusFloat32;
    case at::kDouble:
      return chorusFloat64;
    case at::kHalf:
      return chorusFloat16;
    case at::kBFloat16:
      return chorusBfloat16;
    case at::kChar:
      return chorusInt8;
    case at::kByte:
    case at::kBool:  // one byte, 0 or 1: SUM is MAX, PRODUCT is MIN (as NCCL maps them)
      return chorusUint8;
    case at::kInt:
      return chorusInt32;
    case at::kLong:
      return chorusInt64;
    default:
      refuse(rank, op,
             std::string("no reduction for dtype ") + c10::toString(t.scalar_type()) +
                 " (float32, float64, float16, bfloat16, int8, uint8, bool, int32, int64)");
  }
}

bool isBitwise(const c10d::ReduceOp& r) {
  return r.op_ == c10d::ReduceOp::BAND || r.op_ == c10d::ReduceOp::BOR ||
         r.op_ == c10d::ReduceOp::BXOR;
}

// The Chorus reduction for a torch ReduceOp on tensors of `t`'s dtype. PREMUL_SUM is a SUM of
// inputs the caller has multiplied first (premultiply); BAND/BOR/BXOR take bitwiseAllreduce.
chorusRedOp_t redOp(int rank, const char* op, const c10d::ReduceOp& r, const at::Tensor& t) {
  const bool isBool = t.scalar_type() == at::kBool;
  switch (r.op_) {
    case c10d::ReduceOp::SUM:
      return isBool ? chorusMax : chorusSum;
    case c10d::ReduceOp::PRODUCT:
      return isBool ? chorusMin : chorusProd;
    case c10d::ReduceOp::MIN:
      return chorusMin;
    case c10d::ReduceOp::MAX:
      return chorusMax;
    case c10d::ReduceOp::AVG:
      if (isBool) refuse(rank, op, "AVG of bool tensors is undefined (use SUM, MIN or MAX)");
      return chorusAvg;
    case c10d::ReduceOp::PREMUL_SUM:
      if (!at::isFloatingType(t.scalar_type()))
        refuse(rank, op, "PREMUL_SUM needs a floating-point tensor");
      if (!preMulFactor(r))
        refuse(rank, op, "PREMUL_SUM without its factor (make it with _make_nccl_premul_sum)");
      return chorusSum;
    default:
      refuse(rank, op, "unsupported ReduceOp");
  }
}

// PREMUL_SUM: `t` times the op's factor, in place.
void premultiply(const c10d::ReduceOp& r, at::Tensor& t) {
  if (r.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  const auto f = preMulFactor(r);
  if (f->tensor)
    t.mul_(f->tensor->to(t.scalar_type()));
  else
    t.mul_(*f->scalar);
}

// Every tensor must be a dense CPU tensor; one tensor per process (no multi-device lists).
void checkTensor(int rank, const char* op, const at::Tensor& t) {
  if (!t.defined()) refuse(rank, op, "undefined tensor");
  if (!t.device().is_cpu())
    refuse(rank, op,
           "only CPU tensors (device " + t.device().str() +
               "); use the nccl backend "
               "for CUDA tensors");
  if (t.layout() != at::kStrided)
    refuse(rank, op, "sparse tensors are not supported (call .to_dense() first)");
}

void checkSingle(int rank, const char* op, const std::vector<at::Tensor>& ts) {
  if (ts.size() != 1)
    refuse(rank, op, "expects one tensor per process, got " + std::to_string(ts.size()));
  checkTensor(rank, op, ts[0]);
}

// A contiguous tensor to run on: t itself, or a copy that copyBack() writes into t after.
struct Dense {
  at::Tensor user, work;
  explicit Dense(const at::Tensor& t) : user(t), work(t.is_contiguous() ? t : t.contiguous()) {}
  void copyBack() {
    if (!work.is_same(user)) user.copy_(work);
  }
};

size_t nbytes(const at::Tensor& t) {
  return size_t(t.numel()) * t.element_size();
}

char* bytesOf(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

// All tensors of a list share dtype and element count with `like`.
void checkList(int rank, const char* op, const std::vector<at::Tensor>& ts, const at::Tensor& like,
               size_t expected) {
  if (ts.size() != expected)
    refuse(rank, op,
           "expects a list of " + std::to_string(expected) + " tensors, got " +
               std::to_string(ts.size()));
  for (const auto& t : ts) {
    checkTensor(rank, op, t);
    if (t.scalar_type() != like.scalar_type() || t.numel() != like.numel())
      refuse(rank, op, "every tensor of the list must have the input's dtype and element count");
  }
}

// The tensor forms: `whole` (named wholeName) holds size x `block`, same dtype.
// all_gather_into_tensor: whole = output; reduce_scatter_tensor: whole = input.
void checkWholeOfBlocks(int rank, int size, const char* op, const at::Tensor& whole,
                        const char* wholeName, const at::Tensor& block) {
  checkTensor(rank, op, whole);
  checkTensor(rank, op, block);
  if (whole.scalar_type() != block.scalar_type())
    refuse(rank, op, "output and input dtypes differ");
  if (whole.numel() != block.numel() * size)
    refuse(rank, op,
           std::string(wholeName) + " holds " + std::to_string(whole.numel()) +
               " elements, expected world size x " + std::to_string(block.numel()));
}

void checkGatherShapes(int rank, int size, const char* op, const at::Tensor& output,
                       const at::Tensor& input) {
  checkWholeOfBlocks(rank, size, op, output, "output", input);
}

void checkScatterShapes(int rank, int size, const char* op, const at::Tensor& output,
                        const at::Tensor& input) {
  checkWholeOfBlocks(rank, size, op, input, "input", output);
}

// A torch timeout as chorusConfig_t.timeoutMs: 0 (none) for zero or negative.
int timeoutMs(std::chrono::milliseconds t) {
  const int64_t ms = t.count();
  return ms <= 0 ? 0 : int(std::min<int64_t>(ms, 2000000000));
}

// One block each way per peer for the all-to-all family: `send` (sendBytes) goes to the peer,
// `recv` (recvBytes) comes from it. Empty blocks are skipped.
struct Block {
  const char* send;
  size_t sendBytes;
  char* recv;
  size_t recvBytes;
};

// Runs one grouped send and receive per peer; this rank's own block is copied (same size,
// checked when the call was issued).
void exchange(chorusComm_t comm, int me, const std::vector<Block>& blocks, const char* op) {
  check(chorusGroupStart(), comm, op);
  chorusResult_t first = chorusSuccess;
  for (int p = 0; p < int(blocks.size()); ++p) {
    const Block& b = blocks[size_t(p)];
    if (p == me) {
      if (b.sendBytes) memcpy(b.recv, b.send, b.sendBytes);
      continue;
    }
    chorusResult_t r = chorusSuccess;
    if (b.sendBytes) r = chorusSend(b.send, b.sendBytes, chorusInt8, p, comm, nullptr);
    if (r == chorusSuccess && b.recvBytes)
      r = chorusRecv(b.recv, b.recvBytes, chorusInt8, p, comm, nullptr);
    if (first == chorusSuccess) first = r;
  }
  const chorusResult_t end = chorusGroupEnd();
  check(first != chorusSuccess ? first : end, comm, op);
}

}  // namespace

// ------------------------------------------------------------------------------------------
// ChorusWork

ChorusWork::ChorusWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                       std::shared_ptr<Engine> engine, bool deferred)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      engine_(std::move(engine)),
      deferred_(deferred) {}

bool ChorusWork::isCompleted() {
  if (deferred_) engine_->flush();  // polling a deferred send/recv starts it
  return c10d::Work::isCompleted();
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  if (deferred_) engine_->flush();
  // A future's callback runs on the worker thread; when it waits for a later operation (DDP's
  // PowerSGD hook does), the worker runs the queue up to it here instead of waiting for itself.
  if (engine_->onWorkerThread()) engine_->runQueuedUntil([this] { return isDone(); });
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> ChorusWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  bool doneNow = false;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(futureMutex_);
    if (future_) return future_;
    future_ =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    fut = future_;
    doneNow = done_;
    err = error_;
  }
  if (doneNow) {  // completed before anyone asked: complete the future here
    if (err)
      fut->setError(err);
    else
      fut->markCompleted(c10::IValue(outputs_));
  }
  if (deferred_) engine_->flush();
  return fut;
}

void ChorusWork::complete(std::exception_ptr e) {
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  {
    std::lock_guard<std::mutex> lock(futureMutex_);
    done_ = true;
    error_ = e;
    fut = future_;
  }
  finish(e);
  // Callbacks (DDP's hooks) run here, with no lock of ours held.
  if (fut) {
    if (e)
      fut->setError(e);
    else
      fut->markCompleted(c10::IValue(outputs_));
  }
}

// ------------------------------------------------------------------------------------------
// Engine

Engine::Engine(chorusComm_t comm, bool async) : comm_(comm), async_(async) {
  if (async_) {
    worker_ = std::thread([this] { workerLoop(); });
    workerId_ = worker_.get_id();
  }
}

bool Engine::onWorkerThread() const {
  return async_ && std::this_thread::get_id() == workerId_;
}

void Engine::runQueuedUntil(const std::function<bool()>& done) {
  while (!done()) {
    Task t;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      flushLocked();
      if (queue_.empty()) return;  // not queued here: the base wait decides
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    run(t);
  }
}

Engine::~Engine() {
  stop();
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    flushLocked();
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Engine::run(Task& t) {
  std::exception_ptr err;
  try {
    if (t.grouped) check(chorusGroupStart(), comm_, "group");
    std::exception_ptr inner;
    for (auto& job : t.jobs) {
      try {
        job();
      } catch (...) {
        inner = std::current_exception();
        break;
      }
    }
    if (t.grouped) check(chorusGroupEnd(), comm_, "send/recv");
    if (inner) std::rethrow_exception(inner);
    for (auto& post : t.posts) post();
  } catch (...) {
    err = std::current_exception();
  }
  for (auto& w : t.works) w->complete(err);
}

void Engine::submit(const c10::intrusive_ptr<ChorusWork>& work, std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mutex_);
  TORCH_CHECK(!stopping_, "chorus: the process group is shut down");
  flushLocked();
  if (async_ && onWorkerThread()) {
    // Issued by a future's callback, which runs on the worker: it may wait for this operation
    // before it returns (PowerSGD's hook does). The worker runs what was queued before it, in
    // issue order, then this one, here.
    lock.unlock();
    runQueuedUntil([] { return false; });
    std::exception_ptr err;
    try {
      job();
    } catch (...) {
      err = std::current_exception();
    }
    work->complete(err);
    return;
  }
  if (!async_) {
    // Inline: run here, under the lock (one operation at a time, in issue order), with no task
    // to build (the common case's allocations are the work and the job only).
    std::exception_ptr err;
    try {
      job();
    } catch (...) {
      err = std::current_exception();
    }
    work->complete(err);
    return;
  }
  Task t;
  t.works.push_back(work);
  t.jobs.push_back(std::move(job));
  queue_.push_back(std::move(t));
  lock.unlock();
  cv_.notify_one();
}

void Engine::defer(const c10::intrusive_ptr<ChorusWork>& work, std::function<void()> job,
                   std::function<void()> post) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!stopping_, "chorus: the process group is shut down");
  deferred_.works.push_back(work);
  deferred_.jobs.push_back(std::move(job));
  if (post) deferred_.posts.push_back(std::move(post));
}

void Engine::flush() {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued = async_ && !deferred_.jobs.empty();
    flushLocked();
  }
  if (queued) cv_.notify_one();
}

void Engine::flushLocked() {
  if (deferred_.jobs.empty()) return;
  Task t = std::move(deferred_);
  deferred_ = Task{};
  t.grouped = true;
  if (async_)
    queue_.push_back(std::move(t));
  else
    run(t);
}

void Engine::workerLoop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, all done
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    run(t);
  }
}

// ------------------------------------------------------------------------------------------
// ProcessGroupChorus

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

// Runs `job` with the call's own timeout (opts.timeout), when it has one other than the group's.
std::function<void()> withTimeout(std::function<void()> job, chorusComm_t comm,
                                  std::chrono::milliseconds callTimeout,
                                  std::chrono::milliseconds groupTimeout) {
  if (callTimeout == c10d::kUnsetTimeout || callTimeout == groupTimeout) return job;
  const int callMs = timeoutMs(callTimeout), groupMs = timeoutMs(groupTimeout);
  return [job = std::move(job), comm, callMs, groupMs] {
    check(chorusCommSetTimeout(comm, callMs), comm, "timeout");
    struct Restore {
      chorusComm_t comm;
      int ms;
      ~Restore() { chorusCommSetTimeout(comm, ms); }
    } restore{comm, groupMs};
    job();
  };
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

void ProcessGroupChorus::setGlobalRanks(const std::vector<int>& ranks) {
  if (ranks.size() != size_t(size_)) return;
  std::lock_guard<std::mutex> l(gGlobalRanksMu);
  gGlobalRanks[engine_->comm()] = ranks;
}

void ProcessGroupChorus::forgetGlobalRanks() {
  std::lock_guard<std::mutex> l(gGlobalRanksMu);
  gGlobalRanks.erase(engine_->comm());
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

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  static constexpr const char* op = "all_gather_into_tensor_coalesced";
  if (outputs.size() != inputs.size()) refuse(rank_, op, "as many outputs as inputs expected");
  std::vector<std::shared_ptr<Dense>> outs;
  std::vector<at::Tensor> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkGatherShapes(rank_, size_, op, outputs[i], inputs[i]);
    ins.push_back(inputs[i].contiguous());
    outs.push_back(std::make_shared<Dense>(outputs[i]));
  }
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::COALESCED, outputs,
      [ins, outs, comm] {
        check(chorusGroupStart(), comm, op);
        chorusResult_t first = chorusSuccess;
        for (size_t i = 0; i < ins.size(); ++i) {
          const chorusResult_t r = chorusAllGather(ins[i].data_ptr(), outs[i]->work.data_ptr(),
                                                   nbytes(ins[i]), chorusInt8, comm, nullptr);
          if (first == chorusSuccess) first = r;
        }
        const chorusResult_t end = chorusGroupEnd();
        check(first != chorusSuccess ? first : end, comm, op);
        for (auto& o : outs) o->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* op = "reduce_scatter_tensor_coalesced";
  if (outputs.size() != inputs.size()) refuse(rank_, op, "as many outputs as inputs expected");
  if (isBitwise(opts.reduceOp)) refuse(rank_, op, "BAND, BOR and BXOR: use reduce_scatter_tensor");
  std::vector<std::shared_ptr<Dense>> outs;
  std::vector<at::Tensor> ins;
  std::vector<chorusDataType_t> types;
  chorusRedOp_t rop = chorusSum;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkScatterShapes(rank_, size_, op, outputs[i], inputs[i]);
    types.push_back(reduceType(rank_, op, outputs[i]));
    rop = redOp(rank_, op, opts.reduceOp, outputs[i]);
    at::Tensor in = inputs[i].contiguous();
    if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
      in = in.clone();
      premultiply(opts.reduceOp, in);
    }
    ins.push_back(in);
    outs.push_back(std::make_shared<Dense>(outputs[i]));
  }
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::COALESCED, outputs,
      [ins, outs, types, rop, comm] {
        check(chorusGroupStart(), comm, op);
        chorusResult_t first = chorusSuccess;
        for (size_t i = 0; i < ins.size(); ++i) {
          const chorusResult_t r =
              chorusReduceScatter(ins[i].data_ptr(), outs[i]->work.data_ptr(),
                                  size_t(outs[i]->work.numel()), types[i], rop, comm, nullptr);
          if (first == chorusSuccess) first = r;
        }
        const chorusResult_t end = chorusGroupEnd();
        check(first != chorusSuccess ? first : end, comm, op);
        for (auto& o : outs) o->copyBack();
      },
      opts.timeout);
}
#else
void ProcessGroupChorus::startCoalescing() {}

void ProcessGroupChorus::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  engine_->flush();
}
#endif

// Rank 0 waits (opts.timeout, else the group's) for every other rank to check in through the
// store, then releases them; a rank that does not arrive is named on rank 0 and, through the
// store, on every rank that did.
void ProcessGroupChorus::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const std::chrono::milliseconds timeout =
      opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const std::string base = "chorus/monitored_barrier/" + std::to_string(++monitoredSeq_) + "/";
  engine_->flush();
  if (rank_ != 0) {
    store_->set(base + std::to_string(rank_), std::vector<uint8_t>{1});
    // Rank 0 reports within its timeout of arriving: wait for that report twice as long (and 5 s
    // more) before naming rank 0 itself.
    const auto patience = timeout * 2 + std::chrono::milliseconds(5000);
    try {
      store_->wait({base + "result"}, patience);
    } catch (const std::exception&) {
      TORCH_CHECK(false, "Rank ", rank_, " successfully reached monitoredBarrier, but received ",
                  "errors while waiting for send/recv from rank 0: rank 0 gave no answer within ",
                  patience.count(), " ms (chorus monitored_barrier)");
    }
    const std::vector<uint8_t> v = store_->get(base + "result");
    const std::string result(v.begin(), v.end());
    TORCH_CHECK(result == "ok", "Rank ", rank_, " successfully reached monitoredBarrier, but ",
                "received errors while waiting for send/recv from rank 0. Please check rank 0 ",
                "logs for faulty rank: ", result, " (chorus monitored_barrier)");
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) missing.push_back(r);
  while (!missing.empty()) {
    std::vector<int> still;
    for (int r : missing)
      if (!store_->check({base + std::to_string(r)})) still.push_back(r);
    missing.swap(still);
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string result = "ok";
  if (!missing.empty()) {
    std::string names;
    const size_t shown = waitAllRanks ? missing.size() : 1;
    for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + std::to_string(missing[i]);
    // gloo's wording, which torch's tests and users' log scrapers look for.
    result = "Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) +
             " ms: Rank" + std::string(shown > 1 ? "s " : " ") + names +
             " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms";
  }
  store_->set(base + "result", std::vector<uint8_t>(result.begin(), result.end()));
  TORCH_CHECK(result == "ok", result, " (chorus monitored_barrier)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  checkSingle(rank_, "broadcast", tensors);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "broadcast", "root " + std::to_string(opts.rootRank) + " out of range");
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  const int root = int(opts.rootRank);
  return collective(
      c10d::OpType::BROADCAST, tensors,
      [d, comm, root] {
        check(chorusBroadcast(d->work.data_ptr(), d->work.data_ptr(), nbytes(d->work), chorusInt8,
                              root, comm, nullptr),
              comm, "broadcast");
        d->copyBack();
      },
      opts.timeout);
}

// BAND, BOR, BXOR (Chorus has no bitwise kernels): every rank's tensor is gathered and folded
// here, in rank order; `done` gets the result.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::bitwise(
    const char* op, c10d::OpType type, std::vector<at::Tensor> outputs, const at::Tensor& input,
    c10d::ReduceOp::RedOpType rop, std::chrono::milliseconds timeout,
    std::function<void(const at::Tensor&)> done) {
  if (at::isFloatingType(input.scalar_type()) || at::isComplexType(input.scalar_type()))
    refuse(rank_, op, "BAND, BOR and BXOR need an integer or bool tensor");
  at::Tensor in = input.contiguous();
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(
      type, std::move(outputs),
      [in, comm, n, rop, op, done] {
        at::Tensor all = at::empty({int64_t(n), in.numel()}, in.options());
        check(chorusAllGather(in.data_ptr(), all.data_ptr(), nbytes(in), chorusInt8, comm, nullptr),
              comm, op);
        at::Tensor acc = all[0].clone();
        for (int r = 1; r < n; ++r) {
          if (rop == c10d::ReduceOp::BAND)
            acc.bitwise_and_(all[r]);
          else if (rop == c10d::ReduceOp::BOR)
            acc.bitwise_or_(all[r]);
          else
            acc.bitwise_xor_(all[r]);
        }
        done(acc.view(in.sizes()));
      },
      timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  checkSingle(rank_, "all_reduce", tensors);
  if (isBitwise(opts.reduceOp)) {
    at::Tensor t = tensors[0];
    return bitwise("all_reduce", c10d::OpType::ALLREDUCE, tensors, t, opts.reduceOp.op_,
                   opts.timeout, [t](const at::Tensor& r) mutable { t.copy_(r); });
  }
  const chorusDataType_t type = reduceType(rank_, "all_reduce", tensors[0]);
  const chorusRedOp_t op = redOp(rank_, "all_reduce", opts.reduceOp, tensors[0]);
  chorusComm_t comm = engine_->comm();
  if (tensors[0].is_contiguous() && opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM) {
    // the common case: no copies, one shared_ptr less
    at::Tensor t = tensors[0];
    return collective(
        c10d::OpType::ALLREDUCE, tensors,
        [t, comm, type, op] {
          check(chorusAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type, op, comm,
                                nullptr),
                comm, "all_reduce");
        },
        opts.timeout);
  }
  auto d = std::make_shared<Dense>(tensors[0]);
  const c10d::ReduceOp rop = opts.reduceOp;
  return collective(
      c10d::OpType::ALLREDUCE, tensors,
      [d, comm, type, op, rop] {
        premultiply(rop, d->work);
        check(chorusAllReduce(d->work.data_ptr(), d->work.data_ptr(), size_t(d->work.numel()), type,
                              op, comm, nullptr),
              comm, "all_reduce");
        d->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<std::shared_ptr<Dense>> ds;
  std::vector<chorusDataType_t> types;
  for (auto& t : tensors) {
    checkTensor(rank_, "all_reduce_coalesced", t);
    types.push_back(reduceType(rank_, "all_reduce_coalesced", t));
    ds.push_back(std::make_shared<Dense>(t));
  }
  if (isBitwise(opts.reduceOp))
    refuse(rank_, "all_reduce_coalesced", "BAND, BOR and BXOR: use all_reduce per tensor");
  if (tensors.empty()) return completed(c10d::OpType::ALLREDUCE_COALESCED, tensors);
  const chorusRedOp_t op = redOp(rank_, "all_reduce_coalesced", opts.reduceOp, tensors[0]);
  chorusComm_t comm = engine_->comm();
  const c10d::ReduceOp rop = opts.reduceOp;
  return collective(
      c10d::OpType::ALLREDUCE_COALESCED, tensors,
      [ds, types, comm, op, rop] {
        for (auto& d : ds) premultiply(rop, d->work);
        check(chorusGroupStart(), comm, "all_reduce_coalesced");
        chorusResult_t first = chorusSuccess;
        for (size_t i = 0; i < ds.size(); ++i) {
          chorusResult_t r =
              chorusAllReduce(ds[i]->work.data_ptr(), ds[i]->work.data_ptr(),
                              size_t(ds[i]->work.numel()), types[i], op, comm, nullptr);
          if (first == chorusSuccess) first = r;
        }
        chorusResult_t end = chorusGroupEnd();
        check(first != chorusSuccess ? first : end, comm, "all_reduce_coalesced");
        for (auto& d : ds) d->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  checkSingle(rank_, "reduce", tensors);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "reduce", "root " + std::to_string(opts.rootRank) + " out of range");
  const int root = int(opts.rootRank);
  const bool isRoot = root == rank_;
  if (isBitwise(opts.reduceOp)) {
    at::Tensor t = tensors[0];
    return bitwise("reduce", c10d::OpType::REDUCE, tensors, t, opts.reduceOp.op_, opts.timeout,
                   [t, isRoot](const at::Tensor& r) mutable {
                     if (isRoot) t.copy_(r);
                   });
  }
  const chorusDataType_t type = reduceType(rank_, "reduce", tensors[0]);
  const chorusRedOp_t op = redOp(rank_, "reduce", opts.reduceOp, tensors[0]);
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  const c10d::ReduceOp rop = opts.reduceOp;
  return collective(
      c10d::OpType::REDUCE, tensors,
      [d, comm, type, op, root, isRoot, rop] {
        at::Tensor in = d->work;
        if (rop.op_ == c10d::ReduceOp::PREMUL_SUM) {  // a non-root's tensor is only an input
          in = isRoot ? d->work : d->work.clone();
          premultiply(rop, in);
        }
        check(chorusReduce(in.data_ptr(), d->work.data_ptr(), size_t(d->work.numel()), type, op,
                           root, comm, nullptr),
              comm, "reduce");
        if (isRoot) d->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkGatherShapes(rank_, size_, "all_gather_into_tensor", output, input);
  at::Tensor in = input.contiguous();
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::_ALLGATHER_BASE, {output},
      [in, out, comm] {
        check(chorusAllGather(in.data_ptr(), out->work.data_ptr(), nbytes(in), chorusInt8, comm,
                              nullptr),
              comm, "all_gather_into_tensor");
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  checkSingle(rank_, "all_gather", inputs);
  if (outputs.size() != 1) refuse(rank_, "all_gather", "expects one output list per process");
  checkList(rank_, "all_gather", outputs[0], inputs[0], size_t(size_));
  at::Tensor in = inputs[0].contiguous();
  std::vector<at::Tensor> outs = outputs[0];
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(
      c10d::OpType::ALLGATHER, outs,
      [in, outs, comm, n] {
        at::Tensor flat = at::empty({int64_t(n) * in.numel()}, in.options());
        check(
            chorusAllGather(in.data_ptr(), flat.data_ptr(), nbytes(in), chorusInt8, comm, nullptr),
            comm, "all_gather");
        for (int r = 0; r < n; ++r)
          outs[size_t(r)].copy_(
              flat.narrow(0, r * in.numel(), in.numel()).view(outs[size_t(r)].sizes()));
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  // Each input is gathered on its own, in order: every rank issues the same sequence.
  if (outputs.size() != size_t(size_))
    refuse(rank_, "all_gather_coalesced", "expects one output list per rank");
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size_; ++r) {
      if (outputs[size_t(r)].size() != inputs.size())
        refuse(rank_, "all_gather_coalesced", "output lists must match the input list");
      outs[0].push_back(outputs[size_t(r)][i]);
    }
    std::vector<at::Tensor> in{inputs[i]};
    works.push_back(allgather(outs, in, opts));
  }
  auto done = makeWork(c10d::OpType::ALLGATHER_COALESCED, {});
  engine_->submit(done, [works] {
    for (auto& w : works) w->wait();
  });
  return done;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkSingle(rank_, "gather", inputs);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "gather", "root " + std::to_string(opts.rootRank) + " out of range");
  const int root = int(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    if (outputs.size() != 1) refuse(rank_, "gather", "the root expects one output list");
    checkList(rank_, "gather", outputs[0], inputs[0], size_t(size_));
    outs = outputs[0];
  } else if (!outputs.empty() && !outputs[0].empty()) {
    refuse(rank_, "gather", "only the root passes an output list");
  }
  at::Tensor in = inputs[0].contiguous();
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(
      c10d::OpType::GATHER, outs,
      [in, outs, comm, n, root] {
        at::Tensor flat;
        if (!outs.empty()) flat = at::empty({int64_t(n) * in.numel()}, in.options());
        check(chorusGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, nbytes(in),
                           chorusInt8, root, comm, nullptr),
              comm, "gather");
        for (size_t r = 0; r < outs.size(); ++r)
          outs[r].copy_(flat.narrow(0, int64_t(r) * in.numel(), in.numel()).view(outs[r].sizes()));
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkSingle(rank_, "scatter", outputs);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "scatter", "root " + std::to_string(opts.rootRank) + " out of range");
  const int root = int(opts.rootRank);
  at::Tensor flat;
  if (rank_ == root) {
    if (inputs.size() != 1) refuse(rank_, "scatter", "the root expects one input list");
    checkList(rank_, "scatter", inputs[0], outputs[0], size_t(size_));
    std::vector<at::Tensor> parts;
    for (auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
    flat = at::cat(parts);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    refuse(rank_, "scatter", "only the root passes an input list");
  }
  auto out = std::make_shared<Dense>(outputs[0]);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::SCATTER, outputs,
      [flat, out, comm, root] {
        check(chorusScatter(flat.defined() ? flat.data_ptr() : nullptr, out->work.data_ptr(),
                            nbytes(out->work), chorusInt8, root, comm, nullptr),
              comm, "scatter");
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkSingle(rank_, "reduce_scatter", outputs);
  if (inputs.size() != 1) refuse(rank_, "reduce_scatter", "expects one input list per process");
  checkList(rank_, "reduce_scatter", inputs[0], outputs[0], size_t(size_));
  std::vector<at::Tensor> parts;
  for (auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(parts);
  if (isBitwise(opts.reduceOp)) {
    at::Tensor o = outputs[0];
    const int64_t me = rank_, each = o.numel();
    return bitwise("reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, flat, opts.reduceOp.op_,
                   opts.timeout, [o, me, each](const at::Tensor& r) mutable {
                     o.copy_(r.reshape({-1}).narrow(0, me * each, each).view(o.sizes()));
                   });
  }
  const chorusDataType_t type = reduceType(rank_, "reduce_scatter", outputs[0]);
  const chorusRedOp_t op = redOp(rank_, "reduce_scatter", opts.reduceOp, outputs[0]);
  premultiply(opts.reduceOp, flat);  // flat is our own copy
  auto out = std::make_shared<Dense>(outputs[0]);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::REDUCE_SCATTER, outputs,
      [flat, out, comm, type, op] {
        check(chorusReduceScatter(flat.data_ptr(), out->work.data_ptr(), size_t(out->work.numel()),
                                  type, op, comm, nullptr),
              comm, "reduce_scatter");
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* op = "reduce_scatter_tensor";
  checkScatterShapes(rank_, size_, op, output, input);
  if (isBitwise(opts.reduceOp)) {
    at::Tensor o = output;
    const int64_t me = rank_, each = o.numel();
    return bitwise(op, c10d::OpType::_REDUCE_SCATTER_BASE, {output}, input, opts.reduceOp.op_,
                   opts.timeout, [o, me, each](const at::Tensor& r) mutable {
                     o.copy_(r.reshape({-1}).narrow(0, me * each, each).view(o.sizes()));
                   });
  }
  const chorusDataType_t type = reduceType(rank_, op, output);
  const chorusRedOp_t rop = redOp(rank_, op, opts.reduceOp, output);
  at::Tensor in = input.contiguous();
  const c10d::ReduceOp premul = opts.reduceOp;
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::_REDUCE_SCATTER_BASE, {output},
      [in, out, comm, type, rop, premul]() mutable {
        if (premul.op_ == c10d::ReduceOp::PREMUL_SUM) {  // the input is the caller's: scale a copy
          in = in.clone();
          premultiply(premul, in);
        }
        check(chorusReduceScatter(in.data_ptr(), out->work.data_ptr(), size_t(out->work.numel()),
                                  type, rop, comm, nullptr),
              comm, op);
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  static constexpr const char* op = "all_to_all_single";
  checkTensor(rank_, op, output);
  checkTensor(rank_, op, input);
  if (output.scalar_type() != input.scalar_type())
    refuse(rank_, op, "output and input dtypes differ");
  at::Tensor in = input.contiguous();
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  const int n = size_, me = rank_;
  if (outputSplits.empty() && inputSplits.empty()) {
    if (in.numel() != output.numel() || in.numel() % n != 0)
      refuse(rank_, op,
             "input and output must hold the same number of elements, a multiple of "
             "the world size");
    return collective(
        c10d::OpType::ALLTOALL_BASE, {output},
        [in, out, comm, n] {
          check(chorusAlltoAll(in.data_ptr(), out->work.data_ptr(), nbytes(in) / size_t(n),
                               chorusInt8, comm, nullptr),
                comm, op);
          out->copyBack();
        },
        opts.timeout);
  }
  // Uneven splits, counted in rows of dimension 0: one send and one receive per peer, grouped.
  auto offsets = [&](std::vector<int64_t> splits, const at::Tensor& t, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      if (rows % n != 0) refuse(me, op, std::string(which) + " rows not divisible by world size");
      splits.assign(size_t(n), rows / n);
    }
    if (splits.size() != size_t(n))
      refuse(me, op, std::string(which) + " split sizes must have world size entries");
    int64_t sum = 0;
    for (int64_t s : splits) {
      if (s < 0) refuse(me, op, std::string(which) + " split sizes must be >= 0");
      sum += s;
    }
    if (sum != rows)
      refuse(me, op,
             std::string(which) + " split sizes add up to " + std::to_string(sum) +
                 ", the tensor has " + std::to_string(rows) + " rows");
    const size_t rowBytes = rows ? nbytes(t) / size_t(rows) : 0;
    std::vector<size_t> off(size_t(n) + 1, 0);
    for (int p = 0; p < n; ++p)
      off[size_t(p) + 1] = off[size_t(p)] + size_t(splits[size_t(p)]) * rowBytes;
    return off;
  };
  if (in.dim() > 1 && output.dim() > 1 &&
      in.numel() / std::max<int64_t>(1, in.size(0)) !=
          output.numel() / std::max<int64_t>(1, output.size(0)))
    refuse(rank_, op, "input and output rows differ in size");
  const std::vector<size_t> sendOff = offsets(inputSplits, in, "input");
  const std::vector<size_t> recvOff = offsets(outputSplits, output, "output");
  if (sendOff[size_t(me) + 1] - sendOff[size_t(me)] !=
      recvOff[size_t(me) + 1] - recvOff[size_t(me)])
    refuse(me, op, "the split sizes for itself differ between input and output");
  return collective(
      c10d::OpType::ALLTOALL_BASE, {output},
      [in, out, comm, n, me, sendOff, recvOff] {
        std::vector<Block> blocks(static_cast<size_t>(n));
        for (size_t p = 0; p < size_t(n); ++p)
          blocks[p] = {bytesOf(in) + sendOff[p], sendOff[p + 1] - sendOff[p],
                       bytesOf(out->work) + recvOff[p], recvOff[p + 1] - recvOff[p]};
        exchange(comm, me, blocks, op);
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  static constexpr const char* op = "all_to_all";
  if (outputs.size() != size_t(size_) || inputs.size() != size_t(size_))
    refuse(rank_, op, "expects world size input and output tensors");
  std::vector<at::Tensor> ins;
  std::vector<std::shared_ptr<Dense>> outs;
  for (int p = 0; p < size_; ++p) {
    checkTensor(rank_, op, inputs[size_t(p)]);
    checkTensor(rank_, op, outputs[size_t(p)]);
    if (inputs[size_t(p)].scalar_type() != outputs[size_t(p)].scalar_type())
      refuse(rank_, op, "output and input dtypes differ");
    ins.push_back(inputs[size_t(p)].contiguous());
    outs.push_back(std::make_shared<Dense>(outputs[size_t(p)]));
  }
  if (nbytes(ins[size_t(rank_)]) != nbytes(outs[size_t(rank_)]->work))
    refuse(rank_, op, "this rank's own input and output sizes differ");
  chorusComm_t comm = engine_->comm();
  const int n = size_, me = rank_;
  return collective(
      c10d::OpType::ALLTOALL, outputs,
      [ins, outs, comm, n, me] {
        std::vector<Block> blocks(static_cast<size_t>(n));
        for (size_t p = 0; p < size_t(n); ++p)
          blocks[p] = {bytesOf(ins[p]), nbytes(ins[p]), bytesOf(outs[p]->work),
                       nbytes(outs[p]->work)};
        exchange(comm, me, blocks, op);
        for (auto& o : outs) o->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors,
                                                        int dstRank, int /*tag*/) {
  checkSingle(rank_, "send", tensors);
  if (dstRank < 0 || dstRank >= size_ || dstRank == rank_)
    refuse(rank_, "send", "destination " + std::to_string(dstRank) + " is not another rank");
  at::Tensor t = tensors[0].contiguous();
  chorusComm_t comm = engine_->comm();
  auto work = makeWork(c10d::OpType::SEND, tensors, /*deferred=*/true);
  engine_->defer(work, [t, comm, dstRank] {
    if (nbytes(t))
      check(chorusSend(t.data_ptr(), nbytes(t), chorusInt8, dstRank, comm, nullptr), comm, "send");
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors,
                                                        int srcRank, int /*tag*/) {
  checkSingle(rank_, "recv", tensors);
  if (srcRank < 0 || srcRank >= size_ || srcRank == rank_)
    refuse(rank_, "recv", "source " + std::to_string(srcRank) + " is not another rank");
  // A non-contiguous destination is filled from a contiguous copy once the group has ended.
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  auto work = makeWork(c10d::OpType::RECV, tensors, /*deferred=*/true);
  std::function<void()> post;
  if (!d->work.is_same(d->user)) post = [d] { d->copyBack(); };
  engine_->defer(
      work,
      [d, comm, srcRank] {
        if (nbytes(d->work))
          check(chorusRecv(d->work.data_ptr(), nbytes(d->work), chorusInt8, srcRank, comm, nullptr),
                comm, "recv");
      },
      std::move(post));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& /*t*/,
                                                                 int /*tag*/) {
  refuse(rank_, "recv", "receiving from any source is not supported; name the source rank");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  at::Tensor t = barrierToken_;
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::BARRIER, {},
      [t, comm] {
        check(chorusAllReduce(t.data_ptr(), t.data_ptr(), 1, chorusUint8, chorusMax, comm, nullptr),
              comm, "barrier");
      },
      opts.timeout);
}

}  // namespace chorus_torch
