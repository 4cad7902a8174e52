// chorusRecvAny, the receive from any source: several senders, the receiver checks every
// message and its reported source against a reference (tests/anysource_check.h), in threads of
// one process and in processes (shared memory, and TCP between emulated nodes); MPI's matching
// order inside a group; collectives' data never taken for a message; bad calls refused.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "anysource_check.h"
#include "comm_set.h"
#include "run_command.h"
#include "threads.h"
#include "timing.h"
#include "watchdog.h"

namespace {

using namespace ctest;

void runThreaded(int n, const anysource::Options& o) {
  Watchdog wd(120, "any-source threads");
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::string> why(static_cast<size_t>(n));
  runThreads(n, [&](int r) { why[size_t(r)] = anysource::run(comms[r], r, n, o); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(why[size_t(r)], "") << "rank " << r;
}

TEST(AnySourceThreads, SmallMessagesWithAllReduceBetweenRounds) {
  anysource::Options o;
  o.count = 7;
  o.rounds = 40;
  o.perRound = 3;
  runThreaded(4, o);
}

TEST(AnySourceThreads, MultiSlotMessagesInAGroup) {
  anysource::Options o;
  o.count = 300000;  // 1.2 MB: many slots each
  o.rounds = 4;
  o.perRound = 2;
  o.group = true;
  runThreaded(3, o);
}

TEST(AnySourceThreads, SendersRunAheadIntoCollectives) {
  anysource::Options o;  // AllReduce after every round, no barrier before the receives
  o.count = 1000;
  o.rounds = 30;
  o.perRound = 1;
  o.collEvery = 1;
  runThreaded(5, o);
}

// In a group, a named receive issued after an any-source receive gets the message after the one
// the any-source receive matched (MPI's order); the any-source receive reports its source.
TEST(AnySourceThreads, GroupKeepsIssueOrderWithNamedReceives) {
  Watchdog wd(60, "any-source order");
  CommSet comms(3);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<int32_t> a(5, -1), b(5, -1);
  int source = -7;
  std::vector<chorusResult_t> res(3, chorusSuccess);
  runThreads(3, [&](int r) {
    if (r == 0) {
      chorusGroupStart();
      chorusRecvAny(a.data(), 5, chorusInt32, &source, comms[0], nullptr);
      chorusRecv(b.data(), 5, chorusInt32, 1, comms[0], nullptr);
      res[0] = chorusGroupEnd();
    } else if (r == 1) {
      std::vector<int32_t> m1(5, 11), m2(5, 22);
      res[1] = chorusSend(m1.data(), 5, chorusInt32, 0, comms[1], nullptr);
      if (res[1] == chorusSuccess)
        res[1] = chorusSend(m2.data(), 5, chorusInt32, 0, comms[1], nullptr);
    }
  });
  for (int r = 0; r < 3; ++r) ASSERT_EQ(res[size_t(r)], chorusSuccess) << "rank " << r;
  EXPECT_EQ(source, 1);
  EXPECT_EQ(a, std::vector<int32_t>(5, 11));
  EXPECT_EQ(b, std::vector<int32_t>(5, 22));
}

TEST(AnySourceErrors, BadCallsAreRefusedAndTheCommunicatorStaysUsable) {
  Watchdog wd(60, "any-source errors");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  int32_t x = 0;
  int source = 5;
  EXPECT_EQ(chorusRecvAny(&x, 0, chorusInt32, &source, comms[0], nullptr), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(comms[0])).find("count is 0"), std::string::npos)
      << chorusGetLastError(comms[0]);
  EXPECT_EQ(chorusRecvAny(nullptr, 4, chorusInt32, &source, comms[0], nullptr),
            chorusInvalidArgument);
  EXPECT_EQ(chorusRecvAny(&x, 1, chorusDataType_t(15), &source, comms[0], nullptr),
            chorusInvalidArgument);
  // Still usable: one message, source NULL allowed.
  std::vector<chorusResult_t> res(2);
  int32_t got = -1;
  runThreads(2, [&](int r) {
    int32_t v = 42;
    res[size_t(r)] = r == 0 ? chorusRecvAny(&got, 1, chorusInt32, nullptr, comms[0], nullptr)
                            : chorusSend(&v, 1, chorusInt32, 0, comms[1], nullptr);
  });
  EXPECT_EQ(res[0], chorusSuccess) << chorusGetLastError(comms[0]);
  EXPECT_EQ(res[1], chorusSuccess);
  EXPECT_EQ(got, 42);
}

// A matched message shorter than the receive: named as such, not a hang.
TEST(AnySourceErrors, ShorterMessageIsReported) {
  Watchdog wd(60, "any-source short");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<chorusResult_t> res(2);
  std::string err;
  runThreads(2, [&](int r) {
    std::vector<int32_t> v(10, 3), got(15);
    if (r == 0) {
      res[0] = chorusRecvAny(got.data(), 15, chorusInt32, nullptr, comms[0], nullptr);
      err = chorusGetLastError(comms[0]);
    } else {
      res[1] = chorusSend(v.data(), 10, chorusInt32, 0, comms[1], nullptr);
      if (res[1] == chorusSuccess)
        res[1] = chorusSend(v.data(), 10, chorusInt32, 0, comms[1], nullptr);
    }
  });
  EXPECT_EQ(res[0], chorusInvalidUsage);
  EXPECT_NE(err.find("shorter"), std::string::npos) << err;
  EXPECT_EQ(res[1], chorusSuccess);
}

// Processes: chorusrun -np N [--nodes K] chorus_anysource_worker ...
void runProcesses(int np, int nodes, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CHORUSRUN_PATH, "--timeout",
                                   std::to_string(int(90 * timeoutScale()))};
  if (nodes > 1) argv.insert(argv.end(), {"--nodes", std::to_string(nodes)});
  argv.insert(argv.end(), {"-np", std::to_string(np), ANYSOURCE_WORKER_PATH});
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--timeout", "80"});
  const CommandResult r = runCommand(argv, 120 * timeoutScale());
  EXPECT_EQ(r.exitCode, 0) << r.output;
  for (int k = 0; k < np; ++k)
    EXPECT_NE(r.output.find("DONE rank=" + std::to_string(k)), std::string::npos) << r.output;
}

TEST(AnySourceProcesses, SharedMemory) {
  runProcesses(4, 1, {"--count", "5000", "--rounds", "20", "--per-round", "2"});
}

TEST(AnySourceProcesses, SharedMemoryGroupedMultiSlot) {
  runProcesses(3, 1, {"--count", "250000", "--rounds", "3", "--group", "1"});
}

TEST(AnySourceProcesses, TcpBetweenEmulatedNodes) {
  runProcesses(4, 2, {"--count", "3000", "--rounds", "10", "--per-round", "2"});
}

TEST(AnySourceProcesses, TcpMultiSlot) {
  runProcesses(4, 2, {"--count", "250000", "--rounds", "2", "--group", "1"});
}

}  // namespace
