// Reliability: what Chorus promises when something goes wrong (docs/reliability.md).
//
//  DeadPeer      a rank SIGKILLed in the middle of a loop of one collective: every survivor's
//                call fails with chorusRemoteError within 5 s, naming the dead rank and the
//                operation, and chorusCommGetAsyncError says so. Ranks are processes started
//                here (fork/exec of chorus_reliability_worker), not through chorusrun, which
//                would end the job as soon as one rank dies. CHORUS_KILL_ITERS kills per
//                collective (default 2; 20 is the full set), CHORUS_KILL_SEED fixes the
//                random victims and moments.
//  Cascade       the same kills with survivors that leave at once after their failure (exit,
//                destroy then exit, abort then exit: --exit-on-failure): every survivor must
//                still blame the killed rank, never a survivor that left before it.
//  Leftovers     after a crash of one rank, of all of them, during init, or of chorusrun
//                itself: no /dev/shm/chorus-* of the job, no listening socket on the job's
//                port, no rank process.
//  Abort         chorusCommAbort from another thread ends a waiting call within 1 s, and a
//                rank that aborts ends waits of others that do not wait for it;
//                CHORUS_TIMEOUT=1 fails a call that makes no progress, naming the peer.
//  CallCheck     CHORUS_CHECK=1: a mismatch in any field of a collective call fails the call on
//                every rank with chorusInvalidUsage and a message listing every rank's call.
//  Strangers     connections to the bootstrap root that do not prove the secret (junk, a
//                truncated hello, a garbage header, a wrong proof, silence) are closed within
//                the handshake deadline while a real communicator forms and computes.
//
// CHORUS_RELIABILITY_REPORT=FILE appends the measured figures to FILE (used for the docs).
#include <arpa/inet.h>
#include <chorus/chorus.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/siphash.h"
#include "bootstrap/bootstrap.h"
#include "comm_set.h"
#include "gtest_helpers.h"
#include "handstart.h"
#include "net/tcp_wire.h"
#include "proc_net.h"
#include "process.h"
#include "rank_job.h"
#include "result_name.h"
#include "scoped_env.h"
#include "shm_leaks.h"
#include "threads.h"
#include "timing.h"
#include "watchdog.h"

#ifndef RELIABILITY_WORKER_PATH
#error "RELIABILITY_WORKER_PATH must name the chorus_reliability_worker binary"
#endif

extern char** environ;

namespace {

using namespace ctest;

// ---------------------------------------------------------------------------------------------
// Plumbing

long envLong(const char* name, long def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::atol(v) : def;
}

void appendReport(const std::string& line) {
  const char* path = std::getenv("CHORUS_RELIABILITY_REPORT");
  if (path == nullptr || *path == 0) return;
  std::ofstream f(path, std::ios::app);
  f << line << "\n";
}

bool readExactly(int fd, void* buf, size_t n, double seconds) {
  char* p = static_cast<char*>(buf);
  const double until = nowSeconds() + seconds;
  while (n > 0 && nowSeconds() < until) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 50) <= 0) continue;
    const ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= size_t(k);
  }
  return n == 0;
}

void sendBytes(int fd, const void* data, size_t n) {
  ASSERT_EQ(send(fd, data, n, MSG_NOSIGNAL), ssize_t(n));
}

