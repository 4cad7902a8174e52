// Jobs of ranks started by a test (rank_job.h).
#include "rank_job.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "handstart.h"

namespace ctest {

namespace {

std::string randomSecret(std::mt19937_64& rng) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) s += hex[rng() % 16];
  return s;
}

}  // namespace

std::map<std::string, std::string> fieldsOf(const std::string& out, const std::string& tag) {
  std::map<std::string, std::string> f;
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line)) {
    const size_t at = line.find(tag + " ");
    if (at == std::string::npos) continue;
    line = line.substr(at + tag.size() + 1);
    size_t pos = 0;
    while (pos < line.size()) {
      const size_t eq = line.find('=', pos);
      if (eq == std::string::npos) break;
      const std::string key = line.substr(pos, eq - pos);
      if (key == "msg") {
        f[key] = line.substr(eq + 1);
        break;
      }
      size_t end = line.find(' ', eq);
      if (end == std::string::npos) end = line.size();
      f[key] = line.substr(eq + 1, end - eq - 1);
      pos = end + 1;
    }
    f["_found"] = "1";
    return f;
  }
  return f;
}

RankJob::RankJob(const std::string& program, const std::string& hostPrefix, int nranks,
                 const std::vector<std::string>& workerArgs,
                 const std::vector<std::string>& extraEnv, std::mt19937_64& rng, int nodes,
                 const std::function<std::vector<std::string>(int)>& rankEnv)
    : port_(freeLoopbackPort()), secret_(randomSecret(rng)) {
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), workerArgs.begin(), workerArgs.end());
    std::vector<std::string> env = {
        "CHORUS_RANK=" + std::to_string(r), "CHORUS_NRANKS=" + std::to_string(nranks),
        "CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port_), "CHORUS_SECRET=" + secret_};
    if (nodes > 1)
      env.push_back("CHORUS_HOSTID=" + hostPrefix + std::to_string(nodeOf(r, nranks, nodes)));
    env.insert(env.end(), extraEnv.begin(), extraEnv.end());
    if (rankEnv) {
      const auto mine = rankEnv(r);
      env.insert(env.end(), mine.begin(), mine.end());
    }
    procs_.push_back(spawnPiped(argv, env));
  }
}

RankJob::~RankJob() {
  for (auto& p : procs_) {
    if (p.pid > 0 && !p.exited) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &p.status, 0);
      p.exited = true;
    }
    if (p.outFd >= 0) close(p.outFd);
    if (p.inFd >= 0) close(p.inFd);
  }
}

std::vector<pid_t> RankJob::pids() const {
  std::vector<pid_t> v;
  for (const auto& p : procs_) v.push_back(p.pid);
  return v;
}

bool RankJob::started() const {
  for (const auto& p : procs_)
    if (p.pid <= 0) return false;
  return true;
}

void RankJob::pump(double seconds) {
  const double until = nowSeconds() + seconds;
  do {
    std::vector<pollfd> fds;
    for (auto& p : procs_)
      if (p.outFd >= 0) fds.push_back({p.outFd, POLLIN, 0});
    if (!fds.empty()) poll(fds.data(), fds.size(), 10);
    for (auto& p : procs_) readFrom(p);
    for (auto& p : procs_)
      if (p.pid > 0 && !p.exited && waitpid(p.pid, &p.status, WNOHANG) == p.pid) {
        p.exited = true;
        readFrom(p);
      }
    if (fds.empty()) sleepSeconds(0.01);
  } while (nowSeconds() < until);
}

double RankJob::killRank(int r, bool reap) {
  Proc& p = procs_[size_t(r)];
  const double t = nowSeconds();
  kill(p.pid, SIGKILL);
  if (reap) {
    waitpid(p.pid, &p.status, 0);
    p.exited = true;
    readFrom(p);
  } else {
    p.exited = true;  // pump() leaves it alone: a zombie until the destructor reaps it
  }
  return t;
}

void RankJob::releaseLingering() {
  for (auto& p : procs_)
    if (p.inFd >= 0) {
      close(p.inFd);
      p.inFd = -1;
    }
}

bool RankJob::allExited() const {
  for (const auto& p : procs_)
    if (!p.exited) return false;
  return true;
}

std::string RankJob::statuses() const {
  std::string s;
  for (size_t r = 0; r < procs_.size(); ++r) {
    const Proc& p = procs_[r];
    s += "  rank " + std::to_string(r) + " (pid " + std::to_string(p.pid) + "): ";
    if (!p.exited)
      s += "running\n";
    else if (WIFEXITED(p.status))
      s += "exit " + std::to_string(WEXITSTATUS(p.status)) + "\n";
    else if (WIFSIGNALED(p.status))
      s += "signal " + std::to_string(WTERMSIG(p.status)) + "\n";
    else
      s += "status " + std::to_string(p.status) + "\n";
  }
  return s;
}

std::string RankJob::output() const {
  std::string s;
  for (size_t r = 0; r < procs_.size(); ++r) {
    std::istringstream is(procs_[r].out);
    std::string line;
    while (std::getline(is, line)) s += "  [" + std::to_string(r) + "] " + line + "\n";
  }
  return s;
}

void RankJob::readFrom(Proc& p) {
  if (p.outFd < 0) return;
  char buf[4096];
  while (true) {
    const ssize_t n = read(p.outFd, buf, sizeof buf);
    if (n > 0) {
      p.out.append(buf, size_t(n));
      continue;
    }
    if (n == 0) {
      close(p.outFd);
      p.outFd = -1;
    }
    return;
  }
}

}  // namespace ctest
