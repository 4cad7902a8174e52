// The logs of ranks started by hand (/tmp/chorus-<tag>-<pid>-<rank>.log, support/handstart.h):
// removed when the test that made them passed, kept and named when it failed, so that a suite run
// leaves nothing in /tmp but what a failure report points at.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "handstart.h"

namespace {

class HandLogs : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const auto made = ctest::takeHandLogs();
    const bool passed = info.result() == nullptr || !info.result()->Failed();
    for (const auto& path : made) {
      if (passed)
        unlink(path.c_str());
      else
        std::fprintf(stderr, "[ kept ] %s\n", path.c_str());
    }
  }
};

// Appended before gtest_main's RUN_ALL_TESTS (a static initializer of the suite's binary).
const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new HandLogs);
  return true;
}();

// A rank started by hand writes its log; the test passes.
TEST(HandLogs, MakesALog) {
  auto ranks = ctest::startRanksByHand("/bin/true", 1, 1, {}, "hand-logs");
  ctest::waitRanksByHand(ranks, 30);
  ASSERT_EQ(ranks[0].status, 0);
  ASSERT_EQ(access(ranks[0].outPath.c_str(), F_OK), 0) << ranks[0].outPath;
  std::printf("HANDLOG %s\n", ranks[0].outPath.c_str());
}

// That test run alone in a process of its own (this binary): its log is gone when it ends.
TEST(HandLogs, APassedTestsLogsAreRemoved) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = 0;
  FILE* p =
      popen(("'" + std::string(self) + "' --gtest_filter=HandLogs.MakesALog 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out, path;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    out += line;
    if (std::strncmp(line, "HANDLOG ", 8) == 0) path.assign(line + 8, std::strcspn(line + 8, "\n"));
  }
  ASSERT_EQ(pclose(p), 0) << out;
  ASSERT_FALSE(path.empty()) << out;
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " is still there\n" << out;
}

}  // namespace
