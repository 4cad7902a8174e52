#include "launcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "signals.h"

namespace chorusrun {

bool Launcher::InstallSignalHandlers() {
  if (pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    Message(std::string("pipe: ") + std::strerror(errno));
    return false;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwardedSignals) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (sig == SIGHUP && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
    installed_signals_.push_back(sig);
  }
  status_signal_ = StatusSignal(opts_);
  if (status_signal_ != 0) {
    sigaction(status_signal_, &sa, nullptr);
    installed_signals_.push_back(status_signal_);
  }
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
  installed_signals_.push_back(SIGCHLD);
  // A closed stdout must not kill the launcher (the Sink discards instead). Ranks get the
  // original disposition back.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, &saved_sigpipe_);
  return true;
}

void Launcher::ChildSetupAndExec(Rank& r, int out_w, int err_w, int err_pipe_w, char** envp,
                                 const sigset_t& child_mask, int netns_fd) {
  auto fail = [&](int stage) {
    ChildError ce{stage, errno};
    ssize_t n = write(err_pipe_w, &ce, sizeof(ce));
    (void)n;
    _exit(stage == kExec && ce.err != ENOENT ? 126 : 127);  // the shell's conventions
  };
  // The first rank leads the job's process group; the others join it.
  if (setpgid(0, pgid_) != 0) fail(kSetpgid);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(kPdeathsig);
  // If chorusrun died before the prctl, the death signal will never come: give up now.
  if (getppid() != parent_pid_) _exit(127);
  // Default signal handling again, then unblock (pending SIGTERMs now act normally).
  for (int sig : installed_signals_) signal(sig, sig == status_signal_ ? SIG_IGN : SIG_DFL);
  sigaction(SIGPIPE, &saved_sigpipe_, nullptr);
  if (r.index != 0) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0) fail(kStdin);
    if (devnull != STDIN_FILENO) {
      if (dup2(devnull, STDIN_FILENO) < 0) fail(kStdin);
      close(devnull);
    }
  }
  // out_w/err_w are O_CLOEXEC and can't be 1 or 2 (EnsureStdFds), so dup2 yields inheritable fds.
  if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) fail(kDup2);
  if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) fail(kSetns);
  if (bind_core_ >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(bind_core_ + 0, &set);
    sched_setaffinity(0, sizeof(set), &set);  // best effort
  }
  sigprocmask(SIG_SETMASK, &child_mask, nullptr);
  environ = envp;
  execvp(argv_[0], argv_.data());
  fail(kExec);
  _exit(127);
}

bool Launcher::Spawn(Rank& r, const sigset_t& child_mask) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, ep[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], ep[0], ep[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
    Message("cannot create pipes for rank " + std::to_string(r.index) + ": " +
            std::strerror(errno));
    close_all();
    return false;
  }
  // Everything the child needs is prepared before fork().
  const RankPlacement place = PlaceRank(opts_, r.index);
  bind_core_ = -1;
  {
    cpu_set_t avail;
    if (opts_.bindTo != "none" && sched_getaffinity(0, sizeof(avail), &avail) == 0) {
      const int cores = CPU_COUNT(&avail);
      if (opts_.bindTo == "core" || opts_.nranks <= cores) {
        int want = r.index % cores, seen = 0;
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &avail) && seen++ == want) {
            bind_core_ = c;
            break;
          }
      }
    }
  }
  std::vector<std::string> env = BuildRankEnv(opts_, job_, place);
  int netns_fd = -1;
  if (net_ != nullptr && net_->active()) {
    std::string path = "/var/run/netns/" + net_->nodeNamespace(place.node);
    netns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) {
      Message("cannot open " + path + ": " + std::strerror(errno));
      close_all();
      return false;
    }
  }
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    Message("cannot start rank " + std::to_string(r.index) + ": fork: " + std::strerror(errno));
    close_all();
    return false;
  }
  if (pid == 0) ChildSetupAndExec(r, out[1], err[1], ep[1], envp.data(), child_mask, netns_fd);
  if (netns_fd >= 0) close(netns_fd);

  // Parent. Set the group here too, so it holds whichever of parent and child runs first.
  if (pgid_ == 0) pgid_ = pid;
  (void)setpgid(pid, pgid_);  // EACCES once the child has exec'd: it did it itself
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  r.pid = pid;
  r.out.fd = out[0];
  r.out.sink = &g_stdout;
  r.err.fd = err[0];
  r.err.sink = &g_stderr;
  r.exec_err_fd = ep[0];
  rank_of_pid_[pid] = static_cast<size_t>(r.index);
  ++unreaped_;
  return true;
}

