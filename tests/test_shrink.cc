// chorusCommShrink (src/core/shrink.cc): argument checks, explicit exclusion of live ranks
// (threads, every rank calling), a rank that left being dropped, and ranks as processes started
// by hand with launcher variables (tests/shrink_worker.cc): a rank killed during a loop of
// AllReduces, the survivors shrink and go on with exact results, on one node and across two
// emulated nodes, down to one rank, with nothing left behind (threads, listeners, /dev/shm).
#include <arpa/inet.h>
#include <chorus/chorus.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm_set.h"
#include "core/shrink_wire.h"
#include "handstart.h"
#include "process.h"
#include "scoped_env.h"
#include "shm_leaks.h"
#include "threads.h"
#include "timing.h"
#include "watchdog.h"

namespace {

using namespace ctest;

// ---- threads ----

TEST(Shrink, BadArguments) {
  Watchdog watchdog(60, "Shrink.BadArguments");
  CommSet comms(1);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  chorusComm_t c = comms[0], nc = reinterpret_cast<chorusComm_t>(0x1);
  const int outOfRange[1] = {1}, negative[1] = {-1}, self[1] = {0};
  EXPECT_EQ(chorusCommShrink(c, nullptr, 0, nullptr, nullptr, 0), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(c)).find("newcomm is NULL"), std::string::npos);
  EXPECT_EQ(chorusCommShrink(c, outOfRange, 1, &nc, nullptr, 0), chorusInvalidArgument);
  EXPECT_EQ(nc, nullptr);
  EXPECT_NE(std::string(chorusGetLastError(c)).find("excludeRanksList[0] = 1"), std::string::npos)
      << chorusGetLastError(c);
  EXPECT_EQ(chorusCommShrink(c, negative, 1, &nc, nullptr, 0), chorusInvalidArgument);
  EXPECT_EQ(chorusCommShrink(c, nullptr, 2, &nc, nullptr, 0), chorusInvalidArgument);
  EXPECT_EQ(chorusCommShrink(c, self, -1, &nc, nullptr, 0), chorusInvalidArgument);
  EXPECT_EQ(chorusCommShrink(c, nullptr, 0, &nc, nullptr, 7), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(c)).find("shrinkFlags 7"), std::string::npos);
  EXPECT_EQ(chorusCommShrink(nullptr, nullptr, 0, &nc, nullptr, 0), chorusInvalidArgument);
  // Excluding itself: no communicator, no error.
  nc = reinterpret_cast<chorusComm_t>(0x1);
  EXPECT_EQ(chorusCommShrink(c, self, 1, &nc, nullptr, 0), chorusSuccess);
  EXPECT_EQ(nc, nullptr);
  // Nothing excluded: a copy of one rank that works.
  ASSERT_EQ(chorusCommShrink(c, nullptr, 0, &nc, nullptr, 0), chorusSuccess);
  ASSERT_NE(nc, nullptr);
  int n = 0;
  chorusCommCount(nc, &n);
  EXPECT_EQ(n, 1);
  double x = 3, y = 0;
  EXPECT_EQ(chorusAllReduce(&x, &y, 1, chorusDouble, chorusSum, nc, nullptr), chorusSuccess);
  EXPECT_EQ(y, 3);
  EXPECT_EQ(chorusCommDestroy(nc), chorusSuccess);
}

TEST(Shrink, DuplicateExcludedRank) {
  Watchdog watchdog(60, "Shrink.DuplicateExcludedRank");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  const int dup[2] = {1, 1};
  chorusComm_t nc = nullptr;
  EXPECT_EQ(chorusCommShrink(comms[0], dup, 2, &nc, nullptr, 0), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(comms[0])).find("appears twice"), std::string::npos)
      << chorusGetLastError(comms[0]);
  EXPECT_EQ(nc, nullptr);
}

