// Engine (process_group.h): runs a group's operations in issue order, inline or on its worker
// thread (CHORUS_TORCH_ASYNC=1), and the deferred point-to-point batch as one Chorus group.
#include "errors.h"
#include "process_group.h"

namespace chorus_torch {

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

namespace {
// Runs one operation here and completes its work with what it threw, if anything.
void runNow(const c10::intrusive_ptr<ChorusWork>& work, const std::function<void()>& job) {
  std::exception_ptr err;
  try {
    job();
  } catch (...) {
    err = std::current_exception();
  }
  work->complete(err);
}
}  // namespace

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
    runNow(work, job);
    return;
  }
  if (!async_) {
    // Inline: run here, under the lock (one operation at a time, in issue order), with no task
    // to build (the common case's allocations are the work and the job only).
    runNow(work, job);
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

}  // namespace chorus_torch
