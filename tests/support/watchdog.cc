// The watchdog against hangs (watchdog.h).
#include "watchdog.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "timing.h"

namespace ctest {

namespace {
std::mutex gProgressMu;
std::map<int, std::string>& progressMap() {
  static auto* m = new std::map<int, std::string>;
  return *m;
}
}  // namespace

void setProgress(int rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(gProgressMu);
  progressMap()[rank] = what;
}

std::string progressReport() {
  std::lock_guard<std::mutex> lock(gProgressMu);
  std::string s;
  for (const auto& [rank, what] : progressMap()) {
    s += "  rank " + std::to_string(rank) + ": " + what + "\n";
  }
  return s.empty() ? "  (no progress recorded)\n" : s;
}

struct Watchdog::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

Watchdog::Watchdog(double seconds, std::string what) : state_(std::make_shared<State>()) {
  const double limit = seconds * timeoutScale();
  std::thread([state = state_, limit, what = std::move(what)] {
    std::unique_lock<std::mutex> lock(state->mu);
    const bool finished =
        state->cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return state->done; });
    if (finished) return;
    std::fprintf(stderr, "WATCHDOG: %s did not finish within %.0f s; last progress:\n%s",
                 what.c_str(), limit, progressReport().c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(99);
  }).detach();
}

Watchdog::~Watchdog() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->done = true;
  state_->cv.notify_all();
}

}  // namespace ctest
