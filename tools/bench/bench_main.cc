// The nccl-tests-style benchmark programs (all_reduce_perf, broadcast_perf, ...): one main,
// built once per collective with CHORUS_BENCH_NAME set to the program's name (CMakeLists.txt);
// the collective is the entry of that name in common/collectives.cc.
#include <cstdio>

#include "collectives.h"
#include "harness.h"

#ifndef CHORUS_BENCH_NAME
#error "CHORUS_BENCH_NAME (the program's name) must be defined"
#endif

int main(int argc, char** argv) {
  const chorus_bench::CollDesc* d = chorus_bench::findCollective(CHORUS_BENCH_NAME);
  if (d == nullptr) {
    std::fprintf(stderr, "%s: no such collective in the benchmark table\n", CHORUS_BENCH_NAME);
    return 2;
  }
  return chorus_bench::benchMain(argc, argv, *d);
}