// Every rank calls with the same list; the excluded ones get no communicator, the others one
// whose ranks are the survivors in order, and exact AllReduce results on it.
void shrinkLiveRanks(int n, const std::vector<int>& excluded) {
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<chorusComm_t> out(size_t(n), nullptr);
  std::vector<chorusResult_t> rs(size_t(n), chorusInternalError);
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end()) survivors.push_back(r);
  std::vector<std::vector<double>> results(static_cast<size_t>(n));
  const size_t count = 5000;
  runThreads(n, [&](int r) {
    rs[size_t(r)] = chorusCommShrink(comms[r], excluded.data(), int(excluded.size()),
                                     &out[size_t(r)], nullptr, CHORUS_SHRINK_DEFAULT);
    if (rs[size_t(r)] != chorusSuccess || out[size_t(r)] == nullptr) return;
    std::vector<double> send(count);
    for (size_t k = 0; k < count; ++k) send[k] = double(r * 100 + int(k % 97));
    results[size_t(r)].assign(count, -1);
    rs[size_t(r)] = chorusAllReduce(send.data(), results[size_t(r)].data(), count, chorusDouble,
                                    chorusSum, out[size_t(r)], nullptr);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(rs[size_t(r)], chorusSuccess) << "rank " << r << ": " << chorusGetLastError(nullptr);
    const bool isOut = std::find(excluded.begin(), excluded.end(), r) != excluded.end();
    if (isOut) {
      EXPECT_EQ(out[size_t(r)], nullptr) << "excluded rank " << r << " got a communicator";
      continue;
    }
    ASSERT_NE(out[size_t(r)], nullptr) << "rank " << r;
    int nr = -1, nn = 0;
    chorusCommUserRank(out[size_t(r)], &nr);
    chorusCommCount(out[size_t(r)], &nn);
    EXPECT_EQ(nn, int(survivors.size()));
    EXPECT_EQ(nr, int(std::find(survivors.begin(), survivors.end(), r) - survivors.begin()));
    for (size_t k = 0; k < count; ++k) {
      double want = 0;
      for (int s : survivors) want += double(s * 100 + int(k % 97));
      ASSERT_EQ(results[size_t(r)][k], want) << "rank " << r << " index " << k;
    }
  }
  runThreads(n, [&](int r) {
    if (out[size_t(r)]) {
      EXPECT_EQ(chorusCommDestroy(out[size_t(r)]), chorusSuccess);
    }
  });
}

TEST(Shrink, ExcludeLiveRanksAllCalling) {
  Watchdog watchdog(120, "Shrink.ExcludeLiveRanksAllCalling");
  shrinkLiveRanks(4, {1, 3});
  shrinkLiveRanks(5, {0});  // the bootstrap root's rank
  shrinkLiveRanks(3, {});
}

// A rank that destroyed the parent is dropped without a list, and without waiting for the bound.
TEST(Shrink, RankThatLeftIsDropped) {
  Watchdog watchdog(120, "Shrink.RankThatLeftIsDropped");
  ScopedEnv bound("CHORUS_SHRINK_TIMEOUT", "100");
  CommSet comms(4);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  ASSERT_EQ(chorusCommDestroy(comms[0]), chorusSuccess);
  comms.forget(0);
  std::vector<chorusComm_t> out(4, nullptr);
  std::vector<chorusResult_t> rs(4, chorusInternalError);
  const double t0 = nowSeconds();
  runThreads(3, [&](int i) {
    const int r = i + 1;
    rs[size_t(r)] = chorusCommShrink(comms[r], nullptr, 0, &out[size_t(r)], nullptr, 0);
    if (rs[size_t(r)] != chorusSuccess) return;
    int v = r, sum = 0;
    rs[size_t(r)] = chorusAllReduce(&v, &sum, 1, chorusInt32, chorusSum, out[size_t(r)], nullptr);
    if (sum != 1 + 2 + 3) rs[size_t(r)] = chorusInternalError;
  });
  EXPECT_LT(nowSeconds() - t0, 60.0) << "the shrink waited for the bound";
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(rs[size_t(r)], chorusSuccess) << "rank " << r;
    int nr = -1;
    if (out[size_t(r)]) chorusCommUserRank(out[size_t(r)], &nr);
    EXPECT_EQ(nr, r - 1);
  }
  runThreads(4, [&](int r) {
    if (out[size_t(r)]) chorusCommDestroy(out[size_t(r)]);
  });
}

