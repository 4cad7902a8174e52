// ChorusWork (process_group.h): one operation's completion, its wait and its future.
#include <ATen/core/ivalue.h>

#include "process_group.h"

namespace chorus_torch {

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

int ChorusWork::sourceRank() const {
  if (!source_)
    TORCH_CHECK(false, "sourceRank() is only available on the work of a receive from any source");
  return *source_;
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

}  // namespace chorus_torch
