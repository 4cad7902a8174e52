// The launcher form reads rank, size and root address from the variables of each launcher:
// here the processes are started by a shell with exactly the variables Open MPI, MPICH/Hydra,
// Slurm and torchrun set (plus the root address), and must form one communicator and pass a
// small collective matrix. A real mpirun runs too when Open MPI is installed. Under srun no
// address is needed: it comes from Slurm's variables (core/slurm_env.h; a real Slurm runs in
// scripts/slurm_check.sh).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/slurm_env.h"
#include "gtest_helpers.h"
#include "handstart.h"
#include "process.h"
#include "run_command.h"
#include "timing.h"

namespace {

using namespace ctest;

// The end of a shell script that started ranks in the background, each followed by
// `pids="$pids $!"`: waits for them all and exits 1 if any failed. (`$(jobs -p)` would list
// nothing: dash runs a command substitution in a subshell, which has no jobs.)
constexpr const char* kWaitAll = "fail=0; for j in $pids; do wait $j || fail=1; done; exit $fail";

struct LauncherVars {
  const char* name;
  const char* rankVar;
  const char* sizeVar;
  bool torchStyle;  // MASTER_ADDR/MASTER_PORT instead of CHORUS_COMM_ID
};

const LauncherVars kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", false},
    {"mpich", "PMI_RANK", "PMI_SIZE", false},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", false},
    {"torchrun", "RANK", "WORLD_SIZE", true},
};

class Launchers : public ShmCheckedTestP<int> {};

TEST_P(Launchers, FormOneCommunicator) {
  const LauncherVars& l = kLaunchers[GetParam()];
  const int np = 3;
  // A port the kernel just handed out and took back: a fixed formula could land in the
  // ephemeral range, where another process's connection may hold it.
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 1) << "no free port on 127.0.0.1";
  std::string script;
  for (int r = 0; r < np; ++r) {
    script += std::string("env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_COMM_ID ") + l.rankVar +
              "=" + std::to_string(r) + " " + l.sizeVar + "=" + std::to_string(np) + " ";
    script += l.torchStyle ? "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port - 1)
                           : "CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port);
    script += std::string(" CHORUS_SECRET=00112233445566778899aabbccddeeff ") + MP_WORKER_PATH +
              " --counts 1,1000 --big none --timeout 100 & pids=\"$pids $!\"; ";
  }
  script += kWaitAll;
  const CommandResult r = runCommand({"/bin/sh", "-c", script}, 150);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << l.name << ":\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(Env, Launchers, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(kLaunchers[info.param].name);
                         });

// The root's fixed port held by a socket that is not a listener (a peer's early connection
// attempt can get it from the kernel, a closing job's socket can keep it): rank 0 retries its
// bind for up to 2 s, so a port held for a moment costs a moment; one held for good fails every
// rank with an error that says what and where. Ranks started by hand with Open MPI's variables.
// holdPort: a socket bound to 127.0.0.1:port (no listener, no SO_REUSEADDR), or -1.
int holdPort(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

std::string twoRanksOn(int port) {
  std::string script;
  for (int r = 0; r < 2; ++r)
    script += "env -u CHORUS_RANK -u CHORUS_NRANKS OMPI_COMM_WORLD_RANK=" + std::to_string(r) +
              " OMPI_COMM_WORLD_SIZE=2 CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port) +
              " CHORUS_SECRET=00112233445566778899aabbccddeeff CHORUS_BOOTSTRAP_TIMEOUT=10 " +
              MP_WORKER_PATH +
              " --counts 1,1000 --big none --timeout 30 2>&1 & pids=\"$pids $!\"; ";
  return script + kWaitAll;
}

TEST(Launchers, RootPortHeldForAMomentIsWaitedFor) {
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 0) << "no free port on 127.0.0.1";
  const int held = holdPort(port);
  ASSERT_GE(held, 0) << "cannot bind 127.0.0.1:" << port;
  std::thread release([held] {
    sleepSeconds(0.5);
    close(held);
  });
  const CommandResult r = runCommand({"/bin/sh", "-c", twoRanksOn(port)}, 90);
  release.join();
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

TEST(Launchers, RootPortHeldForGoodFailsNamingIt) {
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 0) << "no free port on 127.0.0.1";
  const int held = holdPort(port);
  ASSERT_GE(held, 0) << "cannot bind 127.0.0.1:" << port;
  const double start = nowSeconds();
  const CommandResult r = runCommand({"/bin/sh", "-c", twoRanksOn(port)}, 90);
  const double took = nowSeconds() - start;
  close(held);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_NE(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find(":" + std::to_string(port) + ": Address already in use (for 2 s"),
            std::string::npos)
      << r.output;
  EXPECT_GE(took, 1.9) << "rank 0 gave up before 2 s:\n" << r.output;
  std::printf("both ranks ended %.1f s after the start\n", took);
}

