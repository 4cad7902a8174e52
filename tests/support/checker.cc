#include "checker.h"

#include <cstdio>
#include <cstring>

#include "test_types.h"

namespace ctest {

CheckResult compareElements(chorusDataType_t type, const void* got, const void* expected,
                            size_t count, uint64_t ulpTolerance) {
  CheckResult res;
  const size_t size = typeSize(type);
  if (count == 0 || std::memcmp(got, expected, count * size) == 0) return res;
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* e = static_cast<const unsigned char*>(expected);
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* gi = g + i * size;
    const unsigned char* ei = e + i * size;
    if (std::memcmp(gi, ei, size) == 0) continue;
    if (ulpTolerance > 0 && ulpDistance(type, gi, ei) <= ulpTolerance) continue;
    if (res.mismatches++ == 0) {
      res.first = "element " + std::to_string(i) + ": expected " + formatElement(type, ei) +
                  ", got " + formatElement(type, gi);
    }
  }
  if (res.mismatches > 1) {
    res.first += " (" + std::to_string(res.mismatches) + " of " + std::to_string(count) +
                 " elements differ)";
  }
  return res;
}

CheckResult checkPattern(const void* p, size_t bytes, unsigned char pattern) {
  CheckResult res;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    if (b[i] == pattern) continue;
    if (res.mismatches++ == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "byte %zu: expected 0x%02x (untouched), got 0x%02x", i,
                    pattern, b[i]);
      res.first = buf;
    }
  }
  if (res.mismatches > 1) res.first += " (" + std::to_string(res.mismatches) + " bytes differ)";
  return res;
}

}  // namespace ctest
