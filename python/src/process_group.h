// ProcessGroupChorus: the torch.distributed backend "chorus" over one Chorus communicator per
// group: a c10d::Backend on torch 2.x, a c10d::ProcessGroup on torch 1.13 (torch_compat.h).
//
// Execution. Collectives run where they are issued (the calling thread does the work, as a
// NULL-stream Chorus call does): no thread hand-off, so an 8-byte all_reduce costs the library's
// time plus torch's dispatch. With CHORUS_TORCH_ASYNC=1 (read once per group) a worker thread
// per group runs them in issue order instead and completes each Work there, so that a DDP
// backward pass goes on while its buckets are reduced. Point-to-point operations are deferred
// until someone waits on one of them, the next collective is issued, or a coalescing block
// (batch_isend_irecv) ends; the deferred batch then runs as one Chorus group, so a rank's isend
// and irecv never wait for each other.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "chorus/chorus.h"
#include "registered_pool.h"
#include "torch_compat.h"

namespace chorus_torch {

class Engine;

// One operation's completion: the base Work's state (finish), a future made on demand.
class ChorusWork : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
             std::shared_ptr<Engine> engine, bool deferred);
  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // recvAnysource: the rank the receive matched (set when the group it ran in ended).
  int sourceRank() const override;
  void setSource(std::shared_ptr<int> source) { source_ = std::move(source); }
  // Marks the work done (error: e != nullptr); completes the future if one was asked for.
  void complete(std::exception_ptr e);
  bool isDone() {
    std::lock_guard<std::mutex> lock(futureMutex_);
    return done_;
  }

 private:
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<Engine> engine_;  // to run deferred point-to-point operations on wait()
  bool deferred_;
  std::mutex futureMutex_;
  bool done_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<int> source_;  // recvAnysource's matched rank, else null
};

// Runs operations on the group's communicator, in issue order (see the top of this file).
class Engine {
 public:
  Engine(chorusComm_t comm, bool async);
  ~Engine();
  // The communicator; null once aborted (chorusCommAbort frees it: the handle must never be
  // used again, not even to destroy it, since a new communicator may get its address).
  chorusComm_t comm() const { return comm_.load(std::memory_order_acquire); }
  void forgetComm() { comm_.store(nullptr, std::memory_order_release); }
  // Runs (inline) or queues (async) a collective; deferred work first.
  void submit(const c10::intrusive_ptr<ChorusWork>& work, std::function<void()> job);
  // Queues a point-to-point operation until flush(); `post` runs once the group has ended.
  void defer(const c10::intrusive_ptr<ChorusWork>& work, std::function<void()> job,
             std::function<void()> post = {});
  // Starts the deferred operations as one Chorus group.
  void flush();
  void stop();
  // Whether the caller is this engine's worker thread (async mode).
  bool onWorkerThread() const;
  // On the worker thread: runs queued operations, in order, until done() (a wait issued by a
  // future's callback, which runs on the worker, for an operation queued after it).
  void runQueuedUntil(const std::function<bool()>& done);

 private:
  struct Task {
    std::vector<c10::intrusive_ptr<ChorusWork>> works;
    std::vector<std::function<void()>> jobs;
    std::vector<std::function<void()>> posts;  // after the group ends (copies out)
    bool grouped = false;
  };
  void run(Task& t);  // executes and completes; never throws
  void workerLoop();
  void flushLocked();

  std::atomic<chorusComm_t> comm_;
  bool async_;
  std::mutex mutex_;  // issue order: inline execution, the queue, the deferred batch
  Task deferred_;
  std::deque<Task> queue_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread worker_;
  std::thread::id workerId_;
};

class ProcessGroupChorus : public BackendBase {
 public:
  // Creates the group's communicator: rank 0 makes the unique id and publishes it in `store`
  // (the group's own prefixed store), the others read it. `timeout` bounds every wait.
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  // Adopts a communicator made by split or shrink (owned from now on).
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, chorusComm_t comm,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;
  // destroy_process_group (and the destructor): the pending work runs, then the communicator
  // goes. Once; later calls do nothing. Virtual in the torch releases that have it.
  CHORUS_TORCH_MAYBE_OVERRIDE_BEGIN
  void shutdown();
  CHORUS_TORCH_MAYBE_OVERRIDE_END
  // The group's ranks in torch's default group (global_ranks_in_group), for error messages that
  // name the global rank at fault; ignored unless there is one per rank.
  void setGlobalRanks(const std::vector<int>& ranks);

