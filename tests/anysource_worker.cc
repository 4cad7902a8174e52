// chorus_anysource_worker: one rank of the multi-process any-source receive tests
// (tests/test_anysource.cc), started by chorusrun (optionally with --nodes, so that the messages
// cross TCP). It runs the check of tests/anysource_check.h.
//
//   chorus_anysource_worker [--count N] [--rounds N] [--per-round N] [--coll-every N]
//                           [--group 0|1] [--timeout S]
//
// Output: DONE rank=R when every message was right, else FAILED rank=R <why>. Exit status 0,
// 1 on a failure, 99 when the watchdog (--timeout, default 60 s) fires.
#include <chorus/chorus.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "anysource_check.h"
#include "watchdog.h"

int main(int argc, char** argv) {
  anysource::Options o;
  double timeout = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--count") {
      o.count = size_t(std::atoll(v));
    } else if (a == "--rounds") {
      o.rounds = std::atoi(v);
    } else if (a == "--per-round") {
      o.perRound = std::atoi(v);
    } else if (a == "--coll-every") {
      o.collEvery = std::atoi(v);
    } else if (a == "--group") {
      o.group = std::atoi(v) != 0;
    } else if (a == "--timeout") {
      timeout = std::atof(v);
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  ctest::Watchdog watchdog(timeout, "chorus_anysource_worker: not finished");
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::printf("FAILED rank=? init: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int rank = -1, n = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const std::string why = anysource::run(comm, rank, n, o);
  if (why.empty())
    std::printf("DONE rank=%d\n", rank);
  else
    std::printf("FAILED rank=%d %s\n", rank, why.c_str());
  std::fflush(stdout);
  chorusCommDestroy(comm);
  return why.empty() ? 0 : 1;
}
