// Counts past 2^31 elements (the int32 limit of MPI's counts, and of read(2) and
// process_vm_readv(2) per call): the check one rank of two runs, shared by the threaded test
// (tests/test_huge_counts.cc) and the multi-process worker (tests/mp_worker.cc, --huge).
//
// AllReduce, Broadcast, AllGather and ReduceScatter of int8, in place, on one buffer of
// 2^31 + 4 bytes per rank, one after the other with the tuner's choice at these sizes; each rank
// fills its buffer just before each call (the previous call must have let go of it) and checks
// every element of the result against its formula.
#pragma once

#include <chorus/chorus.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace huge {

constexpr int kRanks = 2;
constexpr size_t kBlock = (size_t(1) << 30) + 2;  // AllGather / ReduceScatter's count per rank
constexpr size_t kBytes = kBlock * kRanks;        // 2^31 + 4: past INT32_MAX
constexpr size_t kOdd = kBytes - 1;               // AllReduce and Broadcast: an odd count

// Rank r's input at index i: 0..64, so that the sum of two fits int8.
inline int8_t pattern(size_t i, int r) {
  return int8_t((i & 63) + size_t(r));
}

// A buffer of kBytes (nullptr when there is no memory for it); unmap() gives it back.
inline int8_t* map() {
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, kBytes, MADV_HUGEPAGE);  // fewer page faults where THP is on "madvise"
  return static_cast<int8_t*>(p);
}
inline void unmap(int8_t* p) {
  munmap(p, kBytes);
}

// The first index in [0, n) where p[i] != want(i), or n.
template <class Want>
size_t firstWrong(const int8_t* p, size_t n, Want want) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != want(i)) return i;
  return n;
}

// Runs rank `rank` (0 or 1) of the check on its buffer p (kBytes); "" when every call succeeded
// and every element was right, else the first problem, naming the collective and the rank.
inline std::string run(chorusComm_t comm, int rank, int8_t* p) {
  char msg[512];
  // True (msg set) when the call failed or an element of q[0, n) is not want(i).
  auto problem = [&](const char* what, chorusResult_t r, const int8_t* q, size_t n,
                     auto want) -> bool {
    if (r != chorusSuccess) {
      std::snprintf(msg, sizeof msg, "%s, rank %d: %s: %s", what, rank, chorusGetErrorString(r),
                    chorusGetLastError(comm));
      return true;
    }
    const size_t wrong = firstWrong(q, n, want);
    if (wrong == n) return false;
    std::snprintf(msg, sizeof msg, "%s, rank %d: element %zu of %zu wrong: %d", what, rank, wrong,
                  n, int(q[wrong]));
    return true;
  };
  auto sumOfTwo = [](size_t i) { return int8_t(2 * (i & 63) + 1); };

  // A small AllReduce first: where the single copy is named (CHORUS_ALGO=...:cma), its first
  // call runs the FIFO fallback while cross-memory attach is enabled; the huge calls then read
  // the peer's buffer directly.
  constexpr size_t kSmall = 4099;
  for (size_t i = 0; i < kSmall; ++i) p[i] = pattern(i, rank);
  chorusResult_t r = chorusAllReduce(p, p, kSmall, chorusInt8, chorusSum, comm, nullptr);
  if (problem("AllReduce of 4099", r, p, kSmall, sumOfTwo)) return msg;

  for (size_t i = 0; i < kOdd; ++i) p[i] = pattern(i, rank);
  r = chorusAllReduce(p, p, kOdd, chorusInt8, chorusSum, comm, nullptr);
  if (problem("AllReduce", r, p, kOdd, sumOfTwo)) return msg;

  for (size_t i = 0; i < kOdd; ++i) p[i] = rank == 1 ? pattern(i, 0) : int8_t(-1);
  r = chorusBroadcast(p, p, kOdd, chorusInt8, /*root=*/1, comm, nullptr);
  if (problem("Broadcast from rank 1", r, p, kOdd, [](size_t i) { return pattern(i, 0); }))
    return msg;

  // In place (NCCL): rank r's input is block r of its output.
  for (size_t i = 0; i < kBytes; ++i) p[i] = i / kBlock == size_t(rank) ? pattern(i, rank) : -1;
  r = chorusAllGather(p + size_t(rank) * kBlock, p, kBlock, chorusInt8, comm, nullptr);
  if (problem("AllGather", r, p, kBytes, [](size_t i) { return pattern(i, int(i / kBlock)); }))
    return msg;

  // In place (NCCL): rank r's output is block r of its input.
  for (size_t i = 0; i < kBytes; ++i) p[i] = pattern(i, rank);
  int8_t* out = p + size_t(rank) * kBlock;
  r = chorusReduceScatter(p, out, kBlock, chorusInt8, chorusSum, comm, nullptr);
  const size_t at = size_t(rank) * kBlock;  // the output's index in the inputs
  if (problem("ReduceScatter", r, out, kBlock,
              [at, sumOfTwo](size_t i) { return sumOfTwo(at + i); }))
    return msg;
  return "";
}

}  // namespace huge
