// handoff_bench: the cost of one hand-off between two ranks through Chorus against the physical
// floor, a spin-flag ping-pong on a shared cache line (docs/performance.md, "Small messages").
//
// Two processes (fork), pinned to cores 0 and 1 when the machine has two or more (--no-pin:
// left where the scheduler puts them, as ranks started by hand or by torchrun run):
//   floor        a flag in a MAP_SHARED page, bounced back and forth: one-way = round trip / 2;
//   send/recv    chorusSend / chorusRecv of 8 bytes, bounced the same way: one-way = round trip /
//   2; allreduce    chorusAllReduce of 8 bytes in a loop: time per call (one hand-off each way, at
//                the same time);
//   broadcast    chorusBroadcast of 8 bytes from rank 0 in a loop: time per call (the root can run
//                ahead by the FIFO depth).
// Each figure is the best and the median of --reps repetitions of --iters iterations, in
// microseconds. Usage: handoff_bench [--iters N (100000)] [--reps N (7)] [--no-pin]
//
// handoff_bench --watch N: the machine's state, N times in a row (docs/performance.md, "Why
// the medians spread"): per round the floor (50 round trips), a 256 KiB line-by-line read by
// rank 1 of lines rank 0 has just written (dirty in the other core's cache), a 256 KiB read of
// lines written once at the start (clean), and one 512 KiB chorusReduceScatter (float32); the
// medians of 10 blocks of rounds, in the order they ran.
#include <getopt.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "chorus/chorus.h"

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Line {
  std::atomic<uint64_t> v;
};
constexpr size_t kWatchBytes = 256 << 10;  // --watch: the bytes read across per round
constexpr int kWatchMax = 100000;

struct Shared {
  Line ping, pong;  // the floor's two flags, one cache line each
  Line go;          // start barrier of the floor test
  Line written;     // --watch: rank 0's round number once it has written `dirty`
  double results[4][64];
  chorusUniqueId id;
  double watch[kWatchMax][4];  // --watch: floor, dirty read, clean read, ReduceScatter (us)
  alignas(64) char dirty[kWatchBytes];
  alignas(64) char clean[kWatchBytes];
};

// Whether the two processes pin themselves: not with --no-pin, nor on fewer than two CPUs.
bool gPin = true;

void pin(int cpu) {
  if (!gPin) return;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof(s), &s);
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

double usSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// One-way hand-off through a bare flag: rank 0 writes ping = i, rank 1 answers pong = i.
double floorRun(Shared* sh, int rank, int iters, uint64_t base) {
  const auto t0 = Clock::now();
  for (uint64_t i = base + 1; i <= base + uint64_t(iters); ++i) {
    if (rank == 0) {
      sh->ping.v.store(i, std::memory_order_release);
      while (sh->pong.v.load(std::memory_order_acquire) != i) relax();
    } else {
      while (sh->ping.v.load(std::memory_order_acquire) != i) relax();
      sh->pong.v.store(i, std::memory_order_release);
    }
  }
  return usSince(t0) / iters / 2;
}

void meet(Shared* sh, uint64_t* n) {  // both processes: a barrier on `go`
  *n += 2;
  sh->go.v.fetch_add(1);
  while (sh->go.v.load() < *n) relax();
}

bool ok(chorusResult_t r, const char* what) {
  if (r == chorusSuccess) return true;
  fprintf(stderr, "handoff_bench: %s: %s\n", what, chorusGetErrorString(r));
  return false;
}

