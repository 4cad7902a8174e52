// Emulated clusters: chorusrun --nodes Q gives each block of ranks its own CHORUS_HOSTID, so
// ranks on different "nodes" talk through the TCP transport (loopback) and those on one node
// through shared memory. Every collective must stay correct with even and uneven nodes.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gtest_helpers.h"
#include "util.h"

namespace {

using namespace ctest;

CommandResult launchNodes(int nodes, int np, const std::vector<std::string>& workerArgs,
                          double timeout) {
  std::vector<std::string> argv = {CHORUSRUN_PATH, "--timeout",
                                   std::to_string(static_cast<int>(timeout * timeoutScale())),
                                   "--nodes", std::to_string(nodes), "-np", std::to_string(np),
                                   MP_WORKER_PATH};
  argv.insert(argv.end(), workerArgs.begin(), workerArgs.end());
  argv.push_back("--timeout");
  argv.push_back(std::to_string(static_cast<int>(timeout - 10)));
  return runCommand(argv, timeout + 30);
}

std::string tail(const std::string& s, size_t n = 6000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

class MultiNode : public ShmCheckedTestP<std::tuple<int, int>> {};

TEST_P(MultiNode, EveryCollectiveCorrect) {
  const auto [nodes, np] = GetParam();
  const CommandResult r = launchNodes(nodes, np, {"--counts", "0,1,7,1000", "--big", "minimal"}, 400);
  EXPECT_FALSE(r.timedOut) << tail(r.output);
  EXPECT_EQ(r.exitCode, 0) << tail(r.output);
  std::printf("%d nodes, %d ranks: %.1f s\n", nodes, np, r.seconds);
}

// 2 nodes x 2 ranks, 3 + 2 ranks (uneven), 3 nodes x 1 rank, 3 nodes with 2 + 2 + 1 ranks.
INSTANTIATE_TEST_SUITE_P(Emulated, MultiNode,
                         ::testing::Values(std::make_tuple(2, 4), std::make_tuple(2, 5),
                                           std::make_tuple(3, 3), std::make_tuple(3, 5)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "nodes_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// The hierarchical AllReduce (even nodes only), the ring and the tree forced across nodes; 2500007
// floats (10 MB) cut the hierarchical AllReduce into 8 pipelined slices with uneven blocks.
TEST(MultiNodeAlgorithms, ForcedHierAndRingAllReduce) {
  for (const char* algo : {"hier", "ring", "tree"})
    for (auto [nodes, np] : {std::make_pair(2, 4), std::make_pair(3, 6), std::make_pair(2, 2)}) {
      std::vector<std::string> argv = {CHORUSRUN_PATH, "--timeout", "120", "-x",
                                       std::string("CHORUS_ALGO=") + algo, "--nodes",
                                       std::to_string(nodes), "-np", std::to_string(np),
                                       MP_WORKER_PATH, "--colls", "AllReduce", "--counts",
                                       "0,1,7,1000,100003,2500007", "--big", "minimal"};
      const CommandResult r = runCommand(argv, 150);
      EXPECT_EQ(r.exitCode, 0) << algo << " " << nodes << "x" << np << "\n" << tail(r.output);
    }
}

// A rank of another node dies right after init: the job ends (no hang) with a failure status.
TEST(MultiNodeFailure, DeadRemoteRankEndsTheJob) {
  const CommandResult r = launchNodes(2, 4, {"--crash-rank", "3", "--counts", "1000"}, 120);
  EXPECT_FALSE(r.timedOut) << tail(r.output);
  EXPECT_NE(r.exitCode, 0) << tail(r.output);
}

}  // namespace
