// chorusStream_t: an ordered queue of operations run by one worker thread. The worker sleeps on
// a condition variable when idle (after polling for at most 1 ms, so back-to-back operations
// need no wake-up; no core is burnt for longer). The first error since the last
// chorusStreamSynchronize is kept and reported by Query/Synchronize.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "base/error.h"
#include "base/thread_name.h"
#include "comm/comm.h"
#include "core/exec.h"
#include "cuda/backend.h"

struct chorusStream {
  std::mutex mu;
  std::condition_variable work, done;
  std::deque<std::vector<chorus::OpDesc>> queue;
  uint64_t enqueued = 0, completed = 0;
  chorusResult_t error = chorusSuccess;
  std::string errorMessage;
  bool stop = false;
  bool workerSleeping = false;  // enqueue only signals a sleeping worker
  int syncWaiters = 0;          // completion only signals when someone waits
  std::atomic<uint64_t> enqueuedFast{0};
  std::atomic<uint64_t> completedFast{0};
  std::thread worker;
  // chorusStreamCreateFromCuda: the user's cudaStream_t. Operations then run in the calling
  // thread, ordered after the CUDA stream's prior work (the worker stays idle).
  void* cudaStream = nullptr;
  bool wrapsCuda = false;

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      if (queue.empty() && !stop) {
        // Back-to-back operations are the common case (a benchmark loop, a training step):
        // poll briefly before sleeping so that each enqueue does not cost a wake-up.
        uint64_t seen = enqueuedFast.load(std::memory_order_acquire);
        lock.unlock();
        auto t0 = std::chrono::steady_clock::now();
        while (enqueuedFast.load(std::memory_order_acquire) == seen &&
               std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(1000))
          std::this_thread::yield();
        lock.lock();
        workerSleeping = true;
        work.wait(lock, [&] { return stop || !queue.empty(); });
        workerSleeping = false;
      }
      if (queue.empty()) return;
      std::vector<chorus::OpDesc> batch = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      chorusResult_t r;
      std::string msg;
      try {  // the worker's top: nothing may reach std::terminate
        r = chorus::executeBatch(batch);
        if (r != chorusSuccess) msg = chorusGetLastError(batch[0].comm);
      } catch (...) {
        const chorus::Failure f =
            chorus::caughtFailure(batch[0].comm->rank, "running a stream's queued operations");
        r = f.code;
        msg = f.message;
        chorus::setLastError(batch[0].comm, f.message);
      }
      for (auto& op : batch) op.comm->pending.fetch_sub(1);
      lock.lock();
      if (r != chorusSuccess && error == chorusSuccess) {
        error = r;
        errorMessage = msg;
      }
      ++completed;
      completedFast.store(completed, std::memory_order_release);
      if (syncWaiters > 0) done.notify_all();
    }
  }
};