int runRank(Shared* sh, int rank, int iters, int reps) {
  pin(rank);
  // The floor first (both processes meet at `go` before each repetition).
  uint64_t met = 0;
  for (int r = 0; r < reps; ++r) {
    meet(sh, &met);
    const double t = floorRun(sh, rank, iters, uint64_t(r) * uint64_t(iters));
    if (rank == 0) sh->results[0][r] = t;
  }
  chorusComm_t comm;
  if (!ok(chorusCommInitRank(&comm, 2, sh->id, rank), "chorusCommInitRank")) return 1;
  uint64_t send = uint64_t(rank) + 1, recv = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (rank == 0) {
        if (!ok(chorusSend(&send, 1, chorusUint64, 1, comm, nullptr), "chorusSend") ||
            !ok(chorusRecv(&recv, 1, chorusUint64, 1, comm, nullptr), "chorusRecv"))
          return 1;
      } else {
        if (!ok(chorusRecv(&recv, 1, chorusUint64, 0, comm, nullptr), "chorusRecv") ||
            !ok(chorusSend(&send, 1, chorusUint64, 0, comm, nullptr), "chorusSend"))
          return 1;
      }
    }
    if (rank == 0) sh->results[1][r] = usSince(t0) / iters / 2;
    if (recv != uint64_t(2 - rank)) {
      fprintf(stderr, "handoff_bench: rank %d received %llu\n", rank, (unsigned long long)recv);
      return 1;
    }
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      if (!ok(chorusAllReduce(&send, &recv, 1, chorusUint64, chorusSum, comm, nullptr),
              "chorusAllReduce"))
        return 1;
    if (rank == 0) sh->results[2][r] = usSince(t0) / iters;
    if (recv != 3) {
      fprintf(stderr, "handoff_bench: AllReduce gave %llu, not 3\n", (unsigned long long)recv);
      return 1;
    }
    // Broadcast: both ranks time their loop; a final AllReduce makes the receiver's end count.
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      if (!ok(chorusBroadcast(&send, &recv, 1, chorusUint64, 0, comm, nullptr), "chorusBroadcast"))
        return 1;
    if (!ok(chorusAllReduce(&send, &recv, 1, chorusUint64, chorusSum, comm, nullptr), "sync"))
      return 1;
    if (rank == 0) sh->results[3][r] = usSince(t0) / iters;
  }
  return ok(chorusCommDestroy(comm), "chorusCommDestroy") ? 0 : 1;
}

// Reads every 8-byte word of `p` (volatile: each load is done); returns their sum.
uint64_t readAll(const char* p, size_t bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes; i += 8) sum += *reinterpret_cast<const volatile uint64_t*>(p + i);
  return sum;
}

