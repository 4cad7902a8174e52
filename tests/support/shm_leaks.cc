// /dev/shm bookkeeping (shm_leaks.h).
#include "shm_leaks.h"

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "timing.h"

namespace ctest {

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

std::vector<std::string> shmOf(const std::vector<pid_t>& pids) {
  std::vector<std::string> out;
  for (const auto& name : shmEntries())
    for (pid_t p : pids)
      if (name.rfind("chorus-" + std::to_string(p) + "-", 0) == 0) out.push_back(name);
  return out;
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

}  // namespace ctest
