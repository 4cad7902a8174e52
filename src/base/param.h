// Environment parameters (CHORUS_*). Each call reads the environment anew (nothing is cached):
// callers read a parameter once, at init or first use, and keep the value.
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

int64_t envInt(const char* name, int64_t defaultValue);
std::string envStr(const char* name, const char* defaultValue = "");
// Size with optional K/M/G/T (binary) suffix.
int64_t envSize(const char* name, int64_t defaultValue);

}  // namespace chorus
