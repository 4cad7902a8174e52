// Counts past 2^31 elements (the int32 limit of MPI's counts, and of read(2) and
// process_vm_readv(2) per call): AllReduce, Broadcast, AllGather and ReduceScatter of int8 on
// 2 ranks, in place, on one buffer of 2^31 + 4 bytes per rank (4 GiB in all), every element
// checked against its formula (tests/huge_check.h), with the tuner's choice at these sizes: as
// threads of one process, and as processes started by hand beside a busy process (where the peers'
// buffers are read by cross-memory attach, whose calls move at most 2^31 - 4096 bytes each).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "handstart.h"
#include "huge_check.h"
#include "launch.h"
#include "process.h"
#include "scoped_env.h"
#include "threads.h"
#include "watchdog.h"

namespace {

struct Unmap {
  void operator()(int8_t* p) const { huge::unmap(p); }
};

TEST(HugeCounts, EveryCollectiveInPlacePastTwoToThe31) {
  ctest::Watchdog watchdog(300, "HugeCounts.EveryCollectiveInPlacePastTwoToThe31");
  std::vector<std::unique_ptr<int8_t, Unmap>> bufs;
  for (int r = 0; r < huge::kRanks; ++r) {
    int8_t* p = huge::map();
    if (p == nullptr) GTEST_SKIP() << "no memory for 2 x 2 GiB";
    bufs.emplace_back(p);
  }
  std::vector<chorusComm_t> comms(huge::kRanks, nullptr);
  ASSERT_EQ(chorusCommInitAll(comms.data(), huge::kRanks, nullptr), chorusSuccess);
  std::string problem[huge::kRanks];
  ctest::runThreads(huge::kRanks, [&](int r) {
    problem[r] = huge::run(comms[size_t(r)], r, bufs[size_t(r)].get());
  });
  for (int r = 0; r < huge::kRanks; ++r) EXPECT_EQ(problem[r], "") << "rank " << r;
  for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
}

// The same as two processes (chorus_mp_worker --huge, 2 GiB each), AllReduce, Broadcast and
// AllGather by the single copy (cross-memory attach: the tuner picks the FIFO algorithms at these
// sizes, which the threads above run), ReduceScatter by the tuner's choice. The ranks start as a
// user's job script starts them (the launcher variables, no chorusrun, no pinning) beside a busy
// process on the same cores, so that a rank loses its core in the middle of a copy.
TEST(HugeCounts, EveryCollectiveInPlacePastTwoToThe31AsProcessesByHandBesideABusyProcess) {
  const ctest::BusyProcesses busy(1);
  ASSERT_EQ(busy.error(), "");
  std::vector<ctest::HandRank> ranks =
      ctest::startRanksByHand(MP_WORKER_PATH, huge::kRanks, 1, {"--huge", "--timeout", "400"},
                              "huge", {"CHORUS_ALGO=allreduce:cma;broadcast:cma;allgather:cma"});
  ctest::waitRanksByHand(ranks, 450);
  for (int r = 0; r < huge::kRanks; ++r) {
    const std::string out = ranks[size_t(r)].output();
    EXPECT_EQ(ranks[size_t(r)].status, 0) << "rank " << r << ":\n" << ctest::outputTail(out);
  }
}

}  // namespace
