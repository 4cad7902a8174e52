// ProcessGroupChorus (process_group.h): argument checks, tensor <-> Chorus call mapping, the
// execution engine and the work objects.
#include "process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace chorus_torch {

namespace {

// Throws a c10::Error (RuntimeError in Python) for a failed Chorus call: the call, the result and
// the library's message, which names the rank and, for a failed peer, the peer and the cause.
void check(chorusResult_t r, chorusComm_t comm, const char* what) {
  if (r == chorusSuccess) return;
  TORCH_CHECK(false, "chorus ", what, " failed: ", chorusGetErrorString(r), ": ",
              chorusGetLastError(comm));
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
      return chorusUint8;
    case at::kInt:
      return chorusInt32;
    case at::kLong:
      return chorusInt64;
    default:
      refuse(rank, op,
             std::string("no reduction for dtype ") + c10::toString(t.scalar_type()) +
                 " (float32, float64, float16, bfloat16, int8, uint8, int32, int64)");
  }
}

chorusRedOp_t redOp(int rank, const char* op, const c10d::ReduceOp& r) {
  switch (r.op_) {
    case c10d::ReduceOp::SUM:
      return chorusSum;
    case c10d::ReduceOp::PRODUCT:
      return chorusProd;
    case c10d::ReduceOp::MIN:
      return chorusMin;
    case c10d::ReduceOp::MAX:
      return chorusMax;
    case c10d::ReduceOp::AVG:
      return chorusAvg;
    default:
      refuse(rank, op,
             "unsupported ReduceOp (SUM, PRODUCT, MIN, MAX, AVG; not BAND, BOR, BXOR, "
             "PREMUL_SUM)");
  }
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
  if (async_) worker_ = std::thread([this] { workerLoop(); });
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
  Task t;
  t.works.push_back(work);
  t.jobs.push_back(std::move(job));
  std::unique_lock<std::mutex> lock(mutex_);
  TORCH_CHECK(!stopping_, "chorus: the process group is shut down");
  if (async_) {
    flushLocked();
    queue_.push_back(std::move(t));
    lock.unlock();
    cv_.notify_one();
    return;
  }
  flushLocked();
  run(t);  // under the lock: one operation at a time, in issue order
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

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  // The unique id travels through the group's store: rank 0 sets, the others wait for it.
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
  const int64_t ms = timeout.count();
  cfg.timeoutMs = ms <= 0 ? 0 : int(std::min<int64_t>(ms, 2000000000));
  chorusComm_t comm = nullptr;
  check(chorusCommInitRankConfig(&comm, size, id, rank, &cfg), nullptr, "init");
  const char* a = getenv("CHORUS_TORCH_ASYNC");
  async_ = a != nullptr && atoi(a) != 0;
  engine_ = std::make_shared<Engine>(comm, async_);
  barrierToken_ = at::zeros({1}, at::kByte);
}

ProcessGroupChorus::~ProcessGroupChorus() {
  engine_->stop();
  chorusCommDestroy(engine_->comm());
}