int watchRank(Shared* sh, int rank, int rounds) {
  pin(rank);
  chorusComm_t comm;
  if (!ok(chorusCommInitRank(&comm, 2, sh->id, rank), "chorusCommInitRank")) return 1;
  std::vector<float> send(2 * 65536, float(rank + 1)), recv(65536);
  uint64_t n = 0, flag = 0, sink = 0;
  const int warm = 20;
  for (int it = 0; it < rounds + warm; ++it) {
    double t[4];
    meet(sh, &n);
    t[0] = floorRun(sh, rank, 50, flag);
    flag += 50;
    meet(sh, &n);
    auto t0 = Clock::now();
    if (rank == 0) {
      memset(sh->dirty, it & 0xff, kWatchBytes);
      sh->written.v.store(uint64_t(it) + 1, std::memory_order_release);
    } else {
      while (sh->written.v.load(std::memory_order_acquire) != uint64_t(it) + 1) relax();
      sink += readAll(sh->dirty, kWatchBytes);
    }
    t[1] = usSince(t0);
    meet(sh, &n);
    t0 = Clock::now();
    if (rank == 1) sink += readAll(sh->clean, kWatchBytes);
    t[2] = usSince(t0);
    meet(sh, &n);
    t0 = Clock::now();
    if (!ok(chorusReduceScatter(send.data(), recv.data(), 65536, chorusFloat32, chorusSum, comm,
                                nullptr),
            "chorusReduceScatter"))
      return 1;
    t[3] = usSince(t0);
    if (recv[0] != 3.0f) {
      fprintf(stderr, "handoff_bench: ReduceScatter gave %g, not 3\n", double(recv[0]));
      return 1;
    }
    if (it < warm) continue;
    // The reads are rank 1's, the ReduceScatter rank 0's (its call ends when rank 1's data
    // has arrived), the floor rank 0's (the round trip).
    double* w = sh->watch[it - warm];
    if (rank == 0) {
      w[0] = t[0];
      w[3] = t[3];
    } else {
      w[1] = t[1];
      w[2] = t[2];
    }
  }
  if (sink == 1) puts("");  // keeps the reads
  return ok(chorusCommDestroy(comm), "chorusCommDestroy") ? 0 : 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The rounds in 10 blocks in the order they ran, each block's medians: a state of the
// machine that lasts longer than a block shows as rows where the columns move together.
void printWatch(const Shared* sh, int rounds) {
  const int blocks = std::min(rounds, 10);
  printf("# handoff_bench --watch: %d rounds in %d blocks in order, each block's medians in us\n",
         rounds, blocks);
  printf("%-7s %8s %14s %14s %22s\n", "rounds", "floor", "dirty 256 KiB", "clean 256 KiB",
         "ReduceScatter 512 KiB");
  for (int b = 0; b < blocks; ++b) {
    const int lo = rounds * b / blocks, hi = rounds * (b + 1) / blocks;
    std::vector<double> c[4];
    for (int i = lo; i < hi; ++i)
      for (int k = 0; k < 4; ++k) c[k].push_back(sh->watch[i][k]);
    printf("%-7d %8.3f %14.1f %14.1f %22.1f\n", hi - lo, median(c[0]), median(c[1]), median(c[2]),
           median(c[3]));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 100000, reps = 7, watch = 0;
  static const option opts[] = {
      {"iters", required_argument, nullptr, 'n'}, {"reps", required_argument, nullptr, 'r'},
      {"watch", required_argument, nullptr, 'w'}, {"no-pin", no_argument, nullptr, 'p'},
      {"help", no_argument, nullptr, 'h'},        {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "n:r:w:h", opts, nullptr)) != -1;) {
    if (c == 'w') {
      watch = std::clamp(atoi(optarg), 1, kWatchMax);
    } else if (c == 'n') {
      iters = std::max(1, atoi(optarg));
    } else if (c == 'r') {
      reps = std::clamp(atoi(optarg), 1, 64);
    } else if (c == 'p') {
      gPin = false;
    } else {
      fprintf(stderr, "usage: %s [--iters N (100000)] [--reps N (7)] [--no-pin] | --watch ROUNDS\n",
              argv[0]);
      return c == 'h' ? 0 : 2;
    }
  }
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) gPin = false;
  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    perror("handoff_bench: mmap");
    return 1;
  }
  Shared* sh = new (mem) Shared{};
  memset(sh->clean, 1, kWatchBytes);
  if (!ok(chorusGetUniqueId(&sh->id), "chorusGetUniqueId")) return 1;
  fflush(stdout);
  const pid_t child = fork();
  if (child < 0) {
    perror("handoff_bench: fork");
    return 1;
  }
  if (child == 0) _exit(watch > 0 ? watchRank(sh, 1, watch) : runRank(sh, 1, iters, reps));
  const int mine = watch > 0 ? watchRank(sh, 0, watch) : runRank(sh, 0, iters, reps);
  int status = 0;
  waitpid(child, &status, 0);
  if (mine != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  if (watch > 0) {
    printWatch(sh, watch);
    return 0;
  }
  const char* names[4] = {"floor (spin flag, one way)", "send/recv 8 B (one way)",
                          "allreduce 8 B (per call)", "broadcast 8 B (per call)"};
  printf("# handoff_bench: 2 processes (%s), %d iterations x %d repetitions, times in us\n",
         gPin ? "pinned to cores 0 and 1" : "not pinned", iters, reps);
  printf("%-28s %8s %8s %10s\n", "what", "best", "median", "best/floor");
  double floorBest = 0;
  for (int k = 0; k < 4; ++k) {
    std::vector<double> v(sh->results[k], sh->results[k] + reps);
    std::sort(v.begin(), v.end());
    if (k == 0) floorBest = v[0];
    printf("%-28s %8.3f %8.3f %10.2f\n", names[k], v[0], v[size_t(reps) / 2], v[0] / floorBest);
  }
  return 0;
}