TEST(Launchers, SlurmHostList) {
  EXPECT_EQ(chorus::slurmFirstHost("vm"), "vm");
  EXPECT_EQ(chorus::slurmFirstHost("node07,node08"), "node07");
  EXPECT_EQ(chorus::slurmFirstHost("node[03-07,12],login1"), "node03");
  EXPECT_EQ(chorus::slurmFirstHost("node[12,3-7]"), "node12");
  EXPECT_EQ(chorus::slurmFirstHost("rack[1-2]-n[5,7]"), "rack1-n5");
  EXPECT_EQ(chorus::slurmFirstHost(""), "");
  EXPECT_EQ(chorus::slurmFirstHost("node[1-2"), "");
  EXPECT_EQ(chorus::slurmFirstHost("node[]"), "");
  // The same port in every task of a step; another step of the job, another port.
  EXPECT_EQ(chorus::slurmRootPort(1234, 3), 20000 + (1234 * 101 + 3) % 12000);
  EXPECT_NE(chorus::slurmRootPort(1234, 3), chorus::slurmRootPort(1234, 4));
  for (uint64_t job : {0ull, 1ull, 999999ull, 4294967295ull})
    for (uint64_t step : {0ull, 1ull, 4294967294ull}) {  // 4294967294: the batch step
      EXPECT_GE(chorus::slurmRootPort(job, step), 20000);
      EXPECT_LT(chorus::slurmRootPort(job, step), 32000);  // below the ephemeral range
    }
}

