// The -T watchdog of a benchmark process: after the timeout, aborts every communicator of the
// process and exits non-zero.
#ifndef CHORUS_BENCH_TIMEOUT_WATCHDOG_H_
#define CHORUS_BENCH_TIMEOUT_WATCHDOG_H_

#include <chorus/chorus.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus_bench {

// -T: after the timeout, abort every communicator of this process and exit non-zero.
class Watchdog {
 public:
  void start(int seconds) {
    if (seconds <= 0) return;
    thread_ = std::thread([this, seconds] { watch(seconds); });
  }
  void add(chorusComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.push_back(comm);
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void watch(int seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) return;
    std::fprintf(stderr, "chorus bench: timeout: still running after %d s (-T), aborting\n",
                 seconds);
    std::fflush(stdout);
    std::fflush(stderr);
    // Abort from a helper thread so that a hung abort cannot keep the process alive.
    std::vector<chorusComm_t> comms = comms_;
    std::thread([comms] {
      for (chorusComm_t c : comms) chorusCommAbort(c);
    }).detach();
    cv_.wait_for(lock, std::chrono::seconds(2), [this] { return done_; });
    std::_Exit(1);
  }

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<chorusComm_t> comms_;
};

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_TIMEOUT_WATCHDOG_H_
