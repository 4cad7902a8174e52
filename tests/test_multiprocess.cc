// Multi-process runs through the launcher: chorusrun -np N chorus_mp_worker [args]. Each test
// asserts exit status 0 (every rank passed its part of the matrix) and that /dev/shm has no new
// entries afterwards (the ShmCheckedTest fixture compares listings before and after).
//
// Matrix/<N>ranks runs every collective at counts 0, 1, 7, 1000 (full type x op x placement x
// root matrix) and the "minimal" big-count policy (two rotating combinations per collective) —
// the threads tests (test_collectives.cc) cover the big-count subset more widely.
#include <chorus/chorus.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "gtest_helpers.h"
#include "handstart.h"
#include "launch.h"
#include "process.h"
#include "run_command.h"
#include "scoped_env.h"

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

// The single-copy Broadcast / AllGather (cross-memory attach between processes) and the one-shot
// AllGather / Broadcast / ReduceScatter, forced, across processes: every type, op, placement and
// root at counts 0, 1, 7, 1000 and a large count (single copy), on 2, 3 and 5 ranks. The
// single-copy path's first call runs the FIFO algorithm (cross-memory attach is being enabled),
// later calls read the peers directly; CHORUS_CMA=0 forces the fallback throughout.
TEST_F(MultiProcessMisc, SingleCopyAndOneShotForced) {
  struct Case {
    const char* algo;
    const char* cma;
    const char* colls;
    const char* counts;
  };
  for (const Case& c :
       {Case{"broadcast:cma;allgather:cma;allreduce:cma", nullptr, "Broadcast,AllGather,AllReduce",
             "0,1,7,1000,300001"},
        Case{"broadcast:cma;allgather:cma;allreduce:cma", "0", "Broadcast,AllGather,AllReduce",
             "7,70001"},
        Case{"broadcast:oneshot;allgather:oneshot;reducescatter:oneshot", nullptr,
             "Broadcast,AllGather,ReduceScatter", "0,1,7,100"},
        Case{"allreduce:twoshot", nullptr, "AllReduce", "0,1,7,1000,16383,16400"}}) {
    ScopedEnv algo("CHORUS_ALGO", c.algo), cma("CHORUS_CMA", c.cma);
    for (int np : {2, 3, 5}) {
      const CommandResult r =
          launch(np, {"--colls", c.colls, "--counts", c.counts, "--big", "none"}, 300);
      EXPECT_FALSE(r.timedOut) << outputTail(r.output);
      EXPECT_EQ(r.exitCode, 0) << c.algo << " CHORUS_CMA=" << (c.cma ? c.cma : "-") << ", " << np
                               << " ranks:\n"
                               << outputTail(r.output);
    }
  }
}

// Streamed slots across processes (prims/prims.h setStreamingSlots: the receiver reads lines
// the sender wrote with streaming stores, fenced before the post), every slot streamed
// (CHORUS_SLOT_STREAM_THRESHOLD=0) on small slots, with the ring, the trees, the chains and
// halving-doubling forced: every collective, type, op, placement and root at counts up to 70001
// against the reference, on 2 and 3 ranks.
TEST_F(MultiProcessMisc, StreamingSlotsForced) {
  ScopedEnv stream("CHORUS_SLOT_STREAM_THRESHOLD", "0"), buff("CHORUS_BUFFSIZE", "32768");
  for (const char* algo : {"ring", "tree", "chain", "allreduce:hd"}) {
    ScopedEnv forced("CHORUS_ALGO", algo), proto("CHORUS_PROTO", "simple");
    for (int np : {2, 3}) {
      const CommandResult r = launch(np, {"--counts", "0,1,7,1000,70001", "--big", "none"}, 300);
      EXPECT_FALSE(r.timedOut) << outputTail(r.output);
      EXPECT_EQ(r.exitCode, 0) << "CHORUS_ALGO=" << algo << ", " << np << " ranks:\n"
                               << outputTail(r.output);
    }
  }
}

// The small and medium AllReduce (one-shot up to 4 KiB, two-shot to 64 KiB, ring beyond) the way
// a training job meets it: ranks started by hand with the launcher variables, more ranks than
// cores, and two busy processes spinning on the same cores the whole time. Every rank checks
// every result against an independent reference (mp_worker), with the tuner's own choice, with
// the two-shot forced, and with every slot streamed (CHORUS_SLOT_STREAM_THRESHOLD=0).
TEST_F(MultiProcessMisc, SmallAllReduceByHandBesideBusyProcesses) {
  const BusyProcesses busy(2);
  ASSERT_EQ(busy.error(), "");
  for (const char* setting :
       {"", "CHORUS_ALGO=allreduce:twoshot", "CHORUS_SLOT_STREAM_THRESHOLD=0"}) {
    for (int np : {3, 4}) {
      std::vector<std::string> env;
      if (*setting) env.push_back(setting);
      std::vector<HandRank> ranks = startRanksByHand(
          MP_WORKER_PATH, np, 1,
          {"--colls", "AllReduce", "--types", "float32,bfloat16,int32,int64", "--counts",
           "0,1,7,1000,4000,16383", "--big", "none", "--timeout", "200"},
          "busy", env);
      waitRanksByHand(ranks, 240);
      for (int r = 0; r < np; ++r) {
        EXPECT_EQ(ranks[size_t(r)].status, 0) << (*setting ? setting : "the tuner's choice") << ", "
                                              << np << " ranks, rank " << r << ":\n"
                                              << outputTail(ranks[size_t(r)].output());
      }
      if (!::testing::Test::HasFailure())
        for (auto& k : ranks) unlink(k.outPath.c_str());
    }
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
