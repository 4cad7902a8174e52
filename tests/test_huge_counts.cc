// Counts past 2^31 elements (the int32 limit of MPI's counts, and of read(2) and
// process_vm_readv(2) per call): AllReduce, Broadcast, AllGather and ReduceScatter of int8 on
// 2 ranks as threads, in place, on one buffer of 2^31 + 4 bytes per rank (4 GiB in all), every
// element checked against its formula, with the tuner's choice at these sizes. The same sizes as
// processes, by hand (12 GiB in all): `chorusrun -np 2 build/all_reduce_perf -b 2100M -e 2100M
// -d int8 -n 1 -w 0 -c 1` and broadcast_perf.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "threads.h"
#include "watchdog.h"

namespace {

constexpr int kRanks = 2;
constexpr size_t kBlock = (size_t(1) << 30) + 2;  // AllGather / ReduceScatter's count per rank
constexpr size_t kHuge = kBlock * kRanks;         // 2^31 + 4: past INT32_MAX
constexpr size_t kOdd = kHuge - 1;                // AllReduce and Broadcast: an odd count

// Rank r's input at index i: 0..64, so that the sum of two fits int8.
int8_t pattern(size_t i, int r) {
  return int8_t((i & 63) + size_t(r));
}

struct Unmap {
  void operator()(int8_t* p) const { munmap(p, kHuge); }
};

// The first index in [0, n) where p[i] != want(i), or n.
template <class Want>
size_t firstWrong(const int8_t* p, size_t n, Want want) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != want(i)) return i;
  return n;
}

TEST(HugeCounts, EveryCollectiveInPlacePastTwoToThe31) {
  ctest::Watchdog watchdog(300, "HugeCounts.EveryCollectiveInPlacePastTwoToThe31");
  std::vector<std::unique_ptr<int8_t, Unmap>> bufs;
  for (int r = 0; r < kRanks; ++r) {
    void* p = mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) GTEST_SKIP() << "no memory for 2 x 2 GiB";
    madvise(p, kHuge, MADV_HUGEPAGE);  // fewer page faults where THP is on "madvise"
    bufs.emplace_back(static_cast<int8_t*>(p));
  }
  std::vector<chorusComm_t> comms(kRanks, nullptr);
  ASSERT_EQ(chorusCommInitAll(comms.data(), kRanks, nullptr), chorusSuccess);
  chorusResult_t res[kRanks] = {};
  size_t wrong[kRanks] = {};
  auto check = [&](const char* what, size_t n) {
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(res[r], chorusSuccess)
          << what << ", rank " << r << ": " << chorusGetLastError(comms[size_t(r)]);
      EXPECT_EQ(wrong[r], n) << what << ", rank " << r << ": the first wrong element";
    }
  };

  ctest::runThreads(kRanks, [&](int r) {
    int8_t* p = bufs[size_t(r)].get();
    for (size_t i = 0; i < kOdd; ++i) p[i] = pattern(i, r);
    res[r] = chorusAllReduce(p, p, kOdd, chorusInt8, chorusSum, comms[size_t(r)], nullptr);
    wrong[r] = firstWrong(p, kOdd, [](size_t i) { return int8_t(2 * (i & 63) + 1); });
  });
  check("AllReduce", kOdd);

  ctest::runThreads(kRanks, [&](int r) {
    int8_t* p = bufs[size_t(r)].get();
    for (size_t i = 0; i < kOdd; ++i) p[i] = r == 1 ? pattern(i, 0) : int8_t(-1);
    res[r] = chorusBroadcast(p, p, kOdd, chorusInt8, /*root=*/1, comms[size_t(r)], nullptr);
    wrong[r] = firstWrong(p, kOdd, [](size_t i) { return pattern(i, 0); });
  });
  check("Broadcast from rank 1", kOdd);

  // In place (NCCL): rank r's input is block r of its output.
  ctest::runThreads(kRanks, [&](int r) {
    int8_t* p = bufs[size_t(r)].get();
    for (size_t i = 0; i < kHuge; ++i) p[i] = i / kBlock == size_t(r) ? pattern(i, r) : -1;
    res[r] =
        chorusAllGather(p + size_t(r) * kBlock, p, kBlock, chorusInt8, comms[size_t(r)], nullptr);
    wrong[r] = firstWrong(p, kHuge, [](size_t i) { return pattern(i, int(i / kBlock)); });
  });
  check("AllGather", kHuge);

  // In place (NCCL): rank r's output is block r of its input.
  ctest::runThreads(kRanks, [&](int r) {
    int8_t* p = bufs[size_t(r)].get();
    for (size_t i = 0; i < kHuge; ++i) p[i] = pattern(i, r);
    int8_t* out = p + size_t(r) * kBlock;
    res[r] = chorusReduceScatter(p, out, kBlock, chorusInt8, chorusSum, comms[size_t(r)], nullptr);
    const size_t at = size_t(r) * kBlock;  // the output's index in the inputs
    wrong[r] = firstWrong(out, kBlock, [at](size_t i) { return int8_t(2 * ((at + i) & 63) + 1); });
  });
  check("ReduceScatter", kBlock);

  for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
}

}  // namespace
