// chorus_shrink_worker: one rank of the shrink tests (tests/test_shrink.cc) and of
// scripts/shrink_time.sh, started by hand with launcher variables (CHORUS_RANK, CHORUS_NRANKS,
// CHORUS_COMM_ID, CHORUS_SECRET; CHORUS_HOSTID to emulate nodes).
//
// It runs --iters AllReduces (int64 sum, --count elements) whose inputs depend on the rank's
// original rank and the iteration, and checks every result against a sum computed here from
// the ranks that should be alive. A rank named in --kill R@I,... kills itself with SIGKILL at the
// start of iteration I; the others see the failure, call chorusCommShrink (no exclude list: the
// dead are found), abort the old communicator and repeat the iteration on the new one.
// --exclude R@I: at iteration I every rank calls chorusCommShrink excluding the live rank R
// (which calls it too, gets no communicator and leaves).
//
// Output lines (t: CLOCK_MONOTONIC seconds):
//   READY rank=R nranks=N
//   FAILED it=I t=T code=NAME msg=...          an AllReduce failed
//   SHRUNK it=I t=T rank=R nranks=N            the new communicator is ready
//   FIRSTOK it=I t=T                           the first AllReduce on it succeeded
//   MISMATCH it=I index=K got=G want=W
//   EXCLUDED it=I                              this rank was excluded on purpose
//   LEAKS threads=T listeners=L shm=S          after destroying everything
//   DONE rank=R ok=0|1
#include <chorus/chorus.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proc_net.h"
#include "shm_leaks.h"
#include "timing.h"

namespace {

struct Event {
  int rank, iter;
};

std::vector<Event> parseEvents(const std::string& s) {
  std::vector<Event> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t at = item.find('@');
    if (at == std::string::npos) {
      std::fprintf(stderr, "bad event %s (want RANK@ITER)\n", item.c_str());
      std::exit(2);
    }
    out.push_back({std::atoi(item.substr(0, at).c_str()), std::atoi(item.substr(at + 1).c_str())});
  }
  return out;
}

