// Test plumbing: threads per rank, a watchdog against hangs, /dev/shm bookkeeping and running a
// child command with a deadline.
#pragma once

#include <chorus/chorus.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace ctest {

// "chorusInvalidArgument" etc.
const char* resultName(chorusResult_t r);
double nowSeconds();  // monotonic

// Multiplier for every deadline, from CHORUS_TEST_TIMEOUT_SCALE (e.g. 4 under sanitizers).
double timeoutScale();

// Runs fn(rank) for rank 0..n-1 on n std::threads and joins them.
void runThreads(int n, const std::function<void(int)>& fn);

// What each rank (thread or process) is doing, for the watchdog's report.
void setProgress(int rank, const std::string& what);
std::string progressReport();

// Ends the process (exit status 99, after printing `what` and the progress report) unless
// destroyed within seconds * timeoutScale(). A hang becomes a quick, explained failure.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Sets (or, with value nullptr, unsets) an environment variable for the life of the object. Only
// while no other thread reads the environment (before communicators are created).
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

// Names in /dev/shm.
std::set<std::string> shmEntries();
// Entries of /dev/shm (of this user) that are not in `before` and that no other live process
// has open or mapped (those belong to whoever else runs on this machine), after waiting up to
// settleSeconds for them to disappear.
std::vector<std::string> leakedShm(const std::set<std::string>& before, double settleSeconds = 3);
// Unlinks /dev/shm/<name> for each name (after a leak was reported, to restore the machine).
void removeShm(const std::vector<std::string>& names);

// chorusCommInitAll(n); the destructor destroys every communicator still held, one thread per
// rank (forget() one that the test destroyed or aborted itself).
class CommSet {
 public:
  explicit CommSet(int n);
  ~CommSet();
  CommSet(const CommSet&) = delete;
  CommSet& operator=(const CommSet&) = delete;
  chorusResult_t initResult() const { return init_; }
  int size() const { return static_cast<int>(comms_.size()); }
  chorusComm_t operator[](int i) const { return comms_[i]; }
  const std::vector<chorusComm_t>& comms() const { return comms_; }
  void forget(int i) { comms_[i] = nullptr; }
  // Destroys every communicator still held (one thread per rank); the first failure.
  chorusResult_t destroyAll();

 private:
  chorusResult_t init_;
  std::vector<chorusComm_t> comms_;
};

struct CommandResult {
  int exitCode = -1;  // exit status, or 128+signal
  bool timedOut = false;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};
// Runs argv (argv[0] a path) in a new process group; kills the group after timeoutSeconds.
CommandResult runCommand(const std::vector<std::string>& argv, double timeoutSeconds);

}  // namespace ctest
