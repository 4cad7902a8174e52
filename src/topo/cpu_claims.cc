// The machine's record of the CPUs self-bound ranks hold (topo/cpu_claims.h).
#include "topo/cpu_claims.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "topo/cpu_share.h"

namespace chorus {

namespace {

constexpr uint64_t kMagic = 0x3130737570636863ULL;  // "chcpus01": the layout's version
constexpr int kSlots = CPU_SETSIZE;                 // CPUs past it are left out of the record
constexpr int kLockTries = 2000;                    // 1 ms apart: the lock is held microseconds

struct Entry {
  int32_t pid;      // 0: free
  uint32_t unused;  // keeps the layout fixed
  uint64_t start;   // the holder's start time (processStartTime), against a reused pid
  uint64_t job;     // the holder's job
};
static_assert(sizeof(Entry) == 24);

struct Table {
  uint64_t magic;
  Entry cpu[kSlots];
};

bool alive(const Entry& e) {
  if (e.pid <= 0) return false;
  if (kill(e.pid, 0) != 0 && errno != EPERM) return false;
  return processStartTime(e.pid) == e.start;
}

// The file, locked; -1 with `why` where it cannot be had.
int openLocked(const std::string& path, std::string& why) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    why = "cannot open " + path + ": " + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || !S_ISREG(st.st_mode)) {
    why = path + " is not a file of this user";
    close(fd);
    return -1;
  }
  for (int i = 0; i < kLockTries; ++i) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    const timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
  why = "cannot lock " + path + " within 2 s";
  close(fd);
  return -1;
}

std::string cpuList(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(cpus[i]) +
         (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return s;
}

}  // namespace

uint64_t processStartTime(int32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close = line.rfind(')');  // the command may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  // Field 22 of proc(5) is the start time; fields 3.. follow the command.
  for (int f = 3; f <= 22; ++f)
    if (!(fields >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

std::string defaultClaimsPath() {
  return "/dev/shm/chorus-cpus-" + std::to_string(geteuid());
}

ClaimedShare claimShare(const std::string& path, uint64_t job, const std::vector<int>& cpus,
                        const std::vector<int32_t>& pids, int index) {
  const int n = int(pids.size());
  ClaimedShare plain{cpuShare(cpus, index, n), ""};
  if (path.empty() || path == "none") return plain;
  std::vector<uint64_t> starts;
  for (int32_t pid : pids) {
    starts.push_back(processStartTime(pid));
    if (starts.back() == 0) {
      plain.note = "CPU record not used: no start time for pid " + std::to_string(pid);
      return plain;
    }
  }
  std::string why;
  const int fd = openLocked(path, why);
  if (fd < 0) {
    plain.note = "CPU record not used: " + why;
    return plain;
  }
  Table t{};
  const ssize_t got = pread(fd, &t, sizeof(t), 0);
  if (got != ssize_t(sizeof(t)) || t.magic != kMagic) t = Table{};  // new, short or foreign
  t.magic = kMagic;
  const int32_t me = pids[size_t(index)];
  std::vector<int> mine, free, held;
  int32_t holder = 0;
  bool jobHolds = false;
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= kSlots) continue;
    Entry& e = t.cpu[cpu];
    if (!alive(e)) {
      e = Entry{};
      free.push_back(cpu);
    } else if (e.job == job) {
      jobHolds = true;
      if (e.pid == me) mine.push_back(cpu);
    } else {
      held.push_back(cpu);
      holder = e.pid;
    }
  }
  ClaimedShare out;
  if (jobHolds) {
    out.cpus = mine;  // what the job's first rank here claimed for this one
  } else if (int(free.size()) < n) {
    out.note = "CPUs " + cpuList(held) + " held by another job's ranks (pid " +
               std::to_string(holder) + "); " + std::to_string(free.size()) +
               " free for this node's " + std::to_string(n) + " ranks: not binding";
  } else {
    for (int i = 0; i < n; ++i)
      for (int cpu : cpuShare(free, i, n))
        t.cpu[cpu] = Entry{pids[size_t(i)], 0, starts[size_t(i)], job};
    out.cpus = cpuShare(free, index, n);
    if (!held.empty())
      out.note = "CPUs " + cpuList(held) + " held by another job's ranks (pid " +
                 std::to_string(holder) + "): share of the " + std::to_string(free.size()) +
                 " free";
  }
  if (pwrite(fd, &t, sizeof(t), 0) != ssize_t(sizeof(t)) && out.note.empty())
    out.note = "CPU record not written: " + std::string(std::strerror(errno));
  close(fd);  // releases the lock
  return out;
}

}  // namespace chorus