// Threads of this process, without the library's one process-wide status-signal watcher
// ("chorus-status", started at the first init for CHORUS_STATUS_SIGNAL and kept).
int countThreads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char name[32] = {};
      const std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fgets(name, sizeof(name), f) == nullptr) name[0] = 0;
        std::fclose(f);
      }
      if (std::strncmp(name, "chorus-status", 13) != 0) ++n;
    }
    closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  size_t count = 1000;
  double timeout = 120;
  std::vector<Event> kills, excludes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "option %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--iters")
      iters = std::atoi(next().c_str());
    else if (a == "--count")
      count = size_t(std::atol(next().c_str()));
    else if (a == "--kill")
      kills = parseEvents(next());
    else if (a == "--exclude")
      excludes = parseEvents(next());
    else if (a == "--timeout")
      timeout = std::atof(next().c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  // Watchdog: a hang is a failure, never a stuck test.
  std::thread([timeout] {
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout));
    std::printf("WATCHDOG fired after %.0f s\n", timeout);
    std::fflush(stdout);
    std::_Exit(99);
  }).detach();
  setvbuf(stdout, nullptr, _IOLBF, 0);

  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::printf("INITFAILED msg=%s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int me = 0, n = 0;
  chorusCommUserRank(comm, &me);
  chorusCommCount(comm, &n);
  const int orig = me;
  const int baseThreads = 1;  // main; the watchdog is counted apart below
  std::printf("READY rank=%d nranks=%d\n", me, n);
  std::vector<int> present(static_cast<size_t>(n));  // original ranks, in order
  for (int r = 0; r < n; ++r) present[size_t(r)] = r;

  std::vector<int64_t> send(count), recv(count), want(count);
  bool ok = true, fresh = false;
  for (int it = 0; it < iters;) {
    for (const Event& k : kills)
      if (k.iter == it && k.rank == orig) raise(SIGKILL);
    // Ranks that the schedule says are dead by now (killed at an earlier or this iteration).
    std::vector<int> alive;
    for (int r : present) {
      bool dead = false;
      for (const Event& k : kills) dead = dead || (k.rank == r && k.iter <= it);
      if (!dead) alive.push_back(r);
    }
    for (const Event& e : excludes) {
      if (e.iter != it || std::find(present.begin(), present.end(), e.rank) == present.end())
        continue;
      // Everyone (the excluded rank too) calls shrink with the rank's current number.
      const int cur = int(std::find(present.begin(), present.end(), e.rank) - present.begin());
      chorusComm_t nc = nullptr;
      const chorusResult_t r = chorusCommShrink(comm, &cur, 1, &nc, nullptr, CHORUS_SHRINK_DEFAULT);
      if (r != chorusSuccess) {
        std::printf("SHRINKFAILED it=%d code=%s msg=%s\n", it, chorusGetErrorString(r),
                    chorusGetLastError(comm));
        return 1;
      }
      chorusCommDestroy(comm);
      comm = nc;
      present.erase(present.begin() + cur);
      if (orig == e.rank) {
        if (nc != nullptr) std::printf("MISMATCH it=%d excluded rank got a communicator\n", it);
        std::printf("EXCLUDED it=%d\n", it);
        comm = nullptr;
        break;
      }
      int nr = -1, nn = 0;
      chorusCommUserRank(comm, &nr);
      chorusCommCount(comm, &nn);
      std::printf("SHRUNK it=%d t=%.6f rank=%d nranks=%d\n", it, ctest::nowSeconds(), nr, nn);
      fresh = true;
      alive.erase(std::remove(alive.begin(), alive.end(), e.rank), alive.end());
    }
    if (comm == nullptr) break;
    for (size_t k = 0; k < count; ++k) {
      send[k] = int64_t(orig + 1) * 1000003 + int64_t(it) * 7 + int64_t(k);
      want[k] = 0;
      for (int r : alive) want[k] += int64_t(r + 1) * 1000003 + int64_t(it) * 7 + int64_t(k);
      recv[k] = -1;
    }
    const chorusResult_t r =
        chorusAllReduce(send.data(), recv.data(), count, chorusInt64, chorusSum, comm, nullptr);
    if (r == chorusSuccess) {
      if (fresh) std::printf("FIRSTOK it=%d t=%.6f\n", it, ctest::nowSeconds());
      fresh = false;
      for (size_t k = 0; k < count; ++k)
        if (recv[k] != want[k]) {
          std::printf("MISMATCH it=%d index=%zu got=%lld want=%lld\n", it, k, (long long)recv[k],
                      (long long)want[k]);
          ok = false;
          break;
        }
      ++it;
      continue;
    }
    std::printf("FAILED it=%d t=%.6f code=%s msg=%s\n", it, ctest::nowSeconds(),
                chorusGetErrorString(r), chorusGetLastError(comm));
    chorusComm_t nc = nullptr;
    const chorusResult_t s = chorusCommShrink(comm, nullptr, 0, &nc, nullptr, CHORUS_SHRINK_ABORT);
    if (s != chorusSuccess || nc == nullptr) {
      std::printf("SHRINKFAILED it=%d code=%s msg=%s\n", it, chorusGetErrorString(s),
                  chorusGetLastError(comm));
      chorusCommAbort(comm);
      return 1;
    }
    chorusCommAbort(comm);
    comm = nc;
    int nr = -1, nn = 0;
    chorusCommUserRank(comm, &nr);
    chorusCommCount(comm, &nn);
    std::printf("SHRUNK it=%d t=%.6f rank=%d nranks=%d\n", it, ctest::nowSeconds(), nr, nn);
    // Survivors may have failed at different iterations (a rank can finish an AllReduce that
    // another could not): they agree to resume at the earliest one, and the dead are those the
    // schedule kills by the latest.
    int64_t span[2] = {-int64_t(it), int64_t(it)}, agreed[2] = {0, 0};
    const chorusResult_t a =
        chorusAllReduce(span, agreed, 2, chorusInt64, chorusMax, comm, nullptr);
    if (a != chorusSuccess) {
      std::printf("SHRINKFAILED it=%d first collective: %s\n", it, chorusGetLastError(comm));
      return 1;
    }
    std::printf("FIRSTOK it=%d t=%.6f\n", it, ctest::nowSeconds());
    it = int(-agreed[0]);
    // A victim's last AllReduce before its kill may not have reached everyone (data still in
    // its TCP staging when it died): one killed up to two iterations after the latest failure
    // may be the one gone. The communicator's size tells which.
    std::vector<int> still;
    for (int late = 0; late <= 2; ++late) {
      still.clear();
      for (int rr : present) {
        bool dead = false;
        for (const Event& k : kills)
          dead = dead || (k.rank == rr && k.iter <= int(agreed[1]) + late);
        if (!dead) still.push_back(rr);
      }
      if (int(still.size()) == nn) break;
    }
    present = still;
    if (nn != int(present.size()) || nr < 0 || nr >= nn || present[size_t(nr)] != orig) {
      std::printf("MISMATCH it=%d new communicator rank %d of %d, expected %zu ranks\n", it, nr, nn,
                  present.size());
      ok = false;
      break;
    }
  }
  if (comm) chorusCommDestroy(comm);
  // Threads (the bootstrap roots) end once their ranks disconnect: allow them a moment.
  int threads = 0;
  for (int i = 0; i < 300; ++i) {
    threads = countThreads() - 1;  // minus the watchdog
    if (threads <= baseThreads) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("LEAKS threads=%d listeners=%d shm=%d\n", threads - baseThreads,
              int(ctest::listenersOf({getpid()}).size()), int(ctest::shmOf({getpid()}).size()));
  std::printf("DONE rank=%d ok=%d\n", orig, ok ? 1 : 0);
  return ok ? 0 : 1;
}
