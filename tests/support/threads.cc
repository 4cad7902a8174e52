// One std::thread per rank (threads.h).
#include "threads.h"

#include <thread>
#include <vector>

namespace ctest {

void runThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

}  // namespace ctest