// Whether 127.0.0.1:port can be bound now.
bool loopbackPortFree(int port) {
  const int fd = holdPort(port);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

// srun's variables alone (no CHORUS_COMM_ID, no MASTER_ADDR): the root is the step's first node
// at the port derived from the job and step ids. Job id 12000 makes that port 20000 + step id,
// so the step id picks a port that is free now.
TEST(Launchers, SlurmWithoutAddress) {
  int step = -1;
  for (int i = 0; i < 2000 && step < 0; ++i) {
    const int s = int((unsigned(getpid()) * 7 + unsigned(i) * 13) % 12000);
    if (loopbackPortFree(20000 + s)) step = s;
  }
  ASSERT_GE(step, 0) << "no free port in 20000-31999";
  ASSERT_EQ(chorus::slurmRootPort(12000, uint64_t(step)), 20000 + step);
  const int np = 3;
  std::string script;
  for (int r = 0; r < np; ++r)
    script +=
        "env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_COMM_ID -u MASTER_ADDR -u MASTER_PORT "
        "-u RANK -u WORLD_SIZE SLURM_PROCID=" +
        std::to_string(r) + " SLURM_NTASKS=" + std::to_string(np) +
        " SLURM_LOCALID=" + std::to_string(r) +
        " SLURM_JOB_ID=12000 SLURM_STEP_ID=" + std::to_string(step) +
        " SLURM_STEP_NODELIST=127.0.0.1,node[2-3] CHORUS_SECRET=00112233445566778899aabbccddeeff " +
        MP_WORKER_PATH + " --counts 1,1000 --big none --timeout 100 & pids=\"$pids $!\"; ";
  script += kWaitAll;
  const CommandResult r = runCommand({"/bin/sh", "-c", script}, 150);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

// A batch script's own environment has SLURM_PROCID=0 and SLURM_NTASKS=N but no step: a program
// started there without srun fails at once, saying so, instead of waiting for N - 1 ranks.
TEST(Launchers, SlurmBatchScriptWithoutSrun) {
  const CommandResult r = runCommand(
      {"/bin/sh", "-c",
       std::string("env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_COMM_ID -u MASTER_ADDR -u "
                   "MASTER_PORT -u RANK -u WORLD_SIZE -u SLURM_STEP_ID -u SLURM_STEPID -u "
                   "SLURM_STEP_NODELIST SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0 "
                   "SLURM_JOB_ID=77 SLURM_JOB_NODELIST=localhost ") +
           MP_WORKER_PATH + " --counts 1 --big none --timeout 30 2>&1"},
      60);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_NE(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 of 4: SLURM_PROCID/SLURM_NTASKS are set but this is no srun "
                          "step"),
            std::string::npos)
      << r.output;
}

TEST(Launchers, RealMpirunWhenInstalled) {
  if (access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "Open MPI's mpirun is not installed";
  // As above: mpirun's own daemons take ephemeral ports, which a fixed formula once hit
  // ("bind 0.0.0.0:37052: Address already in use").
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 0) << "no free port on 127.0.0.1";
  const CommandResult r =
      runCommand({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", "-x",
                  "CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port), MP_WORKER_PATH, "--counts",
                  "1,1000", "--big", "none", "--timeout", "100"},
                 150);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

// Ranks that nothing placed take their share of the CPUs they were given (core/init.cc,
// placement): started by hand with Open MPI's variables, each prints the CPUs its thread may use
// once the communicator exists (mp_worker --print-cpus).
std::vector<int> parentCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The shell lines that start np ranks by hand in the background (prefix[r] before rank r's
// command, e.g. "taskset -c 1"), each checking the collective matrix at `counts` and printing
// its CPUs, then wait for them: the status is 1 if any failed.
std::string ranksByHandScript(int np, const std::string& env, const std::string& counts,
                              const std::vector<std::string>& prefix = {},
                              const std::string& extra = "") {
  const int port = freeLoopbackPort();
  std::string script = "pids=; ";
  for (int r = 0; r < np; ++r)
    script += "env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_BIND OMPI_COMM_WORLD_RANK=" +
              std::to_string(r) + " OMPI_COMM_WORLD_SIZE=" + std::to_string(np) +
              " CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port) +
              " CHORUS_SECRET=00112233445566778899aabbccddeeff " + env + " " +
              (size_t(r) < prefix.size() ? prefix[size_t(r)] + " " : std::string()) +
              MP_WORKER_PATH + " --print-cpus --counts " + counts + " --big none --timeout 100" +
              extra + " & pids=\"$pids $!\"; ";
  return script + "fail=0; for j in $pids; do wait $j || fail=1; done; exit $fail";
}

// Starts np ranks by hand (ranksByHandScript); their output.
CommandResult runRanksByHand(int np, const std::string& env, const std::string& counts,
                             const std::vector<std::string>& prefix = {}) {
  return runCommand({"/bin/sh", "-c", ranksByHandScript(np, env, counts, prefix)}, 150);
}

// Each rank's CPU list from the lines "<tag>cpus rank=R list=..." of `output`.
std::map<int, std::vector<int>> cpusInOutput(const std::string& output,
                                             const std::string& tag = "") {
  std::map<int, std::vector<int>> out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    int rank = -1;
    const size_t at = line.find("cpus rank=");
    if (at == std::string::npos || line.compare(0, tag.size(), tag) != 0 ||
        sscanf(line.c_str() + at, "cpus rank=%d", &rank) != 1)
      continue;
    std::vector<int> cpus;
    std::istringstream list(line.substr(line.find("list=") + 5));
    for (std::string item; std::getline(list, item, ',');) cpus.push_back(std::stoi(item));
    out[rank] = cpus;
  }
  return out;
}

// Starts np ranks by hand as runRanksByHand, returns each rank's CPU list.
std::map<int, std::vector<int>> cpusOfRanks(int np, const std::string& env,
                                            const std::string& counts,
                                            const std::vector<std::string>& prefix = {}) {
  const CommandResult res = runRanksByHand(np, env, counts, prefix);
  EXPECT_FALSE(res.timedOut) << res.output;
  EXPECT_EQ(res.exitCode, 0) << res.output;
  const auto out = cpusInOutput(res.output);
  EXPECT_EQ(int(out.size()), np) << res.output;
  return out;
}

// Shares of `all` (CPUs) that are disjoint and cover it, as many as `got` has ranks.
void expectSharesCover(const std::map<int, std::vector<int>>& got, const std::vector<int>& all,
                       const std::string& what) {
  std::set<int> seen;
  for (const auto& [rank, cpus] : got) {
    EXPECT_FALSE(cpus.empty()) << what << ", rank " << rank;
    for (int c : cpus) {
      EXPECT_TRUE(seen.insert(c).second) << what << ": CPU " << c << " in two ranks' shares";
      EXPECT_NE(std::find(all.begin(), all.end(), c), all.end()) << what << ": CPU " << c;
    }
  }
  EXPECT_EQ(seen.size(), all.size()) << what;
}

TEST(Placement, UnplacedRanksTakeTheirShareOfTheCpus) {
  const std::vector<int> all = parentCpus();
  if (all.size() < 2) GTEST_SKIP() << "one CPU: nothing to share";
  for (int np : {2, 3}) {
    if (size_t(np) > all.size()) continue;
    const auto got = cpusOfRanks(np, "", "1");
    std::set<int> seen;
    for (const auto& [rank, cpus] : got) {
      // Share r of np: all.size() / np CPUs, one more for the first all.size() % np shares.
      const size_t want = all.size() / size_t(np) + (size_t(rank) < all.size() % size_t(np));
      EXPECT_EQ(cpus.size(), want) << "rank " << rank << " of " << np;
      for (int c : cpus) {
        EXPECT_TRUE(seen.insert(c).second) << "CPU " << c << " in two ranks' shares";
        EXPECT_NE(std::find(all.begin(), all.end(), c), all.end()) << "CPU " << c;
      }
    }
    EXPECT_EQ(seen.size(), all.size()) << np << " ranks";
  }
}

TEST(Placement, KeepsWhatTheUserOrTheLauncherChose) {
  const std::vector<int> all = parentCpus();
  if (all.size() < 2) GTEST_SKIP() << "one CPU: nothing to share";
  // CHORUS_BIND=none: every rank keeps the whole set.
  for (const auto& [rank, cpus] : cpusOfRanks(2, "CHORUS_BIND=none", "1"))
    EXPECT_EQ(cpus, all) << "rank " << rank;
  // Placed by a launcher (taskset: both on the same CPU, sets equal but of one CPU): kept.
  const std::string one = "taskset -c " + std::to_string(all.back());
  for (const auto& [rank, cpus] : cpusOfRanks(2, "", "1", {one, one}))
    EXPECT_EQ(cpus, std::vector<int>{all.back()}) << "rank " << rank;
  // Placed on different sets: kept.
  const std::string first = "taskset -c " + std::to_string(all.front());
  for (const auto& [rank, cpus] :
       cpusOfRanks(2, "", "1", {first, "taskset -c " + std::to_string(all[1])}))
    EXPECT_EQ(cpus, std::vector<int>{rank == 0 ? all.front() : all[1]}) << "rank " << rank;
  // More ranks than CPUs: no share would be a core of its own; kept.
  if (all.size() <= 4) {
    for (const auto& [rank, cpus] : cpusOfRanks(int(all.size()) + 1, "", "1"))
      EXPECT_EQ(cpus, all) << "rank " << rank;
  }
}

// Two jobs on one machine, neither placed by a launcher (two torchrun jobs, or programs started
// by hand), the second started while the first still runs: each binds its ranks to its shares
// of the CPUs (the same CPUs for both: each core then runs a rank of each job, as beside any
// other work; measured no slower than the second job unbound, CHANGELOG 2026-12-05), and each
// job's matrix stays exact.
TEST(Placement, TwoJobsAtOnceStayExact) {
  const std::vector<int> all = parentCpus();
  if (all.size() < 2) GTEST_SKIP() << "one CPU: nothing to share";
  const std::string dir =
      std::string(::testing::TempDir()) + "chorus-twojobs-" + std::to_string(getpid());
  const std::string script =
      "rm -rf " + dir + "; mkdir -p " + dir + " && cd " + dir + " || exit 2; : > a; (" +
      ranksByHandScript(2, "", "1", {}, " --hold " + dir + "/hold") +
      ") > a 2>&1 & a=$!; i=0; "
      "while [ \"$(grep -c 'cpus rank=' a)\" -lt 2 ] && [ $i -lt 6000 ]; do "
      "sleep 0.01; i=$((i+1)); done; (" +
      ranksByHandScript(2, "", "1,1000,65537") +
      ") > b 2>&1; rb=$?; touch hold; wait $a; ra=$?; sed 's/^/A: /' a; sed 's/^/B: /' b; "
      "echo status $ra $rb; cd / && rm -rf " +
      dir + "; [ $ra$rb = 00 ]";
  const CommandResult res = runCommand({"/bin/sh", "-c", script}, 300);
  ASSERT_FALSE(res.timedOut) << res.output;
  EXPECT_EQ(res.exitCode, 0) << res.output;
  const auto a = cpusInOutput(res.output, "A: ");
  const auto b = cpusInOutput(res.output, "B: ");
  ASSERT_EQ(a.size(), 2u) << res.output;
  ASSERT_EQ(b.size(), 2u) << res.output;
  expectSharesCover(a, all, "the first job");
  expectSharesCover(b, all, "the second job, beside the first");
}

// Bound ranks beside a busy process (the cores shared with other work, as in training): the
// collective matrix (every collective, type and op at three counts, each checked by mp_worker
// against its own reference) stays right, and the ranks still take disjoint shares.
TEST(Placement, BoundRanksBesideABusyProcessGetRightResults) {
  const std::vector<int> all = parentCpus();
  if (all.size() < 2) GTEST_SKIP() << "one CPU: nothing to share";
  const pid_t busy = fork();
  ASSERT_GE(busy, 0);
  if (busy == 0) {
    std::atomic<uint64_t> spins{0};
    for (;;) spins.fetch_add(1, std::memory_order_relaxed);  // busy until killed
  }
  const auto got = cpusOfRanks(2, "", "1,1000,65537");
  kill(busy, SIGKILL);
  waitpid(busy, nullptr, 0);
  ASSERT_EQ(got.size(), 2u);
  for (int c : got.at(0))
    EXPECT_EQ(std::find(got.at(1).begin(), got.at(1).end(), c), got.at(1).end()) << "CPU " << c;
}

// Each rank's "destroy: poll phase N us (how)" line (CHORUS_DEBUG=INFO), by rank.
std::map<int, std::pair<double, std::string>> pollPhases(const std::string& output) {
  std::map<int, std::pair<double, std::string>> got;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("destroy: poll phase ");
    const size_t open = line.find("] CHORUS INFO");
    if (at == std::string::npos || open == std::string::npos) continue;
    const size_t lb = line.rfind('[', open);
    double us = 0;
    if (lb == std::string::npos ||
        sscanf(line.c_str() + at, "destroy: poll phase %lf us", &us) != 1)
      continue;
    const size_t how = line.find('(', at);
    got[std::stoi(line.substr(lb + 1))] = {us, line.substr(how + 1, line.rfind(')') - how - 1)};
  }
  return got;
}

// The poll phase as users' ranks run: started by hand (Open MPI's variables), two ranks bind
// themselves a core each and their poll phase adapts, staying within 50-500 us (each reports it
// at CHORUS_DEBUG=INFO when its communicator goes); unbound (CHORUS_BIND=none), on one CPU
// together (taskset: more ranks than CPUs), or set by CHORUS_POLL_US, it stays as it was set.
TEST(Placement, PollPhaseAdaptsOnlyForRanksOnCoresOfTheirOwn) {
  const std::vector<int> all = parentCpus();
  if (all.size() < 2) GTEST_SKIP() << "one CPU: no core of its own for each rank";
  const std::string one = "taskset -c " + std::to_string(all.back());
  struct Case {
    std::string env;
    std::vector<std::string> prefix;
    bool adaptive;
    double us;  // the fixed phase
  };
  const Case cases[] = {{"CHORUS_DEBUG=INFO", {}, true, 0},
                        {"CHORUS_DEBUG=INFO CHORUS_BIND=none", {}, false, 50},
                        {"CHORUS_DEBUG=INFO", {one, one}, false, 50},
                        {"CHORUS_DEBUG=INFO CHORUS_POLL_US=80", {}, false, 80}};
  for (const Case& c : cases) {
    const CommandResult res = runRanksByHand(2, c.env, "1,1000,65537", c.prefix);
    ASSERT_EQ(res.exitCode, 0) << c.env << "\n" << res.output;
    const auto got = pollPhases(res.output);
    ASSERT_EQ(got.size(), 2u) << c.env << "\n" << res.output;
    for (const auto& [rank, phase] : got) {
      const std::string what = c.env + (c.prefix.empty() ? "" : " " + one) + ", rank " +
                               std::to_string(rank) + ": " + phase.second;
      EXPECT_EQ(phase.second.rfind("adaptive", 0) == 0, c.adaptive) << what;
      if (c.adaptive) {
        EXPECT_GE(phase.first, 50) << what;
        EXPECT_LE(phase.first, 500) << what;
      } else {
        EXPECT_EQ(phase.first, c.us) << what;
      }
    }
  }
}

// Two ranks put on one CPU while busy processes keep every CPU taken, started by hand: the
// collectives' results stay exact (the worker checks each against its own reference) and the
// ranks finish, though each yield of theirs may hand a busy process its time slice (their waits
// then sleep at once for a while, comm/wait.cc). Their poll phase stays fixed.
TEST(Placement, RanksOnOneCpuBesideBusyProcessesStayExact) {
  const std::vector<int> all = parentCpus();
  const std::string one = "taskset -c " + std::to_string(all.back());
  const ctest::BusyProcesses busy(int(all.size()));
  ASSERT_EQ(busy.error(), "");
  const CommandResult res = runRanksByHand(2, "CHORUS_DEBUG=INFO", "1,1000,65537", {one, one});
  ASSERT_FALSE(res.timedOut) << res.output;
  ASSERT_EQ(res.exitCode, 0) << res.output;
  const auto got = pollPhases(res.output);
  ASSERT_EQ(got.size(), 2u) << res.output;
  for (const auto& [rank, phase] : got) {
    EXPECT_EQ(phase.second.rfind("fixed", 0), 0u) << "rank " << rank << ": " << phase.second;
    EXPECT_EQ(phase.first, 50) << "rank " << rank;
  }
}

}  // namespace