c10::intrusive_ptr<ChorusWork> ProcessGroupChorus::makeWork(c10d::OpType type,
                                                            std::vector<at::Tensor> outputs,
                                                            bool deferred) {
  return c10::make_intrusive<ChorusWork>(rank_, type, std::move(outputs), engine_, deferred);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::collective(c10d::OpType type,
                                                              std::vector<at::Tensor> outputs,
                                                              std::function<void()> job) {
  auto work = makeWork(type, std::move(outputs));
  engine_->submit(work, std::move(job));
  return work;
}

void ProcessGroupChorus::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  engine_->flush();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  checkSingle(rank_, "broadcast", tensors);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "broadcast", "root " + std::to_string(opts.rootRank) + " out of range");
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  const int root = int(opts.rootRank);
  return collective(c10d::OpType::BROADCAST, tensors, [d, comm, root] {
    check(chorusBroadcast(d->work.data_ptr(), d->work.data_ptr(), nbytes(d->work), chorusInt8, root,
                          comm, nullptr),
          comm, "broadcast");
    d->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  checkSingle(rank_, "all_reduce", tensors);
  const chorusDataType_t type = reduceType(rank_, "all_reduce", tensors[0]);
  const chorusRedOp_t op = redOp(rank_, "all_reduce", opts.reduceOp);
  chorusComm_t comm = engine_->comm();
  if (tensors[0].is_contiguous()) {  // the common case: no copies, one shared_ptr less
    at::Tensor t = tensors[0];
    return collective(c10d::OpType::ALLREDUCE, tensors, [t, comm, type, op] {
      check(chorusAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type, op, comm, nullptr),
            comm, "all_reduce");
    });
  }
  auto d = std::make_shared<Dense>(tensors[0]);
  return collective(c10d::OpType::ALLREDUCE, tensors, [d, comm, type, op] {
    check(chorusAllReduce(d->work.data_ptr(), d->work.data_ptr(), size_t(d->work.numel()), type, op,
                          comm, nullptr),
          comm, "all_reduce");
    d->copyBack();
  });
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
  const chorusRedOp_t op = redOp(rank_, "all_reduce_coalesced", opts.reduceOp);
  chorusComm_t comm = engine_->comm();
  return collective(c10d::OpType::ALLREDUCE_COALESCED, tensors, [ds, types, comm, op] {
    check(chorusGroupStart(), comm, "all_reduce_coalesced");
    chorusResult_t first = chorusSuccess;
    for (size_t i = 0; i < ds.size(); ++i) {
      chorusResult_t r = chorusAllReduce(ds[i]->work.data_ptr(), ds[i]->work.data_ptr(),
                                         size_t(ds[i]->work.numel()), types[i], op, comm, nullptr);
      if (first == chorusSuccess) first = r;
    }
    chorusResult_t end = chorusGroupEnd();
    check(first != chorusSuccess ? first : end, comm, "all_reduce_coalesced");
    for (auto& d : ds) d->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  checkSingle(rank_, "reduce", tensors);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "reduce", "root " + std::to_string(opts.rootRank) + " out of range");
  const chorusDataType_t type = reduceType(rank_, "reduce", tensors[0]);
  const chorusRedOp_t op = redOp(rank_, "reduce", opts.reduceOp);
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  const int root = int(opts.rootRank);
  const bool isRoot = root == rank_;
  return collective(c10d::OpType::REDUCE, tensors, [d, comm, type, op, root, isRoot] {
    check(chorusReduce(d->work.data_ptr(), d->work.data_ptr(), size_t(d->work.numel()), type, op,
                       root, comm, nullptr),
          comm, "reduce");
    if (isRoot) d->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  checkTensor(rank_, "all_gather_into_tensor", output);
  checkTensor(rank_, "all_gather_into_tensor", input);
  if (output.scalar_type() != input.scalar_type())
    refuse(rank_, "all_gather_into_tensor", "output and input dtypes differ");
  if (output.numel() != input.numel() * size_)
    refuse(rank_, "all_gather_into_tensor",
           "output holds " + std::to_string(output.numel()) + " elements, expected world size x " +
               std::to_string(input.numel()));
  at::Tensor in = input.contiguous();
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  return collective(c10d::OpType::_ALLGATHER_BASE, {output}, [in, out, comm] {
    check(
        chorusAllGather(in.data_ptr(), out->work.data_ptr(), nbytes(in), chorusInt8, comm, nullptr),
        comm, "all_gather_into_tensor");
    out->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  checkSingle(rank_, "all_gather", inputs);
  if (outputs.size() != 1) refuse(rank_, "all_gather", "expects one output list per process");
  checkList(rank_, "all_gather", outputs[0], inputs[0], size_t(size_));
  at::Tensor in = inputs[0].contiguous();
  std::vector<at::Tensor> outs = outputs[0];
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(c10d::OpType::ALLGATHER, outs, [in, outs, comm, n] {
    at::Tensor flat = at::empty({int64_t(n) * in.numel()}, in.options());
    check(chorusAllGather(in.data_ptr(), flat.data_ptr(), nbytes(in), chorusInt8, comm, nullptr),
          comm, "all_gather");
    for (int r = 0; r < n; ++r)
      outs[size_t(r)].copy_(
          flat.narrow(0, r * in.numel(), in.numel()).view(outs[size_t(r)].sizes()));
  });
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
  return collective(c10d::OpType::GATHER, outs, [in, outs, comm, n, root] {
    at::Tensor flat;
    if (!outs.empty()) flat = at::empty({int64_t(n) * in.numel()}, in.options());
    check(chorusGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, nbytes(in),
                       chorusInt8, root, comm, nullptr),
          comm, "gather");
    for (size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(flat.narrow(0, int64_t(r) * in.numel(), in.numel()).view(outs[r].sizes()));
  });
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
  return collective(c10d::OpType::SCATTER, outputs, [flat, out, comm, root] {
    check(chorusScatter(flat.defined() ? flat.data_ptr() : nullptr, out->work.data_ptr(),
                        nbytes(out->work), chorusInt8, root, comm, nullptr),
          comm, "scatter");
    out->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkSingle(rank_, "reduce_scatter", outputs);
  if (inputs.size() != 1) refuse(rank_, "reduce_scatter", "expects one input list per process");
  checkList(rank_, "reduce_scatter", inputs[0], outputs[0], size_t(size_));
  const chorusDataType_t type = reduceType(rank_, "reduce_scatter", outputs[0]);
  const chorusRedOp_t op = redOp(rank_, "reduce_scatter", opts.reduceOp);
  std::vector<at::Tensor> parts;
  for (auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(parts);
  auto out = std::make_shared<Dense>(outputs[0]);
  chorusComm_t comm = engine_->comm();
  return collective(c10d::OpType::REDUCE_SCATTER, outputs, [flat, out, comm, type, op] {
    check(chorusReduceScatter(flat.data_ptr(), out->work.data_ptr(), size_t(out->work.numel()),
                              type, op, comm, nullptr),
          comm, "reduce_scatter");
    out->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(rank_, "reduce_scatter_tensor", output);
  checkTensor(rank_, "reduce_scatter_tensor", input);
  if (output.scalar_type() != input.scalar_type())
    refuse(rank_, "reduce_scatter_tensor", "output and input dtypes differ");
  if (input.numel() != output.numel() * size_)
    refuse(rank_, "reduce_scatter_tensor",
           "input holds " + std::to_string(input.numel()) + " elements, expected world size x " +
               std::to_string(output.numel()));
  const chorusDataType_t type = reduceType(rank_, "reduce_scatter_tensor", output);
  const chorusRedOp_t op = redOp(rank_, "reduce_scatter_tensor", opts.reduceOp);
  at::Tensor in = input.contiguous();
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  return collective(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [in, out, comm, type, op] {
    check(chorusReduceScatter(in.data_ptr(), out->work.data_ptr(), size_t(out->work.numel()), type,
                              op, comm, nullptr),
          comm, "reduce_scatter_tensor");
    out->copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& /*opts*/) {
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
    return collective(c10d::OpType::ALLTOALL_BASE, {output}, [in, out, comm, n] {
      check(chorusAlltoAll(in.data_ptr(), out->work.data_ptr(), nbytes(in) / size_t(n), chorusInt8,
                           comm, nullptr),
            comm, op);
      out->copyBack();
    });
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
  return collective(c10d::OpType::ALLTOALL_BASE, {output},
                    [in, out, comm, n, me, sendOff, recvOff] {
                      std::vector<Block> blocks(static_cast<size_t>(n));
                      for (size_t p = 0; p < size_t(n); ++p)
                        blocks[p] = {bytesOf(in) + sendOff[p], sendOff[p + 1] - sendOff[p],
                                     bytesOf(out->work) + recvOff[p], recvOff[p + 1] - recvOff[p]};
                      exchange(comm, me, blocks, op);
                      out->copyBack();
                    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& /*opts*/) {
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
  return collective(c10d::OpType::ALLTOALL, outputs, [ins, outs, comm, n, me] {
    std::vector<Block> blocks(static_cast<size_t>(n));
    for (size_t p = 0; p < size_t(n); ++p)
      blocks[p] = {bytesOf(ins[p]), nbytes(ins[p]), bytesOf(outs[p]->work), nbytes(outs[p]->work)};
    exchange(comm, me, blocks, op);
    for (auto& o : outs) o->copyBack();
  });
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

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& /*opts*/) {
  at::Tensor t = barrierToken_;
  chorusComm_t comm = engine_->comm();
  return collective(c10d::OpType::BARRIER, {}, [t, comm] {
    check(chorusAllReduce(t.data_ptr(), t.data_ptr(), 1, chorusUint8, chorusMax, comm, nullptr),
          comm, "barrier");
  });
}

}  // namespace chorus_torch
