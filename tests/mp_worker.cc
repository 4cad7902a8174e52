// chorus_mp_worker: one rank of a multi-process test, started as
//
//   chorusrun -np N chorus_mp_worker [options]
//
// It joins the job with chorusCommInitFromEnv, runs the correctness matrix (tests/support) on
// its communicator, prints its failures and exits non-zero if there was any.
//
// Options (lists are comma separated):
//   --colls NAMES     collectives (AllReduce,Broadcast,...; default all)
//   --types NAMES     int8,uint8,int32,uint32,int64,uint64,float16,bfloat16,float32,float64
//   --ops NAMES       sum,prod,min,max,avg
//   --counts LIST     default 0,1,7,1000,1048579
//   --big POLICY      none|minimal|subset|full (default subset; see tests/support/matrix.h)
//   --seed N          input seed
//   --stream          run on a created stream instead of the null stream
//   --split           also check chorusCommSplit (odd/even, reversed keys, NOCOLOR)
//   --fail-rank R     rank R exits with status 3 at the end (tests the launcher)
//   --crash-rank R    rank R kills itself with SIGKILL right after init (tests teardown)
//   --timeout SEC     watchdog: exit 99 if not done by then (default 500)
//   --resources       print one line "resources rank=R init_s=S threads=T shm_bytes=B
//                     shm_files=F shm_resident=B devshm_grown=B shm_largest=B" after the matrix:
//                     init's time, this process's threads, and the Chorus shared memory it maps
//                     and has touched (/proc/self/smaps, /dev/shm/chorus*), how much /dev/shm's
//                     use grew since this rank started (the whole node's segments, once all
//                     exist), and its largest single mapping (its own segment)
//   --hold FILE       before finalizing, wait until FILE exists (within --timeout): keeps the
//                     job's ranks, and the CPUs they bound themselves to, alive meanwhile
//   --huge            instead of the matrix, the check of counts past 2^31 on 2 ranks, 2 GiB
//                     each (tests/huge_check.h)
#include <chorus/chorus.h>
#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "huge_check.h"
#include "matrix.h"
#include "result_name.h"
#include "test_types.h"
#include "timing.h"
#include "values.h"
#include "watchdog.h"

namespace {

using namespace ctest;

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    const std::string item =
        s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!item.empty()) out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "chorus_mp_worker: %s\n", msg.c_str());
  std::exit(2);
}

struct Options {
  MatrixOptions matrix;
  bool stream = false;
  bool split = false;
  int failRank = -1;
  int crashRank = -1;
  double timeout = 500;
  std::string hold;        // --hold FILE
  bool printCpus = false;  // print the CPUs this rank's thread may use once the communicator exists
  bool resources = false;
  bool huge = false;  // the past-2^31 check (tests/huge_check.h) instead of the matrix, 2 ranks
};

// Bytes in use on /dev/shm (every process's, unlinked but still mapped segments included).
size_t devShmUsed() {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return 0;
  return size_t(v.f_blocks - v.f_bfree) * v.f_frsize;
}

// This process's thread count (/proc/self/status).
int threadCount() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr)
    if (std::sscanf(line, "Threads: %d", &n) == 1) break;
  std::fclose(f);
  return n;
}