// Waits for every started rank to either exec (its error pipe closes) or report why it could not.
void Launcher::CollectExecErrors() {
  for (auto& r : ranks_) {
    if (r.exec_err_fd < 0) continue;
    ChildError ce{};
    ssize_t n;
    do {
      n = read(r.exec_err_fd, &ce, sizeof(ce));
    } while (n < 0 && errno == EINTR);
    close(r.exec_err_fd);
    r.exec_err_fd = -1;
    if (n != static_cast<ssize_t>(sizeof(ce)) || terminating_) continue;
    if (ce.stage == kExec) {
      Message("cannot execute " + opts_.command[0] + ": " + std::strerror(ce.err));
      Fail(ce.err == ENOENT ? 127 : 126, SIGTERM);
    } else {
      static const char* const kStageNames[] = {"setpgid", "prctl", "stdin", "dup2"};
      Message("cannot set up rank " + std::to_string(r.index) + " (" + kStageNames[ce.stage] +
              "): " + std::strerror(ce.err));
      Fail(1, SIGTERM);
    }
  }
}

void Launcher::KillGroup(int sig) {
  if (pgid_ > 0) (void)kill(-pgid_, sig);
}

// Starts the teardown: records why (the exit status), sends `sig` to every process of the job and
// arms the SIGKILL deadline. Only the first cause counts.
void Launcher::Fail(int exit_code, int sig) {
  if (terminating_) return;
  terminating_ = true;
  exit_code_ = exit_code;
  KillGroup(sig);
  KillGroup(SIGCONT);  // stopped ranks must run to act on it
  kill_deadline_ = Clock::now() + kKillGrace;
}

// A rank that died may leave a shared-memory segment it created but had not unlinked yet
// (its peers remove it too when they notice; this is the launcher's safety net).
void RemoveShmOf(pid_t pid) {
  std::string prefix = "chorus-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
        shm_unlink((std::string("/") + e->d_name).c_str());
    closedir(d);
  }
}

void Launcher::OnRankExit(Rank& r, int status) {
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) RemoveShmOf(r.pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (terminating_) return;  // collateral damage of a teardown already under way
  std::string who = "rank " + std::to_string(r.index);
  if (WIFEXITED(status)) {
    Message(who + " exited with status " + std::to_string(WEXITSTATUS(status)));
    Fail(WEXITSTATUS(status), SIGTERM);
  } else if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    Message(who + " killed by signal " + SignalName(sig) +
            (WCOREDUMP(status) ? " (core dumped)" : ""));
    Fail(128 + sig, SIGTERM);
  }
}

void Launcher::Reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) return;
    if (pid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) no_children_left_ = true;
      return;
    }
    auto it = rank_of_pid_.find(pid);
    if (it == rank_of_pid_.end()) continue;  // an orphaned grandchild (we are its subreaper)
    Rank& r = ranks_[it->second];
    rank_of_pid_.erase(it);
    r.reaped = true;
    --unreaped_;
    DrainNow(r);  // so the rank's last words come out before our verdict on it
    OnRankExit(r, status);
  }
}

