// Persistent channel workers (src/algo/channel_workers.h): a communicator whose calls run on
// several channels starts its workers once (on its first multi-channel call) and keeps them, so
// the process's thread count (/proc/self/task) stays the same over many calls; destroy and abort
// join them (no "chorus-ch*" thread left); a rank whose peer fails mid-call still fails the call
// on every channel, marks the communicator failed, and its workers are joined at destroy.
//
// Ranks are threads (chorusCommInitAll); CHORUS_ALGO=ring and CHORUS_MIN/MAX_NCHANNELS force the
// channel count (read when a communicator is created).
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm_set.h"
#include "gtest_helpers.h"
#include "scoped_env.h"
#include "threads.h"
#include "watchdog.h"

namespace {

using namespace ctest;

// Threads of this process, and those of them named chorus-ch* (the channel workers).
int taskCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}
int workerCount() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(e.path() / "comm");
    std::string name;
    std::getline(f, name);
    if (name.rfind("chorus-ch", 0) == 0) ++n;
  }
  return n;
}
// Polls until taskCount() <= want (threads that have just been joined may linger an instant).
int settledTaskCount(int want) {
  int n = taskCount();
  for (int i = 0; i < 100 && n > want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = taskCount();
  }
  return n;
}

// The thread count with no communicator, once the process-wide threads the library starts on
// first use (the status-signal watcher) run: a communicator created and destroyed first.
int baselineTaskCount() {
  {
    CommSet warm(2);
    EXPECT_EQ(warm.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  }
  int n = taskCount();
  for (int i = 0; i < 20; ++i) {  // until it stops changing (a detached bootstrap root ends)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int now = taskCount();
    if (now == n) break;
    n = now;
  }
  return n;
}

// One AllReduce of `count` floats on every rank; true when every result is right.
bool allReduceOnce(CommSet& comms, size_t count, int iter) {
  const int n = comms.size();
  std::vector<int> ok(size_t(n), 0);
  runThreads(n, [&](int r) {
    std::vector<float> a(count), b(count, -1.f);
    for (size_t i = 0; i < count; ++i) a[i] = float(r + 1) + float((i + size_t(iter)) % 7);
    if (chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[r], nullptr) !=
        chorusSuccess)
      return;
    for (size_t i = 0; i < count; ++i)
      if (b[i] != float(n * (n + 1) / 2) + float(n) * float((i + size_t(iter)) % 7)) return;
    ok[size_t(r)] = 1;
  });
  for (int v : ok)
    if (!v) return false;
  return true;
}

class ChannelWorkers : public ShmCheckedTest {};

TEST_F(ChannelWorkers, ConstantThreadCountAndNoneAfterDestroy) {
  Watchdog watchdog(120, "ConstantThreadCountAndNoneAfterDestroy");
  constexpr int kRanks = 2, kChannels = 4;
  ScopedEnv algo("CHORUS_ALGO", "ring"), minCh("CHORUS_MIN_NCHANNELS", "4"),
      maxCh("CHORUS_MAX_NCHANNELS", "4");
  ASSERT_EQ(workerCount(), 0);
  const int before = baselineTaskCount();
  {
    CommSet comms(kRanks);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    EXPECT_EQ(workerCount(), 0) << "workers start on the first multi-channel call, not at init";
    ASSERT_TRUE(allReduceOnce(comms, 64 << 10, 0));
    EXPECT_EQ(workerCount(), kRanks * (kChannels - 1));
    const int running = taskCount();
    for (int i = 1; i <= 300; ++i) {
      // Several sizes: a call may use fewer channels than the workers (tiny shares).
      ASSERT_TRUE(allReduceOnce(comms, i % 3 == 0 ? 100 : (16 << 10) + size_t(i), i)) << i;
      if (i % 50 == 0) {
        ASSERT_EQ(taskCount(), running) << "after " << i << " calls";
        ASSERT_EQ(workerCount(), kRanks * (kChannels - 1)) << "after " << i << " calls";
      }
    }
    ASSERT_EQ(comms.destroyAll(), chorusSuccess) << chorusGetLastError(nullptr);
    EXPECT_EQ(workerCount(), 0);
  }
  EXPECT_LE(settledTaskCount(before), before);
}

TEST_F(ChannelWorkers, AbortJoinsWorkers) {
  Watchdog watchdog(120, "AbortJoinsWorkers");
  ScopedEnv algo("CHORUS_ALGO", "ring"), minCh("CHORUS_MIN_NCHANNELS", "2"),
      maxCh("CHORUS_MAX_NCHANNELS", "2");
  ASSERT_EQ(workerCount(), 0);
  const int before = baselineTaskCount();
  {
    CommSet comms(2);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(allReduceOnce(comms, 32 << 10, i)) << i;
    EXPECT_EQ(workerCount(), 2);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(chorusCommAbort(comms[r]), chorusSuccess);
      comms.forget(r);
    }
    EXPECT_EQ(workerCount(), 0);
  }
  EXPECT_LE(settledTaskCount(before), before);
}

// Rank 1 aborts while rank 0 is inside a two-channel AllReduce: both of rank 0's channels (the
// caller's and the worker's) stop, the call fails, the communicator is failed (later calls are
// refused at once), and destroying it joins the worker.
TEST_F(ChannelWorkers, PeerFailureStopsEveryChannel) {
  Watchdog watchdog(120, "PeerFailureStopsEveryChannel");
  ScopedEnv algo("CHORUS_ALGO", "ring"), minCh("CHORUS_MIN_NCHANNELS", "2"),
      maxCh("CHORUS_MAX_NCHANNELS", "2");
  const int before = baselineTaskCount();
  {
    CommSet comms(2);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    ASSERT_TRUE(allReduceOnce(comms, 32 << 10, 0));
    ASSERT_EQ(workerCount(), 2);
    const size_t count = 256 << 10;
    std::vector<float> a(count, 1.f), b(count, 0.f);
    chorusResult_t res = chorusSuccess;
    std::thread caller([&] {
      res = chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[0], nullptr);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(chorusCommAbort(comms[1]), chorusSuccess);
    comms.forget(1);
    caller.join();
    EXPECT_NE(res, chorusSuccess);
    chorusResult_t async = chorusSuccess;
    ASSERT_EQ(chorusCommGetAsyncError(comms[0], &async), chorusSuccess);
    EXPECT_NE(async, chorusSuccess);
    EXPECT_NE(
        chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[0], nullptr),
        chorusSuccess);
    EXPECT_EQ(workerCount(), 1);  // rank 0's worker, parked again
    EXPECT_EQ(chorusCommDestroy(comms[0]), chorusSuccess);
    comms.forget(0);
    EXPECT_EQ(workerCount(), 0);
  }
  EXPECT_LE(settledTaskCount(before), before);
}

}  // namespace
