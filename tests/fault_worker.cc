// chorus_fault_worker: one rank of the fault-injection tests (tests/test_faults.cc), started by
// hand with the launcher variables (CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID, CHORUS_SECRET).
// The rank named by FAULT_RANK (default 1) meets one fault just before chorusCommInitFromEnv;
// every rank then runs FAULT_ITERS (default 3) checked AllReduce calls and reports.
//
//   chorus_fault_worker none              no fault (the reference run)
//   chorus_fault_worker alloc N           the N-th operator new from init on throws
//                                         std::bad_alloc, once (N = 0: count them only)
//   chorus_fault_worker nofile L          RLIMIT_NOFILE = L
//   chorus_fault_worker as MIB            RLIMIT_AS = the address space in use + MIB MiB
//   chorus_fault_worker nproc K UID       RLIMIT_NPROC = the threads this process has + K, then
//                                         setuid(UID) (the limit binds only a non-root user)
//   chorus_fault_worker shm               nothing here: the test runs the ranks over a small
//                                         tmpfs /dev/shm
//
// Output, one line on stdout:
//   RESULT rank=R stage=init|call|done code=NAME failed=F t=SECONDS allocs=A msg=MESSAGE
// (F: chorusCommGetFailedRank, -1 if none; t: seconds from the start of init to the result).
// Exit status: 0 a result was reported (success or a clean error), 2 wrong data or usage,
// 99 the watchdog (FAULT_WATCHDOG seconds, default 60) fired: a hang.
#include <chorus/chorus.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "result_name.h"
#include "timing.h"

namespace {

// The interposed allocator: counts operator new calls while armed; the fail-th one throws.
std::atomic<bool> gArmed{false};
std::atomic<long> gCount{0};
long gFailAt = 0;

void onAlarm(int) {
  const char msg[] = "WATCHDOG: the fault worker hung\n";
  ssize_t n = write(2, msg, sizeof(msg) - 1);
  (void)n;
  _exit(99);
}

long envLong(const char* name, long dflt) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : dflt;
}

long procStatusKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return strtol(line.c_str() + strlen(key), nullptr, 10);
  return 0;
}

[[noreturn]] void usage(const char* msg) {
  fprintf(stderr, "chorus_fault_worker: %s\n", msg);
  exit(2);
}

void setLimit(int resource, rlim_t value, const char* name) {
  rlimit rl{value, value};
  if (setrlimit(resource, &rl) != 0) {
    fprintf(stderr, "setrlimit(%s, %llu): %s\n", name, (unsigned long long)value, strerror(errno));
    exit(2);
  }
}

}  // namespace

void* operator new(size_t n) {
  if (gArmed.load(std::memory_order_relaxed) &&
      gCount.fetch_add(1, std::memory_order_relaxed) + 1 == gFailAt)
    throw std::bad_alloc();
  if (void* p = malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  free(p);
}
void operator delete[](void* p) noexcept {
  free(p);
}
void operator delete(void* p, size_t) noexcept {
  free(p);
}
void operator delete[](void* p, size_t) noexcept {
  free(p);
}

int main(int argc, char** argv) {
  if (argc < 2) usage("usage: chorus_fault_worker MODE [ARGS]");
  const std::string mode = argv[1];
  const int rank = int(envLong("CHORUS_RANK", 0));
  const bool faulty = rank == int(envLong("FAULT_RANK", 1));
  const long iters = envLong("FAULT_ITERS", 3);
  signal(SIGALRM, onAlarm);
  alarm(unsigned(envLong("FAULT_WATCHDOG", 60)));
  setvbuf(stdout, nullptr, _IOLBF, 0);

  // The worker's own memory first: only the library meets the fault.
  const size_t count = 65536;
  std::vector<float> send(count), recv(count);
  bool countAllocs = false;
  if (mode == "none" || mode == "shm") {
  } else if (mode == "alloc" && argc >= 3) {
    gFailAt = faulty ? strtol(argv[2], nullptr, 10) : 0;
    countAllocs = faulty;
  } else if (mode == "nofile" && argc >= 3) {
    if (faulty) setLimit(RLIMIT_NOFILE, rlim_t(strtol(argv[2], nullptr, 10)), "RLIMIT_NOFILE");
  } else if (mode == "as" && argc >= 3) {
    if (faulty) {
      const long inUseKb = procStatusKb("VmSize:");
      setLimit(RLIMIT_AS, rlim_t(inUseKb) * 1024 + rlim_t(strtol(argv[2], nullptr, 10)) * 1048576,
               "RLIMIT_AS");
    }
  } else if (mode == "nproc" && argc >= 4) {
    if (faulty) {
      const long threads = procStatusKb("Threads:");
      setLimit(RLIMIT_NPROC, rlim_t(threads + strtol(argv[2], nullptr, 10)), "RLIMIT_NPROC");
      const uid_t uid = uid_t(strtoul(argv[3], nullptr, 10));
      if (setgid(uid) != 0 || setuid(uid) != 0) {
        fprintf(stderr, "setuid(%u): %s\n", unsigned(uid), strerror(errno));
        exit(2);
      }
    }
  } else {
    usage("unknown mode or missing argument");
  }

  const double t0 = ctest::nowSeconds();
  auto report = [&](const char* stage, chorusResult_t r, chorusComm_t comm) {
    const bool armed = gArmed.exchange(false);  // the report itself must not fail
    int failed = -1;
    if (comm) chorusCommGetFailedRank(comm, &failed);
    // No allocation here: under RLIMIT_AS the heap may have no room left.
    const char* msg = r == chorusSuccess ? "" : chorusGetLastError(comm);
    printf("RESULT rank=%d stage=%s code=%s failed=%d t=%.3f allocs=%ld msg=%s\n", rank, stage,
           ctest::resultName(r), failed, ctest::nowSeconds() - t0, gCount.load(), msg);
    gArmed.store(armed);
  };

  int nranks = 0;
  if (countAllocs) gArmed.store(true);
  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitFromEnv(&comm);
  if (r != chorusSuccess) {
    report("init", r, nullptr);
    return 0;
  }
  chorusCommCount(comm, &nranks);
  for (long it = 0; it < iters; ++it) {
    for (size_t i = 0; i < count; ++i) send[i] = float(rank + 1) * float(i % 97 + it);
    r = chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm, nullptr);
    if (r != chorusSuccess) {
      report("call", r, comm);
      chorusCommAbort(comm);
      return 0;
    }
    const float ranksSum = float(nranks) * float(nranks + 1) / 2;
    for (size_t i = 0; i < count; ++i)
      if (recv[i] != ranksSum * float(i % 97 + it)) {
        gArmed.store(false);
        fprintf(stderr, "rank %d: wrong result at %zu: %g, expected %g\n", rank, i, recv[i],
                ranksSum * float(i % 97 + it));
        return 2;
      }
  }
  report("done", chorusSuccess, comm);
  gArmed.store(false);
  chorusCommDestroy(comm);
  return 0;
}
