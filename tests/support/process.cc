#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace ctest {

namespace {

void closeBoth(int fds[2]) {
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  fds[0] = fds[1] = -1;
}

}  // namespace

Child spawnProcess(const SpawnSpec& spec) {
  Child c;
  if (spec.argv.empty()) {
    c.error = "spawnProcess: empty argv";
    return c;
  }
  // The environment: ours, minus the names spec.env sets, then spec.env.
  std::vector<std::string> envStrings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string s = *e;
    const std::string name = s.substr(0, s.find('=') + 1);
    bool overridden = false;
    for (const auto& x : spec.env) overridden = overridden || x.substr(0, x.find('=') + 1) == name;
    if (!overridden) envStrings.push_back(s);
  }
  envStrings.insert(envStrings.end(), spec.env.begin(), spec.env.end());
  std::vector<std::string> argvCopy = spec.argv;
  std::vector<char*> envp, args;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& a : argvCopy) args.push_back(a.data());
  args.push_back(nullptr);
  const char* outFile = spec.outFile.c_str();

  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1};
  const bool outPipe = spec.out == ChildOutput::kPipe || spec.out == ChildOutput::kSeparatePipes;
  if ((outPipe && pipe2(out, O_CLOEXEC) != 0) ||
      (spec.out == ChildOutput::kSeparatePipes && pipe2(err, O_CLOEXEC) != 0) ||
      (spec.in == ChildStdin::kPipe && pipe2(in, O_CLOEXEC) != 0)) {
    c.error = std::string("pipe: ") + std::strerror(errno);
    closeBoth(out);
    closeBoth(err);
    closeBoth(in);
    return c;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (spec.newGroup) setpgid(0, 0);
    if (spec.dieWithParent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before the call
    }
    if (spec.in == ChildStdin::kPipe) {
      dup2(in[0], 0);
    } else if (spec.in == ChildStdin::kNull) {
      const int fd = open("/dev/null", O_RDONLY);
      if (fd >= 0) dup2(fd, 0);
    }
    if (outPipe) {
      dup2(out[1], 1);
      dup2(spec.out == ChildOutput::kSeparatePipes ? err[1] : out[1], 2);
    } else if (spec.out == ChildOutput::kFile) {
      const int fd = open(outFile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
    }
    execve(args[0], args.data(), envp.data());
    const char msg[] = "spawnProcess: exec failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  if (pid < 0) {
    c.error = std::string("fork: ") + std::strerror(errno);
    closeBoth(out);
    closeBoth(err);
    closeBoth(in);
    return c;
  }
  if (spec.newGroup) setpgid(pid, pid);  // also here: no race with a kill(-pid) right after
  c.pid = pid;
  if (out[1] >= 0) close(out[1]);
  if (err[1] >= 0) close(err[1]);
  if (in[0] >= 0) close(in[0]);
  c.outFd = out[0];
  c.errFd = err[0];
  c.inFd = in[1];
  return c;
}

int waitProcess(pid_t pid, double seconds, bool group) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    int st = 0;
    const pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (w < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > until) {
      if (group) kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Proc spawnPiped(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  Proc p;
  SpawnSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.in = ChildStdin::kPipe;
  spec.out = ChildOutput::kPipe;
  spec.dieWithParent = true;  // never outlive the test
  const Child c = spawnProcess(spec);
  if (c.pid < 0) return p;
  fcntl(c.outFd, F_SETFL, O_NONBLOCK);
  p.pid = c.pid;
  p.outFd = c.outFd;
  p.inFd = c.inFd;
  return p;
}

bool processRuns(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

BusyProcesses::BusyProcesses(int n) {
  for (int i = 0; i < n; ++i) {
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", "while :; do :; done"};
    spec.out = ChildOutput::kInherit;
    spec.newGroup = true;
    spec.dieWithParent = true;
    const Child c = spawnProcess(spec);
    if (c.pid <= 0) {
      error_ = c.error;
      return;
    }
    pids_.push_back(c.pid);
  }
}

BusyProcesses::~BusyProcesses() {
  for (pid_t pid : pids_) {
    kill(-pid, SIGKILL);
    waitProcess(pid, 10, true);
  }
}

}  // namespace ctest
