// Time in the tests (timing.h).
#include "timing.h"

#include <chrono>
#include <cstdlib>

namespace ctest {

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double timeoutScale() {
  const char* s = std::getenv("CHORUS_TEST_TIMEOUT_SCALE");
  if (s == nullptr) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? v : 1.0;
}

}  // namespace ctest
