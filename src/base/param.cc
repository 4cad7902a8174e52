#include "base/param.h"

#include <cstdlib>

#include "base/debug.h"

namespace chorus {

int64_t envInt(const char* name, int64_t defaultValue) {
  const char* v = getenv(name);
  if (v == nullptr || *v == 0) return defaultValue;
  char* end = nullptr;
  long long x = strtoll(v, &end, 0);
  if (end == v || *end != 0) {
    CHORUS_WARN(-1, "ignoring %s=%s: not an integer", name, v);
    return defaultValue;
  }
  return x;
}

std::string envStr(const char* name, const char* defaultValue) {
  const char* v = getenv(name);
  return v ? std::string(v) : std::string(defaultValue);
}

int64_t envSize(const char* name, int64_t defaultValue) {
  const char* v = getenv(name);
  if (v == nullptr || *v == 0) return defaultValue;
  char* end = nullptr;
  long long x = strtoll(v, &end, 0);
  if (end == v) {
    CHORUS_WARN(-1, "ignoring %s=%s: not a size", name, v);
    return defaultValue;
  }
  switch (*end) {
    case 'k':
    case 'K':
      x <<= 10;
      ++end;
      break;
    case 'm':
    case 'M':
      x <<= 20;
      ++end;
      break;
    case 'g':
    case 'G':
      x <<= 30;
      ++end;
      break;
    case 't':
    case 'T':
      x <<= 40;
      ++end;
      break;
    default:
      break;
  }
  if (*end != 0) {
    CHORUS_WARN(-1, "ignoring %s=%s: not a size", name, v);
    return defaultValue;
  }
  return x;
}

}  // namespace chorus
