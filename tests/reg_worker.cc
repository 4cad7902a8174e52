// chorus_reg_worker: one rank of the multi-process registered-buffer tests
// (tests/test_register.cc), started by hand with the launcher variables
// (tests/support/handstart.h).
//
//   chorus_reg_worker --mode memalloc|plain|unregistered|mixed   every rank runs regcheck::runAll
//                                                                 (mixed: rank 0 unregistered,
//                                                                 the others chorusMemAlloc)
//   chorus_reg_worker --mode kill     registered 1 MiB AllReduces until one fails; rank 1 kills
//                                     itself (SIGKILL) before its 20th call
// Output: "OK rank=R" or "ERROR rank=R msg=..." / "FAILED rank=R code=C msg=..." (kill).
#include <chorus/chorus.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "reg_check.h"

int main(int argc, char** argv) {
  std::string mode = "memalloc";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--mode") == 0) mode = argv[i + 1];
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::printf("ERROR rank=? msg=init failed: %s\n", chorusGetLastError(nullptr));
    return 2;
  }
  int rank = 0, n = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  if (mode == "kill") {
    const size_t count = 262144;
    regcheck::RankBuffers b(comm, regcheck::Buffers::kMemAlloc, count * 4);
    if (!b.error.empty()) {
      std::printf("ERROR rank=%d msg=%s\n", rank, b.error.c_str());
      return 2;
    }
    for (int it = 0;; ++it) {
      if (rank == 1 && it == 19) raise(SIGKILL);
      const chorusResult_t rc =
          chorusAllReduce(b.send, b.recv, count, chorusFloat32, chorusSum, comm, nullptr);
      if (rc != chorusSuccess) {
        std::printf("FAILED rank=%d code=%d msg=%s\n", rank, int(rc), chorusGetLastError(comm));
        std::fflush(stdout);
        chorusCommAbort(comm);
        return 3;
      }
      if (it > 100000) break;
    }
    std::printf("ERROR rank=%d msg=no call failed\n", rank);
    return 2;
  }
  regcheck::Buffers how = regcheck::Buffers::kMemAlloc;
  if (mode == "plain") how = regcheck::Buffers::kPlainRegistered;
  if (mode == "unregistered" || (mode == "mixed" && rank == 0))
    how = regcheck::Buffers::kUnregistered;
  const std::string err = regcheck::runAll(comm, rank, n, how);
  chorusCommDestroy(comm);
  if (!err.empty()) {
    std::printf("ERROR rank=%d msg=%s\n", rank, err.c_str());
    return 1;
  }
  std::printf("OK rank=%d\n", rank);
  return 0;
}
