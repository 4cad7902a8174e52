// The logs of ranks started by hand (/tmp/chorus-<tag>-<pid>-<rank>.log, support/handstart.h):
// removed when the test that made them passed, kept and named when it failed, so that a suite run
// leaves nothing in /tmp but what a failure report points at.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "handstart.h"
#include "run_command.h"

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

// That test run alone in a process of its own (this binary, /proc/self/exe in the child): its
// log is gone when it ends.
TEST(HandLogs, APassedTestsLogsAreRemoved) {
  const ctest::CommandResult r =
      ctest::runCommand({"/proc/self/exe", "--gtest_filter=HandLogs.MakesALog"}, 60);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const size_t at = r.output.find("HANDLOG ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string path = r.output.substr(at + 8, r.output.find('\n', at) - at - 8);
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " is still there\n" << r.output;
}

}  // namespace