  const std::string getBackendName() const override { return "chorus"; }
#if CHORUS_TORCH_BACKEND_API
  bool supportsSplitting() const override {
    return true;
  }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  // Virtual in the torch releases that have them (2.13 has them all; 2.6, Debian 13's, has
  // none of these five, nor split's and shrink's forms).
  CHORUS_TORCH_MAYBE_OVERRIDE_BEGIN
  bool supportsCoalescing() const {
    return true;
  }
  c10::intrusive_ptr<Options> getBackendOptions();
  void setTimeout(std::chrono::milliseconds timeout);
  void abort();
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts);
  bool supportsShrinking() const {
    return true;
  }
  // Backend::allocateTensor (FSDP2's set_allocate_memory_from_process_group_for_comm): `size`
  // elements of the group's registered memory (registeredEmpty); collective. CPU only.
  bool supportsTensorAlloc(c10::DeviceIndex /*deviceIdx*/) {
    return true;
  }
  at::Tensor allocateTensor(long size, at::TensorOptions options = {});
  // all_reduce of a sparse COO tensor (SUM), as gloo does it (collectives.cc).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude,
                                           int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& optsOverride);
  CHORUS_TORCH_MAYBE_OVERRIDE_END
#else
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;
#endif
  void setSequenceNumberForGroup() override {
    seq_ = 0;
  }
  uint64_t getSequenceNumberForGroup() override {
    return seq_;
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // The Chorus communicator (for tests and for chorus.torch.comm_of).
  chorusComm_t comm() const {
    return engine_->comm();
  }
  bool async() const {
    return async_;
  }
  // Aborts the communicator (every waiting and later call raises); the group stays usable for
  // shrink.
  void abortComm();
  // chorus.torch.registered_empty: `bytes` of the group's registered memory as a 1-D uint8
  // tensor (registered_pool.h). Collective: every rank, in the same order; it runs in issue
  // order with the group's other operations (on the worker thread in async mode).
  at::Tensor registeredEmpty(size_t bytes);
  RegisteredPoolStats registeredStats() {
    return pool_->stats();
  }

 private:
  void start(chorusComm_t comm, std::chrono::milliseconds timeout);
  c10::intrusive_ptr<ChorusWork> makeWork(c10d::OpType type, std::vector<at::Tensor> outputs,
                                          bool deferred = false);
  // Runs or queues `job` (engine order); `timeout`: the call's own (opts.timeout), if set.
  c10::intrusive_ptr<c10d::Work> collective(c10d::OpType type, std::vector<at::Tensor> outputs,
                                            std::function<void()> job,
                                            std::chrono::milliseconds timeout);
  // A reduction Chorus has no kernel for (BAND, BOR, BXOR): gathers every rank's `input`, folds
  // them in rank order and hands the folded tensor to `done`.
  c10::intrusive_ptr<c10d::Work> bitwise(const char* op, c10d::OpType type,
                                         std::vector<at::Tensor> outputs, const at::Tensor& input,
                                         c10d::ReduceOp::RedOpType rop,
                                         std::chrono::milliseconds timeout,
                                         std::function<void(const at::Tensor&)> done);
  // A completed Work for an op that finished inside another (coalescing ends, no-ops).
  c10::intrusive_ptr<c10d::Work> completed(c10d::OpType type, std::vector<at::Tensor> outputs);

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<Engine> engine_;
  // Registered memory handed out by registeredEmpty; closed when the communicator goes.
  std::shared_ptr<RegisteredPool> pool_ = std::make_shared<RegisteredPool>();
  std::chrono::milliseconds timeout_{0};
  bool async_ = false;
  bool destroyed_ = false;
  uint64_t seq_ = 0;           // collectives issued (TORCH_DISTRIBUTED_DEBUG's sequence number)
  uint64_t monitoredSeq_ = 0;  // monitored barriers issued (their store keys)
  void forgetGlobalRanks();
  uint64_t splits_ = 0;  // splits and shrinks made from this group (their store prefixes)
  at::Tensor barrierToken_;
};

}  // namespace chorus_torch
