// GoogleTest helpers, header only (included by the test programs, not by the support library).
#pragma once

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "util.h"

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

// The message names `arg` (as a word) and, if rank >= 0, the rank ("rank 3", "rank=3", ...).
inline ::testing::AssertionResult Mentions(const std::string& message, const std::string& arg,
                                           int rank = -1) {
  if (!arg.empty() && !std::regex_search(message, std::regex("\\b" + arg + "\\b"))) {
    return ::testing::AssertionFailure()
           << "the last error \"" << message << "\" does not name \"" << arg << "\"";
  }
  if (rank >= 0 &&
      !std::regex_search(
          message, std::regex("rank[ =:#]*" + std::to_string(rank) + "\\b", std::regex::icase))) {
    return ::testing::AssertionFailure()
           << "the last error \"" << message << "\" does not name rank " << rank;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ctest
