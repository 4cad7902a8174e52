// Multi-process runs through the launcher: chorusrun -np N chorus_mp_worker [args]. Each test
// asserts exit status 0 (every rank passed its part of the matrix) and that /dev/shm has no new
// entries afterwards (the ShmCheckedTest fixture compares listings before and after).
//
// Matrix/<N>ranks runs every collective at counts 0, 1, 7, 1000 (full type x op x placement x
// root matrix) and the "minimal" big-count policy (two rotating combinations per collective) —
// the threads tests (test_collectives.cc) cover the big-count subset more widely.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gtest_helpers.h"
#include "launch.h"
#include "util.h"

namespace {

using namespace ctest;

CommandResult launch(int np, const std::vector<std::string>& workerArgs, double timeout) {
  return launchWorkers({}, np, workerArgs, timeout);
}

class MultiProcess : public ShmCheckedTestP<int> {};

TEST_P(MultiProcess, Matrix) {
  const int np = GetParam();
  const CommandResult r = launch(np, {"--big", "minimal"}, 500);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  std::printf("%d ranks: %.1f s\n", np, r.seconds);
}

INSTANTIATE_TEST_SUITE_P(Launcher, MultiProcess, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

class MultiProcessMisc : public ShmCheckedTest {};

// Created streams and Split across processes.
TEST_F(MultiProcessMisc, StreamsAndSplit) {
  for (int np : {3, 4}) {
    const CommandResult r = launch(np,
                                   {"--stream", "--split", "--big", "none", "--types",
                                    "int8,float16,float64,uint32", "--seed", "31"},
                                   300);
    EXPECT_FALSE(r.timedOut) << outputTail(r.output);
    EXPECT_EQ(r.exitCode, 0) << np << " ranks:\n" << outputTail(r.output);
  }
}

// A rank that exits non-zero makes the job fail with its status.
TEST_F(MultiProcessMisc, FailingRankFailsTheJob) {
  const CommandResult r = launch(
      3, {"--fail-rank", "1", "--colls", "AllReduce", "--counts", "7", "--big", "none"}, 120);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 3) << outputTail(r.output);
}

// A rank killed right after init (its peers then wait for it in their first collective): the
// launcher ends the job with 128+SIGKILL, and nothing is left in /dev/shm.
TEST_F(MultiProcessMisc, KilledRankEndsTheJobCleanly) {
  const CommandResult r =
      launch(4, {"--crash-rank", "2", "--colls", "AllReduce", "--big", "none"}, 120);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 128 + 9) << outputTail(r.output);
}

}  // namespace
