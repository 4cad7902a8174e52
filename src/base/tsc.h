// The CPU's time-stamp counter, for timing a hand-off between two cores without a system call:
// the writer stores its count beside the data, the reader subtracts it from its own
// (transport/fifo.h). That needs one counter that every core of the machine reads alike: an
// x86 CPU with an invariant TSC (the constant_tsc and nonstop_tsc flags Linux lists in
// /proc/cpuinfo: the same rate on every core whatever its frequency, and kept in step across
// cores by the kernel or the hypervisor). Elsewhere tscUsable() is false and nothing is timed.
#pragma once

#include <cstdint>

namespace chorus {

inline uint64_t tscNow() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#else
  return 0;
#endif
}

// The counter once every store before it is visible to the other cores (a full fence, then a
// dispatch-serializing lfence so that the read waits for it): what a hand-off's time counts
// from, not from the moment the data's last stores left the pipeline.
inline uint64_t tscAfterStores() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_mfence();
  __builtin_ia32_lfence();
  return __builtin_ia32_rdtsc();
#else
  return 0;
#endif
}

// Whether the counter runs alike on every core (see above): read once per process.
bool tscUsable();
// Counts per nanosecond, measured once per process against the steady clock (about 2 ms the
// first time); 0 where !tscUsable().
double tscPerNs();

}  // namespace chorus
