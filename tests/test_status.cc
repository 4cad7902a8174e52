// Status reports (docs/reliability.md "Status reports"):
//
//  StatusReport.Timeout*       a rank that never calls (CHORUS_TIMEOUT=1): every other rank's
//                              stderr has one report naming the collective in flight, its
//                              sequence number, the peer waited for (the hung rank for its
//                              neighbours) and the operations completed before; the error
//                              names the peer. Ranks as processes, and as threads.
//  StatusReport.Signal*        SIGUSR1 to a running chorusrun: every rank of every process (one
//                              or several communicators each) prints a report, and the job ends
//                              normally; CHORUS_STATUS_SIGNAL=usr2 moves it to SIGUSR2.
//  StatusReport.PrintStatus*   chorusCommPrintStatus lists the last operations of each kind with
//                              their arguments, newest first, and keeps the last 16.
#include <chorus/chorus.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm_set.h"
#include "launch.h"
#include "process.h"
#include "run_command.h"
#include "threads.h"
#include "timing.h"

#ifndef STATUS_WORKER_PATH
#error "STATUS_WORKER_PATH must name the chorus_status_worker binary"
#endif

namespace {

using namespace ctest;

int countOf(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The lines of `out` holding "chorus rank R: " (one rank's reports).
std::string reportOf(const std::string& out, int rank) {
  std::istringstream in(out);
  std::string line, mine;
  const std::string tag = "chorus rank " + std::to_string(rank) + ": ";
  while (std::getline(in, line))
    if (line.find(tag) != std::string::npos) mine += line + "\n";
  return mine;
}

// A job where rank `hung` never makes its 6th call: the others time out after 1 s.
void checkTimeoutReports(int np, int threads, int hung) {
  const int nranks = np * threads;
  CommandResult r = runCommand(
      {CHORUSRUN_PATH, "--timeout", "100", "-x", "CHORUS_TIMEOUT=1", "-np", std::to_string(np),
       STATUS_WORKER_PATH, "--threads", std::to_string(threads), "--iters", "5", "--hang-rank",
       std::to_string(hung), "--hang-seconds", "5", "--timeout", "90"},
      130 * timeoutScale());
  ASSERT_EQ(r.exitCode, 0) << outputTail(r.output);
  bool someNamesHung = false;
  for (int rank = 0; rank < nranks; ++rank) {
    const std::string rep = reportOf(r.output, rank);
    if (rank == hung) {
      EXPECT_EQ(rep, "") << "the hung rank was not in a call: " << rep;
      continue;
    }
    // One report per rank and operation, with its first line's cause.
    EXPECT_EQ(countOf(rep, "status of communicator"), 1) << outputTail(r.output);
    EXPECT_TRUE(rep.find("no progress for 1.0 s (CHORUS_TIMEOUT)") != std::string::npos ||
                rep.find("ended in a failure") != std::string::npos)
        << rep;
    EXPECT_NE(rep.find("(rank " + std::to_string(rank) + " of " + std::to_string(nranks)),
              std::string::npos)
        << rep;
    // The collective in flight and its sequence number (the 6th call: seq 5).
    EXPECT_NE(rep.find("in flight: AllReduce seq 5: 8 x float32 sum"), std::string::npos) << rep;
    EXPECT_TRUE(std::regex_search(rep, std::regex("waiting for peer rank [0-9]+: "))) << rep;
    if (rep.find("waiting for peer rank " + std::to_string(hung) + ":") != std::string::npos)
      someNamesHung = true;
    // The completed operations, newest first.
    EXPECT_NE(rep.find("last 5 completed operation(s), newest first"), std::string::npos) << rep;
    const size_t s4 = rep.find("AllReduce seq 4: 8 x float32 sum");
    const size_t s0 = rep.find("AllReduce seq 0: 8 x float32 sum");
    EXPECT_NE(s4, std::string::npos) << rep;
    EXPECT_NE(s0, std::string::npos) << rep;
    EXPECT_LT(s4, s0) << rep;
  }
  EXPECT_TRUE(someNamesHung) << "no rank names the hung rank " << hung << "\n"
                             << outputTail(r.output);
  // The concise error names a peer; a rank that timed out itself names the one it waited for.
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex("result operation timed out: rank [0-9]+: .*no progress for 1\\.0 s waiting for "
                 "peer rank [0-9]+")))
      << outputTail(r.output);
}

TEST(StatusReport, TimeoutReportsProcesses) {
  checkTimeoutReports(3, 1, 2);
}

TEST(StatusReport, TimeoutReportsThreads) {
  checkTimeoutReports(2, 2, 3);
}

// Starts argv with stdout and stderr into `outFile`; returns the pid.
pid_t startToFile(const std::vector<std::string>& argv, const std::string& outFile) {
  SpawnSpec spec;
  spec.argv = argv;
  spec.out = ChildOutput::kFile;
  spec.outFile = outFile;
  return spawnProcess(spec).pid;
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void checkSignalReports(int np, int threads, int sig = SIGUSR1, const char* sigName = "SIGUSR1",
                        const char* env = "USR1") {
  char dir[] = "/tmp/chorus-status-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string ready = std::string(dir) + "/ready", out = std::string(dir) + "/out";
  const pid_t pid = startToFile(
      {CHORUSRUN_PATH, "--timeout", "100", "-x", std::string("CHORUS_STATUS_SIGNAL=") + env, "-np",
       std::to_string(np), STATUS_WORKER_PATH, "--threads", std::to_string(threads), "--iters",
       "20", "--ready-file", ready, "--timeout", "90"},
      out);
  ASSERT_GT(pid, 0);
  const double start = nowSeconds();
  while (access(ready.c_str(), F_OK) != 0 && nowSeconds() - start < 60 * timeoutScale())
    usleep(10000);
  EXPECT_EQ(access(ready.c_str(), F_OK), 0) << readFile(out);
  kill(pid, sig);
  int status = -1;
  while (waitpid(pid, &status, WNOHANG) == 0 && nowSeconds() - start < 120 * timeoutScale())
    usleep(20000);
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << "the job did not end after the status signal";
  }
  const std::string output = readFile(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find(std::string("chorusrun: received ") + sigName +
                        ", asking every rank for its status report"),
            std::string::npos)
      << output;
  for (int rank = 0; rank < np * threads; ++rank) {
    const std::string rep = reportOf(output, rank);
    EXPECT_GE(countOf(rep, std::string("status requested (") + sigName + ")"), 1)
        << "rank " << rank << "\n"
        << output;
    EXPECT_NE(rep.find("(rank " + std::to_string(rank) + " of " + std::to_string(np * threads)),
              std::string::npos)
        << rep;
    // Every rank had completed its first 20 calls when rank 0 wrote the ready file.
    EXPECT_TRUE(std::regex_search(rep, std::regex("AllReduce seq [0-9]+: 8 x float32 sum"))) << rep;
    EXPECT_NE(rep.find("completed operation(s), newest first"), std::string::npos) << rep;
  }
  unlink(ready.c_str());
  unlink(out.c_str());
  rmdir(dir);
}

TEST(StatusReport, SignalThroughChorusrunProcesses) {
  checkSignalReports(3, 1);
}

TEST(StatusReport, SignalThroughChorusrunThreads) {
  checkSignalReports(2, 2);
}

// CHORUS_STATUS_SIGNAL chooses the signal, for chorusrun and the ranks alike.
TEST(StatusReport, SignalChosenByEnvironment) {
  checkSignalReports(2, 1, SIGUSR2, "SIGUSR2", "usr2");
}

// In one process: the report lists what was done, with its arguments, newest first.
TEST(StatusReport, PrintStatusListsOperations) {
  constexpr int n = 3;
  CommSet g(n);
  ASSERT_EQ(g.initResult(), chorusSuccess);
  runThreads(n, [&](int rank) {
    chorusComm_t comm = g[rank];
    std::vector<int32_t> a(100, rank), b(100 * n, 0);
    EXPECT_EQ(chorusAllReduce(a.data(), b.data(), 100, chorusInt32, chorusMax, comm, nullptr),
              chorusSuccess);
    EXPECT_EQ(chorusBroadcast(a.data(), b.data(), 7, chorusInt32, 1, comm, nullptr), chorusSuccess);
    EXPECT_EQ(chorusAllGather(a.data(), b.data(), 50, chorusInt32, comm, nullptr), chorusSuccess);
    // A ring of sends and receives: one group per rank (seq 3).
    EXPECT_EQ(chorusGroupStart(), chorusSuccess);
    EXPECT_EQ(chorusSend(a.data(), 10, chorusInt32, (rank + 1) % n, comm, nullptr), chorusSuccess);
    EXPECT_EQ(chorusRecv(b.data(), 10, chorusInt32, (rank + n - 1) % n, comm, nullptr),
              chorusSuccess);
    EXPECT_EQ(chorusGroupEnd(), chorusSuccess);
  });
  testing::internal::CaptureStderr();
  EXPECT_EQ(chorusCommPrintStatus(g[2]), chorusSuccess);
  const std::string rep = testing::internal::GetCapturedStderr();
  EXPECT_NE(rep.find("chorus rank 2: status of communicator"), std::string::npos) << rep;
  EXPECT_NE(rep.find("(rank 2 of 3, pid " + std::to_string(getpid()) + ", ready)"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("in flight: nothing"), std::string::npos) << rep;
  EXPECT_NE(rep.find("last 4 completed operation(s)"), std::string::npos) << rep;
  const size_t p3 = rep.find("Send/Recv group seq 3: 2 transfers");
  const size_t p2 = rep.find("AllGather seq 2: 50 x int32");
  const size_t p1 = rep.find("Broadcast seq 1: 7 x int32, root 1");
  const size_t p0 = rep.find("AllReduce seq 0: 100 x int32 max");
  ASSERT_NE(p3, std::string::npos) << rep;
  ASSERT_NE(p2, std::string::npos) << rep;
  ASSERT_NE(p1, std::string::npos) << rep;
  ASSERT_NE(p0, std::string::npos) << rep;
  EXPECT_TRUE(p3 < p2 && p2 < p1 && p1 < p0) << rep;
  EXPECT_EQ(chorusCommPrintStatus(nullptr), chorusInvalidArgument);
  EXPECT_EQ(g.destroyAll(), chorusSuccess);
}

TEST(StatusReport, PrintStatusKeepsTheLast16) {
  constexpr int n = 2;
  CommSet g(n);
  ASSERT_EQ(g.initResult(), chorusSuccess);
  runThreads(n, [&](int rank) {
    float x = float(rank), y = 0;
    for (int i = 0; i < 40; ++i)
      EXPECT_EQ(chorusAllReduce(&x, &y, 1, chorusFloat32, chorusSum, g[rank], nullptr),
                chorusSuccess);
  });
  testing::internal::CaptureStderr();
  EXPECT_EQ(chorusCommPrintStatus(g[0]), chorusSuccess);
  const std::string rep = testing::internal::GetCapturedStderr();
  EXPECT_NE(rep.find("last 16 completed operation(s)"), std::string::npos) << rep;
  EXPECT_NE(rep.find("AllReduce seq 39: 1 x float32 sum"), std::string::npos) << rep;
  EXPECT_NE(rep.find("AllReduce seq 24: 1 x float32 sum"), std::string::npos) << rep;
  EXPECT_EQ(rep.find("AllReduce seq 23:"), std::string::npos) << rep;
  EXPECT_EQ(countOf(rep, "AllReduce seq "), 16) << rep;
  EXPECT_EQ(g.destroyAll(), chorusSuccess);
}

}  // namespace
