// Test hooks of the form CHORUS_TEST_<NAME>=rank:value (docs/environment.md): read at init only.
#pragma once

#include <cstdio>
#include <string>

#include "base/param.h"

namespace chorus {

// The value the hook `var` gives `rank` ("rank:value" naming this rank), else 0.
inline int testHookFor(const char* var, int rank) {
  const std::string s = envStr(var);
  int who = -1, value = 0;
  if (s.empty() || sscanf(s.c_str(), "%d:%d", &who, &value) != 2 || who != rank) return 0;
  return value;
}

}  // namespace chorus
