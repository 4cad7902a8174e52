// The machine's record of the CPUs self-bound ranks hold (src/topo/cpu_claims.h), called as
// placement calls it, with live processes (this one and children that sleep) as the holders, in
// a record of the test's own. Binding itself, by two jobs of real ranks, is checked in
// test_launchers.cc (Placement.SecondJobTakesOnlyTheCpusTheFirstLeft).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "topo/cpu_claims.h"

namespace chorus {
namespace {

std::vector<int> range(int from, int to) {  // [from, to)
  std::vector<int> v(size_t(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// A child that sleeps until killed: a live process of another rank.
struct Sleeper {
  pid_t pid = fork();
  Sleeper() {
    if (pid == 0) {
      pause();
      _exit(0);
    }
  }
  void stop() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Sleeper() { stop(); }
};

std::string recordPath(const char* name) {
  const std::string path =
      std::string(::testing::TempDir()) + "chorus-claims-" + name + "-" + std::to_string(getpid());
  std::remove(path.c_str());
  return path;
}

TEST(CpuClaims, SecondJobSharesWhatTheFirstLeftAndThirdStaysUnbound) {
  const std::string path = recordPath("jobs");
  Sleeper other;
  ASSERT_GT(other.pid, 0);
  const std::vector<int32_t> pids{int32_t(getpid()), int32_t(other.pid)};
  // Job 1 on CPUs 0-7: its first rank to come claims both shares; the second finds its own.
  ClaimedShare a1 = claimShare(path, 1, range(0, 8), pids, 1);
  EXPECT_EQ(a1.cpus, range(4, 8));
  EXPECT_EQ(a1.note, "");
  ClaimedShare a0 = claimShare(path, 1, range(0, 8), pids, 0);
  EXPECT_EQ(a0.cpus, range(0, 4));
  // Job 2 given CPUs 0-15: the 8 job 1 left, 4 each.
  ClaimedShare b0 = claimShare(path, 2, range(0, 16), pids, 0);
  ClaimedShare b1 = claimShare(path, 2, range(0, 16), pids, 1);
  EXPECT_EQ(b0.cpus, range(8, 12));
  EXPECT_EQ(b1.cpus, range(12, 16));
  EXPECT_NE(b0.note.find("CPUs 0-7 held by another job's ranks"), std::string::npos) << b0.note;
  // Job 3: nothing free, so no rank of it binds.
  ClaimedShare c0 = claimShare(path, 3, range(0, 16), pids, 0);
  EXPECT_TRUE(c0.cpus.empty());
  EXPECT_NE(c0.note.find("0 free for this node's 2 ranks: not binding"), std::string::npos)
      << c0.note;
  // The other process dies: its CPUs (4-7 of job 1, 12-15 of job 2) are free again.
  other.stop();
  ClaimedShare d = claimShare(path, 4, range(0, 16), {int32_t(getpid())}, 0);
  std::vector<int> want = range(4, 8);
  for (int cpu : range(12, 16)) want.push_back(cpu);
  EXPECT_EQ(d.cpus, want);
  std::remove(path.c_str());
}

TEST(CpuClaims, WithoutAUsableRecordThePlainShare) {
  const std::vector<int32_t> self{int32_t(getpid()), int32_t(getpid())};
  // Turned off.
  ClaimedShare off = claimShare("none", 1, range(0, 4), self, 1);
  EXPECT_EQ(off.cpus, range(2, 4));
  EXPECT_EQ(off.note, "");
  // A folder that does not exist.
  ClaimedShare missing = claimShare("/nonexistent-chorus-dir/claims", 1, range(0, 4), self, 0);
  EXPECT_EQ(missing.cpus, range(0, 2));
  EXPECT_NE(missing.note.find("cannot open /nonexistent-chorus-dir/claims"), std::string::npos)
      << missing.note;
  // A pid with no process: no start time to record.
  Sleeper gone;
  const int32_t dead = int32_t(gone.pid);
  gone.stop();
  const std::string path = recordPath("dead");
  ClaimedShare nostart = claimShare(path, 1, range(0, 4), {int32_t(getpid()), dead}, 0);
  EXPECT_EQ(nostart.cpus, range(0, 2));
  EXPECT_NE(nostart.note.find("no start time for pid " + std::to_string(dead)), std::string::npos)
      << nostart.note;
  // A file of something else: taken as an empty record and rewritten.
  {
    std::ofstream junk(path);
    junk << std::string(100, 'x');
  }
  ClaimedShare over = claimShare(path, 1, range(0, 4), self, 0);
  EXPECT_EQ(over.cpus, range(0, 2));
  EXPECT_EQ(over.note, "");
  std::remove(path.c_str());
}

TEST(CpuClaims, StartTimeOfThisProcessAndNone) {
  EXPECT_GT(processStartTime(int32_t(getpid())), 0u);
  EXPECT_EQ(processStartTime(-5), 0u);
}

}  // namespace
}  // namespace chorus
