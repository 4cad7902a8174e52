// One spin-wait iteration's hint to the core (x86 pause, AArch64 yield): a spinning thread
// leaves the pipeline and the sibling hyperthread to others.
#pragma once

namespace chorus {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace chorus
