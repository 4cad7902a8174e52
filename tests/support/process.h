// The tests' one way to start a process: fork + exec with every argument, environment entry and
// file name prepared before fork(), so that the child only dups, opens and execs
// (async-signal-safe: other threads of the test may hold the allocator's lock). Used by
// runCommand (run_command.h) and by the tests that start ranks themselves (launcher variables,
// kills, lingering survivors, status signals; rank_job.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ctest {

enum class ChildStdin { kInherit, kNull, kPipe };  // kPipe: the test holds the write end
enum class ChildOutput {
  kInherit,
  kPipe,           // stdout and stderr into one pipe
  kSeparatePipes,  // stdout and stderr into two pipes
  kFile,           // stdout and stderr into outFile (created or truncated)
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0]: the program's path (no PATH search)
  // NAME=VALUE entries that replace (or add to) this process's environment in the child.
  std::vector<std::string> env;
  ChildStdin in = ChildStdin::kInherit;
  ChildOutput out = ChildOutput::kPipe;
  std::string outFile;         // ChildOutput::kFile
  bool newGroup = false;       // the child leads its own process group (kill(-pid) reaches all)
  bool dieWithParent = false;  // PR_SET_PDEATHSIG=SIGKILL: never outlive the test
};

struct Child {
  pid_t pid = -1;  // -1: not started (error says why)
  int outFd = -1;  // read ends this process holds (close-on-exec), per ChildOutput
  int errFd = -1;
  int inFd = -1;  // write end of the child's stdin (ChildStdin::kPipe)
  std::string error;
};

Child spawnProcess(const SpawnSpec& spec);

// Waits up to `seconds` (not scaled) for pid; returns its exit status or 128 + signal, or -2
// after killing it (its group too when `group`) with SIGKILL at the deadline.
int waitProcess(pid_t pid, double seconds, bool group = false);

// A process whose stdout and stderr come through one pipe (non-blocking: read what is there),
// with its stdin from a pipe the test holds (closing it releases a --linger worker); it never
// outlives the test. The test reaps it (exited, status: waitpid's).
struct Proc {
  pid_t pid = -1;  // -1: not started
  int outFd = -1;
  int inFd = -1;
  std::string out;
  bool exited = false;
  int status = 0;
};
Proc spawnPiped(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// Alive and not a zombie.
bool processRuns(pid_t pid);

// n processes spinning on the cores for the life of the object (computation sharing the machine
// with the ranks); each in its own group, killed with it, never outliving the test.
class BusyProcesses {
 public:
  explicit BusyProcesses(int n);
  ~BusyProcesses();
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;
  const std::string& error() const { return error_; }  // empty when all started

 private:
  std::vector<pid_t> pids_;
  std::string error_;
};

}  // namespace ctest
