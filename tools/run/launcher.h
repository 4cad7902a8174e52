// The launcher: forks the ranks into one process group, relays their output line by line with
// a "[rank] " prefix, forwards signals, and tears the job down when a rank fails or the
// timeout expires (see the top of chorusrun.cc for the process model).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "job.h"
#include "netns.h"
#include "options.h"
#include "run_common.h"

namespace chorusrun {

// One of a rank's output pipes: complete lines go to the sink, each with the rank's prefix.
struct Stream {
  int fd = -1;  // read end; -1 once closed
  Sink* sink = nullptr;
  std::string buf;     // bytes not written yet (at most one incomplete line after Emit)
  size_t scanned = 0;  // buf[0, scanned) holds no '\n'
};

class Launcher {
 public:
  Launcher(Options opts, JobInfo job, const EmulatedNet* net)
      : opts_(std::move(opts)), job_(std::move(job)), net_(net) {}
  int Run();

 private:
  struct Rank {
    int index = 0;
    pid_t pid = -1;
    bool reaped = false;
    std::string prefix;
    Stream out, err;
    int exec_err_fd = -1;  // CLOEXEC pipe: EOF means exec succeeded
  };
  // What a child reports through exec_err_fd when its setup or exec fails.
  struct ChildError {
    int stage;
    int err;
  };
  enum Stage : int { kSetpgid, kPdeathsig, kStdin, kDup2, kExec, kSetns };

  bool InstallSignalHandlers();
  bool Spawn(Rank& r, const sigset_t& child_mask);
  [[noreturn]] void ChildSetupAndExec(Rank& r, int out_w, int err_w, int err_pipe_w, char** envp,
                                      const sigset_t& child_mask, int netns_fd);
  void CollectExecErrors();
  void Loop();
  void HandleSignals();
  void Reap();
  void OnRankExit(Rank& r, int status);
  void Fail(int exit_code, int sig);
  void KillGroup(int sig);
  enum class PumpResult { kData, kAgain, kClosed };
  PumpResult Pump(const Rank& r, Stream& s);  // one read()
  void DrainNow(const Rank& r);
  void Emit(const Rank& r, Stream& s);
  void FlushPartial(const Rank& r, Stream& s);
  void CloseStream(const Rank& r, Stream& s);

  Options opts_;
  JobInfo job_;
  const EmulatedNet* net_;
  int bind_core_ = -1;  // the core the rank being started is pinned to (set before fork)
  std::vector<Rank> ranks_;
  std::vector<char*> argv_;  // opts_.command as execvp wants it
  pid_t parent_pid_ = 0;
  pid_t pgid_ = 0;  // 0 until the first rank is started
  std::unordered_map<pid_t, size_t> rank_of_pid_;
  int unreaped_ = 0;
  bool no_children_left_ = false;  // waitpid said ECHILD (also covers reparented grandchildren)
  std::vector<int> installed_signals_;
  int status_signal_ = 0;  // forwarded to every rank (StatusSignal)
  struct sigaction saved_sigpipe_ {};

  // Teardown state.
  bool terminating_ = false;
  bool killed_ = false;  // SIGKILL sent to the group
  int exit_code_ = 0;
  std::optional<Clock::time_point> timeout_deadline_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

}  // namespace chorusrun