// A job of chorus_reliability_worker ranks (support/rank_job.h); ranks of emulated node k carry
// CHORUS_HOSTID=reliability-node<k>.
class Job : public RankJob {
 public:
  Job(int nranks, const std::vector<std::string>& workerArgs,
      const std::vector<std::string>& extraEnv, std::mt19937_64& rng, int nodes = 1,
      const std::function<std::vector<std::string>(int)>& rankEnv = {})
      : RankJob(RELIABILITY_WORKER_PATH, "reliability-node", nranks, workerArgs, extraEnv, rng,
                nodes, rankEnv) {}
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::mt19937_64 makeRng(const std::string& what) {
  uint64_t seed = uint64_t(envLong("CHORUS_KILL_SEED", 0));
  if (seed == 0) seed = std::random_device{}() ^ (uint64_t(getpid()) << 20);
  std::printf("%s: seed %llu (CHORUS_KILL_SEED to repeat)\n", what.c_str(),
              (unsigned long long)seed);
  return std::mt19937_64(seed);
}

// The checks after a job ended: nothing of it left on the machine.
void expectNothingLeft(const Job& job, const std::string& context) {
  const auto shm = shmOf(job.pids());
  EXPECT_TRUE(shm.empty()) << context << ": /dev/shm entries of the job left: "
                           << ::testing::PrintToString(shm);
  removeShm(shm);
  // A process of the job (its environment holds the job's secret) listening on its port: another
  // test's program may have taken the port since (the suite runs two tests at a time).
  EXPECT_FALSE(listeningWithEnv(job.port(), "CHORUS_SECRET=" + job.secret()))
      << context << ": a process of the job still listens on its port " << job.port();
  for (pid_t p : job.pids()) EXPECT_FALSE(processRuns(p)) << context << ": pid " << p << " runs";
}

// Once every rank has created its communicator, none listens any more: not the bootstrap root
// (rank 0's process), not the data listeners. Waits up to a second for the root's thread.
void expectNoListeners(const Job& job, const std::string& context) {
  std::vector<OwnedListener> left;
  const double until = nowSeconds() + 1.0 * timeoutScale();
  while (!(left = listenersOf(job.pids())).empty() && nowSeconds() < until) sleepSeconds(0.01);
  for (const auto& l : left)
    ADD_FAILURE() << context << ": pid " << l.pid << " still listens on port " << l.port
                  << " after the communicator was created";
}

// ---------------------------------------------------------------------------------------------
// DeadPeer: kill one rank of four in the middle of a loop of one collective.

constexpr int kRanks = 4;
constexpr double kDetectLimit = 5.0;  // seconds, the promise

const char* opWord(const std::string& coll) {
  return coll == "SendRecv" ? "Send" : coll.c_str();  // "Send/Recv group", "Send", "Recv"
}

// The rank a failure message blames: the first "rank N" after the reporting rank's own
// "rank R: <operation>: " prefix ("peer rank 2 (pid 7) died", "rank 2 died (reported by peer rank
// 1)", "lost the connection to rank 2 (node 1): ..."); -1 when there is none.
int blamedRank(const std::string& msg) {
  static const std::regex prefix("^rank [0-9]+: ");
  static const std::regex named("rank ([0-9]+)\\b");
  std::smatch m;
  std::string rest = msg;
  if (std::regex_search(msg, m, prefix)) rest = m.suffix().str();
  if (!std::regex_search(rest, m, named)) return -1;
  return std::stoi(m[1].str());
}

// How survivors behave after their failure: Linger keeps them alive (their failed communicator
// too) until the test releases them; the others leave at once, as a job whose ranks end on their
// first error does (--exit-on-failure exit, destroy or abort), which is when a survivor's exit
// could be mistaken for the first failure.
enum class Survivors { kLinger, kExitAtOnce };

// The exit-at-once modes used, kill after kill: CHORUS_CASCADE_MODES (comma-separated among
// exit, destroy, abort), default all three in turn.
std::vector<std::string> cascadeModes() {
  const char* v = std::getenv("CHORUS_CASCADE_MODES");
  std::vector<std::string> modes;
  std::string s = v != nullptr && *v != 0 ? v : "exit,destroy,abort";
  std::istringstream is(s);
  std::string m;
  while (std::getline(is, m, ','))
    if (m == "exit" || m == "destroy" || m == "abort") modes.push_back(m);
  if (modes.empty()) modes = {"exit", "destroy", "abort"};
  return modes;
}

// "<Collective>" or "<Collective><Variant>": the variant forces an algorithm through the
// tuner's environment (Tree: CHORUS_ALGO=tree; Ring2ch: rings on two channels; Hier: the
// hierarchical AllReduce; Cma: single copy (algo/copy.cc); OneShot: one hand-off; Rd: recursive
// doubling, and halving for ReduceScatter, small enough for its 128 KiB scratch). nodes = 2:
// ranks 0,1 and 2,3 are two emulated nodes (TCP between). kills: CHORUS_KILL_ITERS, else
// defaultKills. Every survivor must name the killed rank as the cause (blamedRank), whatever the
// survivors do after their failure.
// A name's suffix forces the algorithm; the one-shot collectives run up to 4 KiB of input per
// rank, the two-shot up to 64 KiB, so they get a count that fits (empty: the worker's 1 MiB).
void parseVariant(const std::string& name, std::string* collOut, std::vector<std::string>* envOut,
                  std::string* countOut) {
  struct Variant {
    std::string suffix;
    std::vector<std::string> env;
    std::string count;
  };
  std::string coll = name, count;
  std::vector<std::string> env;
  for (const Variant& v :
       std::vector<Variant>{{"Tree", {"CHORUS_ALGO=tree"}, ""},
                            {"Hier", {"CHORUS_ALGO=hier"}, ""},
                            {"Ring2ch", {"CHORUS_ALGO=ring", "CHORUS_MIN_NCHANNELS=2"}, ""},
                            {"Cma", {"CHORUS_ALGO=cma"}, ""},
                            {"OneShot", {"CHORUS_ALGO=oneshot"}, "64"},
                            {"TwoShot", {"CHORUS_ALGO=twoshot"}, "4096"},
                            {"Rd", {"CHORUS_ALGO=rd"}, "1024"}}) {
    if (name.size() > v.suffix.size() &&
        name.compare(name.size() - v.suffix.size(), v.suffix.size(), v.suffix) == 0) {
      coll = name.substr(0, name.size() - v.suffix.size());
      env = v.env;
      count = v.count;
    }
  }
  *collOut = coll;
  *envOut = env;
  *countOut = count;
}

void deadPeerKills(const std::string& name, int nodes, long defaultKills,
                   Survivors survivors = Survivors::kLinger) {
  std::string coll, count;
  std::vector<std::string> env;
  parseVariant(name, &coll, &env, &count);
  const bool linger = survivors == Survivors::kLinger;
  const std::string suite = linger ? "DeadPeer" : "Cascade";
  const std::string test = suite + (nodes > 1 ? "AcrossNodes." : ".") + name;
  const long iters = std::max(1L, envLong("CHORUS_KILL_ITERS", defaultKills));
  const std::vector<std::string> modes = cascadeModes();
  Watchdog watchdog(60.0 + 45.0 * double(iters), test);
  std::mt19937_64 rng = makeRng(test);
  std::vector<double> detect;
  int kills = 0, named = 0;
  for (long it = 0; it < iters; ++it) {
    const std::string mode = linger ? "linger" : modes[size_t(it) % modes.size()];
    std::vector<std::string> args = {"--coll", coll, "--watchdog", "90"};
    if (linger)
      args.push_back("--linger");
    else
      args.insert(args.end(), {"--exit-on-failure", mode});
    if (!count.empty()) args.insert(args.end(), {"--count", count});
    Job job(kRanks, args, env, rng, nodes);
    ASSERT_TRUE(job.started()) << "cannot start the ranks";
    const bool ready = job.pumpUntil(nowSeconds() + 60 * timeoutScale(), [&] {
      for (int r = 0; r < kRanks; ++r)
        if (!job.has(r, "READY") || job[r].exited) return false;
      return true;
    });
    ASSERT_TRUE(ready) << "the ranks did not all start their loop:\n"
                       << job.output() << job.statuses();
    expectNoListeners(job, test + " kill " + std::to_string(it));
    // A random moment of the loop: up to 400 ms in.
    job.pump(double(rng() % 400) / 1000.0);
    const int victim = int(rng() % kRanks);
    for (int r = 0; r < kRanks; ++r)
      ASSERT_FALSE(job[r].exited) << "rank " << r << " ended early:\n" << job.output();
    const double killedAt = job.killRank(victim);
    ++kills;
    // Everyone else must report; give them twice the promise so that a late one is measured.
    job.pumpUntil(killedAt + 2 * kDetectLimit * timeoutScale(), [&] {
      for (int r = 0; r < kRanks; ++r)
        if (r != victim && !job.has(r, "FAILED") && !job[r].exited) return false;
      return true;
    });
    const std::string ctx = coll + " kill " + std::to_string(it) + " (rank " +
                            std::to_string(victim) + ", survivors " + mode + ")";
    for (int r = 0; r < kRanks; ++r) {
      if (r == victim) continue;
      const auto f = job.fields(r, "FAILED");
      if (!f.count("_found")) {
        ADD_FAILURE() << ctx << ": rank " << r << " did not report a failure within "
                      << 2 * kDetectLimit << " s:\n"
                      << job.output() << job.statuses();
        continue;
      }
      const double dt = std::stod(f.at("t")) - killedAt;
      detect.push_back(dt);
      EXPECT_LE(dt, kDetectLimit) << ctx << ": rank " << r << " noticed after " << dt << " s";
      EXPECT_EQ(f.at("name"), "chorusRemoteError") << ctx << ": rank " << r << ": " << f.at("msg");
      EXPECT_EQ(f.at("async"), "chorusRemoteError")
          << ctx << ": rank " << r << ": chorusCommGetAsyncError";
      const std::string& msg = f.at("msg");
      const bool namesVictim = blamedRank(msg) == victim;
      named += namesVictim ? 1 : 0;
      std::printf("  %s: rank %d after %.0f ms: %s\n", ctx.c_str(), r, dt * 1e3, msg.c_str());
      EXPECT_TRUE(namesVictim) << ctx << ": rank " << r << "'s message blames rank "
                               << blamedRank(msg) << ", not the killed rank " << victim << ": "
                               << msg << "\n"
                               << job.output();
      EXPECT_NE(msg.find(opWord(coll)), std::string::npos)
          << ctx << ": rank " << r << "'s message does not name the operation: " << msg;
      EXPECT_EQ(f.count("culprit") ? std::stoi(f.at("culprit")) : -9, victim)
          << ctx << ": rank " << r << ": chorusCommGetFailedRank";
    }
    // Lingering survivors: release them; each destroys its failed communicator and exits 3.
    // The others have left (exit status 1) or are leaving.
    job.releaseLingering();
    job.pumpUntil(nowSeconds() + 20 * timeoutScale(), [&] { return job.allExited(); });
    for (int r = 0; r < kRanks; ++r) {
      if (r == victim) continue;
      EXPECT_TRUE(job[r].exited) << ctx << ": rank " << r << " did not exit:\n" << job.output();
      if (!job[r].exited) continue;
      EXPECT_TRUE(WIFEXITED(job[r].status) && WEXITSTATUS(job[r].status) == (linger ? 3 : 1))
          << ctx << ": rank " << r << " status " << job[r].status << ":\n"
          << job.output();
      if (!linger) continue;
      const auto d = job.fields(r, "DESTROY");
      EXPECT_EQ(d.count("_found") ? d.at("rc") : "(none)", "chorusSuccess")
          << ctx << ": rank " << r << ": chorusCommDestroy after the failure";
    }
    expectNothingLeft(job, ctx);
  }
  if (!detect.empty()) {
    const double med = median(detect), mx = *std::max_element(detect.begin(), detect.end());
    std::printf(
        "%s: %d kills, %zu survivor reports, detection median %.0f ms, max %.0f ms, %d name "
        "the dead rank\n",
        test.c_str(), kills, detect.size(), med * 1e3, mx * 1e3, named);
    char line[256];
    std::snprintf(line, sizeof line,
                  "deadpeer %s nodes=%d survivors=%s kills=%d reports=%zu median_ms=%.1f "
                  "max_ms=%.1f named=%d",
                  name.c_str(), nodes, linger ? "linger" : "exit", kills, detect.size(), med * 1e3,
                  mx * 1e3, named);
    appendReport(line);
  }
}

class DeadPeer : public ::testing::TestWithParam<std::string> {};

TEST_P(DeadPeer, SurvivorsFailWithRemoteError) {
  deadPeerKills(GetParam(), 1, 2);
}

// The same across two emulated nodes (2 + 2 ranks): a survivor on the victim's node sees it die
// through shared memory, one on the other node through its TCP sockets or, when it waits for a
// survivor of the other node, through that survivor's failure notice. One kill per collective
// in CI (CHORUS_KILL_ITERS for more).
class DeadPeerAcrossNodes : public ::testing::TestWithParam<std::string> {};

TEST_P(DeadPeerAcrossNodes, SurvivorsFailWithRemoteError) {
  deadPeerKills(GetParam(), 2, 1);
}

// The cascade: survivors that leave at once after their failure (exit without
// destroy, destroy then exit, abort then exit; one of each in turn, kill after kill). A peer
// that waited for such a survivor sees it gone; it must still name the rank killed first, which
// the survivor left readable before it could exit (its segment's failure flag; across nodes, a
// notice written on the control connection before the call returned). Three kills per
// collective on one node (one per mode), two across nodes (CHORUS_KILL_ITERS for more).
class Cascade : public ::testing::TestWithParam<std::string> {};

TEST_P(Cascade, SurvivorsThatExitAtOnceStillNameTheKilledRank) {
  deadPeerKills(GetParam(), 1, 3, Survivors::kExitAtOnce);
}

class CascadeAcrossNodes : public ::testing::TestWithParam<std::string> {};

TEST_P(CascadeAcrossNodes, SurvivorsThatExitAtOnceStillNameTheKilledRank) {
  deadPeerKills(GetParam(), 2, 3, Survivors::kExitAtOnce);
}

// A dead rank that its parent has not reaped yet is a zombie: kill(pid, 0) still succeeds on
// it. Launchers reap at their own pace (or not at all while they are busy), so the survivors
// must not depend on it.
TEST(DeadPeerUnreaped, SurvivorsStillFail) {
  Watchdog watchdog(90, "DeadPeerUnreaped.SurvivorsStillFail");
  std::mt19937_64 rng = makeRng("DeadPeerUnreaped.SurvivorsStillFail");
  Job job(kRanks, {"--coll", "AllReduce", "--linger", "--watchdog", "60"}, {}, rng);
  ASSERT_TRUE(job.started());
  ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(), [&] {
    for (int r = 0; r < kRanks; ++r)
      if (!job.has(r, "READY")) return false;
    return true;
  })) << job.output();
  const int victim = 2;
  const double killedAt = job.killRank(victim, /*reap=*/false);
  job.pumpUntil(killedAt + 2 * kDetectLimit * timeoutScale(), [&] {
    for (int r = 0; r < kRanks; ++r)
      if (r != victim && !job.has(r, "FAILED")) return false;
    return true;
  });
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    const auto f = job.fields(r, "FAILED");
    ASSERT_TRUE(f.count("_found")) << "rank " << r << " did not notice that rank " << victim
                                   << " died (not reaped yet, a zombie):\n"
                                   << job.output();
    EXPECT_LE(std::stod(f.at("t")) - killedAt, kDetectLimit) << "rank " << r;
    EXPECT_EQ(f.at("name"), "chorusRemoteError") << "rank " << r << ": " << f.at("msg");
  }
  job.releaseLingering();
}

