// One std::thread per rank.
#pragma once

#include <functional>

namespace ctest {

// Runs fn(rank) for rank 0..n-1 on n std::threads and joins them.
void runThreads(int n, const std::function<void(int)>& fn);

}  // namespace ctest
