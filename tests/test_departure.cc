// Departures: at the end of a job ranks leave one by one, each as soon as its last call returns
// (chorusCommDestroy, then exit; or exit without destroying). A rank that leaves fails nobody:
// the others still finish their last calls with the ranks that remain, even when they wait for a
// slow rank and the rank that left was their neighbour (a tree's rotating health checks, a TCP
// connection's end of file).
// A rank that makes one call more than the others fails within moments, naming the rank that
// left, instead of hanging. As threads, as processes on one node and across two emulated nodes
// (tests/departure_worker.cc, started by hand with launcher variables).
#include <chorus/chorus.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "handstart.h"
#include "scoped_env.h"
#include "threads.h"
#include "watchdog.h"

namespace {

using namespace ctest;

struct Case {
  int nodes, nranks;
  std::string coll, algo;
};

std::string caseName(const Case& c) {
  return std::to_string(c.nodes) + "nodes_" + std::to_string(c.nranks) + "ranks_" + c.coll + "_" +
         (c.algo.empty() ? "auto" : c.algo);
}

// Runs the worker on every rank; returns every rank's output, and checks each exit status.
std::string runJob(const Case& c, const std::vector<std::string>& args, const std::string& tag) {
  std::vector<std::string> env;
  if (!c.algo.empty()) env.push_back("CHORUS_ALGO=" + c.algo);
  std::vector<HandRank> ranks =
      startRanksByHand(DEPARTURE_WORKER_PATH, c.nranks, c.nodes, args, tag, env);
  waitRanksByHand(ranks, 90);
  std::string all;
  for (int r = 0; r < c.nranks; ++r)
    all += "--- rank " + std::to_string(r) + "\n" + ranks[size_t(r)].output();
  for (int r = 0; r < c.nranks; ++r) {
    EXPECT_EQ(ranks[size_t(r)].status, 0) << caseName(c) << ": rank " << r << "\n" << all;
    EXPECT_TRUE(fieldsOfLine(ranks[size_t(r)].output(), "DONE")["_found"] == "1")
        << caseName(c) << ": rank " << r << "\n"
        << all;
  }
  if (!::testing::Test::HasFailure())
    for (auto& k : ranks) unlink(k.outPath.c_str());
  return all;
}

std::string testName(const ::testing::TestParamInfo<Case>& i) {
  return caseName(i.param);
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << caseName(c);
}

// Rank n-2 sleeps before its last call: the ranks that do not need it (the root of a broadcast,
// the ranks whose part is done) finish and leave first, each as `leave` says (the worker's
// --leave: destroy, exit).
void leaveEarly(const Case& c, const std::string& leave, const std::string& suite) {
  Watchdog watchdog(120, suite + "." + caseName(c));
  runJob(c,
         {"--coll", c.coll, "--iters", "12", "--slow", std::to_string(c.nranks - 2), "--slow-sec",
          "0.7", "--timeout", "60", "--leave", leave},
         leave == "destroy" ? "depart" : "noexit");
}

class EarlyLeavers : public ::testing::TestWithParam<Case> {};

TEST_P(EarlyLeavers, FailNobody) {
  leaveEarly(GetParam(), "destroy", "EarlyLeavers");
}

INSTANTIATE_TEST_SUITE_P(
    Departure, EarlyLeavers,
    ::testing::Values(Case{1, 3, "allreduce", "tree"}, Case{1, 4, "broadcast", "tree"},
                      Case{1, 4, "allreduce", "ring"}, Case{1, 3, "broadcast", ""},
                      Case{2, 3, "allreduce", ""}, Case{2, 3, "allreduce", "tree"},
                      Case{2, 3, "allreduce", "ring"}, Case{2, 4, "broadcast", ""},
                      Case{2, 4, "broadcast", "tree"}, Case{2, 4, "allreduce", "hier"}),
    testName);

class LeaversWithoutDestroy : public ::testing::TestWithParam<Case> {};

// As EarlyLeavers, but every rank ends with exit() right after its last call, its communicator
// never destroyed (a C program that forgets to): the library leaves for it at exit
// (comm/comm.cc leaveAtExit), so the ranks still finishing their last calls across nodes get
// everything it sent. Before that, a broadcast root that ran ahead took its unsent chunks with
// it and every other rank failed naming it.
TEST_P(LeaversWithoutDestroy, FailNobody) {
  leaveEarly(GetParam(), "exit", "LeaversWithoutDestroy");
}

INSTANTIATE_TEST_SUITE_P(
    Departure, LeaversWithoutDestroy,
    ::testing::Values(Case{1, 3, "allreduce", ""}, Case{2, 3, "allreduce", "ring"},
                      Case{2, 3, "allreduce", "tree"}, Case{2, 4, "broadcast", ""},
                      Case{2, 4, "broadcast", "tree"}, Case{2, 4, "allreduce", "hier"}),
    testName);

class ExtraCall : public ::testing::TestWithParam<Case> {};

// The last rank calls AllReduce once more after the others left: its call fails with
// chorusRemoteError naming a rank that destroyed its communicator (the worker checks the code;
// its watchdog turns a hang into exit status 99).
TEST_P(ExtraCall, FailsNamingTheRankThatLeft) {
  const Case& c = GetParam();
  Watchdog watchdog(120, "ExtraCall." + caseName(c));
  const std::string all = runJob(c,
                                 {"--coll", c.coll, "--iters", "5", "--extra",
                                  std::to_string(c.nranks - 1), "--timeout", "60"},
                                 "extra");
  EXPECT_NE(all.find("destroyed its communicator while this rank still waits"), std::string::npos)
      << all;
}

INSTANTIATE_TEST_SUITE_P(Departure, ExtraCall,
                         ::testing::Values(Case{1, 2, "allreduce", ""},
                                           Case{1, 3, "allreduce", "tree"},
                                           Case{2, 2, "allreduce", ""},
                                           Case{2, 3, "allreduce", "ring"},
                                           Case{2, 4, "allreduce", "hier"}),
                         testName);

// Threads of one process: rank 0, the broadcast's root, leaves right after its last call while
// rank 2 waits for rank 1, which is late; then rank 2 alone calls once more and fails.
TEST(DepartureThreads, RootLeavesWhileOthersFinishThenAnExtraCallFails) {
  Watchdog watchdog(60, "DepartureThreads");
  constexpr int n = 3;
  constexpr size_t count = 5000;
  ScopedEnv algo("CHORUS_ALGO", "tree");
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  std::vector<chorusResult_t> last(n, chorusInternalError), extra(n, chorusSuccess);
  std::vector<std::string> msg(n);
  std::vector<int> wrong(n, 0);
  runThreads(n, [&](int r) {
    chorusComm_t comm = nullptr;
    if (chorusCommInitRank(&comm, n, id, r) != chorusSuccess) return;
    std::vector<float> buf(count);
    for (int it = 0; it < 4; ++it) {
      if (r == 1 && it == 3) std::this_thread::sleep_for(std::chrono::milliseconds(700));
      for (size_t k = 0; k < count; ++k) buf[k] = r == 0 ? float(it * 1000 + int(k % 500)) : -1;
      last[size_t(r)] =
          chorusBroadcast(buf.data(), buf.data(), count, chorusFloat32, 0, comm, nullptr);
      if (last[size_t(r)] != chorusSuccess) break;
      for (size_t k = 0; k < count; ++k)
        if (buf[k] != float(it * 1000 + int(k % 500))) ++wrong[size_t(r)];
    }
    if (r == 2 && last[size_t(r)] == chorusSuccess) {
      // Ranks 0 and 1 destroy theirs right after their last call.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      extra[size_t(r)] =
          chorusAllReduce(buf.data(), buf.data(), count, chorusFloat32, chorusSum, comm, nullptr);
      msg[size_t(r)] = chorusGetLastError(comm);
    }
    chorusCommDestroy(comm);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(last[size_t(r)], chorusSuccess) << "rank " << r;
    EXPECT_EQ(wrong[size_t(r)], 0) << "rank " << r;
  }
  EXPECT_EQ(extra[2], chorusRemoteError);
  EXPECT_NE(msg[2].find("destroyed its communicator"), std::string::npos) << msg[2];
}

}  // namespace