void Launcher::HandleSignals() {
  char buf[64];
  while (read(g_wake_pipe[0], buf, sizeof(buf)) > 0) {
  }
  g_got_signal[SIGCHLD] = 0;  // Reap() runs on every iteration anyway
  if (status_signal_ != 0 && g_got_signal[status_signal_]) {
    g_got_signal[status_signal_] = 0;
    Message("received " + SignalName(status_signal_) + ", asking every rank for its status report");
    for (const Rank& r : ranks_)
      if (!r.reaped && r.pid > 0) (void)kill(r.pid, status_signal_);
  }
  for (int sig : kForwardedSignals) {
    if (!g_got_signal[sig]) continue;
    g_got_signal[sig] = 0;
    if (!terminating_) {
      Message("received " + SignalName(sig) + ", forwarding it to all ranks");
      Fail(128 + sig, sig);
    } else if (!killed_) {
      Message("received " + SignalName(sig) + " again, killing all ranks");
      KillGroup(SIGKILL);
      killed_ = true;
    }
  }
}

Launcher::PumpResult Launcher::Pump(const Rank& r, Stream& s) {
  // One shared read buffer: a stream only keeps (and allocates for) its unfinished line.
  static char chunk[kReadChunk];
  ssize_t n;
  do {
    n = read(s.fd, chunk, sizeof(chunk));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    s.buf.append(chunk, static_cast<size_t>(n));
    Emit(r, s);
    if (s.buf.empty() && s.buf.capacity() > 4 * kReadChunk) std::string().swap(s.buf);
    return PumpResult::kData;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PumpResult::kAgain;
  CloseStream(r, s);  // EOF (or a read error, which we treat the same)
  return PumpResult::kClosed;
}

// Reads what a just-exited rank left in its pipes. Bounded: a grandchild could keep writing.
void Launcher::DrainNow(const Rank& r) {
  Rank& rr = ranks_[static_cast<size_t>(r.index)];
  for (Stream* s : {&rr.out, &rr.err}) {
    for (int i = 0; i < 256 && s->fd >= 0; ++i) {
      if (Pump(rr, *s) != PumpResult::kData) break;
    }
  }
}

// Writes every complete line in s.buf, each preceded by the rank's prefix, in one writev batch.
void Launcher::Emit(const Rank& r, Stream& s) {
  char* data = s.buf.data();
  const size_t size = s.buf.size();
  const std::string& prefix = r.prefix;  // empty with --no-prefix
  std::vector<iovec> iov;
  size_t start = 0;
  size_t pos = s.scanned;
  while (pos < size) {
    const void* nl = std::memchr(data + pos, '\n', size - pos);
    if (nl == nullptr) break;
    size_t end = static_cast<size_t>(static_cast<const char*>(nl) - data) + 1;
    if (!prefix.empty()) {
      iov.push_back({const_cast<char*>(prefix.data()), prefix.size()});
      iov.push_back({data + start, end - start});
    } else if (iov.empty()) {
      iov.push_back({data + start, end - start});
    } else {
      iov.back().iov_len += end - start;  // unprefixed lines are contiguous: one iovec
    }
    start = pos = end;
  }
  if (start > 0) {
    s.sink->Write(iov);
    s.buf.erase(0, start);
  }
  s.scanned = s.buf.size();
}

// At EOF: an unterminated last line is written too. With a prefix it is completed with '\n' so
// the next line (maybe another rank's) starts on a line of its own; --no-prefix passes it as is.
void Launcher::FlushPartial(const Rank& r, Stream& s) {
  if (s.buf.empty()) return;
  static char newline[] = "\n";
  std::vector<iovec> iov;
  if (!r.prefix.empty()) iov.push_back({const_cast<char*>(r.prefix.data()), r.prefix.size()});
  iov.push_back({s.buf.data(), s.buf.size()});
  if (!r.prefix.empty()) iov.push_back({newline, 1});
  s.sink->Write(iov);
  s.buf.clear();
  s.scanned = 0;
}

void Launcher::CloseStream(const Rank& r, Stream& s) {
  FlushPartial(r, s);
  close(s.fd);
  s.fd = -1;
  std::string().swap(s.buf);
}

void Launcher::Loop() {
  std::vector<pollfd> pfds;
  std::vector<std::pair<size_t, Stream*>> pstreams;  // pfds[i + 1] belongs to pstreams[i]
  for (;;) {
    HandleSignals();
    Reap();
    auto now = Clock::now();
    if (timeout_deadline_ && now >= *timeout_deadline_) {
      timeout_deadline_.reset();
      if (!terminating_) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%g", *opts_.timeout_s);
        Message(std::string("timeout after ") + buf + " s, terminating all ranks");
        Fail(kTimeoutExit, SIGTERM);
      }
    }
    if (terminating_ && !killed_ && unreaped_ > 0 && now >= *kill_deadline_) {
      Message("ranks still running " + std::to_string(kKillGrace.count()) +
              " s after SIGTERM, sending SIGKILL");
      KillGroup(SIGKILL);
      killed_ = true;
    }
    if (unreaped_ == 0) {
      if (!drain_deadline_) {
        // Every rank is gone: whatever is left in the job's process group is an orphan.
        KillGroup(SIGKILL);
        killed_ = true;
        drain_deadline_ = now + kDrainGrace;
      }
      bool streams_open = std::any_of(ranks_.begin(), ranks_.end(),
                                      [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
      if ((!streams_open && no_children_left_) || now >= *drain_deadline_) break;
    }

    // Sleep until output arrives, a signal comes in, or the nearest deadline.
    std::optional<Clock::time_point> wake;
    auto consider = [&](const std::optional<Clock::time_point>& t) {
      if (t && (!wake || *t < *wake)) wake = t;
    };
    consider(timeout_deadline_);
    if (terminating_ && !killed_) consider(kill_deadline_);
    consider(drain_deadline_);
    int timeout_ms = -1;
    if (wake) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<decltype(ms)>(ms, 0, 60'000));
    }
    pfds.clear();
    pstreams.clear();
    pfds.push_back({g_wake_pipe[0], POLLIN, 0});
    for (size_t i = 0; i < ranks_.size(); ++i) {
      for (Stream* s : {&ranks_[i].out, &ranks_[i].err}) {
        if (s->fd < 0) continue;
        pfds.push_back({s->fd, POLLIN, 0});
        pstreams.emplace_back(i, s);
      }
    }
    int n = poll(pfds.data(), pfds.size(), timeout_ms);
    if (n < 0) {
      if (errno != EINTR && errno != EAGAIN) {
        Message(std::string("poll: ") + std::strerror(errno));
        Fail(1, SIGKILL);
        killed_ = true;
      }
      continue;
    }
    for (size_t i = 0; i < pstreams.size(); ++i) {
      if (pfds[i + 1].revents == 0) continue;
      auto [rank, s] = pstreams[i];
      if (s->fd >= 0) (void)Pump(ranks_[rank], *s);
    }
  }
}

int Launcher::Run() {
  parent_pid_ = getpid();
  // Orphaned grandchildren of the ranks get reparented here, so they are reaped before we exit.
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (!InstallSignalHandlers()) return 1;
  for (auto& a : opts_.command) argv_.push_back(a.data());
  argv_.push_back(nullptr);

  // Handled signals stay blocked while children are forked: a child must not run our handlers
  // between fork() and exec(). It unblocks them (mask `orig`) once the defaults are back.
  sigset_t block, orig;
  sigemptyset(&block);
  for (int sig : installed_signals_) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &orig);

  if (opts_.timeout_s) {
    timeout_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(*opts_.timeout_s));
  }
  ranks_.resize(static_cast<size_t>(opts_.nranks));
  for (int i = 0; i < opts_.nranks; ++i) {
    ranks_[i].index = i;
    if (opts_.prefix) ranks_[i].prefix = "[" + std::to_string(i) + "] ";
  }
  for (auto& r : ranks_) {
    if (!Spawn(r, orig)) {
      Fail(1, SIGTERM);
      break;
    }
  }
  CollectExecErrors();
  sigprocmask(SIG_SETMASK, &orig, nullptr);

  Loop();
  return exit_code_;
}

}  // namespace chorusrun
