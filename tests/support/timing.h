// Time in the tests: a monotonic clock and the scale every deadline is multiplied by.
#pragma once

namespace ctest {

double nowSeconds();  // monotonic (CLOCK_MONOTONIC)

// Sleeps `s` seconds (none when s <= 0).
void sleepSeconds(double s);

// Multiplier for every deadline, from CHORUS_TEST_TIMEOUT_SCALE (e.g. 4 under sanitizers).
double timeoutScale();

}  // namespace ctest
