#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "process.h"

namespace ctest {

namespace {
// The matrix allocates and frees buffers of up to tens of MiB per case; keep them in the heap
// instead of fresh mmaps (and their page faults) each time.
const bool gMallocTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return true;
}();
}  // namespace

const char* resultName(chorusResult_t r) {
  switch (r) {
    case chorusSuccess:
      return "chorusSuccess";
    case chorusUnhandledCudaError:
      return "chorusUnhandledCudaError";
    case chorusSystemError:
      return "chorusSystemError";
    case chorusInternalError:
      return "chorusInternalError";
    case chorusInvalidArgument:
      return "chorusInvalidArgument";
    case chorusInvalidUsage:
      return "chorusInvalidUsage";
    case chorusRemoteError:
      return "chorusRemoteError";
    case chorusInProgress:
      return "chorusInProgress";
    case chorusTimeout:
      return "chorusTimeout";
    default:
      return "chorus<unknown result>";
  }
}

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double timeoutScale() {
  const char* s = std::getenv("CHORUS_TEST_TIMEOUT_SCALE");
  if (s == nullptr) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? v : 1.0;
}

void runThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

namespace {
std::mutex gProgressMu;
std::map<int, std::string>& progressMap() {
  static auto* m = new std::map<int, std::string>;
  return *m;
}
}  // namespace

void setProgress(int rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(gProgressMu);
  progressMap()[rank] = what;
}

std::string progressReport() {
  std::lock_guard<std::mutex> lock(gProgressMu);
  std::string s;
  for (const auto& [rank, what] : progressMap()) {
    s += "  rank " + std::to_string(rank) + ": " + what + "\n";
  }
  return s.empty() ? "  (no progress recorded)\n" : s;
}

struct Watchdog::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

Watchdog::Watchdog(double seconds, std::string what) : state_(std::make_shared<State>()) {
  const double limit = seconds * timeoutScale();
  std::thread([state = state_, limit, what = std::move(what)] {
    std::unique_lock<std::mutex> lock(state->mu);
    const bool finished =
        state->cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return state->done; });
    if (finished) return;
    std::fprintf(stderr, "WATCHDOG: %s did not finish within %.0f s; last progress:\n%s",
                 what.c_str(), limit, progressReport().c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(99);
  }).detach();
}

Watchdog::~Watchdog() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->done = true;
  state_->cv.notify_all();
}

ScopedEnv::ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
  if (const char* old = std::getenv(name_.c_str())) {
    had_ = true;
    old_ = old;
  }
  if (value != nullptr) {
    setenv(name_.c_str(), value, 1);
  } else {
    unsetenv(name_.c_str());
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    setenv(name_.c_str(), old_.c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

std::set<std::string> shmEntries() {
  std::set<std::string> names;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  closedir(d);
  return names;
}

namespace {

// Does process `pid` have /dev/shm/<name> open or mapped?
bool processHolds(const std::string& pid, const std::string& path) {
  const std::string fdDir = "/proc/" + pid + "/fd";
  if (DIR* d = opendir(fdDir.c_str())) {
    bool found = false;
    while (dirent* e = readdir(d)) {
      char target[PATH_MAX];
      const std::string link = fdDir + "/" + e->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (std::strncmp(target, path.c_str(), path.size()) == 0) {
        found = true;
        break;
      }
    }
    closedir(d);
    if (found) return true;
  }
  std::ifstream maps("/proc/" + pid + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(path) != std::string::npos) return true;
  }
  return false;
}

bool heldByAnotherProcess(const std::string& name) {
  const std::string path = "/dev/shm/" + name;
  const std::string self = std::to_string(getpid());
  DIR* d = opendir("/proc");
  if (d == nullptr) return false;
  bool held = false;
  while (dirent* e = readdir(d)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (pid == self) continue;
    if (processHolds(pid, path)) {
      held = true;
      break;
    }
  }
  closedir(d);
  return held;
}

}  // namespace

std::vector<std::string> leakedShm(const std::set<std::string>& before, double settleSeconds) {
  const double deadline = nowSeconds() + settleSeconds;
  auto candidates = [&] {
    std::vector<std::string> out;
    for (const auto& name : shmEntries()) {
      if (before.count(name)) continue;
      // Only Chorus's own segments ("chorus-<pid>-<rank>-<nonce>"): other programs' entries
      // (Python's multiprocessing semaphores, say) are neither ours to judge nor to remove.
      if (name.rfind("chorus", 0) != 0) continue;
      struct stat st;
      const std::string path = "/dev/shm/" + name;
      if (stat(path.c_str(), &st) != 0 || st.st_uid != getuid()) continue;
      out.push_back(name);
    }
    return out;
  };
  std::vector<std::string> fresh;
  for (;;) {
    fresh = candidates();
    if (fresh.empty() || nowSeconds() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (fresh.empty()) return fresh;
  // Entries another process holds are that process's. An entry nobody else holds, twice, a
  // second apart, is a leak (a creator between shm_open and mmap holds it too).
  std::vector<std::string> unheld;
  for (const auto& name : fresh) {
    if (!heldByAnotherProcess(name)) unheld.push_back(name);
  }
  if (unheld.empty()) return unheld;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto now = shmEntries();
  std::vector<std::string> leaked;
  for (const auto& name : unheld) {
    if (now.count(name) && !heldByAnotherProcess(name)) leaked.push_back(name);
  }
  return leaked;
}

void removeShm(const std::vector<std::string>& names) {
  for (const auto& name : names) unlink(("/dev/shm/" + name).c_str());
}

CommSet::CommSet(int n) : comms_(n > 0 ? n : 0, nullptr) {
  init_ = chorusCommInitAll(comms_.data(), n, nullptr);
  if (init_ != chorusSuccess) std::fill(comms_.begin(), comms_.end(), nullptr);
}

CommSet::~CommSet() {
  destroyAll();
}

chorusResult_t CommSet::destroyAll() {
  std::vector<chorusResult_t> res(comms_.size(), chorusSuccess);
  runThreads(size(), [&](int r) {
    if (comms_[r] != nullptr) res[r] = chorusCommDestroy(comms_[r]);
  });
  std::fill(comms_.begin(), comms_.end(), nullptr);
  for (auto r : res) {
    if (r != chorusSuccess) return r;
  }
  return chorusSuccess;
}

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