// Chorus's shared memory (/dev/shm/chorus*) as this process sees it (/proc/self/smaps): bytes
// mapped, bytes of it resident (pages touched), and the distinct files.
struct ShmMapped {
  size_t bytes = 0, residentBytes = 0, files = 0, largest = 0;
};
ShmMapped chorusShmMapped() {
  ShmMapped m;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return m;
  char line[1024];
  bool inChorus = false;
  std::vector<std::string> files;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    size_t kb = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      const char* path = std::strstr(line, "/dev/shm/chorus");
      inChorus = path != nullptr;
      if (!inChorus) continue;
      m.bytes += hi - lo;
      m.largest = std::max(m.largest, size_t(hi - lo));
      std::string name(path);
      while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
      if (std::find(files.begin(), files.end(), name) == files.end()) files.push_back(name);
    } else if (inChorus && std::sscanf(line, "Rss: %zu kB", &kb) == 1) {
      m.residentBytes += kb << 10;
    }
  }
  std::fclose(f);
  m.files = files.size();
  return m;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--colls") {
      o.matrix.colls.clear();
      for (const auto& name : splitList(next())) {
        Coll c;
        if (!parseColl(name, &c)) usage("unknown collective " + name);
        o.matrix.colls.push_back(c);
      }
    } else if (a == "--types") {
      for (const auto& name : splitList(next())) {
        bool found = false;
        for (auto t : kAllTypes) {
          if (name == typeName(t)) {
            o.matrix.types.push_back(t);
            found = true;
          }
        }
        if (!found) usage("unknown type " + name);
      }
    } else if (a == "--ops") {
      for (const auto& name : splitList(next())) {
        bool found = false;
        for (auto op : kAllOps) {
          if (name == opName(op)) {
            o.matrix.ops.push_back(op);
            found = true;
          }
        }
        if (!found) usage("unknown op " + name);
      }
    } else if (a == "--counts") {
      o.matrix.counts.clear();
      for (const auto& c : splitList(next())) o.matrix.counts.push_back(std::stoull(c));
    } else if (a == "--big") {
      if (!parseBigPolicy(next(), &o.matrix.big)) usage("unknown --big policy");
    } else if (a == "--seed") {
      o.matrix.seed = std::stoull(next());
    } else if (a == "--stream") {
      o.stream = true;
    } else if (a == "--split") {
      o.split = true;
    } else if (a == "--fail-rank") {
      o.failRank = std::stoi(next());
    } else if (a == "--crash-rank") {
      o.crashRank = std::stoi(next());
    } else if (a == "--timeout") {
      o.timeout = std::stod(next());
    } else if (a == "--hold") {
      o.hold = next();
    } else if (a == "--print-cpus") {
      o.printCpus = true;
    } else if (a == "--resources") {
      o.resources = true;
    } else if (a == "--huge") {
      o.huge = true;
    } else {
      usage("unknown option " + a);
    }
  }
  return o;
}

