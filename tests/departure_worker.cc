// chorus_departure_worker: one rank of the departure tests (tests/test_departure.cc), started by
// hand with launcher variables (CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID, CHORUS_SECRET;
// CHORUS_HOSTID to emulate nodes).
//
// Ranks leave at different moments, as they do at the end of a job: a rank that finished its
// last call destroys its communicator and exits while others still finish theirs. That is no
// failure; a rank that makes one call more than the others is one, and must fail (not hang).
//
//   chorus_departure_worker --coll allreduce|broadcast [--iters N] [--count N]
//                           [--slow R] [--slow-sec S] [--extra R] [--timeout S]
//                           [--leave destroy|exit|_exit]
//
//   --iters N     calls (default 20); float32 sum / broadcast from root 0, checked every time
//   --slow R      rank R sleeps --slow-sec (default 1) before its last call: ranks that are done
//                 leave while R has not even started, and ranks after R wait for it
//   --extra R     rank R makes one more AllReduce after the others destroyed their communicators:
//                 it must fail with chorusRemoteError within --timeout
//   --timeout S   watchdog: exit 99 if not done by then (default 60)
//   --leave HOW   after the last call: destroy the communicator, then return from main (the
//                 default); exit: call exit() without destroying it (a C program that forgets
//                 to); _exit: call _exit() without destroying it (as a Python multiprocessing
//                 child started by fork or forkserver ends: os._exit, no teardown)
//
// Output: DONE rank=R (every call right), MISMATCH it=I index=K got=G want=W,
// FAILED it=I code=NAME msg=..., EXTRA code=NAME seconds=T msg=...
// Exit status: 0 as expected, 1 otherwise, 99 watchdog.
#include <chorus/chorus.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "timing.h"

namespace {

// Exact in float32: small integers.
float input(int rank, int it, size_t k) {
  return float((rank + 1) * 3 + it * 5 + int(k % 97));
}

}  // namespace

int main(int argc, char** argv) {
  std::string coll = "allreduce";
  int iters = 20, slow = -1, extra = -1;
  size_t count = 3000;
  double slowSec = 1, timeout = 60;
  std::string leave = "destroy";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--coll") {
      coll = v;
    } else if (a == "--iters") {
      iters = std::atoi(v);
    } else if (a == "--count") {
      count = size_t(std::atoll(v));
    } else if (a == "--slow") {
      slow = std::atoi(v);
    } else if (a == "--slow-sec") {
      slowSec = std::atof(v);
    } else if (a == "--extra") {
      extra = std::atoi(v);
    } else if (a == "--timeout") {
      timeout = std::atof(v);
    } else if (a == "--leave" &&
               (!strcmp(v, "destroy") || !strcmp(v, "exit") || !strcmp(v, "_exit"))) {
      leave = v;
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::thread([timeout] {
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout));
    std::printf("WATCHDOG after %.0f s\n", timeout);
    std::fflush(stdout);
    std::_Exit(99);
  }).detach();

  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::printf("INITFAILED %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int rank = -1, n = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const bool bcast = coll == "broadcast";
  std::vector<float> send(count), recv(count);
  bool ok = true;
  for (int it = 0; it < iters && ok; ++it) {
    if (rank == slow && it == iters - 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(slowSec));
    for (size_t k = 0; k < count; ++k) send[k] = input(rank, it, k), recv[k] = -1;
    const chorusResult_t r =
        bcast ? chorusBroadcast(send.data(), recv.data(), count, chorusFloat32, 0, comm, nullptr)
              : chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm,
                                nullptr);
    if (r != chorusSuccess) {
      std::printf("FAILED it=%d code=%s msg=%s\n", it, chorusGetErrorString(r),
                  chorusGetLastError(comm));
      ok = false;
      break;
    }
    for (size_t k = 0; k < count; ++k) {
      float want = 0;
      if (bcast)
        want = input(0, it, k);
      else
        for (int q = 0; q < n; ++q) want += input(q, it, k);
      if (recv[k] != want) {
        std::printf("MISMATCH it=%d index=%zu got=%g want=%g\n", it, k, double(recv[k]),
                    double(want));
        ok = false;
        break;
      }
    }
  }
  if (ok && rank == extra) {
    // The others destroy and exit right after their last call: give them a moment to be gone.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double t0 = ctest::nowSeconds();
    const chorusResult_t r =
        chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm, nullptr);
    std::printf("EXTRA code=%s seconds=%.3f msg=%s\n", chorusGetErrorString(r),
                ctest::nowSeconds() - t0, r == chorusSuccess ? "" : chorusGetLastError(comm));
    ok = r == chorusRemoteError;
  }
  if (leave == "destroy") chorusCommDestroy(comm);
  if (ok) std::printf("DONE rank=%d\n", rank);
  std::fflush(stdout);
  if (leave == "exit") std::exit(ok ? 0 : 1);
  if (leave == "_exit") _exit(ok ? 0 : 1);
  return ok ? 0 : 1;
}
