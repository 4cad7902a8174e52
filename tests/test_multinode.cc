// Emulated clusters: chorusrun --nodes Q gives each block of ranks its own CHORUS_HOSTID, so
// ranks on different "nodes" talk through the TCP transport (loopback) and those on one node
// through shared memory. Every collective must stay correct with even and uneven nodes.
#include <chorus/chorus.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest_helpers.h"
#include "handstart.h"
#include "launch.h"
#include "process.h"
#include "run_command.h"

namespace {

using namespace ctest;

CommandResult launchNodes(int nodes, int np, const std::vector<std::string>& workerArgs,
                          double timeout) {
  return launchWorkers({"--nodes", std::to_string(nodes)}, np, workerArgs, timeout);
}

// How many times `needle` occurs in `out`.
size_t occurrences(const std::string& out, const std::string& needle) {
  size_t n = 0;
  for (size_t p = out.find(needle); p != std::string::npos; p = out.find(needle, p + 1)) ++n;
  return n;
}

class MultiNode : public ShmCheckedTestP<std::tuple<int, int>> {};

TEST_P(MultiNode, EveryCollectiveCorrect) {
  const auto [nodes, np] = GetParam();
  const CommandResult r =
      launchNodes(nodes, np, {"--counts", "0,1,7,1000", "--big", "minimal"}, 400);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
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

// The hierarchical AllReduce (even nodes only), the ring and the tree forced across nodes. The
// hierarchical one runs a ReduceScatter of the count split into blocks of whole 64-byte lines,
// the last ones shorter or empty (LineBlocks), and their AllGather: counts below a line (1, 7:
// one block holds them all), a multiple of N (1000 on 2 and 4 ranks) and counts that leave the
// last block short (100003, 2500007, 3000001; 524291 on 4 ranks: blocks of 131088 floats, past
// one 512 KiB Simple chunk, the last block 131027).
TEST(MultiNodeAlgorithms, ForcedHierAndRingAllReduce) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> configs = {
      {"hier", {"-x", "CHORUS_ALGO=hier"}},
      {"ring", {"-x", "CHORUS_ALGO=ring"}},
      {"tree", {"-x", "CHORUS_ALGO=tree"}}};
  for (const auto& [name, env] : configs)
    for (auto [nodes, np] : {std::make_pair(2, 4), std::make_pair(3, 6), std::make_pair(2, 2)}) {
      std::vector<std::string> launcher = env;
      launcher.insert(launcher.end(), {"--nodes", std::to_string(nodes)});
      const CommandResult r =
          launchWorkers(launcher, np,
                        {"--colls", "AllReduce", "--counts",
                         "0,1,7,1000,100003,524291,2500007,3000001", "--big", "minimal"},
                        120);
      EXPECT_EQ(r.exitCode, 0) << name << " " << nodes << "x" << np << "\n" << outputTail(r.output);
      EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << name;
    }
}

// The hierarchical AllGather and ReduceScatter (algo/hier.cc) forced: one, two and three ranks
// per node, 2-4 nodes; odd counts that leave the last chunk short, every type and op up to 1000
// elements, in and out of place. Simple only: a TCP link carries no LL, so CHORUS_PROTO=ll with
// CHORUS_ALGO=hier would run the ring with Simple (and warn, as the by-hand test below checks).
TEST(MultiNodeAlgorithms, ForcedHierAllGatherAndReduceScatter) {
  struct Case {
    int nodes, np;
    const char* counts;
  };
  for (const Case& c : {Case{2, 2, "0,1,7,1000,1000001"}, Case{2, 4, "0,1,7,1000,100003,1000001"},
                        Case{4, 8, "0,1,7,1000,100003"}, Case{3, 9, "0,1,7,1000,70001"},
                        Case{3, 6, "0,1,7,1000,1000001"}}) {
    const CommandResult r = launchWorkers(
        {"-x", "CHORUS_ALGO=hier", "-x", "CHORUS_DEBUG=WARN", "--nodes", std::to_string(c.nodes)},
        c.np, {"--colls", "AllGather,ReduceScatter", "--counts", c.counts, "--big", "minimal"},
        200);
    const std::string what = std::to_string(c.nodes) + "x" + std::to_string(c.np);
    EXPECT_FALSE(r.timedOut) << what << "\n" << outputTail(r.output);
    EXPECT_EQ(r.exitCode, 0) << what << "\n" << outputTail(r.output);
    EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << what;
    EXPECT_EQ(r.output.find("allow no algorithm"), std::string::npos) << what << "\n"
                                                                      << outputTail(r.output);
  }
}

// The same, and the hierarchical AllReduce (built on them), started as users' job scripts start
// ranks, one process each with the launcher variables and CHORUS_HOSTID for its node (no
// chorusrun, no pinning), beside a busy process on the same cores. Rank 0's log must show the
// hierarchical algorithm ran for each. And with LL asked for
// too, which no TCP link carries: the ring with Simple runs, every rank says so once per
// collective, and the results are still right.
TEST(MultiNodeAlgorithms, HierCollectivesByHandBesideABusyProcess) {
  const BusyProcesses busy(1);
  ASSERT_EQ(busy.error(), "");
  struct Case {
    const char* proto;
    int nodes, np;
  };
  for (const Case& c : {Case{"simple", 2, 4}, Case{"simple", 3, 6}, Case{"ll", 2, 4}}) {
    const std::string what =
        std::string(c.proto) + " " + std::to_string(c.nodes) + "x" + std::to_string(c.np);
    std::vector<HandRank> ranks = startRanksByHand(
        MP_WORKER_PATH, c.np, c.nodes,
        {"--colls", "AllGather,AllReduce,ReduceScatter", "--counts", "0,1,7,1000,100003", "--big",
         "minimal", "--timeout", "200"},
        "hierhand",
        {"CHORUS_ALGO=hier", std::string("CHORUS_PROTO=") + c.proto, "CHORUS_DEBUG=INFO"});
    waitRanksByHand(ranks, 240);
    const bool ll = std::string(c.proto) == "ll";
    for (int r = 0; r < c.np; ++r) {
      const std::string out = ranks[size_t(r)].output();
      EXPECT_EQ(ranks[size_t(r)].status, 0) << what << ", rank " << r << ":\n" << outputTail(out);
      EXPECT_EQ(occurrences(out, "allow no algorithm"), ll ? 3u : 0u)
          << what << ", rank " << r << ":\n"
          << outputTail(out);
    }
    const std::string out0 = ranks[0].output();
    for (const char* coll : {"AllGather", "AllReduce", "ReduceScatter"}) {
      // Every choice line of rank 0's for the collective names the algorithm expected.
      const std::string key = std::string(" ") + coll + " opCount ";
      size_t lines = 0;
      for (size_t at = out0.find(key); at != std::string::npos; at = out0.find(key, at + 1)) {
        const std::string line = out0.substr(at, out0.find('\n', at) - at);
        ++lines;
        EXPECT_NE(line.find(ll ? "algo ring proto simple" : "algo hier proto simple"),
                  std::string::npos)
            << what << ": " << line;
      }
      EXPECT_GT(lines, 0u) << what << " " << coll << "\n" << outputTail(out0);
    }
    if (ll) {
      EXPECT_EQ(out0.find("algo hier"), std::string::npos) << what;
    }
    EXPECT_EQ(out0.find(" 0 cases,"), std::string::npos) << what;
    if (!::testing::Test::HasFailure())
      for (auto& k : ranks) unlink(k.outPath.c_str());
  }
}

// Recursive halving-doubling AllReduce and recursive doubling AllReduce and AllGather
// (algo/halving_doubling.cc) forced in processes: on one node (shared memory only) and across
// emulated nodes (the exchanges at distance >= the node's ranks go through TCP), with power-of-two
// and other rank counts (folded pairs), even and uneven nodes. Every type and op, in place and out
// of place, up to 1000 elements (bit for bit on every rank: floating max and min included, which
// recursive doubling hands to the halving-doubling); the large counts (odd, not divisible by the
// ranks) for a minimal set of types and ops.
void forcedDoubling(const char* algo, const char* colls) {
  for (auto [nodes, np] : {std::make_pair(1, 2), std::make_pair(1, 3), std::make_pair(1, 6),
                           std::make_pair(2, 2), std::make_pair(2, 3), std::make_pair(2, 4),
                           std::make_pair(3, 5), std::make_pair(3, 6), std::make_pair(4, 8)}) {
    const CommandResult r = launchWorkers(
        {"-x", std::string("CHORUS_ALGO=") + algo, "--nodes", std::to_string(nodes)}, np,
        {"--colls", colls, "--counts", "0,1,7,1000,100003,1000001", "--big", "minimal"}, 120);
    EXPECT_FALSE(r.timedOut) << algo << " " << nodes << "x" << np << "\n" << outputTail(r.output);
    EXPECT_EQ(r.exitCode, 0) << algo << " " << nodes << "x" << np << "\n" << outputTail(r.output);
    EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << algo << " " << nodes << "x" << np;
  }
}

TEST(MultiNodeAlgorithms, ForcedHalvingDoublingAllReduce) {
  forcedDoubling("hd", "AllReduce");
}

TEST(MultiNodeAlgorithms, ForcedRecursiveDoublingAllReduceAllGatherReduceScatter) {
  forcedDoubling("rd", "AllReduce,AllGather,ReduceScatter");
}

// Nodes whose ranks are not consecutive (started by hand, rank r on node r % 2): the ring order
// is not the rank order, so the recursive doubling AllGather's groups of ring positions hold
// blocks scattered through the output (it sends them run by run), and the folded pairs (6 ranks:
// 2 of them) pair ranks 0 and 2, 4 and 1. The halving-doubling, the hierarchical and the ring
// the same way. Beside a busy process, as a training job's own computation shares the cores.
TEST(MultiNodeAlgorithms, DoublingOnInterleavedNodes) {
  const BusyProcesses busy(1);
  ASSERT_EQ(busy.error(), "");
  for (const char* algo : {"rd", "hd", "hier", "ring"}) {
    std::vector<HandRank> ranks = startRanksByHand(
        MP_WORKER_PATH, 6, 2,
        {"--colls", "AllReduce,AllGather,ReduceScatter", "--counts", "0,1,7,1000,100003", "--big",
         "minimal", "--timeout", "200"},
        "interleaved", {std::string("CHORUS_ALGO=") + algo, "CHORUS_DEBUG=INFO"}, true);
    waitRanksByHand(ranks, 240);
    for (int r = 0; r < 6; ++r) {
      const std::string out = ranks[size_t(r)].output();
      EXPECT_EQ(ranks[size_t(r)].status, 0) << algo << ", rank " << r << ":\n" << outputTail(out);
      EXPECT_EQ(out.find(" 0 cases,"), std::string::npos) << algo << ", rank " << r;
    }
    // Rank 0 ran the forced algorithm (CHORUS_DEBUG=INFO prints each call's choice).
    const std::string out0 = ranks[0].output();
    EXPECT_NE(out0.find(std::string("algo ") + algo + " proto"), std::string::npos)
        << algo << "\n"
        << outputTail(out0);
    if (!::testing::Test::HasFailure())
      for (auto& k : ranks) unlink(k.outPath.c_str());
  }
}

// Network namespaces (chorusrun --netns): each emulated node in its own namespace, joined by
// veth links, so the TCP transport really crosses interfaces (and optionally a shaped link).
// Needs root and a working `ip netns`; skipped with the reason otherwise.
std::string netnsUnavailable() {
  if (geteuid() != 0) return "not root";
  const std::string probe = "chorus-probe-" + std::to_string(getpid());
  const CommandResult add = runCommand({"/bin/sh", "-c", "ip netns add " + probe + " 2>&1"}, 20);
  runCommand({"/bin/sh", "-c", "ip netns delete " + probe + " 2>/dev/null"}, 20);
  if (add.exitCode != 0) return "ip netns add failed: " + add.output;
  return "";
}

// Namespaces of a chorusrun that is no longer running (other tests may run their own chorusrun
// in parallel under ctest -j, so only the dead owners' namespaces count as left behind).
std::string leftoverNamespaces() {
  const CommandResult r =
      runCommand({"/bin/sh", "-c", "ip netns list 2>/dev/null | grep '^chorus-' || true"}, 20);
  std::string left;
  size_t pos = 0;
  while (pos < r.output.size()) {
    size_t eol = r.output.find('\n', pos);
    if (eol == std::string::npos) eol = r.output.size();
    const std::string line = r.output.substr(pos, eol - pos);
    pos = eol + 1;
    int pid = 0;
    if (std::sscanf(line.c_str(), "chorus-%d-", &pid) == 1 && pid > 0 && kill(pid, 0) != 0)
      left += line + "\n";
  }
  return left;
}

class MultiNodeNetns : public ShmCheckedTestP<std::tuple<int, int>> {};

TEST_P(MultiNodeNetns, EveryCollectiveCorrect) {
  if (const std::string why = netnsUnavailable(); !why.empty()) GTEST_SKIP() << why;
  const auto [nodes, np] = GetParam();
  const CommandResult r = launchWorkers({"--netns", "--nodes", std::to_string(nodes)}, np,
                                        {"--counts", "0,1,7,1000", "--big", "none"}, 300);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << "a rank ran nothing";
  EXPECT_EQ(leftoverNamespaces(), "");
  std::printf("netns, %d nodes, %d ranks: %.1f s\n", nodes, np, r.seconds);
}

// 2 nodes of 2 + 1 ranks (uneven), 3 nodes of 2 + 2 + 1.
INSTANTIATE_TEST_SUITE_P(Namespaces, MultiNodeNetns,
                         ::testing::Values(std::make_tuple(2, 3), std::make_tuple(3, 5)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "nodes_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Clusters of 4 and 8 emulated nodes with 1 and 2 ranks each, every node in its own namespace:
// every collective (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather,
// Scatter, Send/Recv) with the tuner's choice, and the AllReduce algorithms that cross nodes
// (ring, tree, hier, halving-doubling) forced, on three types whose arithmetic differs.
class MultiNodeCluster : public ShmCheckedTestP<std::tuple<int, int>> {};

TEST_P(MultiNodeCluster, EveryCollectiveAndAlgorithmCorrect) {
  if (const std::string why = netnsUnavailable(); !why.empty()) GTEST_SKIP() << why;
  const auto [nodes, np] = GetParam();
  const CommandResult r =
      launchWorkers({"--netns", "--nodes", std::to_string(nodes)}, np,
                    {"--types", "float32,int64,bfloat16", "--ops", "sum,max,avg", "--counts",
                     "0,1,7,1000,70001", "--big", "none"},
                    500);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << "a rank ran nothing";
  std::printf("netns cluster, %d nodes, %d ranks, tuner's choice: %.1f s\n", nodes, np, r.seconds);
  for (const char* algo : {"ring", "tree", "hier", "hd", "rd"}) {
    const CommandResult f = launchWorkers(
        {"--netns", "--nodes", std::to_string(nodes), "-x", std::string("CHORUS_ALGO=") + algo}, np,
        {"--colls", "AllReduce", "--types", "float32,int64", "--ops", "sum,avg", "--counts",
         "1,7,1000,70001,2500007", "--big", "minimal"},
        500);
    EXPECT_FALSE(f.timedOut) << algo << ": " << outputTail(f.output);
    EXPECT_EQ(f.exitCode, 0) << "CHORUS_ALGO=" << algo << ":\n" << outputTail(f.output);
    std::printf("netns cluster, %d nodes, %d ranks, AllReduce %s: %.1f s\n", nodes, np, algo,
                f.seconds);
  }
  EXPECT_EQ(leftoverNamespaces(), "");
}

INSTANTIATE_TEST_SUITE_P(Clusters, MultiNodeCluster,
                         ::testing::Values(std::make_tuple(4, 4), std::make_tuple(4, 8),
                                           std::make_tuple(8, 8), std::make_tuple(8, 16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "nodes_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// A shaped link (tc) and the hierarchical AllReduce across it: right results, and nothing left
// behind.
TEST(MultiNodeNetnsShaped, HierAllReduceOverShapedLinks) {
  if (const std::string why = netnsUnavailable(); !why.empty()) GTEST_SKIP() << why;
  const CommandResult r = launchWorkers(
      {"--netns", "--link-rate", "1gbit", "--nodes", "2", "-x", "CHORUS_ALGO=hier"}, 4,
      {"--colls", "AllReduce", "--types", "float32,int64", "--ops", "sum,avg", "--counts",
       "1,1000,2500007", "--big", "minimal"},
      200);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << "a rank ran nothing";
  EXPECT_EQ(leftoverNamespaces(), "");
  std::printf("shaped netns: %.1f s\n", r.seconds);
}

// --link-mtu: every node's side of its link has the MTU asked for (what `ip link` shows inside the
// rank's namespace), and a collective whose messages fill jumbo frames crosses it exactly.
TEST(MultiNodeNetnsShaped, JumboFramesReachEveryNodeAndCarryExactResults) {
  if (const std::string why = netnsUnavailable(); !why.empty()) GTEST_SKIP() << why;
  const CommandResult links =
      runCommand({CHORUSRUN_PATH, "--netns", "--nodes", "2", "--link-mtu", "9000", "-np", "2",
                  "/bin/sh", "-c", "ip -o link show | grep -c 'mtu 9000' || true"},
                 60 * timeoutScale());
  EXPECT_EQ(links.exitCode, 0) << outputTail(links.output);
  EXPECT_NE(links.output.find("[0] 1\n"), std::string::npos) << outputTail(links.output);
  EXPECT_NE(links.output.find("[1] 1\n"), std::string::npos) << outputTail(links.output);
  const CommandResult r =
      launchWorkers({"--netns", "--link-rate", "1gbit", "--link-mtu", "9000", "--nodes", "2"}, 4,
                    {"--colls", "AllReduce,AllGather,Broadcast", "--types", "float32,int64",
                     "--ops", "sum", "--counts", "1,70001,2500007", "--big", "none"},
                    200);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << "a rank ran nothing";
  EXPECT_EQ(leftoverNamespaces(), "");
}

// --link-burst: the token bucket of every node's side of its link lets that many bytes through at
// once (what `tc qdisc show` prints inside the rank's namespace), and a collective crosses it
// exactly.
TEST(MultiNodeNetnsShaped, BurstReachesEveryNodeAndCarriesExactResults) {
  if (const std::string why = netnsUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // tc prints the burst it keeps, rounded through its clock ticks: "65500b" for 65536.
  const CommandResult links = runCommand(
      {CHORUSRUN_PATH, "--netns", "--nodes", "2", "--link-rate", "1gbit", "--link-burst", "65536",
       "-np", "2", "/bin/sh", "-c", "tc qdisc show | grep -o 'tbf .* burst [0-9]*[Kk]*b'"},
      60 * timeoutScale());
  EXPECT_EQ(links.exitCode, 0) << outputTail(links.output);
  for (const char* rank : {"[0] ", "[1] "}) {
    const size_t at = links.output.find(rank);
    ASSERT_NE(at, std::string::npos) << rank << outputTail(links.output);
    const size_t burst = links.output.find(" burst ", at);
    ASSERT_NE(burst, std::string::npos) << outputTail(links.output);
    char* end = nullptr;
    double bytes = std::strtod(links.output.c_str() + burst + 7, &end);
    if (*end == 'K' || *end == 'k') bytes *= 1024;
    EXPECT_NEAR(bytes, 65536, 2048) << outputTail(links.output);
  }
  const CommandResult r =
      launchWorkers({"--netns", "--link-rate", "1gbit", "--link-burst", "65536", "--nodes", "2"}, 4,
                    {"--colls", "AllReduce,ReduceScatter", "--types", "float32", "--ops", "sum",
                     "--counts", "1,70001,1000003", "--big", "none"},
                    200);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << "a rank ran nothing";
  EXPECT_EQ(leftoverNamespaces(), "");
}

// The link probe (core/net_probe.h): what every rank's "network link: ..." line (CHORUS_DEBUG=INFO)
// says, without its " in X ms" tail (each rank's own probe time), and those times.
struct LinkLines {
  std::vector<std::string> figures;
  std::vector<double> ms;
};
LinkLines linkLines(const std::string& out) {
  LinkLines l;
  const std::string key = "network link: ";
  for (size_t p = out.find(key); p != std::string::npos; p = out.find(key, p + 1)) {
    const size_t eol = out.find('\n', p);
    const std::string line = out.substr(p + key.size(), eol - p - key.size());
    const size_t in = line.rfind(" in ");
    l.figures.push_back(line.substr(0, in));
    l.ms.push_back(in == std::string::npos ? -1 : std::atof(line.c_str() + in + 4));
  }
  return l;
}

// A communicator across nodes measures its link at init; every rank ends with the same figures
// (the slowest rank's), in bounded time. Even nodes (every rank measures) and uneven ones (2 + 2
// + 1: only the first rank of each node measures, the others meet the barriers).
TEST(MultiNodeLinkProbe, EveryRankLearnsTheSameLink) {
  for (auto [nodes, np] : {std::make_pair(2, 4), std::make_pair(3, 5)}) {
    const CommandResult r =
        launchWorkers({"--nodes", std::to_string(nodes), "-x", "CHORUS_DEBUG=INFO"}, np,
                      {"--colls", "AllReduce", "--counts", "1,1000", "--big", "none"}, 120);
    ASSERT_EQ(r.exitCode, 0) << outputTail(r.output);
    const LinkLines l = linkLines(r.output);
    ASSERT_EQ(l.figures.size(), size_t(np)) << outputTail(r.output);
    for (const std::string& f : l.figures) EXPECT_EQ(f, l.figures[0]);
    double hop = 0, gbs = 0, nodeHop = 0, pipe = 0, reducePipe = 0;
    ASSERT_EQ(std::sscanf(l.figures[0].c_str(),
                          "%lf us per hop, %lf GB/s per node, %lf us per hop in a node, %lf and "
                          "%lf us",
                          &hop, &gbs, &nodeHop, &pipe, &reducePipe),
              5)
        << l.figures[0];
    EXPECT_GT(hop, 0);
    EXPECT_GT(gbs, 0);
    EXPECT_GT(nodeHop, 0);     // both shapes have a node of 2 ranks
    EXPECT_GT(pipe, 0);        // back-to-back chain Broadcasts
    EXPECT_GT(reducePipe, 0);  // and Reduces
    EXPECT_NE(l.figures[0].find("measured at init"), std::string::npos) << l.figures[0];
    // Tens of ms over loopback: 5 s leaves room for a loaded machine.
    for (double ms : l.ms) {
      EXPECT_GE(ms, 0);
      EXPECT_LT(ms, 5000) << l.figures[0];
    }
  }
}

// One node: nothing to measure, no line.
TEST(MultiNodeLinkProbe, OneNodeMeasuresNothing) {
  const CommandResult r =
      launchWorkers({"-x", "CHORUS_DEBUG=INFO"}, 2,
                    {"--colls", "AllReduce", "--counts", "1", "--big", "none"}, 60);
  ASSERT_EQ(r.exitCode, 0) << outputTail(r.output);
  EXPECT_NE(r.output.find("init done"), std::string::npos) << outputTail(r.output);
  EXPECT_TRUE(linkLines(r.output).figures.empty()) << outputTail(r.output);
}

// CHORUS_NET_GBS / CHORUS_NET_HOP_US replace the measurement, and the tuner's prediction follows
// the link: halving the bandwidth about doubles a 16 MiB AllReduce's predicted time (the JSON's
// predicted_time, from chorusTunerChoice).
double predicted16M(const std::string& gbs) {
  const std::string json = ::testing::TempDir() + "linkprobe_" + gbs + ".json";
  const CommandResult r = runCommand({CHORUSRUN_PATH,
                                      "--nodes",
                                      "2",
                                      "-np",
                                      "4",
                                      "-x",
                                      "CHORUS_DEBUG=INFO",
                                      "-x",
                                      "CHORUS_ALGO=hier",
                                      "-x",
                                      "CHORUS_NET_GBS=" + gbs,
                                      "-x",
                                      "CHORUS_NET_HOP_US=40",
                                      ALL_REDUCE_PERF_PATH,
                                      "-b",
                                      "16M",
                                      "-e",
                                      "16M",
                                      "-n",
                                      "1",
                                      "-w",
                                      "0",
                                      "-J",
                                      json},
                                     120 * timeoutScale());
  EXPECT_EQ(r.exitCode, 0) << outputTail(r.output);
  const LinkLines l = linkLines(r.output);
  EXPECT_EQ(l.figures.size(), 4u) << outputTail(r.output);
  for (const std::string& f : l.figures)
    EXPECT_EQ(f,
              "40.0 us per hop, " + gbs +
                  "0 GB/s per node, 0.0 us per hop in a node, 0.0 and 0.0 us per back-to-back "
                  "chain Broadcast and Reduce (set by CHORUS_NET_GBS / CHORUS_NET_HOP_US; 0: the "
                  "machine model's)");
  FILE* f = std::fopen(json.c_str(), "r");
  if (f == nullptr) return 0;
  std::string doc;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) doc.append(buf, n);
  std::fclose(f);
  const size_t p = doc.find("\"predicted_time\":");
  return p == std::string::npos ? 0 : std::atof(doc.c_str() + p + 17);
}

TEST(MultiNodeLinkProbe, EnvironmentSetsTheLinkAndThePredictionFollows) {
  const double slow = predicted16M("0.05"), fast = predicted16M("0.10");
  ASSERT_GT(fast, 0);
  EXPECT_GT(slow / fast, 1.8) << slow << " vs " << fast;
  EXPECT_LT(slow / fast, 2.05) << slow << " vs " << fast;
}

// Whether the kernel offers TCP congestion control `name`.
bool congestionAvailable(const std::string& name) {
  std::ifstream f("/proc/sys/net/ipv4/tcp_available_congestion_control");
  for (std::string w; f >> w;)
    if (w == name) return true;
  return false;
}

// The data connections' congestion control (CHORUS_SOCKET_CC): cubic unless asked, the one asked
// for, and for a name the kernel refuses a warning on every rank that names the variable, with the
// results still right. What each rank's "TCP transport: ..." line (CHORUS_DEBUG=INFO) reads back
// from its socket. Under chorusrun, then started by hand with the launcher variables beside a busy
// process.
TEST(MultiNodeSockets, CongestionControlIsTheOneAsked) {
  const bool cubic = congestionAvailable("cubic");
  const std::vector<std::string> args = {"--colls",  "AllReduce,Broadcast",
                                         "--types",  "float32",
                                         "--ops",    "sum",
                                         "--counts", "1,70001",
                                         "--big",    "none"};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "cubic"}, {"CHORUS_SOCKET_CC=reno", "reno"}, {"CHORUS_SOCKET_CC=nosuch", ""}};
  for (const auto& [env, want] : cases) {
    if (want == "cubic" && !cubic) continue;
    std::vector<std::string> opts = {"--nodes", "2", "-x", "CHORUS_DEBUG=INFO"};
    if (!env.empty()) opts.insert(opts.end(), {"-x", env});
    const CommandResult r = launchWorkers(opts, 4, args, 120);
    ASSERT_EQ(r.exitCode, 0) << env << outputTail(r.output);
    EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos) << "a rank ran nothing";
    if (!want.empty()) {
      EXPECT_EQ(occurrences(r.output, "connection(s), congestion control " + want + "\n"), 4u)
          << env << outputTail(r.output);
    } else {
      EXPECT_EQ(occurrences(r.output, "CHORUS_SOCKET_CC=nosuch: the kernel refused it"), 4u)
          << outputTail(r.output);
      for (int rank = 0; rank < 4; ++rank)
        EXPECT_NE(r.output.find("[" + std::to_string(rank) + "] CHORUS WARN CHORUS_SOCKET_CC"),
                  std::string::npos)
            << rank << outputTail(r.output);
    }
  }
  if (!cubic) return;
  const BusyProcesses busy(1);
  ASSERT_EQ(busy.error(), "");
  std::vector<std::string> handArgs = args;
  handArgs.insert(handArgs.end(), {"--timeout", "100"});
  std::vector<HandRank> ranks =
      startRanksByHand(MP_WORKER_PATH, 4, 2, handArgs, "cchand", {"CHORUS_DEBUG=INFO"});
  waitRanksByHand(ranks, 120);
  for (int r = 0; r < 4; ++r) {
    const std::string out = ranks[size_t(r)].output();
    EXPECT_EQ(ranks[size_t(r)].status, 0) << "rank " << r << ":\n" << outputTail(out);
    EXPECT_EQ(occurrences(out, "connection(s), congestion control cubic\n"), 1u)
        << "rank " << r << ":\n"
        << outputTail(out);
    EXPECT_EQ(out.find(" 0 cases,"), std::string::npos) << "rank " << r;
  }
  if (!::testing::Test::HasFailure())
    for (auto& k : ranks) unlink(k.outPath.c_str());
}

// A rank of another node dies right after init: the job ends (no hang) with a failure status.
TEST(MultiNodeFailure, DeadRemoteRankEndsTheJob) {
  const CommandResult r = launchNodes(2, 4, {"--crash-rank", "3", "--counts", "1000"}, 120);
  EXPECT_FALSE(r.timedOut) << outputTail(r.output);
  EXPECT_NE(r.exitCode, 0) << outputTail(r.output);
}

}  // namespace
