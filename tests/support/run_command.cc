// Running a child command with a deadline (run_command.h).
#include "run_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "process.h"
#include "timing.h"

namespace ctest {

CommandResult runCommand(const std::vector<std::string>& argv, double timeoutSeconds) {
  CommandResult res;
  const double start = nowSeconds();
  SpawnSpec spec;
  spec.argv = argv;
  spec.out = ChildOutput::kPipe;
  spec.newGroup = true;
  const Child child = spawnProcess(spec);
  if (child.pid < 0) {
    res.output = child.error;
    return res;
  }
  const pid_t pid = child.pid;
  const int outFd = child.outFd;
  const double limit = timeoutSeconds * timeoutScale();
  bool eof = false;
  int status = 0;
  bool exited = false;
  while (!eof || !exited) {
    if (!exited) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) exited = true;
    }
    if (nowSeconds() - start > limit && !res.timedOut) {
      res.timedOut = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    if (eof) {
      if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    pollfd p{outFd, POLLIN, 0};
    const int pr = poll(&p, 1, 100);
    if (pr > 0) {
      char buf[4096];
      const ssize_t n = read(outFd, buf, sizeof buf);
      if (n > 0) {
        res.output.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        eof = true;
      }
    }
    // After a kill, grandchildren may keep the pipe open for a moment: give up on it.
    if (res.timedOut && exited && nowSeconds() - start > limit + 5) eof = true;
  }
  close(outFd);
  if (WIFEXITED(status)) {
    res.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res.exitCode = 128 + WTERMSIG(status);
  }
  res.seconds = nowSeconds() - start;
  return res;
}

}  // namespace ctest