namespace chorus {

namespace {
std::mutex gStreamsMu;
std::unordered_set<chorusStream_t> gStreams;
}  // namespace

bool isLiveStream(chorusStream_t s) {
  std::lock_guard<std::mutex> l(gStreamsMu);
  return gStreams.count(s) != 0;
}

void* streamCudaHandle(chorusStream_t s) {
  // The legacy default stream (0) is a valid cudaStream_t to wrap: return a marker for it.
  return s->wrapsCuda ? (s->cudaStream != nullptr ? s->cudaStream : kLegacyCudaStream) : nullptr;
}

void streamEnqueue(chorusStream_t s, std::vector<OpDesc> ops) {
  std::lock_guard<std::mutex> l(s->mu);
  s->queue.push_back(std::move(ops));
  ++s->enqueued;
  s->enqueuedFast.fetch_add(1, std::memory_order_release);
  if (s->workerSleeping) s->work.notify_one();
}

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusStreamCreate(chorusStream_t* stream) {
  if (stream == nullptr) {
    setThreadLastError("chorusStreamCreate: stream is NULL");
    return chorusInvalidArgument;
  }
  *stream = nullptr;
  return guarded(
      -1, "chorusStreamCreate",
      [&] {
        auto s = std::make_unique<chorusStream>();
        {  // registered first: nothing runs yet if this fails
          std::lock_guard<std::mutex> l(gStreamsMu);
          gStreams.insert(s.get());
        }
        try {
          s->worker = std::thread([p = s.get()] {
            nameThisThread("stream");
            p->run();
          });
        } catch (...) {
          std::lock_guard<std::mutex> l(gStreamsMu);
          gStreams.erase(s.get());
          throw;
        }
        *stream = s.release();
        return chorusSuccess;
      },
      [](const Failure& f) {
        setThreadLastError(f.message);
        return f.code;
      });
}

chorusResult_t chorusStreamCreateFromCuda(chorusStream_t* stream, void* cudaStream) {
  if (stream == nullptr) {
    setThreadLastError("chorusStreamCreateFromCuda: stream is NULL");
    return chorusInvalidArgument;
  }
  if (!cudaBuilt()) {
    setThreadLastError("chorusStreamCreateFromCuda: Chorus was built without CUDA");
    return chorusInvalidUsage;
  }
  if (chorusResult_t r = chorusStreamCreate(stream); r != chorusSuccess) return r;
  (*stream)->cudaStream = cudaStream;
  (*stream)->wrapsCuda = true;
  markCudaUsed();
  return chorusSuccess;
}

chorusResult_t chorusStreamGetCuda(chorusStream_t stream, void** cudaStream) {
  if (cudaStream == nullptr || stream == nullptr || !isLiveStream(stream)) {
    setThreadLastError("chorusStreamGetCuda: stream is not a live stream or cudaStream is NULL");
    return chorusInvalidArgument;
  }
  if (!stream->wrapsCuda) {
    setThreadLastError("chorusStreamGetCuda: the stream does not wrap a CUDA stream");
    return chorusInvalidUsage;
  }
  *cudaStream = stream->cudaStream;
  return chorusSuccess;
}

static chorusResult_t checkStream(chorusStream_t s, const char* fn) {
  if (s == nullptr) return chorusSuccess;  // the null stream: nothing is ever pending
  if (!isLiveStream(s)) {
    setThreadLastError(std::string(fn) + ": stream is not a live stream (destroyed?)");
    return chorusInvalidArgument;
  }
  return chorusSuccess;
}

chorusResult_t chorusStreamSynchronize(chorusStream_t s) {
  if (chorusResult_t r = checkStream(s, "chorusStreamSynchronize"); r != chorusSuccess || !s)
    return r;
  {
    // Poll briefly first: a short queue finishes sooner than a sleep/wake round trip.
    const uint64_t target = s->enqueuedFast.load(std::memory_order_acquire);
    auto t0 = std::chrono::steady_clock::now();
    while (s->completedFast.load(std::memory_order_acquire) < target &&
           std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(200))
      std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(s->mu);
  ++s->syncWaiters;
  s->done.wait(lock, [&] { return s->completed == s->enqueued; });
  --s->syncWaiters;
  chorusResult_t r = s->error;
  if (r != chorusSuccess) setThreadLastError(s->errorMessage);
  s->error = chorusSuccess;
  s->errorMessage.clear();
  return r;
}

chorusResult_t chorusStreamQuery(chorusStream_t s) {
  if (chorusResult_t r = checkStream(s, "chorusStreamQuery"); r != chorusSuccess || !s) return r;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->error != chorusSuccess) {
    setThreadLastError(s->errorMessage);
    return s->error;
  }
  return s->completed == s->enqueued ? chorusSuccess : chorusInProgress;
}

chorusResult_t chorusStreamDestroy(chorusStream_t s) {
  if (s == nullptr) {
    setThreadLastError("chorusStreamDestroy: stream is NULL");
    return chorusInvalidArgument;
  }
  if (chorusResult_t r = checkStream(s, "chorusStreamDestroy"); r != chorusSuccess) return r;
  {
    std::lock_guard<std::mutex> l(gStreamsMu);
    gStreams.erase(s);
  }
  {
    std::lock_guard<std::mutex> l(s->mu);
    s->stop = true;
    s->work.notify_one();
  }
  s->worker.join();  // runs what was queued first
  delete s;
  return chorusSuccess;
}
