// The one-thread-per-call rule (ApiGuard, comm/comm.cc): a communicator is biased to the first
// thread that calls (no locked instruction per call); another thread's first call revokes the
// bias once, after which every call takes the lock word. Checked: calls handed between threads
// in turn all succeed; a call from a second thread while the biased one is inside (a call in a
// group, a group ended while another thread is inside) is refused without touching its buffers or
// the call in progress; threads racing on fresh communicators, where the bias is taken and revoked,
// never run two calls at once (each result is checked against its own inputs).
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm_set.h"
#include "gtest_helpers.h"
#include "result_name.h"
#include "watchdog.h"

namespace {

using namespace ctest;

class ApiGuardTest : public ShmCheckedTest {};

// AllReduce (int32 sum) of `n` elements of `value` on `comm`; empty when the result is
// value + other everywhere, else what went wrong.
std::string allReduceOnce(chorusComm_t comm, size_t n, int32_t value, int32_t other) {
  std::vector<int32_t> in(n, value), out(n, -1);
  const chorusResult_t r =
      chorusAllReduce(in.data(), out.data(), n, chorusInt32, chorusSum, comm, nullptr);
  if (r != chorusSuccess) return std::string("AllReduce returned ") + resultName(r);
  for (size_t i = 0; i < n; ++i)
    if (out[i] != value + other)
      return "element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
             std::to_string(value + other);
  return "";
}

TEST_F(ApiGuardTest, CallsHandedBetweenThreadsInTurnAllSucceed) {
  Watchdog watchdog(120, "CallsHandedBetweenThreadsInTurnAllSucceed");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  // A new pair of threads each round: the first takes the bias, the second revokes it, the
  // rest run in the locked mode; the test's own thread calls in between.
  for (int round = 0; round < 6; ++round) {
    std::string e0, e1;
    std::thread t0([&] { e0 = allReduceOnce(comms[0], 1000, 10 * round, round); });
    std::thread t1([&] { e1 = allReduceOnce(comms[1], 1000, round, 10 * round); });
    t0.join();
    t1.join();
    EXPECT_EQ(e0, "") << "round " << round << " rank 0";
    EXPECT_EQ(e1, "") << "round " << round << " rank 1";
    if (round % 2 == 1) {
      std::thread t([&] { e1 = allReduceOnce(comms[1], 7, 2, 3); });
      EXPECT_EQ(allReduceOnce(comms[0], 7, 3, 2), "") << "round " << round << " test thread";
      t.join();
      EXPECT_EQ(e1, "") << "round " << round << " rank 1 beside the test thread";
    }
  }
}

TEST_F(ApiGuardTest, SecondThreadRefusedWhileTheBiasedThreadIsInside) {
  Watchdog watchdog(120, "SecondThreadRefusedWhileTheBiasedThreadIsInside");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  const size_t n = 5000;
  std::atomic<int> phase{0};
  std::string first0, second0, first1;
  // Rank 0's thread: one call (the communicator is biased to it), then a second that waits
  // inside for rank 1.
  std::thread t0([&] {
    first0 = allReduceOnce(comms[0], n, 1, 2);
    phase = 1;
    second0 = allReduceOnce(comms[0], n, 5, 6);
    phase = 2;
  });
  std::thread t1([&] {
    first1 = allReduceOnce(comms[1], n, 2, 1);
    while (phase.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    first1 += allReduceOnce(comms[1], n, 6, 5);
  });
  while (phase.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(phase.load(), 1) << "the second AllReduce returned without its peer";
  std::vector<int32_t> in(n, 9), out(n, -1);
  EXPECT_EQ(chorusAllReduce(in.data(), out.data(), n, chorusInt32, chorusSum, comms[0], nullptr),
            chorusInvalidUsage);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "second thread", 0))
      << chorusGetLastError(nullptr);
  // A call in a group is refused too, and so is the group (nothing of it runs).
  ASSERT_EQ(chorusGroupStart(), chorusSuccess);
  EXPECT_EQ(chorusBroadcast(in.data(), out.data(), n, chorusInt32, 0, comms[0], nullptr),
            chorusInvalidUsage);
  EXPECT_EQ(chorusGroupEnd(), chorusInvalidUsage);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], -1) << "a refused call wrote its recvbuff";
  phase = 3;  // rank 1 joins the call in progress
  t0.join();
  t1.join();
  EXPECT_EQ(first0, "");
  EXPECT_EQ(second0, "") << "the call in progress";
  EXPECT_EQ(first1, "");
  // Afterwards (the bias revoked) the test's thread may drive rank 0.
  std::string e1;
  std::thread t([&] { e1 = allReduceOnce(comms[1], 33, 4, 8); });
  EXPECT_EQ(allReduceOnce(comms[0], 33, 8, 4), "");
  t.join();
  EXPECT_EQ(e1, "");
}

