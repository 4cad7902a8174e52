// Tests of the chorusrun launcher (tools/run/: chorusrun.cc and the files it is split into). They
// start the real binary (CHORUSRUN_PATH) through /bin/sh -c and check its environment, output
// relay, exit statuses and process cleanup. Everything here is bounded by deadlines: a hung
// launcher fails the test.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

#ifndef CHORUSRUN_PATH
#error "CHORUSRUN_PATH must name the chorusrun binary"
#endif

namespace {

using Clock = std::chrono::steady_clock;

// Single-quotes s for /bin/sh.
std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

const std::string& Chorusrun() {
  static const std::string path = ShellQuote(CHORUSRUN_PATH);
  return path;
}

struct Result {
  int status = -1;  // exit status, 128+signal if killed, -1 if it had to be killed by the harness
  std::string out;
  std::string err;
  double seconds = 0;
};

// A `/bin/sh -c CMD` started in the background with its stdout/stderr captured.
struct Proc {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  Clock::time_point start;
};

Proc Start(const std::string& cmd) {
  ctest::SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", cmd};
  spec.in = ctest::ChildStdin::kNull;
  spec.out = ctest::ChildOutput::kSeparatePipes;
  spec.newGroup = true;  // so the harness can kill everything if the launcher hangs
  Proc p;
  p.start = Clock::now();
  const ctest::Child c = ctest::spawnProcess(spec);
  EXPECT_GT(c.pid, 0) << c.error;
  p.pid = c.pid;
  p.out_fd = c.outFd;
  p.err_fd = c.errFd;
  return p;
}

// Collects the output and exit status of p, killing it after limit_s seconds.
Result Finish(Proc& p, double limit_s = 60) {
  Result r;
  auto deadline =
      p.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
  bool killed = false;
  auto kill_all = [&] {
    if (!killed) {
      ADD_FAILURE() << "command did not finish within " << limit_s << " s";
      kill(-p.pid, SIGKILL);
      killed = true;
    }
  };
  while (p.out_fd >= 0 || p.err_fd >= 0) {
    pollfd fds[2] = {{p.out_fd, POLLIN, 0}, {p.err_fd, POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      kill_all();
      deadline = Clock::now() + std::chrono::seconds(5);
      left = std::chrono::seconds(5);
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        (i == 0 ? p.out_fd : p.err_fd) = -1;
      }
    }
    if (killed && Clock::now() > deadline) break;  // something escaped holding the pipes
  }
  if (p.out_fd >= 0) close(p.out_fd);
  if (p.err_fd >= 0) close(p.err_fd);
  int status = 0;
  for (;;) {
    pid_t w = waitpid(p.pid, &status, WNOHANG);
    if (w == p.pid) break;
    if (w < 0 && errno != EINTR) break;
    if (Clock::now() > deadline) kill_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - p.start).count();
  if (killed) {
    r.status = -1;
  } else if (WIFEXITED(status)) {
    r.status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.status = 128 + WTERMSIG(status);
  }
  return r;
}

Result RunShell(const std::string& cmd, double limit_s = 60) {
  Proc p = Start(cmd);
  return Finish(p, limit_s);
}

// "exec chorusrun ARGS": the shell is replaced, so the pid of Start() is the launcher's.
std::string Launch(const std::string& args) {
  return "exec " + Chorusrun() + " " + args;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// True if pid no longer runs (gone, or a zombie waiting for a parent that does not reap).
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return true;  // vanished while we looked
  return paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

// Waits (bounded) until every pid has gone; returns the ones still running.
std::vector<pid_t> StillRunning(const std::vector<pid_t>& pids, double wait_s = 3) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(wait_s));
  for (;;) {
    std::vector<pid_t> alive;
    for (pid_t p : pids) {
      if (!ProcessGone(p)) alive.push_back(p);
    }
    if (alive.empty() || Clock::now() > deadline) return alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Shell code that waits (at most ~10 s) until `file` has `n` lines: lets a rank fail only once
// every rank has recorded its pids.
std::string AwaitLines(const std::string& file, int n) {
  return "i=0; while [ $(cat " + file + " | wc -l) -lt " + std::to_string(n) +
         " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done";
}

class ChorusrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "chorusrun_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string PidFile() const { return (std::filesystem::path(dir_) / "pids").string(); }

  // Pids the ranks appended to PidFile(), one per line.
  std::vector<pid_t> ReadPids() const {
    std::vector<pid_t> pids;
    std::ifstream in(PidFile());
    for (long p; in >> p;) pids.push_back(static_cast<pid_t>(p));
    return pids;
  }

  // Waits (bounded) until PidFile() lists at least n pids.
  bool WaitForPids(size_t n, double wait_s = 10) const {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(wait_s));
    while (Clock::now() < deadline) {
      if (ReadPids().size() >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string dir_;
};

TEST_F(ChorusrunTest, EnvVarsPresentAndDistinctPerRank) {
  Result r = RunShell(Launch(
      "-np 4 sh -c 'echo $CHORUS_RANK $CHORUS_NRANKS $CHORUS_LOCAL_RANK $CHORUS_LOCAL_NRANKS "
      "$CHORUS_COMM_ID $CHORUS_SECRET'"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  std::regex re(R"(\[(\d+)\] (\d+) 4 (\d+) 4 127\.0\.0\.1:(\d+) ([0-9a-f]{32}))");
  std::set<int> ranks;
  std::set<std::string> comm_ids, secrets;
  for (const auto& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    EXPECT_EQ(m[1], m[2]) << "prefix must name the rank: " << line;
    EXPECT_EQ(m[2], m[3]) << "local rank == rank on one node: " << line;
    int port = std::stoi(m[4]);
    EXPECT_GT(port, 0);
    EXPECT_LT(port, 65536);
    ranks.insert(std::stoi(m[2]));
    comm_ids.insert(m[4]);
    secrets.insert(m[5]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(comm_ids.size(), 1u) << "every rank must get the same CHORUS_COMM_ID";
  EXPECT_EQ(secrets.size(), 1u) << "every rank must get the same CHORUS_SECRET";
}

TEST_F(ChorusrunTest, SecretDiffersBetweenJobs) {
  std::string cmd = Launch("--no-prefix -np 1 sh -c 'echo $CHORUS_SECRET'");
  Result a = RunShell(cmd);
  Result b = RunShell(cmd);
  ASSERT_EQ(a.status, 0);
  ASSERT_EQ(b.status, 0);
  EXPECT_EQ(a.out.size(), 33u) << a.out;
  EXPECT_NE(a.out, b.out);
}

TEST_F(ChorusrunTest, InheritedChorusVariablesAreReplaced) {
  Result r =
      RunShell("CHORUS_RANK=7 CHORUS_NRANKS=9 CHORUS_HOSTID=stale CHORUS_KEEP=yes " +
               Launch("-np 2 sh -c 'echo $CHORUS_RANK/$CHORUS_NRANKS/${CHORUS_HOSTID:-unset}/"
                      "$CHORUS_KEEP'"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] 0/2/unset/yes", "[1] 1/2/unset/yes"}));
}

TEST_F(ChorusrunTest, ExtraEnvironmentWithX) {
  Result r = RunShell("BAR_FROM_PARENT=inherited " +
                      Launch("-x FOO=hello -x EQ=a=b -x BAR_FROM_PARENT -x EMPTY= -np 2 "
                             "sh -c 'echo \"$FOO $EQ $BAR_FROM_PARENT [${EMPTY-unset}]\"'"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines,
            (std::vector<std::string>{"[0] hello a=b inherited []", "[1] hello a=b inherited []"}));
}

TEST_F(ChorusrunTest, PrefixesStdoutAndStderrSeparately) {
  Result r = RunShell(Launch("-np 3 sh -c 'echo out$CHORUS_RANK; echo err$CHORUS_RANK >&2'"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> out = Lines(r.out), err = Lines(r.err);
  std::sort(out.begin(), out.end());
  std::sort(err.begin(), err.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[0] out0", "[1] out1", "[2] out2"}));
  EXPECT_EQ(err, (std::vector<std::string>{"[0] err0", "[1] err1", "[2] err2"}));
}

TEST_F(ChorusrunTest, NoPrefix) {
  Result r = RunShell(Launch("--no-prefix -np 2 sh -c 'echo line$CHORUS_RANK; echo e >&2'"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> out = Lines(r.out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"line0", "line1"}));
  EXPECT_EQ(r.err, "e\ne\n");
}

TEST_F(ChorusrunTest, MultipleLinesAndPartialLastLine) {
  Result r = RunShell(Launch("-np 1 sh -c 'printf \"a\\n\\nb\\nc\"; printf x >&2'"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] a\n[0] \n[0] b\n[0] c\n");
  EXPECT_EQ(r.err, "[0] x\n");
  // Without a prefix the bytes pass through unchanged.
  Result raw = RunShell(Launch("--no-prefix -np 1 sh -c 'printf \"a\\nc\"'"));
  ASSERT_EQ(raw.status, 0) << raw.err;
  EXPECT_EQ(raw.out, "a\nc");
}

TEST_F(ChorusrunTest, LongLinesAreNeverInterleaved) {
  constexpr size_t kLen = 1000000;
  Result r = RunShell(Launch("-np 4 sh -c 'for i in 1 2 3; do head -c " + std::to_string(kLen) +
                             " /dev/zero | tr \"\\0\" \"$CHORUS_RANK\"; echo; done'"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 12u);
  std::map<char, int> per_rank;
  for (const auto& line : lines) {
    ASSERT_EQ(line.size(), kLen + 4);
    ASSERT_EQ(line.compare(0, 1, "["), 0);
    char rank = line[1];
    ASSERT_EQ(line.compare(2, 2, "] "), 0);
    EXPECT_EQ(line.find_first_not_of(rank, 4), std::string::npos) << "mixed line of rank " << rank;
    ++per_rank[rank];
  }
  EXPECT_EQ(per_rank, (std::map<char, int>{{'0', 3}, {'1', 3}, {'2', 3}, {'3', 3}}));
}

TEST_F(ChorusrunTest, StdinGoesToRankZeroOnly) {
  // Rank 0 reads the launcher's stdin (a pipe here); the others have /dev/null.
  Result r = RunShell("echo hello | " + Chorusrun() +
                      " -np 3 sh -c 'in=$(readlink /proc/$$/fd/0); case $in in pipe:*) in=pipe;; "
                      "esac; read x || x=none; echo $CHORUS_RANK:$in:$x'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] 0:pipe:hello", "[1] 1:/dev/null:none",
                                             "[2] 2:/dev/null:none"}));
}

TEST_F(ChorusrunTest, AllRanksSucceed) {
  Result r = RunShell(Launch("-np 4 true"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST_F(ChorusrunTest, FailingRankStatusIsForwardedAndOthersAreKilled) {
  // Every rank records its shell's pid and that of a background sleep (a grandchild of the
  // launcher); rank 2 then fails while the others would sleep for 30 s.
  Result r = RunShell(Launch("-n 4 sh -c 'sleep 30 & echo $$ $! >> " + PidFile() +
                             "; if [ $CHORUS_RANK = 2 ]; then " + AwaitLines(PidFile(), 4) +
                             "; exit 3; fi; wait'"));
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.err.find("chorusrun: rank 2 exited with status 3"), std::string::npos) << r.err;
  std::vector<pid_t> pids = ReadPids();
  EXPECT_EQ(pids.size(), 8u);
  EXPECT_EQ(StillRunning(pids), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, LeftoverBackgroundProcessesAreKilledAtTheEnd) {
  // The ranks succeed but leave a background sleep behind (which even holds their stdout).
  Result r =
      RunShell(Launch("-np 2 sh -c 'sleep 30 & echo $! >> " + PidFile() + "; echo done; exit 0'"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_LT(r.seconds, 1.9);
  EXPECT_EQ(Lines(r.out).size(), 2u) << r.out;
  std::vector<pid_t> pids = ReadPids();
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_EQ(StillRunning(pids), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, FirstFailureDecidesTheStatus) {
  Result r =
      RunShell(Launch("-np 3 sh -c 'if [ $CHORUS_RANK = 1 ]; then exit 5; fi; sleep 0.5; exit 7'"));
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with status 5"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("status 7"), std::string::npos) << r.err;
}

TEST_F(ChorusrunTest, RankKilledBySignal) {
  Result r =
      RunShell(Launch("-np 3 sh -c 'echo $$ >> " + PidFile() + "; if [ $CHORUS_RANK = 0 ]; then " +
                      AwaitLines(PidFile(), 3) + "; kill -KILL $$; fi; exec sleep 30'"));
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.err.find("chorusrun: rank 0 killed by signal SIGKILL"), std::string::npos) << r.err;
  std::vector<pid_t> pids = ReadPids();
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(StillRunning(pids), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, TimeoutKillsEverything) {
  Result r = RunShell(Launch("--timeout 1.5 -np 3 sh -c 'echo $$ >> " + PidFile() +
                             "; echo started; exec sleep 30'"));
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_GE(r.seconds, 1.4);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_EQ(Lines(r.out).size(), 3u) << "output before the timeout must not be lost";
  EXPECT_NE(r.err.find("timeout"), std::string::npos) << r.err;
  std::vector<pid_t> pids = ReadPids();
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(StillRunning(pids), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, RanksIgnoringSigtermGetSigkill) {
  // SIG_IGN survives exec, so the sleep ignores SIGTERM as well.
  Proc p =
      Start(Launch("-np 2 sh -c 'trap \"\" TERM; echo $$ >> " + PidFile() + "; exec sleep 30'"));
  ASSERT_TRUE(WaitForPids(2));
  auto sent = Clock::now();
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  Result r = Finish(p);
  double after_signal = std::chrono::duration<double>(Clock::now() - sent).count();
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_GE(after_signal, 1.9) << "SIGKILL must come about 2 s after SIGTERM";
  EXPECT_LT(after_signal, 8.0);
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
  std::vector<pid_t> pids = ReadPids();
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_EQ(StillRunning(pids), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, SigintIsForwarded) {
  Proc p = Start(Launch("-np 3 sh -c 'echo $$ >> " + PidFile() + "; exec sleep 30'"));
  ASSERT_TRUE(WaitForPids(3));
  ASSERT_EQ(kill(p.pid, SIGINT), 0);
  Result r = Finish(p);
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_LT(r.seconds, 8.0);
  EXPECT_EQ(StillRunning(ReadPids()), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, SigtermIsForwarded) {
  Proc p = Start(Launch("-np 2 sh -c 'trap \"echo got-term; exit 0\" TERM; echo $$ >> " +
                        PidFile() + "; sleep 30 & wait'"));
  ASSERT_TRUE(WaitForPids(2));
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  Result r = Finish(p);
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_LT(r.seconds, 8.0);
  // The ranks saw the forwarded SIGTERM (their trap ran) and exited cleanly.
  std::vector<std::string> lines = Lines(r.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] got-term", "[1] got-term"}));
  EXPECT_EQ(StillRunning(ReadPids()), std::vector<pid_t>{});
}

TEST_F(ChorusrunTest, RanksDieWithTheLauncher) {
  Proc p = Start(Launch("-np 3 sh -c 'echo $$ >> " + PidFile() + "; exec sleep 30'"));
  ASSERT_TRUE(WaitForPids(3));
  ASSERT_EQ(kill(p.pid, SIGKILL), 0);
  Result r = Finish(p);
  EXPECT_EQ(r.status, 128 + SIGKILL);
  std::vector<pid_t> pids = ReadPids();
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(StillRunning(pids), std::vector<pid_t>{}) << "PR_SET_PDEATHSIG must kill orphans";
}

TEST_F(ChorusrunTest, MissingProgram) {
  Result r = RunShell(Launch("-np 2 /nonexistent/chorus_no_such_program arg"));
  EXPECT_NE(r.status, 0);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.err.find("chorusrun: cannot execute /nonexistent/chorus_no_such_program: "
                       "No such file or directory"),
            std::string::npos)
      << r.err;
  // Reported once, not once per rank.
  EXPECT_EQ(r.err.find("cannot execute", r.err.find("cannot execute") + 1), std::string::npos)
      << r.err;
}

TEST_F(ChorusrunTest, ProgramNotInPath) {
  Result r = RunShell(Launch("-np 1 chorus_no_such_program_in_path"));
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("cannot execute chorus_no_such_program_in_path"), std::string::npos)
      << r.err;
}

TEST_F(ChorusrunTest, BadOptionsExitTwoWithUsage) {
  const char* bad[] = {
      "true",                                             // no -np
      "-np",                                              // -np without value
      "-np 0 true",                                       // N < 1
      "-np abc true",                                     // not a number
      "-np 2x true",                                      // trailing junk
      "-np 2",                                            // no program
      "--frobnicate -np 2 true",                          // unknown option
      "--timeout -1 -np 1 true",                          // bad timeout
      "--timeout soon -np 1 true",                        // bad timeout
      "-x 1BAD=v -np 1 true",                             // bad variable name
      "-x =v -np 1 true",                                 // empty variable name
      "--link-mtu 9000 -np 1 true",                       // --link-mtu without --netns
      "--netns --nodes 1 --link-mtu 100 -np 1 true",      // MTU below 576
      "--netns --nodes 1 --link-mtu jumbo -np 1 true",    // not a number
      "--netns --nodes 1 --link-burst 65536 -np 1 true",  // --link-burst without --link-rate
      "--netns --nodes 1 --link-rate 1gbit --link-burst 100 -np 1 true",  // burst below 2048
  };
  for (const char* args : bad) {
    Result r = RunShell(Launch(args));
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find("chorusrun: "), std::string::npos) << args << ": " << r.err;
    EXPECT_NE(r.err.find("Usage:"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
}

TEST_F(ChorusrunTest, OptionsStopAtProgram) {
  // "-np 5" after PROGRAM belongs to the program, not to chorusrun.
  Result r = RunShell(Launch("-np 1 echo -np 5 --no-prefix"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] -np 5 --no-prefix\n");
}

TEST_F(ChorusrunTest, Help) {
  Result r = RunShell(Launch("--help"));
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Usage:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--timeout"), std::string::npos) << r.out;
}

}  // namespace