// Split checks: odd/even with reversed keys, then NOCOLOR for ranks 0, 3, 6, ...
void checkSplits(chorusComm_t comm, int rank, int nranks, MatrixResult& res, size_t maxMessages) {
  auto failure = [&](const std::string& m) {
    res.fail("[rank " + std::to_string(rank) + "] split: " + m, maxMessages);
  };
  // Odd/even, new rank order descending old rank.
  chorusComm_t half = nullptr;
  chorusResult_t r = chorusCommSplit(comm, rank % 2, nranks - rank, &half, nullptr);
  if (r != chorusSuccess || half == nullptr) {
    failure(std::string("odd/even split returned ") + resultName(r));
    return;
  }
  std::vector<int32_t> members;
  for (int k = nranks - 1; k >= 0; --k) {
    if (k % 2 == rank % 2) members.push_back(k);
  }
  int count = -1, newRank = -1;
  chorusCommCount(half, &count);
  chorusCommUserRank(half, &newRank);
  if (count != static_cast<int>(members.size())) failure("count " + std::to_string(count));
  std::vector<int32_t> gathered(members.size(), -1);
  int32_t mine = rank;
  r = chorusAllGather(&mine, gathered.data(), 1, chorusInt32, half, nullptr);
  if (r != chorusSuccess) failure(std::string("AllGather on the half returned ") + resultName(r));
  if (gathered != members) failure("AllGather on the half: members out of order");
  if (newRank < 0 || newRank >= static_cast<int>(members.size()) || members[newRank] != rank) {
    failure("new rank " + std::to_string(newRank));
  }
  // NOCOLOR.
  chorusComm_t some = reinterpret_cast<chorusComm_t>(uintptr_t{1});
  const bool out = rank % 3 == 0;
  r = chorusCommSplit(comm, out ? CHORUS_SPLIT_NOCOLOR : 0, rank, &some, nullptr);
  if (r != chorusSuccess) failure(std::string("NOCOLOR split returned ") + resultName(r));
  if (out && some != nullptr) failure("a NOCOLOR rank got a communicator");
  if (!out && r == chorusSuccess &&
      (some == nullptr || some == reinterpret_cast<chorusComm_t>(uintptr_t{1}))) {
    failure("no communicator from the NOCOLOR split");
  } else if (!out && r == chorusSuccess) {
    int c = -1;
    chorusCommCount(some, &c);
    const int expected = nranks - (nranks + 2) / 3;
    if (c != expected) failure("NOCOLOR split count " + std::to_string(c));
    chorusCommDestroy(some);
  }
  chorusCommDestroy(half);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  Watchdog watchdog(opt.timeout, "chorus_mp_worker");
  const double start = nowSeconds();
  const size_t shmUsedBefore = opt.resources ? devShmUsed() : 0;

  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitFromEnv(&comm);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "chorusCommInitFromEnv returned %s: %s\n", resultName(r),
                 chorusGetLastError(nullptr));
    return 2;
  }
  const double initSeconds = nowSeconds() - start;
  int rank = -1, nranks = -1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &nranks);
  if (opt.printCpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::string list;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
    std::printf("cpus rank=%d list=%s\n", rank, list.c_str());
    std::fflush(stdout);
  }
  setValueRanks(nranks);  // inputs whose sums stay exact on this many ranks
  MatrixResult res;
  const char* envRank = std::getenv("CHORUS_RANK");
  const char* envSize = std::getenv("CHORUS_NRANKS");
  if (envRank != nullptr && std::atoi(envRank) != rank) {
    res.fail("rank " + std::to_string(rank) + " but CHORUS_RANK=" + envRank, 20);
  }
  if (envSize != nullptr && std::atoi(envSize) != nranks) {
    res.fail("nranks " + std::to_string(nranks) + " but CHORUS_NRANKS=" + envSize, 20);
  }
  if (rank == opt.crashRank) {
    std::printf("rank %d: killing myself (--crash-rank)\n", rank);
    std::fflush(stdout);
    std::raise(SIGKILL);
  }

  chorusStream_t stream = nullptr;
  if (opt.stream && (r = chorusStreamCreate(&stream)) != chorusSuccess) {
    std::fprintf(stderr, "chorusStreamCreate returned %s\n", resultName(r));
    return 2;
  }
  if (opt.huge) {
    int8_t* p = nranks == huge::kRanks ? huge::map() : nullptr;
    const std::string problem =
        p == nullptr ? "--huge: needs 2 ranks and 2 GiB each" : huge::run(comm, rank, p);
    if (!problem.empty()) res.fail(problem, opt.matrix.maxMessages);
    if (p != nullptr) huge::unmap(p);
  } else {
    res.merge(runMatrix(comm, rank, nranks, opt.matrix, stream), opt.matrix.maxMessages);
  }
  if (stream != nullptr) chorusStreamDestroy(stream);
  if (opt.split) checkSplits(comm, rank, nranks, res, opt.matrix.maxMessages);
  if (opt.resources) {
    const ShmMapped shm = chorusShmMapped();
    std::printf(
        "resources rank=%d init_s=%.3f threads=%d shm_bytes=%zu shm_files=%zu shm_resident=%zu "
        "devshm_grown=%zd shm_largest=%zu\n",
        rank, initSeconds, threadCount(), shm.bytes, shm.files, shm.residentBytes,
        ssize_t(devShmUsed()) - ssize_t(shmUsedBefore), shm.largest);
    std::fflush(stdout);
  }

  while (!opt.hold.empty() && access(opt.hold.c_str(), F_OK) != 0) usleep(10000);  // watchdog-bound

  if ((r = chorusCommFinalize(comm)) != chorusSuccess) {
    res.fail(std::string("chorusCommFinalize returned ") + resultName(r), opt.matrix.maxMessages);
  }
  if ((r = chorusCommDestroy(comm)) != chorusSuccess) {
    res.fail(std::string("chorusCommDestroy returned ") + resultName(r), opt.matrix.maxMessages);
  }
  std::printf("rank %d/%d: %s (%.1f s)\n", rank, nranks, res.summary().c_str(),
              nowSeconds() - start);
  std::fflush(stdout);
  if (rank == opt.failRank) return 3;
  return res.failures == 0 ? 0 : 1;
}
