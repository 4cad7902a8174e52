// Comparing results: bit for bit, or within a tolerance in ULPs (float avg only).
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ctest {

struct CheckResult {
  size_t mismatches = 0;
  std::string first;  // the first mismatch, described; empty when none
  bool ok() const { return mismatches == 0; }
};

// Compares `count` elements. ulpTolerance 0: bit for bit; otherwise float elements may differ by
// that many units in the last place.
CheckResult compareElements(chorusDataType_t type, const void* got, const void* expected,
                            size_t count, uint64_t ulpTolerance = 0);
// Every byte of [p, p+bytes) equals `pattern` (an untouched region).
CheckResult checkPattern(const void* p, size_t bytes, unsigned char pattern);

}  // namespace ctest
