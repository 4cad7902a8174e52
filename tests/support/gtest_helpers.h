// GoogleTest helpers, header only (included by the test programs, not by the support library).
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "shm_leaks.h"

namespace ctest {

// Fails the test when it leaves new entries in /dev/shm (and removes them).
class ShmCheckedTest : public ::testing::Test {
 protected:
  void SetUp() override { shmBefore_ = shmEntries(); }
  void TearDown() override {
    const auto leaked = leakedShm(shmBefore_);
    if (leaked.empty()) return;
    std::string names;
    for (const auto& n : leaked) names += " " + n;
    ADD_FAILURE() << "the test left entries in /dev/shm (removed now):" << names;
    removeShm(leaked);
  }
  std::set<std::string> shmBefore_;
};

template <class Param>
class ShmCheckedTestP : public ShmCheckedTest, public ::testing::WithParamInterface<Param> {};

namespace detail {

inline bool isWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// `word` occurs in `text` with no letter, digit or '_' right before or after it.
inline bool containsWord(const std::string& text, const std::string& word) {
  for (size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) {
    const bool before = pos == 0 || !isWordChar(text[pos - 1]);
    const size_t end = pos + word.size();
    const bool after = end >= text.size() || !isWordChar(text[end]);
    if (before && after) return true;
  }
  return false;
}

// "rank" (any case), then spaces or one of "=:#", then the number, then no further digit.
inline bool namesRank(const std::string& text, int rank) {
  std::string lower = text;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const std::string number = std::to_string(rank);
  for (size_t pos = lower.find("rank"); pos != std::string::npos;
       pos = lower.find("rank", pos + 1)) {
    size_t k = pos + 4;
    while (k < lower.size() &&
           (lower[k] == ' ' || lower[k] == '=' || lower[k] == ':' || lower[k] == '#')) {
      ++k;
    }
    if (lower.compare(k, number.size(), number) != 0) continue;
    const size_t end = k + number.size();
    if (end >= lower.size() || !std::isdigit(static_cast<unsigned char>(lower[end]))) return true;
  }
  return false;
}

}  // namespace detail

// The message names `arg` (as a word; any of the '|'-separated alternatives) and, if rank >= 0,
// the rank ("rank 3", "rank=3", "(rank 3)", ...).
inline ::testing::AssertionResult Mentions(const std::string& message, const std::string& arg,
                                           int rank = -1) {
  if (!arg.empty()) {
    bool found = false;
    size_t start = 0;
    while (!found && start <= arg.size()) {
      const size_t bar = arg.find('|', start);
      const std::string alt = arg.substr(start, bar == std::string::npos ? bar : bar - start);
      found = !alt.empty() && detail::containsWord(message, alt);
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    if (!found) {
      return ::testing::AssertionFailure()
             << "the last error \"" << message << "\" does not name \"" << arg << "\"";
    }
  }
  if (rank >= 0 && !detail::namesRank(message, rank)) {
    return ::testing::AssertionFailure()
           << "the last error \"" << message << "\" does not name rank " << rank;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ctest
