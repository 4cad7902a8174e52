// ProcessGroupChorus: the torch.distributed backend "chorus" (c10d::ProcessGroup of PyTorch
// 1.13) over one Chorus communicator per group.
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

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "chorus/chorus.h"

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
  // Marks the work done (error: e != nullptr); completes the future if one was asked for.
  void complete(std::exception_ptr e);

 private:
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<Engine> engine_;  // to run deferred point-to-point operations on wait()
  bool deferred_;
  std::mutex futureMutex_;
  bool done_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Runs operations on the group's communicator, in issue order (see the top of this file).
class Engine {
 public:
  Engine(chorusComm_t comm, bool async);
  ~Engine();
  chorusComm_t comm() const { return comm_; }
  // Runs (inline) or queues (async) a collective; deferred work first.
  void submit(const c10::intrusive_ptr<ChorusWork>& work, std::function<void()> job);
  // Queues a point-to-point operation until flush(); `post` runs once the group has ended.
  void defer(const c10::intrusive_ptr<ChorusWork>& work, std::function<void()> job,
             std::function<void()> post = {});
  // Starts the deferred operations as one Chorus group.
  void flush();
  void stop();

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

  chorusComm_t comm_;
  bool async_;
  std::mutex mutex_;  // issue order: inline execution, the queue, the deferred batch
  Task deferred_;
  std::deque<Task> queue_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread worker_;
};

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  // Creates the group's communicator: rank 0 makes the unique id and publishes it in `store`
  // (the group's own prefixed store), the others read it. `timeout` bounds every wait.
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }
  void startCoalescing() override {}
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

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
  chorusComm_t comm() const { return engine_->comm(); }
  bool async() const { return async_; }

 private:
  c10::intrusive_ptr<ChorusWork> makeWork(c10d::OpType type, std::vector<at::Tensor> outputs,
                                          bool deferred = false);
  c10::intrusive_ptr<c10d::Work> collective(c10d::OpType type, std::vector<at::Tensor> outputs,
                                            std::function<void()> job);

  std::shared_ptr<Engine> engine_;
  bool async_ = false;
  at::Tensor barrierToken_;
};

}  // namespace chorus_torch
