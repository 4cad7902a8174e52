// The clocks the harness reads: wall time (the timed iterations), process CPU time (-C) and the
// UTC date of the JSON document.
#ifndef CHORUS_BENCH_CLOCKS_H_
#define CHORUS_BENCH_CLOCKS_H_

#include <string>

namespace chorus_bench {

// Now, UTC, as "2024-01-31T12:34:56Z".
std::string isoNow();

// CPU time of the whole process, in seconds (CLOCK_PROCESS_CPUTIME_ID).
double cpuSeconds();

// Monotonic wall time, in seconds.
double wallSeconds();

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_CLOCKS_H_
