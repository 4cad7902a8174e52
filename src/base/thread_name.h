// The names of the threads Chorus starts ("chorus-proxy", "chorus-ch1", ...), as top -H, perf,
// gdb and the tests' leak checks show them. Called first thing in the thread's body.
#pragma once

#include <pthread.h>

#include <cstdio>

namespace chorus {

// Names the calling thread `chorus-<what>`, cut to the kernel's 15 characters.
inline void nameThisThread(const char* what) {
  char name[16];
  std::snprintf(name, sizeof(name), "chorus-%s", what);
  pthread_setname_np(pthread_self(), name);
}

}  // namespace chorus