// A group whose calls were accepted, ended while another thread is inside a call on its
// communicator: refused, and nothing of it runs.
TEST_F(ApiGuardTest, GroupEndedWhileAnotherThreadIsInsideIsRefused) {
  Watchdog watchdog(120, "GroupEndedWhileAnotherThreadIsInsideIsRefused");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  const size_t n = 3000;
  std::vector<int32_t> in(n, 9), out(n, -1);
  ASSERT_EQ(chorusGroupStart(), chorusSuccess);
  ASSERT_EQ(chorusBroadcast(in.data(), out.data(), n, chorusInt32, 0, comms[0], nullptr),
            chorusSuccess);
  std::atomic<bool> started{false};
  std::string e0, e1;
  std::thread t0([&] {
    started = true;
    e0 = allReduceOnce(comms[0], n, 3, 4);
  });
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(chorusGroupEnd(), chorusInvalidUsage);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "chorusGroupEnd", 0))
      << chorusGetLastError(nullptr);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], -1) << "the refused group wrote its recvbuff";
  std::thread t1([&] { e1 = allReduceOnce(comms[1], n, 4, 3); });
  t0.join();
  t1.join();
  EXPECT_EQ(e0, "") << "the call in progress";
  EXPECT_EQ(e1, "");
}

TEST_F(ApiGuardTest, RacingThreadsNeverRunTwoCallsAtOnce) {
  Watchdog watchdog(120, "RacingThreadsNeverRunTwoCallsAtOnce");
  constexpr int kComms = 20, kCalls = 30;
  const size_t n = 256;
  for (int c = 0; c < kComms; ++c) {
    CommSet comms(2);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    // Rank 1 makes kCalls calls adding 1; two threads race to make rank 0's kCalls, each holding
    // a ticket for a call it retries while refused. Every result must be its own input + 1.
    std::atomic<int> tickets{0}, refused{0};
    std::string e1, e0[2];
    std::thread t1([&] {
      std::vector<int32_t> in(n, 1), out(n);
      for (int i = 0; i < kCalls && e1.empty(); ++i) {
        const chorusResult_t r =
            chorusAllReduce(in.data(), out.data(), n, chorusInt32, chorusSum, comms[1], nullptr);
        if (r != chorusSuccess) e1 = std::string("AllReduce returned ") + resultName(r);
        for (size_t k = 1; k < n && e1.empty(); ++k)
          if (out[k] != out[0])
            e1 = "the result differs between elements 0 and " + std::to_string(k);
      }
    });
    std::vector<std::thread> racers;
    for (int x = 0; x < 2; ++x)
      racers.emplace_back([&, x] {
        for (int i = 0; tickets.fetch_add(1) < kCalls; ++i) {
          const int32_t mine = 1000 * (x + 1) + i;
          std::vector<int32_t> in(n, mine), out(n, -1);
          chorusResult_t r;
          while ((r = chorusAllReduce(in.data(), out.data(), n, chorusInt32, chorusSum, comms[0],
                                      nullptr)) == chorusInvalidUsage) {
            refused++;
            for (size_t k = 0; k < n; ++k)
              if (out[k] != -1) {
                e0[x] = "a refused call wrote its recvbuff";
                return;
              }
            std::this_thread::yield();
          }
          if (r != chorusSuccess) {
            e0[x] = std::string("AllReduce returned ") + resultName(r);
            return;
          }
          for (size_t k = 0; k < n; ++k)
            if (out[k] != mine + 1) {
              e0[x] = "element " + std::to_string(k) + " is " + std::to_string(out[k]) +
                      ", expected " + std::to_string(mine + 1);
              return;
            }
        }
      });
    for (auto& t : racers) t.join();
    t1.join();
    ASSERT_EQ(e0[0], "") << "communicator " << c << ", racer 0";
    ASSERT_EQ(e0[1], "") << "communicator " << c << ", racer 1";
    ASSERT_EQ(e1, "") << "communicator " << c << ", rank 1";
  }
}

}  // namespace
