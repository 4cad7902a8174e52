// The network failing between emulated nodes (chorusrun --netns): 4 ranks on 2 nodes x 2 (and 4
// nodes x 1 for a link down) loop an AllReduce that checks every result
// (tests/netfault_worker.cc); after 20 calls the last node's network fails. One trial of
// scripts/netfault_table.sh --trial does the work (starts the job, injects the fault, reads every
// rank's report, looks for namespaces and /dev/shm files left behind) and answers in JSON.
//   - link down, host gone (veth deleted, ranks stopped, namespace deleted), firewall drop (the
//     switch drops all the node sends: half-open connections): every survivor fails within
//     CHORUS_TIMEOUT + 3 s naming a network failure and the unreachable node(s), the job exits
//     non-zero, nothing hangs, nothing is left behind;
//   - a flap shorter than the timeout, 5% and 30% loss: the job completes, every result exact;
//   - a rank that hangs on a node losing 30% of what it sends, or while another node sends no
//     TCP data for 2 s as the timeouts fire (CHORUS_TIMEOUT 10 s): every survivor names it as
//     hung (not stopped), or no one (the network too slow for the bound), never another rank,
//     though the status queries that follow the waits cross the lossy or mute link;
//   - started by hand (each node's ranks with torchrun's variables, no launcher watching them),
//     survivors exiting at their report: a firewall drop and the hang under a mute node, where
//     the survivors left must still name the network or the hung rank, not one that exited;
//   - started by torchrun on each node (static rendezvous at node 0, the C worker with
//     --no-python), whose agent stops a node's other ranks once one ended: a firewall drop, every
//     survivor naming the network or stopped by its agent before its report, never a wrong name.
// And one job of the network soak (NetSoak). Skipped with a reason without root / ip netns, or
// without nft for the faults that need it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "gtest_helpers.h"
#include "launch.h"
#include "run_command.h"
#include "timing.h"

using namespace ctest;