// CHORUS_SHRINK_ABORT on a healthy communicator: rank 0's queued Recv (its peer never sends)
// is stopped, and every rank gets the new communicator.
TEST(Shrink, AbortStopsQueuedWork) {
  Watchdog watchdog(120, "Shrink.AbortStopsQueuedWork");
  CommSet comms(3);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  chorusStream_t stream = nullptr;
  ASSERT_EQ(chorusStreamCreate(&stream), chorusSuccess);
  std::vector<float> buf(16, 0);
  ASSERT_EQ(chorusRecv(buf.data(), buf.size(), chorusFloat, 1, comms[0], stream), chorusSuccess);
  EXPECT_EQ(chorusStreamQuery(stream), chorusInProgress);
  std::vector<chorusComm_t> out(3, nullptr);
  std::vector<chorusResult_t> rs(3, chorusInternalError);
  runThreads(3, [&](int r) {
    rs[size_t(r)] =
        chorusCommShrink(comms[r], nullptr, 0, &out[size_t(r)], nullptr, CHORUS_SHRINK_ABORT);
    if (rs[size_t(r)] != chorusSuccess) return;
    int v = r + 1, sum = 0;
    rs[size_t(r)] = chorusAllReduce(&v, &sum, 1, chorusInt32, chorusSum, out[size_t(r)], nullptr);
    if (sum != 6) rs[size_t(r)] = chorusInternalError;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rs[size_t(r)], chorusSuccess) << "rank " << r;
  EXPECT_NE(chorusStreamSynchronize(stream), chorusSuccess) << "the queued Recv was not stopped";
  chorusStreamDestroy(stream);
  runThreads(3, [&](int r) {
    if (out[size_t(r)]) chorusCommDestroy(out[size_t(r)]);
    chorusCommAbort(comms[r]);
    comms.forget(r);
  });
}

// Bad bytes in a rank's mailbox (what a same-node peer reads; kShrink notices carry the same
// bytes across nodes, fuzz/fuzz_shrink.cc): junk, a truncated view, a view claiming another
// sender, a decision for rank 2's leadership with a broken id. Rank 2 never calls; the others
// ignore what it "published", drop it at the bound, and compute. (A 1 s bound: the follower must
// not give up on the leader while the leader legitimately waits that long for rank 2's view.)
TEST(Shrink, BadMessagesAreIgnored) {
  Watchdog watchdog(120, "Shrink.BadMessagesAreIgnored");
  ScopedEnv bound("CHORUS_SHRINK_TIMEOUT", "1");
  using namespace chorus::shrinkwire;
  Message view;
  view.seq = 1;
  view.sender = 0;  // not the box's owner
  const std::string wrongSender = encode(view);
  view.sender = 2;
  const std::string truncated = encode(view).substr(0, kHeaderBytes - 3);
  Message decision;
  decision.kind = Kind::kDecision;
  decision.seq = 1;
  decision.sender = 2;
  std::string brokenId = encode(decision);
  brokenId[brokenId.size() - CHORUS_UNIQUE_ID_BYTES] ^= 0x5a;  // the id's magic
  for (const std::string& bad : {std::string("\xde\xad\xbe\xef junk that is not a message"),
                                 truncated, wrongSender, brokenId}) {
    CommSet comms(3);
    ASSERT_EQ(comms.initResult(), chorusSuccess);
    chorus::ShrinkBox* box = comms[2]->mySegment.shrinkBox();
    memcpy(box->data, bad.data(), bad.size());
    box->bytes = uint32_t(bad.size());
    box->version.store(2);
    std::vector<chorusComm_t> out(2, nullptr);
    std::vector<chorusResult_t> rs(2, chorusInternalError);
    runThreads(2, [&](int r) {
      rs[size_t(r)] = chorusCommShrink(comms[r], nullptr, 0, &out[size_t(r)], nullptr, 0);
      if (rs[size_t(r)] != chorusSuccess) return;
      int v = r + 1, sum = 0;
      rs[size_t(r)] = chorusAllReduce(&v, &sum, 1, chorusInt32, chorusSum, out[size_t(r)], nullptr);
      if (sum != 3) rs[size_t(r)] = chorusInternalError;
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(rs[size_t(r)], chorusSuccess)
          << "rank " << r << ", bad message of " << bad.size() << " bytes";
      int n = 0;
      if (out[size_t(r)]) chorusCommCount(out[size_t(r)], &n);
      EXPECT_EQ(n, 2);
    }
    runThreads(2, [&](int r) {
      if (out[size_t(r)]) chorusCommDestroy(out[size_t(r)]);
    });
  }
}

// A live rank that never calls (here rank 0, the natural leader; then rank 2, a follower) is
// dropped at the bound (for the leader: twice the bound and a second).
TEST(Shrink, SilentRankIsDroppedAtTheBound) {
  Watchdog watchdog(120, "Shrink.SilentRankIsDroppedAtTheBound");
  ScopedEnv bound("CHORUS_SHRINK_TIMEOUT", "1");
  for (int silent : {0, 2}) {
    CommSet comms(3);
    ASSERT_EQ(comms.initResult(), chorusSuccess);
    std::vector<chorusComm_t> out(3, nullptr);
    std::vector<chorusResult_t> rs(3, chorusSuccess);
    const double t0 = nowSeconds();
    runThreads(3, [&](int r) {
      if (r == silent) return;
      rs[size_t(r)] = chorusCommShrink(comms[r], nullptr, 0, &out[size_t(r)], nullptr, 0);
      if (rs[size_t(r)] != chorusSuccess) return;
      int v = r + 1, sum = 0;
      rs[size_t(r)] = chorusAllReduce(&v, &sum, 1, chorusInt32, chorusSum, out[size_t(r)], nullptr);
      if (sum != 6 - (silent + 1)) rs[size_t(r)] = chorusInternalError;
    });
    const double took = nowSeconds() - t0;
    EXPECT_GE(took, 0.9) << "silent rank " << silent << " dropped before the bound";
    EXPECT_LT(took, 30.0);
    for (int r = 0; r < 3; ++r) {
      if (r == silent) continue;
      EXPECT_EQ(rs[size_t(r)], chorusSuccess) << "rank " << r << ", silent rank " << silent;
      int n = 0;
      if (out[size_t(r)]) chorusCommCount(out[size_t(r)], &n);
      EXPECT_EQ(n, 2);
    }
    runThreads(3, [&](int r) {
      if (out[size_t(r)]) chorusCommDestroy(out[size_t(r)]);
    });
  }
}

// ---- processes ----

// Rank r on emulated node r * nodes / n, started by hand (tests/support/handstart.h).
std::vector<HandRank> startRanks(int n, int nodes, const std::vector<std::string>& args,
                                 const std::string& tag) {
  return startRanksByHand(SHRINK_WORKER_PATH, n, nodes, args, "shrink-" + tag);
}

// n ranks on `nodes` emulated nodes; `kills` as the worker's --kill; every rank not killed must
// end with exact results, one shrink per kill, and no threads, listeners or segments left.
void killAndShrink(int n, int nodes, const std::string& kills, int nkills, const std::string& tag) {
  Watchdog watchdog(240, "Shrink." + tag);
  const std::set<std::string> shmBefore = shmEntries();
  std::vector<HandRank> ranks = startRanks(
      n, nodes, {"--iters", "30", "--count", "3000", "--kill", kills, "--timeout", "150"}, tag);
  waitRanksByHand(ranks, 180);
  std::set<int> victims;
  {
    std::stringstream ss(kills);
    std::string item;
    while (std::getline(ss, item, ',')) victims.insert(std::atoi(item.c_str()));
  }
  std::string all;
  for (int r = 0; r < n; ++r)
    all += "--- rank " + std::to_string(r) + "\n" + ranks[size_t(r)].output();
  for (int r = 0; r < n; ++r) {
    const HandRank& k = ranks[size_t(r)];
    const std::string out = k.output();
    if (victims.count(r)) {
      EXPECT_EQ(k.status, 128 + SIGKILL) << "victim rank " << r << "\n" << all;
      continue;
    }
    EXPECT_EQ(k.status, 0) << tag << ": rank " << r << "\n" << all;
    EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << tag << ": rank " << r << "\n" << out;
    const auto done = fieldsOfLine(out, "DONE");
    EXPECT_EQ(done.count("ok") ? done.at("ok") : "", "1") << tag << ": rank " << r << "\n" << out;
    int shrinks = 0;
    for (size_t p = out.find("SHRUNK "); p != std::string::npos; p = out.find("SHRUNK ", p + 1))
      ++shrinks;
    EXPECT_EQ(shrinks, nkills) << tag << ": rank " << r << "\n" << out;
    const auto leaks = fieldsOfLine(out, "LEAKS");
    EXPECT_EQ(leaks.count("threads") ? leaks.at("threads") : "?", "0") << tag << " rank " << r;
    EXPECT_EQ(leaks.count("listeners") ? leaks.at("listeners") : "?", "0") << tag << " rank " << r;
    EXPECT_EQ(leaks.count("shm") ? leaks.at("shm") : "?", "0") << tag << " rank " << r;
  }
  const auto leaked = leakedShm(shmBefore);
  EXPECT_TRUE(leaked.empty()) << tag << ": " << leaked.size() << " /dev/shm entries left, e.g. "
                              << (leaked.empty() ? "" : leaked[0]);
  removeShm(leaked);
  if (!::testing::Test::HasFailure())
    for (auto& k : ranks) unlink(k.outPath.c_str());
}

TEST(ShrinkProcesses, KillOneRankOneNode) {
  killAndShrink(4, 1, "2@6", 1, "one-node");
}
TEST(ShrinkProcesses, KillRootRankOneNode) {
  killAndShrink(4, 1, "0@4", 1, "root");
}
TEST(ShrinkProcesses, KillOneRankTwoNodes) {
  killAndShrink(4, 2, "1@5", 1, "two-nodes");
}
TEST(ShrinkProcesses, KillRootRankTwoNodes) {
  killAndShrink(4, 2, "0@5", 1, "two-nodes-root");
}
TEST(ShrinkProcesses, RepeatedKillsDownToOneRank) {
  killAndShrink(4, 1, "3@3,0@8,1@13", 3, "down-to-one");
}
TEST(ShrinkProcesses, RepeatedKillsDownToOneRankTwoNodes) {
  killAndShrink(4, 2, "2@3,0@8,3@13", 3, "down-to-one-two-nodes");
}

TEST(ShrinkProcesses, SevenKillsOfEightRanksTwoNodes) {
  killAndShrink(8, 2, "7@3,0@6,3@9,5@12,1@15,2@18,6@21", 7, "eight-down-to-one");
}

// Excluding a live rank on purpose, every rank (it too) calling, as processes across nodes.
TEST(ShrinkProcesses, ExcludeLiveRankTwoNodes) {
  Watchdog watchdog(200, "ShrinkProcesses.ExcludeLiveRankTwoNodes");
  std::vector<HandRank> ranks = startRanks(
      4, 2, {"--iters", "12", "--count", "500", "--exclude", "2@4", "--timeout", "120"}, "exclude");
  waitRanksByHand(ranks, 150);
  for (int r = 0; r < 4; ++r) {
    const std::string out = ranks[size_t(r)].output();
    EXPECT_EQ(ranks[size_t(r)].status, 0) << "rank " << r << "\n" << out;
    EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
    if (r == 2)
      EXPECT_NE(out.find("EXCLUDED it=4"), std::string::npos) << out;
    else
      EXPECT_NE(out.find("SHRUNK it=4"), std::string::npos) << out;
    EXPECT_NE(out.find("DONE rank=" + std::to_string(r) + " ok=1"), std::string::npos) << out;
  }
  if (!::testing::Test::HasFailure())
    for (auto& k : ranks) unlink(k.outPath.c_str());
}

}  // namespace
