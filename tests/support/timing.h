// Time in the tests: a monotonic clock and the scale every deadline is multiplied by.
#pragma once

namespace ctest {

double nowSeconds();  // monotonic

// Multiplier for every deadline, from CHORUS_TEST_TIMEOUT_SCALE (e.g. 4 under sanitizers).
double timeoutScale();

}  // namespace ctest
