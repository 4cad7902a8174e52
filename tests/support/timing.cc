// Time in the tests (timing.h).
#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace ctest {

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void sleepSeconds(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, s)));
}

double timeoutScale() {
  const char* s = std::getenv("CHORUS_TEST_TIMEOUT_SCALE");
  if (s == nullptr) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? v : 1.0;
}

}  // namespace ctest