namespace {

constexpr double kChorusTimeout = 5;  // CHORUS_TIMEOUT where the network fails for good

std::string netfaultUnavailable(const std::string& fault) {
  if (geteuid() != 0) return "not root";
  const std::string probe = "chorus-nfprobe-" + std::to_string(getpid());
  const CommandResult add = runCommand({"/bin/sh", "-c", "ip netns add " + probe + " 2>&1"}, 20);
  runCommand({"/bin/sh", "-c", "ip netns delete " + probe + " 2>/dev/null"}, 20);
  if (add.exitCode != 0) return "ip netns add failed: " + add.output;
  if (fault == "drop" || fault.rfind("hang", 0) == 0 || fault.rfind("loss", 0) == 0) {
    const CommandResult nft = runCommand({"/bin/sh", "-c", "command -v nft"}, 20);
    if (nft.exitCode != 0) return "nft not found (apt-get install nftables)";
  }
  return "";
}

// The JSON line netfault_table.sh ends with, into *j: false if the run timed out, failed or
// printed none.
bool lastJsonLine(const CommandResult& r, nlohmann::json* j) {
  if (r.timedOut || r.exitCode != 0) return false;
  const size_t brace = r.output.rfind("\n{");
  *j = nlohmann::json::parse(r.output.substr(brace == std::string::npos ? 0 : brace + 1), nullptr,
                             false);
  return !j->is_discarded();
}

// Whether netfault_table.sh's interpreter (.venv/bin/python, else python3) runs a torchrun job
// (scripts/torchrun_probe.sh): "" if so, else why not.
std::string torchrunUnavailable() {
  const CommandResult r = runCommand({"/bin/sh", "-c",
                                      "cd \"$(dirname " NETFAULT_TABLE_PATH ")/..\" && p=python3; "
                                      "[ -x .venv/bin/python ] && p=.venv/bin/python; "
                                      "scripts/torchrun_probe.sh $p 2>&1"},
                                     90);
  return r.exitCode == 0 ? "" : outputTail(r.output);
}

// (fault, nodes, launch): "hand": each node starts its ranks with torchrun's variables and
// nothing watches them, and a survivor exits at its report (netfault_table.sh's LAUNCH=hand);
// "torchrun": each node's torchrun starts its ranks (LAUNCH=torchrun); "": chorusrun starts
// every rank and survivors linger until all reported.
class NetFaults : public ShmCheckedTestP<std::tuple<std::string, int, std::string>> {};

TEST_P(NetFaults, SurvivorsNameTheNetworkOrResultsStayExact) {
  const auto [fault, nodes, launch] = GetParam();
  if (const std::string why = netfaultUnavailable(fault); !why.empty()) GTEST_SKIP() << why;
  if (launch == "torchrun")
    if (const std::string why = torchrunUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // CHORUS_TIMEOUT: 5 s where the network fails for good; 15 s where it must only slow the
  // calls, because TCP's retransmission backoff alone can stall a wait for seconds (30% loss:
  // several losses of one segment in a row, 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s; netfault_table.sh
  // shows those rows at 5 s too, and at 15 s: 120 of 120 exact); 30 s for the flap, whose 1.5 s
  // outage stalled a wait about 3 s on a quiet machine, over 10 s once in a CI run beside the
  // sanitizer build (its load stretches the retransmission timeout, which doubles with every
  // retry) and over 15 s once in another with two busy processes beside it too (2026-12-02: the
  // job's first timeout, named rank 0, which waited on the link).
  const bool fails = fault == "down" || fault == "gone" || fault == "drop";
  const bool hang = fault.rfind("hang", 0) == 0;
  const int chorusTimeout = fails ? int(kChorusTimeout) : hang ? 10 : fault == "flap" ? 30 : 15;
  const CommandResult r = runCommand(
      {"/bin/sh", "-c",
       (launch.empty() ? std::string() : "LAUNCH=" + launch + " ") +
           "TIMEOUT=" + std::to_string(chorusTimeout) +
           " " NETFAULT_TABLE_PATH " " BENCH_DIR " --trial " + fault + " " + std::to_string(nodes)},
      150 * timeoutScale());
  nlohmann::json j;
  ASSERT_TRUE(lastJsonLine(r, &j))
      << (r.timedOut ? "timed out" : "exit status " + std::to_string(r.exitCode)) << ": "
      << outputTail(r.output);
  EXPECT_TRUE(j["setup_errors"].empty()) << j["setup_errors"].dump();
  EXPECT_FALSE(j["hang"].get<bool>()) << j.dump(1);
  EXPECT_TRUE(j["leftovers"].empty()) << j["leftovers"].dump();
  EXPECT_TRUE(j["correct"].get<bool>()) << j.dump(1);
  if (fails) {
    EXPECT_NE(j["rc"].get<int>(), 0);
    // Every survivor reports a network failure (the script checked the nodes each one names),
    // but under torchrun one its agent stopped first (SIGTERM, once a rank of its node ended).
    const size_t survivors = fault == "gone" ? size_t(4 - 4 / nodes) : 4;
    EXPECT_EQ(j["reports"].size() + size_t(j["stopped"].get<int>()), survivors) << j.dump(1);
    EXPECT_GT(j["reports"].size(), 0u) << j.dump(1);
    for (const auto& [rank, msg] : j["reports"].items())
      EXPECT_NE(msg.get<std::string>().find("network failure: node"), std::string::npos)
          << "rank " << rank << ": " << msg;
    ASSERT_FALSE(j["worst_s"].is_null());
    // The timeout, the 1 s network probe that follows it, and the rest: 8.06 s once in a CI run
    // beside the sanitizer build (2026-11-28, over the +3 s bound this test had); 7.05-7.11 s in
    // 120 quiet trials, 10.86 s once in 20 at a load average of 44-78 (docs/reliability.md).
    // Bounded, not TCP's minutes.
    EXPECT_LT(j["worst_s"].get<double>(), kChorusTimeout + 5 * timeoutScale()) << j.dump(1);
  } else if (hang) {
    // netfault_table.sh judged each survivor's culprit (`correct`): the hung rank, or -1 with
    // the network too slow for the bound.
    EXPECT_NE(j["rc"].get<int>(), 0);
    EXPECT_EQ(j["reports"].size(), 3u) << j.dump(1);
    EXPECT_EQ(j["named"].get<int>() + j["nobody"].get<int>(), 3) << j.dump(1);
  } else {
    EXPECT_EQ(j["rc"].get<int>(), 0) << j.dump(1);
  }
  std::printf("%s, %d nodes: worst %.2f s\n", fault.c_str(), nodes,
              j["worst_s"].is_null() ? -1.0 : j["worst_s"].get<double>());
}

// One job of the network soak (scripts/netfault_table.sh --soak): the worker's mix of five
// collectives (1-256 Ki int32, every result checked) on 2 nodes x 2 ranks for 12 s while 5% or
// 30% loss (1-5 s) and link flaps (0.3-3 s) hit random nodes one after another, each healed
// 1.5 s before the ranks stop: the job completes, exact, nothing left behind. The JSON names its
// seed (the test's pid): `netfault_table.sh build --soak-job 12 2 4 SEED` runs the same faults.
TEST(NetSoak, MixUnderLossAndFlapsStaysExact) {
  if (const std::string why = netfaultUnavailable("loss5"); !why.empty()) GTEST_SKIP() << why;
  const CommandResult r = runCommand(
      {"/bin/sh", "-c",
       NETFAULT_TABLE_PATH " " BENCH_DIR " --soak-job 12 2 4 " + std::to_string(getpid())},
      200 * timeoutScale());
  nlohmann::json j;
  ASSERT_TRUE(lastJsonLine(r, &j))
      << (r.timedOut ? "timed out" : "exit status " + std::to_string(r.exitCode)) << ": "
      << outputTail(r.output);
  EXPECT_TRUE(j["ok"].get<bool>()) << j.dump(1);
  EXPECT_FALSE(j["hang"].get<bool>()) << j.dump(1);
  EXPECT_TRUE(j["leftovers"].empty()) << j["leftovers"].dump();
  EXPECT_GT(j["calls"].get<int>(), 0) << j.dump(1);
  EXPECT_FALSE(j["faults"].empty()) << "no fault was injected: " << j.dump(1);
  std::printf("%d calls, faults %s\n", j["calls"].get<int>(), j["faults"].dump().c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Faults, NetFaults,
    ::testing::Values(std::make_tuple("down", 2, ""), std::make_tuple("down", 4, ""),
                      std::make_tuple("gone", 2, ""), std::make_tuple("drop", 2, ""),
                      std::make_tuple("drop", 4, "hand"), std::make_tuple("drop", 2, "torchrun"),
                      std::make_tuple("flap", 2, ""), std::make_tuple("loss5", 2, ""),
                      std::make_tuple("loss30", 2, ""), std::make_tuple("hang30", 2, ""),
                      std::make_tuple("hangmute", 4, ""), std::make_tuple("hangmute", 2, "hand")),
    [](const auto& info) {
      const std::string& launch = std::get<2>(info.param);
      return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "nodes" +
             (launch == "hand" ? "_byhand"
              : launch.empty() ? ""
                               : "_" + launch);
    });

}  // namespace