INSTANTIATE_TEST_SUITE_P(Processes, DeadPeer,
                         ::testing::Values("AllReduce", "Broadcast", "Reduce", "AllGather",
                                           "ReduceScatter", "AlltoAll", "Gather", "Scatter",
                                           "SendRecv", "AllReduceTree", "BroadcastTree",
                                           "ReduceTree", "AllReduceRing2ch", "AllGatherRing2ch",
                                           "BroadcastCma", "AllGatherCma", "BroadcastOneShot",
                                           "AllGatherOneShot", "ReduceScatterOneShot",
                                           "AllReduceTwoShot"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(Processes, DeadPeerAcrossNodes,
                         ::testing::Values("AllReduce", "Broadcast", "Reduce", "AllGather",
                                           "ReduceScatter", "AlltoAll", "Gather", "Scatter",
                                           "SendRecv", "AllReduceTree", "AllReduceHier",
                                           "AllReduceRd", "AllGatherRd", "ReduceScatterRd"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(Processes, Cascade,
                         ::testing::Values("AllReduce", "Broadcast", "Reduce", "AllGather",
                                           "ReduceScatter", "AlltoAll", "Gather", "Scatter",
                                           "SendRecv", "AllReduceTree", "BroadcastTree",
                                           "ReduceTree", "AllReduceRing2ch", "AllGatherRing2ch",
                                           "BroadcastCma", "AllGatherCma", "BroadcastOneShot",
                                           "AllGatherOneShot", "ReduceScatterOneShot",
                                           "AllReduceTwoShot"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(Processes, CascadeAcrossNodes,
                         ::testing::Values("AllReduce", "Broadcast", "Reduce", "AllGather",
                                           "ReduceScatter", "AlltoAll", "Gather", "Scatter",
                                           "SendRecv", "AllReduceTree", "AllReduceHier",
                                           "AllReduceRd", "AllGatherRd", "ReduceScatterRd"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---------------------------------------------------------------------------------------------
// HangCulprit: rank 2 never calls and every rank has CHORUS_TIMEOUT=2. All the others time out
// at about the same moment, most of them waiting for a rank that only waits too; each must name
// rank 2, the one behind (comm/wait.cc follows the published waits), on one node and on two.
struct HangCase {
  const char* coll;
  int nodes;
};
class HangCulprit : public ::testing::TestWithParam<HangCase> {};

TEST_P(HangCulprit, EveryRankNamesTheHungRank) {
  const HangCase hc = GetParam();
  const std::string name = std::string("HangCulprit.") + hc.coll + std::to_string(hc.nodes);
  Watchdog watchdog(90, name.c_str());
  std::mt19937_64 rng = makeRng(name.c_str());
  constexpr int kHung = 2;
  Job job(kRanks, {"--coll", hc.coll, "--hang-rank", "2", "--linger", "--watchdog", "60"},
          {"CHORUS_TIMEOUT=2"}, rng, hc.nodes);
  ASSERT_TRUE(job.started());
  ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(), [&] {
    for (int r = 0; r < kRanks; ++r)
      if (r != kHung && !job.has(r, "FAILED")) return false;
    return true;
  })) << job.output();
  for (int r = 0; r < kRanks; ++r) {
    if (r == kHung) continue;
    const auto f = job.fields(r, "FAILED");
    EXPECT_EQ(blamedRank(f.at("msg")), kHung)
        << "rank " << r << " does not name the hung rank " << kHung << ": " << f.at("msg");
  }
  for (int r = 0; r < kRanks; ++r)
    if (!job[r].exited) job.killRank(r);
  expectNothingLeft(job, name);
}

INSTANTIATE_TEST_SUITE_P(Processes, HangCulprit,
                         ::testing::Values(HangCase{"AllReduce", 1}, HangCase{"SendRecv", 1},
                                           HangCase{"AllReduce", 2}, HangCase{"SendRecv", 2},
                                           HangCase{"AllReduce", 4}, HangCase{"SendRecv", 4}),
                         [](const ::testing::TestParamInfo<HangCase>& i) {
                           return std::string(i.param.coll) + "_" + std::to_string(i.param.nodes) +
                                  "nodes";
                         });

// ---------------------------------------------------------------------------------------------
// TwoDeaths: two ranks of one node die close together: within one check period (gap 0: two
// SIGKILLs back to back), or the second because a launcher ends the other ranks once one died
// (gap 30 ms: torchrun and mpirun react in milliseconds to tens of them). Each survivor names
// the rank whose last sign of life is oldest; with a gap that is the first killed, and with
// none it may be either, but every survivor names the same one.
void twoDeaths(const std::string& coll, double gapSeconds, long defaultRuns) {
  const std::string test = "TwoDeaths." + coll + (gapSeconds > 0 ? "LauncherGap" : "AtOnce");
  const long runs = std::max(1L, envLong("CHORUS_KILL_ITERS", defaultRuns));
  Watchdog watchdog(60.0 + 30.0 * double(runs), test);
  std::mt19937_64 rng = makeRng(test);
  int reports = 0, named = 0;
  for (long it = 0; it < runs; ++it) {
    Job job(kRanks, {"--coll", coll, "--linger", "--watchdog", "90"}, {}, rng);
    ASSERT_TRUE(job.started()) << "cannot start the ranks";
    ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(),
                              [&] {
                                for (int r = 0; r < kRanks; ++r)
                                  if (!job.has(r, "READY") || job[r].exited) return false;
                                return true;
                              }))
        << job.output() << job.statuses();
    job.pump(double(rng() % 400) / 1000.0);
    const int first = int(rng() % kRanks);
    const int second = (first + 1 + int(rng() % (kRanks - 1))) % kRanks;
    job.killRank(first, /*reap=*/false);
    if (gapSeconds > 0) sleepSeconds(gapSeconds);
    job.killRank(second, /*reap=*/false);
    const double killedAt = nowSeconds();
    job.pumpUntil(killedAt + 2 * kDetectLimit * timeoutScale(), [&] {
      for (int r = 0; r < kRanks; ++r)
        if (r != first && r != second && !job.has(r, "FAILED")) return false;
      return true;
    });
    const std::string ctx = test + " run " + std::to_string(it) + " (rank " +
                            std::to_string(first) + " killed, then rank " + std::to_string(second) +
                            ")";
    int agreed = -2;
    for (int r = 0; r < kRanks; ++r) {
      if (r == first || r == second) continue;
      const auto f = job.fields(r, "FAILED");
      if (!f.count("_found")) {
        ADD_FAILURE() << ctx << ": rank " << r << " did not report:\n" << job.output();
        continue;
      }
      ++reports;
      const std::string& msg = f.at("msg");
      const int blamed = blamedRank(msg);
      std::printf("  %s: rank %d: %s\n", ctx.c_str(), r, msg.c_str());
      if (gapSeconds > 0) {
        named += blamed == first ? 1 : 0;
        EXPECT_EQ(blamed, first) << ctx << ": rank " << r << " blames rank " << blamed
                                 << ", not the first killed rank " << first << ": " << msg;
      } else {
        named += blamed == first || blamed == second ? 1 : 0;
        EXPECT_TRUE(blamed == first || blamed == second)
            << ctx << ": rank " << r << " blames rank " << blamed << ": " << msg;
        if (agreed == -2) agreed = blamed;
        EXPECT_EQ(blamed, agreed) << ctx << ": survivors name different ranks:\n" << job.output();
      }
    }
    job.releaseLingering();
    job.pumpUntil(nowSeconds() + 20 * timeoutScale(), [&] {
      for (int r = 0; r < kRanks; ++r)
        if (r != first && r != second && !job[r].exited) return false;
      return true;
    });
    expectNothingLeft(job, ctx);
  }
  char line[200];
  std::snprintf(line, sizeof line, "twodeaths %s gap_ms=%.0f runs=%ld reports=%d named=%d",
                coll.c_str(), gapSeconds * 1e3, runs, reports, named);
  std::printf("%s\n", line);
  appendReport(line);
}

TEST(TwoDeaths, AtOnceEverySurvivorNamesTheSameRank) {
  twoDeaths("AllReduce", 0, 3);
  twoDeaths("SendRecv", 0, 2);
}
TEST(TwoDeaths, LauncherEndsASurvivorEveryOneNamesTheFirst) {
  twoDeaths("AllReduce", 0.03, 3);
  twoDeaths("SendRecv", 0.03, 2);
}

// ---------------------------------------------------------------------------------------------
// FrozenRank: a rank stopped with SIGSTOP at a random moment of a loop (inside a call, most of
// the time; sometimes between two), every rank with CHORUS_TIMEOUT=2: a process that stops
// making progress (stopped, a debugger, swapping) is the common hang of real jobs. Its peers
// time out; each must name the stopped rank, not the neighbour it waits for, and not "calls in a
// different order" (the stopped rank's published wait makes the waits look like a cycle; its
// sign of life, refreshed by every live waiting rank, tells it apart). On one node and on two
// emulated nodes (across them, a rank asks the other node's ranks for their state over the
// control connection; a stopped process does not answer). Survivors linger or exit at once.
// Runs per row: CHORUS_FREEZE_RUNS (default 1); scripts/kill_table.sh prints the table.
void frozenRuns(const std::string& name, int nodes, Survivors survivors) {
  std::string coll, count;
  std::vector<std::string> env;
  parseVariant(name, &coll, &env, &count);
  env.push_back("CHORUS_TIMEOUT=2");
  const double timeout = 2.0;
  const bool linger = survivors == Survivors::kLinger;
  const std::string test = std::string("FrozenRank") + (nodes > 1 ? "AcrossNodes." : ".") + name +
                           (linger ? "" : "Exit");
  const long runs = std::max(1L, envLong("CHORUS_FREEZE_RUNS", 1));
  Watchdog watchdog(60.0 + 30.0 * double(runs), test);
  std::mt19937_64 rng = makeRng(test);
  std::vector<double> detect;
  int reports = 0, named = 0;
  for (long it = 0; it < runs; ++it) {
    std::vector<std::string> args = {"--coll", coll, "--watchdog", "90"};
    if (linger)
      args.push_back("--linger");
    else
      args.insert(args.end(), {"--exit-on-failure", "exit"});
    if (!count.empty()) args.insert(args.end(), {"--count", count});
    Job job(kRanks, args, env, rng, nodes);
    ASSERT_TRUE(job.started()) << "cannot start the ranks";
    ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(),
                              [&] {
                                for (int r = 0; r < kRanks; ++r)
                                  if (!job.has(r, "READY") || job[r].exited) return false;
                                return true;
                              }))
        << "the ranks did not all start their loop:\n"
        << job.output() << job.statuses();
    job.pump(double(rng() % 400) / 1000.0);
    const int victim = int(rng() % kRanks);
    for (int r = 0; r < kRanks; ++r)
      ASSERT_FALSE(job[r].exited) << "rank " << r << " ended early:\n" << job.output();
    const double stoppedAt = nowSeconds();
    kill(job[victim].pid, SIGSTOP);
    const double limit = timeout + 3.0;
    job.pumpUntil(stoppedAt + 2 * limit * timeoutScale(), [&] {
      for (int r = 0; r < kRanks; ++r)
        if (r != victim && !job.has(r, "FAILED") && !job[r].exited) return false;
      return true;
    });
    const std::string ctx = name + " run " + std::to_string(it) + " (rank " +
                            std::to_string(victim) + " stopped, survivors " +
                            (linger ? "linger" : "exit") + ")";
    for (int r = 0; r < kRanks; ++r) {
      if (r == victim) continue;
      const auto f = job.fields(r, "FAILED");
      if (!f.count("_found")) {
        ADD_FAILURE() << ctx << ": rank " << r << " did not report within " << 2 * limit << " s:\n"
                      << job.output() << job.statuses();
        continue;
      }
      ++reports;
      const double dt = std::stod(f.at("t")) - stoppedAt;
      detect.push_back(dt);
      const std::string& msg = f.at("msg");
      const bool namesVictim = blamedRank(msg) == victim;
      named += namesVictim ? 1 : 0;
      std::printf("  %s: rank %d after %.0f ms: %s\n", ctx.c_str(), r, dt * 1e3, msg.c_str());
      EXPECT_TRUE(namesVictim) << ctx << ": rank " << r << "'s message blames rank "
                               << blamedRank(msg) << ", not the stopped rank " << victim << ": "
                               << msg << "\n"
                               << job.output();
      EXPECT_EQ(msg.find("different order"), std::string::npos) << ctx << ": rank " << r;
      EXPECT_EQ(f.count("culprit") ? std::stoi(f.at("culprit")) : -9, victim)
          << ctx << ": rank " << r << ": chorusCommGetFailedRank";
      EXPECT_LE(dt, limit) << ctx << ": rank " << r << " reported after " << dt << " s";
    }
    job.killRank(victim);  // SIGKILL ends a stopped process too
    job.releaseLingering();
    job.pumpUntil(nowSeconds() + 20 * timeoutScale(), [&] { return job.allExited(); });
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(job[r].exited) << ctx << ": rank " << r << " did not exit:\n" << job.output();
    expectNothingLeft(job, ctx);
  }
  if (!detect.empty()) {
    const double med = median(detect), mx = *std::max_element(detect.begin(), detect.end());
    char line[256];
    std::snprintf(line, sizeof line,
                  "frozen %s nodes=%d survivors=%s runs=%ld reports=%d median_ms=%.1f "
                  "max_ms=%.1f named=%d",
                  name.c_str(), nodes, linger ? "linger" : "exit", runs, reports, med * 1e3,
                  mx * 1e3, named);
    std::printf("%s\n", line);
    appendReport(line);
  }
}

class FrozenRank : public ::testing::TestWithParam<std::string> {};
TEST_P(FrozenRank, EverySurvivorNamesTheStoppedRank) {
  frozenRuns(GetParam(), 1, Survivors::kLinger);
}
TEST_P(FrozenRank, SurvivorsThatExitAtOnceNameTheStoppedRank) {
  frozenRuns(GetParam(), 1, Survivors::kExitAtOnce);
}
class FrozenRankAcrossNodes : public ::testing::TestWithParam<std::string> {};
TEST_P(FrozenRankAcrossNodes, EverySurvivorNamesTheStoppedRank) {
  frozenRuns(GetParam(), 2, Survivors::kLinger);
}
TEST_P(FrozenRankAcrossNodes, SurvivorsThatExitAtOnceNameTheStoppedRank) {
  frozenRuns(GetParam(), 2, Survivors::kExitAtOnce);
}
// Four emulated nodes of one rank each: a chain of waits crosses up to three node boundaries,
// each followed by a status query.
class FrozenRankFourNodes : public ::testing::TestWithParam<std::string> {};
TEST_P(FrozenRankFourNodes, EverySurvivorNamesTheStoppedRank) {
  frozenRuns(GetParam(), 4, Survivors::kLinger);
}
INSTANTIATE_TEST_SUITE_P(Processes, FrozenRankFourNodes,
                         ::testing::Values("AllReduce", "AllReduceTree", "SendRecv"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
// Ring, tree, one-shot, two-shot and point-to-point waits; across nodes the one-node-only
// algorithms give way to the hierarchical AllReduce.
INSTANTIATE_TEST_SUITE_P(Processes, FrozenRank,
                         ::testing::Values("AllReduce", "AllReduceTree", "BroadcastOneShot",
                                           "AllGatherOneShot", "AllReduceTwoShot", "SendRecv",
                                           "Broadcast", "ReduceScatter"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
INSTANTIATE_TEST_SUITE_P(Processes, FrozenRankAcrossNodes,
                         ::testing::Values("AllReduce", "AllReduceTree", "AllReduceHier",
                                           "SendRecv", "Broadcast"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---------------------------------------------------------------------------------------------
// FailureNotice: a rank that fails on its own while staying alive (here: CHORUS_TIMEOUT) tells
// the peers of the other node at once, through the TCP transport's control connections, not
// when its sockets close. Two nodes (ranks 0,1 | 2,3); SendRecv (rank r sends to r+1, receives
// from r-1); rank 2 never calls; only rank 3 has CHORUS_TIMEOUT=1: it times out waiting for
// rank 2, stays alive (--linger), and rank 0, which receives from rank 3 over TCP and has no
// timeout of its own, must fail with chorusRemoteError naming rank 3 promptly.
TEST(FailureNotice, LiveRankTimeoutReachesTheOtherNode) {
  Watchdog watchdog(90, "FailureNotice.LiveRankTimeoutReachesTheOtherNode");
  std::mt19937_64 rng = makeRng("FailureNotice.LiveRankTimeoutReachesTheOtherNode");
  Job job(kRanks, {"--coll", "SendRecv", "--hang-rank", "2", "--linger", "--watchdog", "60"}, {},
          rng, /*nodes=*/2, [](int r) {
            return r == 3 ? std::vector<std::string>{"CHORUS_TIMEOUT=1"}
                          : std::vector<std::string>{};
          });
  ASSERT_TRUE(job.started());
  ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(), [&] {
    for (int r = 0; r < kRanks; ++r)
      if (!job.has(r, "READY")) return false;
    return true;
  })) << job.output();
  expectNoListeners(job, "FailureNotice");
  ASSERT_TRUE(job.pumpUntil(nowSeconds() + 10 * timeoutScale(),
                            [&] { return job.has(3, "FAILED") && job.has(0, "FAILED"); }))
      << "rank 3 (CHORUS_TIMEOUT=1) or rank 0 (waiting for rank 3 across nodes) did not fail:\n"
      << job.output();
  const auto f3 = job.fields(3, "FAILED"), f0 = job.fields(0, "FAILED");
  EXPECT_EQ(f3.at("name"), "chorusTimeout") << f3.at("msg");
  EXPECT_EQ(f0.at("name"), "chorusRemoteError") << f0.at("msg");
  EXPECT_EQ(f0.at("async"), "chorusRemoteError");
  EXPECT_TRUE(std::regex_search(f0.at("msg"), std::regex("rank 3\\b")))
      << "rank 0's message does not name rank 3, which failed: " << f0.at("msg");
  EXPECT_NE(f0.at("msg").find("Send"), std::string::npos)
      << "rank 0's message does not name the operation: " << f0.at("msg");
  const double lag = std::stod(f0.at("t")) - std::stod(f3.at("t"));
  // The waiter looks at the peer every 50 ms; a busy 2-core machine adds its share.
  EXPECT_LE(lag, 1.0 * timeoutScale())
      << "rank 0 learned of rank 3's failure after " << lag << " s";
  std::printf("FailureNotice: rank 3 failed (%s); rank 0 followed %.0f ms later: %s\n",
              f3.at("msg").c_str(), lag * 1e3, f0.at("msg").c_str());
  char line[160];
  std::snprintf(line, sizeof line, "failurenotice lag_ms=%.1f", lag * 1e3);
  appendReport(line);
  // Rank 1 waits for rank 2, which is alive and never fails: it may hang (by design: a hung
  // peer is not a failure). End the job and check that it left nothing.
  for (int r = 0; r < kRanks; ++r)
    if (!job[r].exited) job.killRank(r);
  expectNothingLeft(job, "FailureNotice");
}

// ---------------------------------------------------------------------------------------------
// Strangers at the data listeners. A rank's data listener exists while its communicator is
// being created (it is closed once the TCP links exist), so strangers are tried in that window:
// 4 ranks on 2 emulated nodes, one rank held back before init (--hold-rank) so that the other
// three wait with their listeners open; each of those gets five strangers (junk, a truncated
// hello, a hello sent a byte per 100 ms, a hello proving another secret, silence). Then the held
// rank is released, the communicator forms, and an AllReduce loop runs and is right; meanwhile no
// rank listens and the former listener ports refuse connections. Two rounds: rank 3 held, then rank
// 0 (which also hosts the bootstrap root), so that every rank's listener is tried.

struct DataStranger {
  std::string name;
  int fd = -1;
  double openedAt = 0, closedAt = 0;
  size_t bytesIn = 0;
  uint8_t nonce[16] = {};
  size_t slowSent = 0;  // bytes of the slow hello sent so far
};

TEST(DataStrangers, ListenersCloseThemAndTheCollectiveRuns) {
  Watchdog watchdog(120, "DataStrangers.ListenersCloseThemAndTheCollectiveRuns");
  std::mt19937_64 rng = makeRng("DataStrangers.ListenersCloseThemAndTheCollectiveRuns");
  const double deadline = 0.5;  // CHORUS_HANDSHAKE_TIMEOUT_MS=500
  for (const int held : {3, 0}) {
    const std::string ctx = "rank " + std::to_string(held) + " held";
    Job job(kRanks,
            {"--coll", "AllReduce", "--iters", "30", "--hold-rank", std::to_string(held),
             "--watchdog", "60"},
            {"CHORUS_HANDSHAKE_TIMEOUT_MS=500", "CHORUS_DEBUG=WARN"}, rng, /*nodes=*/2);
    ASSERT_TRUE(job.started());
    // The listeners of the three ranks that run (rank 0's bootstrap root aside).
    std::vector<pid_t> running;
    for (int r = 0; r < kRanks; ++r)
      if (r != held) running.push_back(job[r].pid);
    std::vector<OwnedListener> data;
    const double findUntil = nowSeconds() + 30 * timeoutScale();
    while (nowSeconds() < findUntil) {
      data.clear();
      for (const auto& l : listenersOf(running))
        if (l.port != job.port()) data.push_back(l);
      if (data.size() == running.size()) break;
      job.pump(0.01);
    }
    ASSERT_EQ(data.size(), running.size())
        << ctx << ": did not find one data listener per running rank:\n"
        << job.output();

    std::vector<DataStranger> st;
    for (const auto& l : data)
      for (const char* kind : {"junk", "truncated hello", "slow hello", "wrong proof", "silent"}) {
        DataStranger d;
        d.name = std::string(kind) + " -> pid " + std::to_string(l.pid) + " port " +
                 std::to_string(l.port);
        d.fd = socket(l.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(d.fd, 0);
        ASSERT_EQ(connect(d.fd, reinterpret_cast<const sockaddr*>(&l.addr), l.len), 0)
            << d.name << ": " << strerror(errno);
        d.openedAt = nowSeconds();
        st.push_back(d);
      }
    // Each first reads the listener's 16-byte nonce, then sends its bytes.
    for (auto& d : st) {
      ASSERT_TRUE(readExactly(d.fd, d.nonce, 16, 5 * timeoutScale())) << d.name << ": no nonce";
      d.bytesIn = 16;
    }
    uint8_t wrongSecret[16];
    for (auto& b : wrongSecret) b = uint8_t(rng());
    auto helloFor = [&](const DataStranger& d) {  // rank 0, channel 0, another secret
      return chorus::tcpwire::DataHello{chorus::tcpwire::kDataMagic, 0, 0, 0,
                                        chorus::tcpwire::dataProof(wrongSecret, d.nonce, 'D')};
    };
    for (auto& d : st) {
      if (d.name.rfind("junk", 0) == 0) {
        std::vector<uint8_t> junk(300);
        for (auto& b : junk) b = uint8_t(rng());
        sendBytes(d.fd, junk.data(), junk.size());
      } else if (d.name.rfind("truncated", 0) == 0) {
        const auto h = helloFor(d);
        sendBytes(d.fd, &h, 12);
      } else if (d.name.rfind("wrong proof", 0) == 0) {
        const auto h = helloFor(d);
        sendBytes(d.fd, &h, sizeof h);
      }
    }
    // Wait until every stranger is closed; the slow one sends a byte of a hello every 100 ms.
    const chorus::tcpwire::DataHello slow{chorus::tcpwire::kDataMagic, 0, 0, 0, 0};
    double nextSlow = nowSeconds();
    const double waitUntil = nowSeconds() + 10 * timeoutScale();
    while (nowSeconds() < waitUntil) {
      bool open = false;
      const bool slowTick = nowSeconds() >= nextSlow;
      if (slowTick) nextSlow += 0.1;
      for (auto& d : st) {
        if (d.closedAt != 0) continue;
        if (slowTick && d.name.rfind("slow", 0) == 0 && d.slowSent < sizeof slow &&
            send(d.fd, reinterpret_cast<const char*>(&slow) + d.slowSent, 1, MSG_NOSIGNAL) == 1)
          ++d.slowSent;
        char buf[512];
        const ssize_t k = recv(d.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k > 0)
          d.bytesIn += size_t(k);
        else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
          d.closedAt = nowSeconds();
        open = open || d.closedAt == 0;
      }
      if (!open) break;
      job.pump(0.005);
    }
    for (auto& d : st) {
      const double t = d.closedAt - d.openedAt;
      EXPECT_NE(d.closedAt, 0.0) << ctx << ": " << d.name << ": never closed";
      EXPECT_LE(t, deadline + 0.5 * timeoutScale())
          << ctx << ": " << d.name << ": closed after " << t << " s";
      EXPECT_EQ(d.bytesIn, 16u) << ctx << ": " << d.name << ": got more than the nonce";
      std::printf("%s: %-40s closed after %4.0f ms\n", ctx.c_str(), d.name.c_str(), t * 1e3);
      char line[200];
      std::snprintf(line, sizeof line, "datastranger held=%d \"%s\" closed_ms=%.0f", held,
                    d.name.substr(0, d.name.find(" ->")).c_str(), t * 1e3);
      appendReport(line);
      close(d.fd);
    }
    // Each running rank logged the five it closed.
    job.pump(0.05);
    for (int r = 0; r < kRanks; ++r) {
      if (r == held) continue;
      size_t logged = 0;
      for (size_t at = 0; (at = job[r].out.find("data listener: closing", at)) != std::string::npos;
           ++at)
        ++logged;
      EXPECT_GE(logged, 5u) << ctx << ": rank " << r << " logged " << logged
                            << " closed strangers:\n"
                            << job.output();
    }

    // Release the held rank: the communicator forms and computes.
    ASSERT_EQ(write(job[held].inFd, "g", 1), 1);
    ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(),
                              [&] {
                                for (int r = 0; r < kRanks; ++r)
                                  if (!job.has(r, "READY") && !job[r].exited) return false;
                                return true;
                              }))
        << ctx << job.output();
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(job.has(r, "READY")) << ctx << ": rank " << r << ":\n" << job.output();
    // The loop runs: the listeners are gone and their ports refuse strangers.
    expectNoListeners(job, ctx);
    for (const auto& l : data) {
      const int fd = socket(l.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      EXPECT_NE(connect(fd, reinterpret_cast<const sockaddr*>(&l.addr), l.len), 0)
          << ctx << ": port " << l.port << " of pid " << l.pid
          << " accepts connections after the communicator was created";
      close(fd);
    }
    ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(), [&] { return job.allExited(); }))
        << ctx << job.output();
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(WIFEXITED(job[r].status) && WEXITSTATUS(job[r].status) == 0)
          << ctx << ": rank " << r << ":\n"
          << job.output();
      EXPECT_TRUE(job.has(r, "DONE")) << ctx << ": rank " << r;
    }
    expectNothingLeft(job, ctx);
    for (const auto& l : data)
      EXPECT_FALSE(listeningWithEnv(l.port, "CHORUS_SECRET=" + job.secret()))
          << ctx << ": port " << l.port;
  }
}

// ---------------------------------------------------------------------------------------------
// Leftovers

// Every rank killed at once in the middle of a loop.
TEST(Leftovers, AllRanksKilled) {
  Watchdog watchdog(120, "Leftovers.AllRanksKilled");
  std::mt19937_64 rng = makeRng("Leftovers.AllRanksKilled");
  for (const char* coll : {"AllReduce", "AlltoAll"}) {
    Job job(kRanks, {"--coll", coll, "--watchdog", "90"}, {}, rng);
    ASSERT_TRUE(job.started());
    ASSERT_TRUE(job.pumpUntil(nowSeconds() + 60 * timeoutScale(), [&] {
      for (int r = 0; r < kRanks; ++r)
        if (!job.has(r, "READY")) return false;
      return true;
    })) << job.output();
    job.pump(double(rng() % 200) / 1000.0);
    for (int r = 0; r < kRanks; ++r) kill(job[r].pid, SIGKILL);
    for (int r = 0; r < kRanks; ++r) job.killRank(r);  // reaps
    expectNothingLeft(job, std::string("all ranks killed during ") + coll);
  }
}

// One rank killed at a random moment of communicator creation (segments exist under a name
// until every peer mapped them). The survivors must end (failed init or failed call) and
// nothing may be left behind: not the dead rank's segment either.
TEST(Leftovers, RankKilledDuringInit) {
  const long iters = std::max(1L, envLong("CHORUS_KILL_ITERS", 2)) * 3;
  Watchdog watchdog(60.0 + 30.0 * double(iters), "Leftovers.RankKilledDuringInit");
  std::mt19937_64 rng = makeRng("Leftovers.RankKilledDuringInit");
  for (long it = 0; it < iters; ++it) {
    Job job(kRanks, {"--coll", "AllReduce", "--watchdog", "60"}, {"CHORUS_BOOTSTRAP_TIMEOUT=10"},
            rng);
    ASSERT_TRUE(job.started());
    const int victim = int(rng() % kRanks);
    // Init of 4 processes takes some 10..200 ms here: kill within it.
    job.pump(double(rng() % 150) / 1000.0);
    job.killRank(victim);
    const bool ended =
        job.pumpUntil(nowSeconds() + 40 * timeoutScale(), [&] { return job.allExited(); });
    const std::string ctx =
        "rank " + std::to_string(victim) + " killed during init (round " + std::to_string(it) + ")";
    EXPECT_TRUE(ended) << ctx << ": survivors still run:\n" << job.output();
    for (int r = 0; r < kRanks && ended; ++r) {
      if (r == victim) continue;
      EXPECT_TRUE(WIFEXITED(job[r].status) &&
                  (WEXITSTATUS(job[r].status) == 2 || WEXITSTATUS(job[r].status) == 3))
          << ctx << ": rank " << r << " status " << job[r].status << "\n"
          << job.output();
    }
    expectNothingLeft(job, ctx);
    if (HasFailure()) break;
  }
}

// The leak checks' test of a port after a job ended (listeningWithEnv): a listener counts as the
// job's only when its process's environment holds the job's marker, since another test's program
// may take the port once the job has freed it. A real listener, with and without the marker.
TEST(Leftovers, PortCheckTellsTheJobFromAnotherProgram) {
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 0);
  std::mt19937_64 rng{uint64_t(getpid())};
  const std::string marker = "TEST_JOB_MARKER=" + std::to_string(rng());
  Proc other = spawnPiped(
      {"/usr/bin/python3", "-c",
       "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', " + std::to_string(port) +
           "))\ns.listen()\nprint('LISTENING', flush=True)\ntime.sleep(60)"},
      {marker});
  ASSERT_GT(other.pid, 0);
  const double until = nowSeconds() + 30 * timeoutScale();
  while (!listeningOn(port) && nowSeconds() < until) sleepSeconds(0.01);
  ASSERT_TRUE(listeningOn(port)) << "the program did not listen on " << port;
  const std::vector<pid_t> owners = listenerOwners(port);
  EXPECT_EQ(owners, std::vector<pid_t>{other.pid});
  EXPECT_TRUE(listeningWithEnv(port, marker)) << "the job's own listener not seen";
  EXPECT_FALSE(listeningWithEnv(port, marker + "0")) << "another program's counted as the job's";
  kill(other.pid, SIGKILL);
  waitpid(other.pid, nullptr, 0);
  close(other.outFd);
  close(other.inFd);
  EXPECT_FALSE(listeningWithEnv(port, marker)) << "a dead program's listener";
}

// chorusrun killed with SIGKILL while its ranks wait in a collective (rank 0 never calls): no
// rank may survive it by more than about a second.
TEST(Leftovers, ChorusrunKilled) {
  Watchdog watchdog(120, "Leftovers.ChorusrunKilled");
  std::mt19937_64 rng = makeRng("Leftovers.ChorusrunKilled");
  // Tells the job's processes from others (environ) when a port is checked after it ended.
  const std::string marker = "TEST_JOB_MARKER=" + std::to_string(rng());
  Proc run = spawnPiped({CHORUSRUN_PATH, "-np", "4", RELIABILITY_WORKER_PATH, "--coll", "AllReduce",
                         "--hang-rank", "0", "--watchdog", "100"},
                        {marker});
  ASSERT_GT(run.pid, 0);
  std::map<int, pid_t> pids;
  int port = -1;
  const double deadline = nowSeconds() + 60 * timeoutScale();
  std::string out;
  while (pids.size() < 4 && nowSeconds() < deadline) {
    pollfd p{run.outFd, POLLIN, 0};
    poll(&p, 1, 50);
    char buf[4096];
    ssize_t n;
    while ((n = read(run.outFd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    std::istringstream is(out);
    std::string line;
    while (std::getline(is, line)) {
      const auto f = fieldsOf(line, "READY");
      if (!f.count("_found")) continue;
      pids[std::stoi(f.at("rank"))] = pid_t(std::stoi(f.at("pid")));
      const std::string comm = f.count("comm") ? f.at("comm") : "";
      if (comm.rfind(':') != std::string::npos) port = std::stoi(comm.substr(comm.rfind(':') + 1));
    }
  }
  auto cleanup = [&] {
    for (auto& [r, pid] : pids) kill(pid, SIGKILL);
    kill(run.pid, SIGKILL);
    waitpid(run.pid, nullptr, 0);
    close(run.outFd);
    close(run.inFd);
  };
  if (pids.size() < 4) {
    cleanup();
    FAIL() << "the ranks did not all start:\n" << out;
  }
  // Let them wait in the AllReduce a moment, then kill the launcher.
  sleepSeconds(0.2 + double(rng() % 300) / 1000.0);
  kill(run.pid, SIGKILL);
  waitpid(run.pid, nullptr, 0);
  const double killedAt = nowSeconds();
  std::vector<pid_t> survivors;
  for (auto& [r, pid] : pids) survivors.push_back(pid);
  while (nowSeconds() < killedAt + 1.0 * timeoutScale()) {
    bool any = false;
    for (pid_t p : survivors) any = any || processRuns(p);
    if (!any) break;
    sleepSeconds(0.02);
  }
  const double gone = nowSeconds() - killedAt;
  for (auto& [r, pid] : pids)
    EXPECT_FALSE(processRuns(pid))
        << "rank " << r << " (pid " << pid << ") outlived chorusrun by more than 1 s";
  std::printf("Leftovers.ChorusrunKilled: ranks gone %.0f ms after chorusrun was killed\n",
              gone * 1e3);
  const auto shm = shmOf(survivors);
  EXPECT_TRUE(shm.empty()) << ::testing::PrintToString(shm);
  removeShm(shm);
  ASSERT_GT(port, 0) << "READY lines carry no comm=host:port:\n" << out;
  EXPECT_FALSE(listeningWithEnv(port, marker))
      << "a process of the job still listens on its port " << port;
  cleanup();
}

// ---------------------------------------------------------------------------------------------
// Abort and CHORUS_TIMEOUT (ranks as threads of this process)

TEST(Abort, UnblocksAWaitingCallWithinOneSecond) {
  Watchdog watchdog(60, "Abort.UnblocksAWaitingCallWithinOneSecond");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<float> in(1 << 16, 1.0f), out(1 << 16, 0.0f);
  std::atomic<double> returnedAt{0};
  chorusResult_t waited = chorusSuccess;
  std::string waitedMsg;
  // Rank 0 never calls; rank 1 waits in AllReduce.
  std::thread rank1([&] {
    waited = chorusAllReduce(in.data(), out.data(), in.size(), chorusFloat32, chorusSum, comms[1],
                             nullptr);
    waitedMsg = chorusGetLastError(nullptr);
    returnedAt = nowSeconds();
  });
  sleepSeconds(0.2);
  EXPECT_EQ(returnedAt.load(), 0.0) << "AllReduce returned without its peer";
  const double abortAt = nowSeconds();
  std::thread aborter([&] { EXPECT_EQ(chorusCommAbort(comms[1]), chorusSuccess); });
  aborter.join();
  const double abortDone = nowSeconds();
  rank1.join();
  comms.forget(1);
  const double latency = returnedAt.load() - abortAt;
  EXPECT_NE(waited, chorusSuccess) << "the aborted AllReduce reported success";
  EXPECT_LT(latency, 1.0) << "AllReduce returned " << latency << " s after chorusCommAbort";
  EXPECT_LT(abortDone - abortAt, 1.0) << "chorusCommAbort took " << abortDone - abortAt << " s";
  std::printf(
      "Abort: the waiting call returned %.1f ms after chorusCommAbort (%s: %s); abort "
      "itself took %.1f ms\n",
      latency * 1e3, resultName(waited), waitedMsg.c_str(), (abortDone - abortAt) * 1e3);
  char line[160];
  std::snprintf(line, sizeof line, "abort latency_ms=%.1f abort_call_ms=%.1f", latency * 1e3,
                (abortDone - abortAt) * 1e3);
  appendReport(line);
  EXPECT_EQ(comms.destroyAll(), chorusSuccess) << "destroying rank 0 (never called)";
}

// Two ranks that wait for each other and not for a third one that failed (ranks that disagree
// about a call once a rank failed: a single-copy AllGather where one rank read the failing
// rank's post before it was withdrawn and copies, the other after and runs the ring) still end,
// naming the failed rank: a long wait reads every same-node rank's failure flag. Here ranks 0
// and 1 each receive from the other (neither sends) and rank 2 aborts.
TEST(Abort, ARankThatFailedEndsWaitsThatDoNotWatchIt) {
  Watchdog watchdog(60, "Abort.ARankThatFailedEndsWaitsThatDoNotWatchIt");
  CommSet comms(3);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<float> buf[2] = {std::vector<float>(1024), std::vector<float>(1024)};
  chorusResult_t res[2] = {chorusSuccess, chorusSuccess};
  std::string msg[2];
  int failedRank[2] = {-1, -1};
  std::atomic<double> returnedAt[2] = {0, 0};
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r)
    waiting.emplace_back([&, r] {
      res[r] = chorusRecv(buf[r].data(), buf[r].size(), chorusFloat32, 1 - r, comms[r], nullptr);
      msg[r] = chorusGetLastError(comms[r]);
      chorusCommGetFailedRank(comms[r], &failedRank[r]);
      returnedAt[r] = nowSeconds();
    });
  sleepSeconds(0.3);
  EXPECT_EQ(returnedAt[0].load() + returnedAt[1].load(), 0.0) << "a receive returned early";
  const double abortAt = nowSeconds();
  EXPECT_EQ(chorusCommAbort(comms[2]), chorusSuccess);
  comms.forget(2);
  for (auto& t : waiting) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[r], chorusRemoteError) << "rank " << r << ": " << msg[r];
    EXPECT_NE(msg[r].find("rank 2 failed"), std::string::npos) << "rank " << r << ": " << msg[r];
    EXPECT_EQ(failedRank[r], 2) << "rank " << r << ": chorusCommGetFailedRank";
    EXPECT_LT(returnedAt[r].load() - abortAt, 2.0) << "rank " << r << " returned late";
    std::printf("rank %d returned %.0f ms after rank 2's abort: %s\n", r,
                (returnedAt[r].load() - abortAt) * 1e3, msg[r].c_str());
  }
  EXPECT_EQ(comms.destroyAll(), chorusSuccess);
}

// A wait whose peer is in a cycle that does not include the waiting rank: ranks 0 and 1 each
// receive from the other (neither sends), rank 2 receives from rank 1 and times out first. Its
// message names the cycle (2 -> 1 -> 0 -> 1), not rank 0 as "not waiting in Chorus": the chain
// it follows goes round without coming back to it. Across nodes the same chain is live ranks
// waiting on data in TCP's retransmission backoff (30% loss), and the wait waits again.
TEST(WaitCycle, AheadOfTheWaitIsNamedAsACycle) {
  Watchdog watchdog(60, "WaitCycle.AheadOfTheWaitIsNamedAsACycle");
  ScopedEnv timeout("CHORUS_TIMEOUT", "1");
  CommSet comms(3);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<float> buf[3] = {std::vector<float>(1024), std::vector<float>(1024),
                               std::vector<float>(1024)};
  chorusResult_t res[3] = {chorusSuccess, chorusSuccess, chorusSuccess};
  std::string msg[3];
  int failedRank[3] = {-9, -9, -9};
  const int from[3] = {1, 0, 1};
  auto receive = [&](int r) {
    res[r] = chorusRecv(buf[r].data(), buf[r].size(), chorusFloat32, from[r], comms[r], nullptr);
    msg[r] = chorusGetLastError(comms[r]);
    chorusCommGetFailedRank(comms[r], &failedRank[r]);
  };
  std::vector<std::thread> waiting;
  waiting.emplace_back(receive, 2);
  sleepSeconds(0.4);  // rank 2 times out while ranks 0 and 1 still wait, live
  waiting.emplace_back(receive, 0);
  waiting.emplace_back(receive, 1);
  for (auto& t : waiting) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_NE(res[r], chorusSuccess) << "rank " << r;
  EXPECT_EQ(res[2], chorusTimeout) << msg[2];
  EXPECT_NE(msg[2].find("wait for each other in a cycle (2 -> 1 -> 0 -> 1)"), std::string::npos)
      << msg[2];
  EXPECT_EQ(msg[2].find("is behind"), std::string::npos) << msg[2];
  EXPECT_EQ(failedRank[2], -1) << "a cycle has no single culprit: " << msg[2];
  std::printf("rank 2: %s\n", msg[2].c_str());
  EXPECT_EQ(comms.destroyAll(), chorusSuccess);
}

// CHORUS_TIMEOUT=1: rank 1 calls, rank 0 never does.
class Timeout : public ::testing::TestWithParam<std::string> {};

TEST_P(Timeout, NoProgressFailsNamingThePeer) {
  const std::string what = GetParam();
  Watchdog watchdog(60, "Timeout." + what);
  ScopedEnv timeout("CHORUS_TIMEOUT", "1");
  // AllGatherRing2ch: a ring on two channels (a channel that fails stops its sibling).
  const bool twoChannels = what == "AllGatherRing2ch";
  ScopedEnv algo("CHORUS_ALGO", twoChannels ? "ring" : nullptr);
  ScopedEnv channels("CHORUS_MIN_NCHANNELS", twoChannels ? "2" : nullptr);
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<float> in(1 << 16, 1.0f), out(1 << 16, 0.0f);
  const double start = nowSeconds();
  chorusResult_t r;
  if (what == "AllReduce")
    r = chorusAllReduce(in.data(), out.data(), in.size(), chorusFloat32, chorusSum, comms[1],
                        nullptr);
  else if (what == "AllGatherRing2ch")
    r = chorusAllGather(in.data(), out.data(), in.size() / 2, chorusFloat32, comms[1], nullptr);
  else if (what == "Broadcast")
    r = chorusBroadcast(in.data(), out.data(), in.size(), chorusFloat32, 0, comms[1], nullptr);
  else
    r = chorusRecv(out.data(), out.size(), chorusFloat32, 0, comms[1], nullptr);
  const double took = nowSeconds() - start;
  const std::string msg = chorusGetLastError(comms[1]);
  EXPECT_EQ(r, chorusTimeout) << msg;
  EXPECT_GE(took, 0.9) << "failed before CHORUS_TIMEOUT: " << msg;
  EXPECT_LT(took, 3.0) << "CHORUS_TIMEOUT=1 took " << took << " s";
  EXPECT_TRUE(std::regex_search(msg, std::regex("peer rank 0\\b")))
      << "the message does not name the peer it waited for (rank 0): " << msg;
  chorusResult_t async = chorusSuccess;
  EXPECT_EQ(chorusCommGetAsyncError(comms[1], &async), chorusSuccess);
  EXPECT_EQ(async, chorusTimeout) << "chorusCommGetAsyncError after the timeout";
  std::printf("Timeout.%s: failed after %.2f s: %s\n", what.c_str(), took, msg.c_str());
  // Rank 0 learns of it too: its next call fails instead of waiting forever.
  const chorusResult_t r0 = chorusAllReduce(in.data(), out.data(), in.size(), chorusFloat32,
                                            chorusSum, comms[0], nullptr);
  // (CHORUS_TIMEOUT applies to rank 0 too: at worst it times out instead of hanging.)
  EXPECT_EQ(r0, chorusRemoteError)
      << "rank 0's AllReduce with a failed peer: " << chorusGetLastError(comms[0]);
  comms.destroyAll();
}

INSTANTIATE_TEST_SUITE_P(Threads, Timeout,
                         ::testing::Values("AllReduce", "Broadcast", "Recv", "AllGatherRing2ch"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---------------------------------------------------------------------------------------------
// CallCheck: CHORUS_CHECK=1 (3 ranks as threads; rank 2 differs in one field)

struct Call {
  std::string kind = "AllReduce";
  size_t count = 1000;
  chorusDataType_t type = chorusFloat32;
  chorusRedOp_t op = chorusSum;
  int root = 0;
};

chorusResult_t issueCall(const Call& c, chorusComm_t comm, std::vector<char>& send,
                         std::vector<char>& recv) {
  if (c.kind == "AllReduce")
    return chorusAllReduce(send.data(), recv.data(), c.count, c.type, c.op, comm, nullptr);
  if (c.kind == "Reduce")
    return chorusReduce(send.data(), recv.data(), c.count, c.type, c.op, c.root, comm, nullptr);
  return chorusBroadcast(send.data(), recv.data(), c.count, c.type, c.root, comm, nullptr);
}

struct MismatchCase {
  const char* field;
  Call same;
  Call other;
  std::string sameText, otherText;  // what the message shows for each
};

class CallCheck : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(CallCheck, MismatchFailsEveryRank) {
  const MismatchCase& mc = GetParam();
  Watchdog watchdog(60, std::string("CallCheck.") + mc.field);
  ScopedEnv check("CHORUS_CHECK", "1");
  const int n = 3;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<chorusResult_t> res(n, chorusSuccess);
  std::vector<std::string> msgs(n);
  runThreads(n, [&](int r) {
    const Call& c = r == 2 ? mc.other : mc.same;
    std::vector<char> send(8 * 2000, 1), recv(8 * 2000, 0);
    res[size_t(r)] = issueCall(c, comms[r], send, recv);
    msgs[size_t(r)] = chorusGetLastError(comms[r]);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(res[size_t(r)], chorusInvalidUsage)
        << "rank " << r << " (" << mc.field << " differs on rank 2): " << msgs[size_t(r)];
    const std::string& m = msgs[size_t(r)];
    for (int q = 0; q < n; ++q) {
      const std::string& text = q == 2 ? mc.otherText : mc.sameText;
      const std::string pattern = "rank " + std::to_string(q) + ": " + text;
      EXPECT_NE(m.find(pattern), std::string::npos)
          << "rank " << r << "'s message does not show what rank " << q << " called ('" << pattern
          << "'): " << m;
    }
  }
  std::printf("CallCheck.%s: %s\n", mc.field, msgs[0].c_str());
  comms.destroyAll();
}

Call with(Call c, const std::string& kind) {
  c.kind = kind;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Threads, CallCheck,
    ::testing::Values(MismatchCase{"kind", Call{}, with(Call{}, "Broadcast"), "AllReduce(",
                                   "Broadcast("},
                      MismatchCase{"count", Call{}, Call{"AllReduce", 1001},
                                   "AllReduce(seq 0, count 1000,", "AllReduce(seq 0, count 1001,"},
                      MismatchCase{"type", Call{}, Call{"AllReduce", 1000, chorusInt32},
                                   "AllReduce(seq 0, count 1000, float32,",
                                   "AllReduce(seq 0, count 1000, int32,"},
                      MismatchCase{"op", Call{}, Call{"AllReduce", 1000, chorusFloat32, chorusMax},
                                   "AllReduce(seq 0, count 1000, float32, op sum",
                                   "AllReduce(seq 0, count 1000, float32, op max"},
                      MismatchCase{"root", Call{"Broadcast"},
                                   Call{"Broadcast", 1000, chorusFloat32, chorusSum, 1},
                                   "Broadcast(seq 0, count 1000, float32, op none, root 0)",
                                   "Broadcast(seq 0, count 1000, float32, op none, root 1)"}),
    [](const ::testing::TestParamInfo<MismatchCase>& i) { return std::string(i.param.field); });

// No false alarm: with CHORUS_CHECK=1 matching calls of every collective still compute, call
// after call (the sequence number advances together).
TEST(CallCheckMatching, EveryCollectivePasses) {
  Watchdog watchdog(120, "CallCheckMatching.EveryCollectivePasses");
  ScopedEnv check("CHORUS_CHECK", "1");
  const int n = 3;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  const size_t count = 777;
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    std::vector<float> send(count * n, float(r + 1)), recv(count * n, 0);
    auto expect = [&](const char* what, chorusResult_t res, float got, float want) {
      if (res != chorusSuccess || got != want)
        errors[size_t(r)] += std::string(what) + ": " + resultName(res) + " got " +
                             std::to_string(got) + " want " + std::to_string(want) + " (" +
                             chorusGetLastError(comms[r]) + "); ";
    };
    for (int round = 0; round < 2; ++round) {
      auto res = chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum,
                                 comms[r], nullptr);
      expect("AllReduce", res, recv[count - 1], 6.0f);
      res = chorusBroadcast(send.data(), recv.data(), count, chorusFloat32, 2, comms[r], nullptr);
      expect("Broadcast", res, recv[0], 3.0f);
      res = chorusReduce(send.data(), recv.data(), count, chorusFloat32, chorusMax, 1, comms[r],
                         nullptr);
      expect("Reduce", res, r == 1 ? recv[0] : 3.0f, 3.0f);
      res = chorusAllGather(send.data(), recv.data(), count, chorusFloat32, comms[r], nullptr);
      expect("AllGather", res, recv[count * 2], 3.0f);
      res = chorusReduceScatter(send.data(), recv.data(), count, chorusFloat32, chorusSum, comms[r],
                                nullptr);
      expect("ReduceScatter", res, recv[0], 6.0f);
      res = chorusAlltoAll(send.data(), recv.data(), count, chorusFloat32, comms[r], nullptr);
      expect("AlltoAll", res, recv[count], 2.0f);
      res = chorusGather(send.data(), recv.data(), count, chorusFloat32, 0, comms[r], nullptr);
      expect("Gather", res, r == 0 ? recv[count * 2] : 3.0f, 3.0f);
      res = chorusScatter(send.data(), recv.data(), count, chorusFloat32, 0, comms[r], nullptr);
      expect("Scatter", res, recv[0], 1.0f);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  EXPECT_EQ(comms.destroyAll(), chorusSuccess);
}

// ---------------------------------------------------------------------------------------------
// Strangers at the bootstrap root

struct Stranger {
  const char* name;
  int fd = -1;
  double openedAt = 0;
  double closedAt = 0;  // 0: still open
  size_t bytesFromRoot = 0;
  uint8_t nonce[16] = {};
};

int connectTo(const chorus::IdData& id) {
  const int fd =
      socket(reinterpret_cast<const sockaddr*>(id.addr)->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(id.addr), socklen_t(id.addrLen)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(Strangers, RootClosesThemAndTheCommunicatorForms) {
  Watchdog watchdog(120, "Strangers.RootClosesThemAndTheCommunicatorForms");
  ScopedEnv handshake("CHORUS_HANDSHAKE_TIMEOUT_MS", "500");
  const double deadline = 0.5;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  const chorus::IdData data = chorus::decodeId(id);
  sockaddr_storage ss{};
  std::memcpy(&ss, data.addr, data.addrLen);
  const int port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                 : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  EXPECT_TRUE(listeningOn(port)) << "the root does not listen on " << port;

  // Ranks 0 and 1 start joining; rank 2 comes only after the strangers were dealt with, so that
  // the root closes them because of what they sent, not because the communicator is complete.
  const int n = 3;
  std::vector<chorusComm_t> comms(n, nullptr);
  std::vector<chorusResult_t> init(n, chorusInternalError);
  std::vector<std::thread> joiners;
  for (int r = 0; r < 2; ++r)
    joiners.emplace_back(
        [&, r] { init[size_t(r)] = chorusCommInitRank(&comms[size_t(r)], n, id, r); });

  std::vector<Stranger> s = {{"junk"},           {"short junk"},  {"truncated hello"},
                             {"garbage header"}, {"wrong proof"}, {"silent"}};
  std::mt19937_64 rng(12345);
  for (auto& st : s) {
    st.fd = connectTo(data);
    ASSERT_GE(st.fd, 0) << st.name << ": cannot connect to the root";
    st.openedAt = nowSeconds();
  }
  auto challenge = [&](Stranger& st) {
    chorus::wire::Challenge c{};
    ASSERT_TRUE(readExactly(st.fd, &c, sizeof c, 5)) << st.name << ": no challenge from the root";
    st.bytesFromRoot += sizeof c;
    ASSERT_TRUE(chorus::wire::parseChallenge(&c, sizeof c, st.nonce)) << st.name;
  };
  // Every stranger first reads the challenge (so that a reset from the root cannot drop it).
  for (auto& st : s) challenge(st);
  {  // junk: 300 random bytes
    std::vector<uint8_t> junk(300);
    for (auto& b : junk) b = uint8_t(rng());
    sendBytes(s[0].fd, junk.data(), junk.size());
  }
  // short junk: less than a hello, then nothing
  sendBytes(s[1].fd, "GET / HTTP/1.0\r\n", 16);
  {  // truncated hello: a real hello's first 12 bytes
    chorus::wire::Hello h{chorus::wire::kHelloMagic, 2, 3, 0, 0};
    sendBytes(s[2].fd, &h, 12);
  }
  {  // garbage header: a round header announcing 4 GiB, then 4 KiB of 0xff
    const uint32_t len = 0xffffffffu;
    sendBytes(s[3].fd, &len, 4);
    std::vector<uint8_t> ff(4096, 0xff);
    sendBytes(s[3].fd, ff.data(), ff.size());
  }
  {  // wrong proof: a well-formed hello for rank 2 proving another secret
    uint8_t wrong[16];
    std::memcpy(wrong, data.secret, 16);
    wrong[0] ^= 1;
    chorus::wire::Hello h{chorus::wire::kHelloMagic, 2, 3, 0,
                          chorus::wire::proofFor(wrong, s[4].nonce, 'C')};
    sendBytes(s[4].fd, &h, sizeof h);
  }
  // silent: nothing at all

  // Wait for the root to close every stranger (read returns 0 or an error).
  const double waitUntil = nowSeconds() + 10;
  while (nowSeconds() < waitUntil) {
    bool open = false;
    for (auto& st : s) {
      if (st.closedAt != 0) continue;
      char buf[512];
      const ssize_t k = recv(st.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (k > 0) {
        st.bytesFromRoot += size_t(k);
      } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        st.closedAt = nowSeconds();
      }
      open = open || st.closedAt == 0;
    }
    if (!open) break;
    sleepSeconds(0.005);
  }
  for (auto& st : s) {
    const double t = st.closedAt - st.openedAt;
    EXPECT_NE(st.closedAt, 0.0) << st.name << ": the root never closed the connection";
    // The root polls every 100 ms; the machine may be busy: allow 0.5 s past the deadline.
    EXPECT_LE(t, deadline + 0.5) << st.name << ": closed " << t << " s after connecting";
    EXPECT_EQ(st.bytesFromRoot, sizeof(chorus::wire::Challenge))
        << st.name << ": the root sent more than its challenge";
    std::printf("stranger %-16s closed after %4.0f ms (%zu bytes from the root)\n", st.name,
                t * 1e3, st.bytesFromRoot);
    char line[160];
    std::snprintf(line, sizeof line, "stranger \"%s\" closed_ms=%.0f", st.name, t * 1e3);
    appendReport(line);
    close(st.fd);
  }

  // The real communicator still forms and computes.
  joiners.emplace_back([&] { init[2] = chorusCommInitRank(&comms[2], n, id, 2); });
  for (auto& t : joiners) t.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(init[size_t(r)], chorusSuccess) << "rank " << r;
  EXPECT_FALSE(listeningOn(port)) << "the root still listens once every rank joined";
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(4096, 0));
  std::vector<chorusResult_t> res(n);
  runThreads(n, [&](int r) {
    std::vector<int32_t> in(4096, r + 1);
    res[size_t(r)] = chorusAllReduce(in.data(), out[size_t(r)].data(), in.size(), chorusInt32,
                                     chorusSum, comms[size_t(r)], nullptr);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(res[size_t(r)], chorusSuccess) << "rank " << r;
    EXPECT_EQ(out[size_t(r)][0], 6) << "rank " << r;
    EXPECT_EQ(out[size_t(r)][4095], 6) << "rank " << r;
  }
  runThreads(n, [&](int r) { EXPECT_EQ(chorusCommDestroy(comms[size_t(r)]), chorusSuccess); });
}

// The root reads its settings when it starts (chorusGetUniqueId), on the caller's thread: its
// own thread reads no environment, which a program (chorus-tune between its inits, a torch
// script's os.environ) may change while it runs, freeing what a concurrent getenv walks. A
// silent stranger is closed by the deadline set when the root started, not the one set after.
TEST(Strangers, RootReadsItsSettingsWhenItStarts) {
  Watchdog watchdog(60, "Strangers.RootReadsItsSettingsWhenItStarts");
  chorusUniqueId id;
  {
    ScopedEnv handshake("CHORUS_HANDSHAKE_TIMEOUT_MS", "300");
    ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  }
  ScopedEnv later("CHORUS_HANDSHAKE_TIMEOUT_MS", "60000");
  const chorus::IdData data = chorus::decodeId(id);
  const int fd = connectTo(data);
  ASSERT_GE(fd, 0) << "cannot connect to the root";
  const double opened = nowSeconds();
  chorus::wire::Challenge c{};
  ASSERT_TRUE(readExactly(fd, &c, sizeof c, 5)) << "no challenge from the root";
  double closedAt = 0;
  while (closedAt == 0 && nowSeconds() < opened + 10) {
    char buf[64];
    const ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closedAt = nowSeconds();
    sleepSeconds(0.005);
  }
  close(fd);
  ASSERT_NE(closedAt, 0.0) << "the root kept a silent stranger 10 s (the later 60 s deadline)";
  EXPECT_LE(closedAt - opened, 0.3 + 1.0);  // polls every 100 ms; a busy machine: 1 s more
  // The communicator (one rank) still forms, and the root exits with it.
  chorusComm_t comm = nullptr;
  ASSERT_EQ(chorusCommInitRank(&comm, 1, id, 0), chorusSuccess) << chorusGetLastError(nullptr);
  EXPECT_EQ(chorusCommDestroy(comm), chorusSuccess);
}

}  // namespace
