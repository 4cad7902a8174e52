// Fault injection: the error boundary holds. Each test starts its ranks by hand
// (tests/fault_worker.cc, launcher variables), gives one of them a fault of the system (an
// allocation that fails, thread creation refused, descriptors exhausted, /dev/shm full, mmap
// refused) or kills one inside the bootstrap exchange, and checks that every rank ends with a
// clear result: success, or an error code whose message names the cause and the rank; no rank
// ends by a signal (std::terminate, SIGBUS, SIGSEGV), none hangs, and nothing is left in /dev/shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "handstart.h"
#include "process.h"
#include "shm_leaks.h"
#include "timing.h"

namespace {

using ctest::HandRank;

// The RESULT line of a fault worker's output ("_found" missing: none).
struct Result {
  bool found = false;
  int rank = -1;
  std::string stage, code, msg;
  int failed = -1;
  double t = 0;
  long allocs = 0;
};

Result resultOf(const std::string& out) {
  Result r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RESULT ", 0) != 0) continue;
    r.found = true;
    const size_t m = line.find(" msg=");
    r.msg = m == std::string::npos ? "" : line.substr(m + 5);
    std::istringstream ls(line.substr(7, m == std::string::npos ? std::string::npos : m - 7));
    std::string kv;
    std::map<std::string, std::string> f;
    while (ls >> kv) {
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) f[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    r.rank = atoi(f["rank"].c_str());
    r.stage = f["stage"];
    r.code = f["code"];
    r.failed = atoi(f["failed"].c_str());
    r.t = atof(f["t"].c_str());
    r.allocs = atol(f["allocs"].c_str());
  }
  return r;
}

std::string describe(const std::vector<HandRank>& ranks) {
  std::string s;
  for (size_t r = 0; r < ranks.size(); ++r)
    s += "--- rank " + std::to_string(r) + " (status " + std::to_string(ranks[r].status) + "):\n" +
         ranks[r].output();
  return s;
}

// Bounded settings: a detection that fails shows as a slow result, never as a long hang.
// Waits (30 s, scaled) until a rank's output holds `text`, such as a test hook's line.
bool awaitOutput(const HandRank& rank, const std::string& text) {
  const double until = ctest::nowSeconds() + 30 * ctest::timeoutScale();
  while (rank.output().find(text) == std::string::npos) {
    if (ctest::nowSeconds() >= until) return false;
    usleep(10000);
  }
  return true;
}

std::vector<std::string> faultEnv(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> env = {"CHORUS_TIMEOUT=15", "CHORUS_BOOTSTRAP_TIMEOUT=8",
                                  "CHORUS_DEBUG=WARN", "FAULT_WATCHDOG=60"};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Runs n ranks of the fault worker with `args`; every rank must exit 0 with a RESULT line.
std::vector<HandRank> runWorkers(int n, int nodes, const std::vector<std::string>& args,
                                 const std::vector<std::string>& env, const std::string& tag) {
  static int runs = 0;  // a log of its own per run (an earlier run's must never be read)
  auto ranks = ctest::startRanksByHand(FAULT_WORKER_PATH, n, nodes, args,
                                       tag + "-" + std::to_string(runs++), env);
  ctest::waitRanksByHand(ranks, 90);
  return ranks;
}

// The checks every fault shares. `faulty`: the rank that met the fault; `cause`: a phrase its
// error must contain when it failed with chorusSystemError.
void checkClean(const std::vector<HandRank>& ranks, int faulty,
                const std::vector<std::string>& causes, const std::string& what) {
  const std::string all = describe(ranks);
  for (size_t r = 0; r < ranks.size(); ++r) {
    // A signal (std::terminate's SIGABRT, SIGSEGV, SIGBUS) shows as 128 + signal; a hang as -2
    // (killed at the deadline) or 99 (the worker's watchdog).
    ASSERT_EQ(ranks[r].status, 0) << what << ": rank " << r << " did not end cleanly\n" << all;
    const Result res = resultOf(ranks[r].output());
    ASSERT_TRUE(res.found) << what << ": rank " << r << " reported nothing\n" << all;
    if (res.code == "chorusSuccess") continue;
    const std::string me = "rank " + std::to_string(faulty);
    EXPECT_NE(res.msg.find(me), std::string::npos)
        << what << ": rank " << r << "'s error does not name " << me << ": " << res.msg;
    if (int(r) == faulty && res.code == "chorusSystemError") {
      bool named = causes.empty();
      for (const auto& c : causes) named = named || res.msg.find(c) != std::string::npos;
      EXPECT_TRUE(named) << what << ": rank " << r
                         << "'s error does not name the cause: " << res.msg;
    }
    EXPECT_TRUE(res.code == "chorusSystemError" || res.code == "chorusRemoteError" ||
                res.code == "chorusInternalError")
        << what << ": rank " << r << ": " << res.code << " " << res.msg;
    EXPECT_LT(res.t, 30.0) << what << ": rank " << r << " took " << res.t << " s: " << res.msg;
  }
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override { before_ = ctest::shmEntries(); }
  void TearDown() override {
    const auto leaked = ctest::leakedShm(before_);
    EXPECT_TRUE(leaked.empty()) << "left in /dev/shm: " << (leaked.empty() ? "" : leaked[0]);
    ctest::removeShm(leaked);
  }
  std::set<std::string> before_;
};

// The reference: no fault, every rank succeeds (also: how many allocations rank 1 makes).
long allocationsOfRank1(int nodes) {
  auto ranks = runWorkers(2, nodes, {"alloc", "0"}, faultEnv(), "faults-count");
  const Result r = resultOf(ranks[1].output());
  EXPECT_EQ(ranks[1].status, 0) << describe(ranks);
  EXPECT_EQ(r.code, "chorusSuccess") << describe(ranks);
  return r.allocs;
}

// The allocation points to try: every one of the first 24, then a spread up to `total`.
std::vector<long> sweepPoints(long total) {
  std::vector<long> pts;
  for (long n = 1; n <= std::min(total, 24L); ++n) pts.push_back(n);
  for (long n = 32; n <= total; n = n * 3 / 2) pts.push_back(n);
  if (total > 0) pts.push_back(total);
  return pts;
}

void allocationSweep(int nodes) {
  const long total = allocationsOfRank1(nodes);
  ASSERT_GT(total, 0);
  for (long n : sweepPoints(total)) {
    const std::string what = "allocation " + std::to_string(n) + " of " + std::to_string(total) +
                             " fails on rank 1 (" + std::to_string(nodes) + " node(s))";
    auto ranks = runWorkers(2, nodes, {"alloc", std::to_string(n)}, faultEnv(), "faults-alloc");
    checkClean(ranks, 1, {"out of memory"}, what);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace

TEST_F(Faults, AllocationFailsOneNode) {
  allocationSweep(1);
}

TEST_F(Faults, AllocationFailsTwoNodes) {
  allocationSweep(2);
}

// RLIMIT_NPROC binds only a user without CAP_SYS_RESOURCE/CAP_SYS_ADMIN: rank 1 becomes an
// unprivileged uid (no account needed) after lowering it. Two emulated nodes: the ranks share no
// /dev/shm segment (rank 0 stays root).
TEST_F(Faults, ThreadCreationRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch rank 1 to an unprivileged uid";
  for (int k : {0, 1, 2, 3, 4, 6, 8}) {
    const std::string what = "RLIMIT_NPROC = threads + " + std::to_string(k) + " on rank 1";
    auto ranks =
        runWorkers(2, 2, {"nproc", std::to_string(k), "61234"}, faultEnv(), "faults-nproc");
    checkClean(ranks, 1, {"Resource temporarily unavailable", "thread"}, what);
    if (HasFatalFailure()) return;
  }
}

TEST_F(Faults, DescriptorsExhausted) {
  for (int nodes : {1, 2})
    for (int lim : {6, 8, 10, 12, 14, 16, 20, 24, 32}) {
      const std::string what = "RLIMIT_NOFILE = " + std::to_string(lim) + " on rank 1 (" +
                               std::to_string(nodes) + " node(s))";
      auto ranks =
          runWorkers(2, nodes, {"nofile", std::to_string(lim)}, faultEnv(), "faults-nofile");
      checkClean(ranks, 1, {"Too many open files"}, what);
      if (HasFatalFailure()) return;
    }
}

TEST_F(Faults, MmapRefused) {
  for (int nodes : {1, 2})
    for (int mib : {0, 4, 16, 40, 64, 128}) {
      const std::string what = "RLIMIT_AS = in use + " + std::to_string(mib) + " MiB on rank 1 (" +
                               std::to_string(nodes) + " node(s))";
      auto ranks = runWorkers(2, nodes, {"as", std::to_string(mib)}, faultEnv(), "faults-as");
      checkClean(ranks, 1,
                 {"Cannot allocate memory", "out of memory", "Resource temporarily unavailable"},
                 what);
      if (HasFatalFailure()) return;
    }
}

// /dev/shm small: n ranks of one node in a mount namespace of their own whose /dev/shm is a
// small tmpfs (`size`). Where even the least FIFOs do not fit (`fits` false), the rank that
// cannot reserve its segment fails naming it and the space, and the others name it; where the
// default FIFOs do not fit but smaller ones do, every rank shrinks them alike, says so once (the
// node's first rank) and runs its checked AllReduces to the end.
namespace {
void devShmSmall(const std::string& size, int n, bool fits) {
  SCOPED_TRACE("/dev/shm: a tmpfs of " + size + ", " + std::to_string(n) + " ranks");
  const int port = ctest::freeLoopbackPort();
  const std::string base = "/tmp/chorus-faults-shm-" + std::to_string(getpid()) + "-";
  std::string script = "mount -t tmpfs -o size=" + size +
                       " chorus-faults-shm /dev/shm || exit 77; "
                       "export CHORUS_NRANKS=" +
                       std::to_string(n) + " CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port) +
                       " CHORUS_SECRET=00112233445566778899aabbccddeeff CHORUS_HOSTID=faults-shm "
                       "CHORUS_TIMEOUT=15 CHORUS_BOOTSTRAP_TIMEOUT=15 CHORUS_DEBUG=WARN; ";
  for (int r = 0; r < n; ++r)
    script += "CHORUS_RANK=" + std::to_string(r) + " " + FAULT_WORKER_PATH + " shm > " + base +
              std::to_string(r) + ".log 2>&1 & pids=\"$pids $!\"; ";
  script += "bad=0; for j in $pids; do wait $j || bad=1; done; exit $bad";
  ctest::SpawnSpec spec;
  spec.argv = {"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script};
  spec.out = ctest::ChildOutput::kFile;
  spec.outFile = base + "sh.log";
  spec.dieWithParent = true;
  const pid_t pid = ctest::spawnProcess(spec).pid;
  ASSERT_GT(pid, 0);
  const int status = ctest::waitProcess(pid, 90 * ctest::timeoutScale(), true);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (status == 77) GTEST_SKIP() << "cannot mount a tmpfs here: " << slurp(base + "sh.log");
  int failedHere = 0;
  std::string all = slurp(base + "sh.log");
  for (int r = 0; r < n; ++r)
    all += "--- rank " + std::to_string(r) + ":\n" + slurp(base + std::to_string(r) + ".log");
  ASSERT_EQ(status, 0) << all;
  for (int r = 0; r < n; ++r) {
    const std::string log = slurp(base + std::to_string(r) + ".log");
    const Result res = resultOf(log);
    ASSERT_TRUE(res.found) << all;
    // Told once, by the node's first rank.
    const bool told = log.find("/dev/shm has") != std::string::npos;
    if (fits) {
      EXPECT_EQ(res.stage, "done") << all;
      EXPECT_EQ(res.code, "chorusSuccess") << all;
      EXPECT_EQ(told, r == 0) << all;
      if (r == 0) {
        EXPECT_NE(log.find("KiB Simple and"), std::string::npos) << log;
      }
      continue;
    }
    EXPECT_EQ(res.stage, "init") << all;
    EXPECT_NE(res.code, "chorusSuccess") << all;
    // The rank that could not create its segment names it and the space; a rank that could
    // names the one that failed.
    if (res.code == "chorusSystemError") {
      ++failedHere;
      EXPECT_NE(res.msg.find("rank " + std::to_string(r)), std::string::npos) << res.msg;
      EXPECT_NE(res.msg.find("/dev/shm"), std::string::npos) << res.msg;
      EXPECT_NE(res.msg.find("segment /chorus"), std::string::npos) << res.msg;
      EXPECT_NE(res.msg.find("bytes free"), std::string::npos) << res.msg;
      EXPECT_NE(res.msg.find("No space left on device"), std::string::npos) << res.msg;
    } else {
      EXPECT_NE(res.msg.find("rank "), std::string::npos) << res.msg;
    }
    EXPECT_LT(res.t, 10.0) << res.msg;
  }
  if (!fits) {
    EXPECT_GE(failedHere, 1) << all;
  }
  for (int r = 0; r < n; ++r) unlink((base + std::to_string(r) + ".log").c_str());
  unlink((base + "sh.log").c_str());
}
}  // namespace

// 64 KiB: no segment fits, even with the least FIFOs: every rank fails, naming the cause. 8 MiB
// at 2 ranks (5.4 MiB each at the defaults) and Docker's default 64 MiB at 8 ranks (20.5 MiB
// each): the FIFOs shrink and the calls run. 64 MiB at 32 ranks: not even the least fit.
TEST_F(Faults, DevShmSmall) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs in a mount namespace";
  if (access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/unshare";
  devShmSmall("64k", 2, false);
  if (HasFatalFailure() || IsSkipped()) return;
  devShmSmall("8m", 2, true);
  if (HasFatalFailure()) return;
  devShmSmall("64m", 8, true);
  if (HasFatalFailure()) return;
  devShmSmall("64m", 32, false);
}

// Issue 32 item 4: a rank killed inside the bootstrap exchange is named by every survivor within
// 5 s. CHORUS_TEST_BOOTSTRAP_STALL=rank:round stops that rank inside its round-th exchange (its
// part sent); the test kills it there with SIGKILL. Round 3 (the barrier after the segments) is
// answered before the kill, so across nodes the survivors meet it while they set up their TCP
// links and run the network probe: the root reports a rank whose connection closes until the
// setup's last round (Bootstrap::formed), the link setup watches the root, and a rank whose setup
// failed because of another asks the root for the first cause before it reports (a rank that
// failed because of the victim closes its connections: its peers must still name the victim).
// (Not covered: the rank that hosts the root killed before every rank joined, whose latecomers
// cannot join: docs/reliability.md. The root's rank is killed from round 2 on, when every rank
// has joined.)
struct KillCase {
  int victim, round, nodes;
};

class BootstrapKill : public Faults, public ::testing::WithParamInterface<KillCase> {};

TEST_P(BootstrapKill, EverySurvivorNamesTheKilledRankWithin5s) {
  const KillCase kc = GetParam();
  const int n = 4;
  // A tag of its own: a log left by an earlier case must not be read as this victim's stop.
  const std::string tag = "faults-bootkill-" + std::to_string(kc.victim) + "-" +
                          std::to_string(kc.round) + "-" + std::to_string(kc.nodes);
  auto ranks =
      ctest::startRanksByHand(FAULT_WORKER_PATH, n, kc.nodes, {"none"}, tag,
                              faultEnv({"CHORUS_BOOTSTRAP_TIMEOUT=60", "CHORUS_TIMEOUT=60",
                                        "CHORUS_TEST_BOOTSTRAP_STALL=" + std::to_string(kc.victim) +
                                            ":" + std::to_string(kc.round)}));
  HandRank& victim = ranks[size_t(kc.victim)];
  ASSERT_TRUE(awaitOutput(victim, "CHORUS_TEST_BOOTSTRAP_STALL"))
      << "the victim never reached bootstrap round " << kc.round << "\n"
      << describe(ranks);
  ASSERT_EQ(kill(victim.pid, SIGKILL), 0);
  const double killedAt = ctest::nowSeconds();
  victim.status = ctest::waitProcess(victim.pid, 10);
  for (int r = 0; r < n; ++r) {
    if (r == kc.victim) continue;
    const double left =
        std::max(0.5, 5.0 * ctest::timeoutScale() - (ctest::nowSeconds() - killedAt));
    ranks[size_t(r)].status = ctest::waitProcess(ranks[size_t(r)].pid, left);
  }
  const double took = ctest::nowSeconds() - killedAt;
  const std::string all = describe(ranks);
  EXPECT_LT(took, 5.0 * ctest::timeoutScale()) << all;
  const std::string name = "rank " + std::to_string(kc.victim);
  for (int r = 0; r < n; ++r) {
    if (r == kc.victim) continue;
    EXPECT_EQ(ranks[size_t(r)].status, 0) << "rank " << r << " (a hang shows as -2)\n" << all;
    const Result res = resultOf(ranks[size_t(r)].output());
    ASSERT_TRUE(res.found) << all;
    // The last round (the barrier after the segments) completes on the survivors: they end
    // their init and their first call names the rank instead.
    EXPECT_TRUE(res.stage == "init" || (kc.round == 3 && res.stage == "call")) << all;
    EXPECT_EQ(res.code, "chorusRemoteError") << all;
    EXPECT_NE(res.msg.find(name), std::string::npos)
        << "rank " << r << " does not name " << name << ": " << res.msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Processes, BootstrapKill,
                         ::testing::Values(KillCase{2, 1, 1}, KillCase{2, 2, 1}, KillCase{2, 3, 1},
                                           KillCase{3, 1, 2}, KillCase{1, 2, 2}, KillCase{0, 2, 1},
                                           KillCase{0, 2, 2}, KillCase{0, 3, 1}, KillCase{0, 3, 2},
                                           KillCase{1, 3, 2}, KillCase{3, 3, 2}),
                         [](const ::testing::TestParamInfo<KillCase>& i) {
                           return "rank" + std::to_string(i.param.victim) + "_round" +
                                  std::to_string(i.param.round) + "_" +
                                  std::to_string(i.param.nodes) + "node";
                         });

// A rank killed inside the link probe (core/net_probe.cc) is named by every survivor within 5 s,
// on its node (shared memory) and across it (TCP): in its chain calls (phase 1: back-to-back
// Broadcasts along the whole communicator, which every rank must forward) and in its smallest
// halving-doubling AllReduces (phase 2: a binomial reduce and broadcast, each rank waiting on
// its partner of each step) and in its tree AllReduces (phase 3: a tree over the nodes' heads
// with a chain of each node's ranks below its head, chunks pipelined up and down it). Two
// emulated nodes of 2 ranks, started by hand;
// CHORUS_TEST_PROBE_STALL stops the victim after the calls that bring its peers into the phase,
// which go on into the timed ones.
struct ProbeKillCase {
  int rank;
  int phase;
};

class ProbeKill : public Faults, public ::testing::WithParamInterface<ProbeKillCase> {};

TEST_P(ProbeKill, EverySurvivorNamesTheKilledRankWithin5s) {
  const int victimRank = GetParam().rank, phase = GetParam().phase, n = 4;
  const std::string tag = std::to_string(victimRank) + ":" + std::to_string(phase);
  auto ranks = ctest::startRanksByHand(
      FAULT_WORKER_PATH, n, 2, {"none"},
      "faults-probekill-" + std::to_string(victimRank) + "-" + std::to_string(phase),
      faultEnv(
          {"CHORUS_BOOTSTRAP_TIMEOUT=60", "CHORUS_TIMEOUT=60", "CHORUS_TEST_PROBE_STALL=" + tag}));
  HandRank& victim = ranks[size_t(victimRank)];
  ASSERT_TRUE(awaitOutput(victim, "(phase " + std::to_string(phase) + ")"))
      << "the victim never reached phase " << phase << " of the link probe\n"
      << describe(ranks);
  ASSERT_EQ(kill(victim.pid, SIGKILL), 0);
  const double killedAt = ctest::nowSeconds();
  victim.status = ctest::waitProcess(victim.pid, 10);
  for (int r = 0; r < n; ++r) {
    if (r == victimRank) continue;
    const double left =
        std::max(0.5, 5.0 * ctest::timeoutScale() - (ctest::nowSeconds() - killedAt));
    ranks[size_t(r)].status = ctest::waitProcess(ranks[size_t(r)].pid, left);
  }
  const std::string all = describe(ranks);
  EXPECT_LT(ctest::nowSeconds() - killedAt, 5.0 * ctest::timeoutScale()) << all;
  const std::string name = "rank " + std::to_string(victimRank);
  for (int r = 0; r < n; ++r) {
    if (r == victimRank) continue;
    EXPECT_EQ(ranks[size_t(r)].status, 0) << "rank " << r << " (a hang shows as -2)\n" << all;
    const Result res = resultOf(ranks[size_t(r)].output());
    ASSERT_TRUE(res.found) << all;
    EXPECT_EQ(res.stage, "init") << all;
    EXPECT_EQ(res.code, "chorusRemoteError") << all;
    EXPECT_NE(res.msg.find(name), std::string::npos)
        << "rank " << r << " does not name " << name << ": " << res.msg;
  }
}

// Rank 0 is the chain's root, rank 3 its end; 1 and 2 forward across the nodes' boundary. In
// the halving-doubling rank 0 receives the reduction and starts its broadcast. In the double
// tree every rank heads its node in one tree (0 and 2 in tree 0, 1 and 3 in tree 1) and hangs
// below its node's head in the other.
INSTANTIATE_TEST_SUITE_P(Processes, ProbeKill,
                         ::testing::Values(ProbeKillCase{0, 1}, ProbeKillCase{1, 1},
                                           ProbeKillCase{2, 1}, ProbeKillCase{3, 1},
                                           ProbeKillCase{0, 2}, ProbeKillCase{1, 2},
                                           ProbeKillCase{2, 2}, ProbeKillCase{3, 2},
                                           ProbeKillCase{0, 3}, ProbeKillCase{1, 3},
                                           ProbeKillCase{2, 3}, ProbeKillCase{3, 3}),
                         [](const ::testing::TestParamInfo<ProbeKillCase>& i) {
                           return "rank" + std::to_string(i.param.rank) +
                                  (i.param.phase == 1   ? "_chain"
                                   : i.param.phase == 2 ? "_halvingDoubling"
                                                        : "_tree");
                         });

// A rank whose peer in the same process fails its init and releases its shared-memory segment
// before this rank attaches to it (CI's soak, 2026-11-29: SIGSEGV in Segment::attach, which
// reached a same-process segment by its address alone; tools/soak/README.md, finding 3). Two
// chorus-soak job processes of two thread ranks each on one node, started by hand: rank 0 waits
// 2 s between the exchange of segment addresses and its attach (CHORUS_TEST_ATTACH_STALL);
// meanwhile process 1 (ranks 2 and 3) is SIGKILLed, rank 1 fails on the root's word and frees
// its segment. Rank 0 must then fail its init too, naming rank 2 or 3, and its process end
// normally (the job's exit 0: every thread reported an error).
TEST_F(Faults, SameProcessPeerReleasedItsSegmentBeforeTheAttach) {
  auto procs = ctest::startRanksByHand(SOAK_PATH, 2, 1,
                                       {"--role", "job", "--procs", "2", "--threads", "2", "--seed",
                                        "7", "--seconds", "60", "--max-bytes", "65536"},
                                       "faults-attach",
                                       {"CHORUS_TIMEOUT=30", "CHORUS_BOOTSTRAP_TIMEOUT=30",
                                        "CHORUS_DEBUG=WARN", "CHORUS_TEST_ATTACH_STALL=0:2000"});
  ASSERT_TRUE(awaitOutput(procs[0], "CHORUS_TEST_ATTACH_STALL"))
      << "rank 0 never reached its attach\n"
      << describe(procs);
  ASSERT_EQ(kill(procs[1].pid, SIGKILL), 0);
  procs[1].status = ctest::waitProcess(procs[1].pid, 10);
  procs[0].status = ctest::waitProcess(procs[0].pid, 30 * ctest::timeoutScale());
  const std::string all = describe(procs);
  EXPECT_EQ(procs[0].status, 0) << "a signal shows as 128 + its number, a hang as -2\n" << all;
  // Both thread ranks of process 0 report an init failure that names a rank of process 1.
  int named = 0;
  std::istringstream in(procs[0].output());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SOAKERR ", 0) != 0) continue;
    EXPECT_NE(line.find("phase=init rc=6 "), std::string::npos) << line;  // chorusRemoteError
    if (line.find("rank 2") != std::string::npos || line.find("rank 3") != std::string::npos)
      ++named;
  }
  EXPECT_EQ(named, 2) << all;
}
