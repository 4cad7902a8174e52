// The hot path (docs/performance.md, "Small messages"): on a ready communicator, a call
// allocates nothing on the heap and reads no environment variable. This program counts operator new
// and getenv calls (it replaces both for the whole process; getenv reads `environ` itself, as
// glibc's does) while two thread ranks run each collective, and Send/Recv, many times after a
// warm-up (the first call of a size class decides its plan and may allocate). Exit status 0 when
// every count is zero. A separate program, so that the replacements touch no other test.
#include <chorus/chorus.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "comm_set.h"
#include "threads.h"

namespace {
std::atomic<bool> gCounting{false};
std::atomic<long> gNews{0};
std::atomic<long> gGetenvs{0};
}  // namespace

void* operator new(std::size_t n) {
  if (gCounting.load(std::memory_order_relaxed)) gNews.fetch_add(1);
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

extern "C" char* getenv(const char* name) {
  if (gCounting.load(std::memory_order_relaxed)) gGetenvs.fetch_add(1);
  const size_t len = strlen(name);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return nullptr;
}

namespace {

constexpr int kRanks = 2;
constexpr int kCalls = 2000;

// Every operation of one round, on rank r: count elements of float (8 B and 2 KiB rounds).
chorusResult_t round(chorusComm_t comm, int r, size_t count, std::vector<float>& a,
                     std::vector<float>& b) {
  chorusResult_t res = chorusSuccess;
  auto keep = [&](chorusResult_t x) {
    if (res == chorusSuccess) res = x;
  };
  keep(chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr));
  keep(chorusAllReduce(b.data(), b.data(), count, chorusFloat32, chorusMax, comm, nullptr));
  keep(chorusBroadcast(a.data(), b.data(), count, chorusFloat32, 0, comm, nullptr));
  keep(chorusReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, 1, comm, nullptr));
  keep(chorusAllGather(a.data(), b.data(), count, chorusFloat32, comm, nullptr));
  keep(chorusReduceScatter(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr));
  keep(chorusGroupStart());
  keep(chorusSend(a.data(), count, chorusFloat32, 1 - r, comm, nullptr));
  keep(chorusRecv(b.data(), count, chorusFloat32, 1 - r, comm, nullptr));
  keep(chorusGroupEnd());
  return res;
}

}  // namespace

int main() {
  ctest::CommSet comms(kRanks);
  if (comms.initResult() != chorusSuccess) {
    fprintf(stderr, "init failed: %s\n", chorusGetLastError(nullptr));
    return 2;
  }
  int failures = 0;
  {
    // The counters count (a replaced operator new / getenv that is not called would pass
    // anything): one vector and one getenv here, through the library's own envInt path too.
    gCounting.store(true);
    std::vector<int> probe(10);
    const bool havePath = getenv("PATH") != nullptr;
    chorusChoice_t choice;
    chorusTunerChoice(comms[0], "allreduce", 2, chorusFloat32, &choice);  // reads CHORUS_ALGO...
    gCounting.store(false);
    const long news = gNews.exchange(0), getenvs = gGetenvs.exchange(0);
    if (news < 1 || getenvs < 3 || !havePath || probe.size() != 10) {
      fprintf(stderr, "the counters do not count: %ld operator new, %ld getenv\n", news, getenvs);
      return 2;
    }
  }
  for (size_t count : {size_t{2}, size_t{512}}) {
    std::atomic<int> arrived{0};
    std::vector<chorusResult_t> results(kRanks, chorusSuccess);
    ctest::runThreads(kRanks, [&](int r) {
      std::vector<float> a(count * kRanks, 1.0f), b(count * kRanks, 0.0f);
      for (int i = 0; i < 10; ++i) results[r] = round(comms[r], r, count, a, b);  // warm-up
      // Both ranks warmed up: count from here (the group start below allocates nothing either:
      // a group's operations go into a thread-local vector whose capacity stays).
      arrived.fetch_add(1);
      while (arrived.load() < kRanks) {
      }
      gCounting.store(true);
      for (int i = 0; i < kCalls && results[r] == chorusSuccess; ++i)
        results[r] = round(comms[r], r, count, a, b);
      arrived.fetch_add(1);
      while (arrived.load() < 2 * kRanks) {
      }
      gCounting.store(false);
    });
    for (int r = 0; r < kRanks; ++r)
      if (results[r] != chorusSuccess) {
        fprintf(stderr, "rank %d: %s\n", r, chorusGetErrorString(results[r]));
        ++failures;
      }
    const long news = gNews.exchange(0), getenvs = gGetenvs.exchange(0);
    printf(
        "%zu bytes: %d rounds of AllReduce x2, Broadcast, Reduce, AllGather, ReduceScatter, "
        "Send/Recv group on %d thread ranks: %ld operator new, %ld getenv\n",
        count * sizeof(float), kCalls, kRanks, news, getenvs);
    if (news != 0 || getenvs != 0) ++failures;
  }
  {
    // Registered buffers (chorusMemAlloc, chorusCommRegister): the zero-copy AllReduce and
    // ReduceScatter, and an AllReduce on unregistered buffers that falls back, allocate nothing
    // either once registered (registration itself may).
    constexpr size_t count = 65536;  // 256 KiB: the tuner picks the zero-copy algorithm
    std::atomic<int> arrived{0};
    std::vector<chorusResult_t> results(kRanks, chorusSuccess);
    ctest::runThreads(kRanks, [&](int r) {
      void* mem[2] = {nullptr, nullptr};
      void* handles[2] = {nullptr, nullptr};
      // Unregistered buffers (static: no vector to inline into the replaced operators).
      static float plainIn[kRanks][count * kRanks], plainOutBuf[kRanks][count * kRanks];
      float* plain = plainIn[r];
      float* plainOut = plainOutBuf[r];
      for (int i = 0; i < 2; ++i) {
        if (chorusMemAlloc(&mem[i], count * kRanks * sizeof(float)) != chorusSuccess ||
            chorusCommRegister(comms[r], mem[i], count * kRanks * sizeof(float), &handles[i]) !=
                chorusSuccess) {
          results[r] = chorusInternalError;
          return;
        }
      }
      auto* a = static_cast<float*>(mem[0]);
      auto* b = static_cast<float*>(mem[1]);
      auto regRound = [&]() {
        chorusResult_t res =
            chorusAllReduce(a, b, count, chorusFloat32, chorusSum, comms[r], nullptr);
        if (res == chorusSuccess)
          res = chorusReduceScatter(a, b, count / kRanks, chorusFloat32, chorusSum, comms[r],
                                    nullptr);
        if (res == chorusSuccess)
          res =
              chorusAllReduce(plain, plainOut, count, chorusFloat32, chorusSum, comms[r], nullptr);
        return res;
      };
      for (int i = 0; i < 10; ++i) results[r] = regRound();  // warm-up
      arrived.fetch_add(1);
      while (arrived.load() < kRanks) {
      }
      gCounting.store(true);
      for (int i = 0; i < kCalls / 10 && results[r] == chorusSuccess; ++i) results[r] = regRound();
      arrived.fetch_add(1);
      while (arrived.load() < 2 * kRanks) {
      }
      gCounting.store(false);
      for (int i = 0; i < 2; ++i) {
        chorusCommDeregister(comms[r], handles[i]);
        chorusMemFree(mem[i]);
      }
    });
    for (int r = 0; r < kRanks; ++r)
      if (results[r] != chorusSuccess) {
        fprintf(stderr, "rank %d (registered): %s\n", r, chorusGetErrorString(results[r]));
        ++failures;
      }
    const long news = gNews.exchange(0), getenvs = gGetenvs.exchange(0);
    printf(
        "registered %zu bytes: %d rounds of AllReduce and ReduceScatter (zero-copy unless "
        "CHORUS_ALGO excludes it) and an "
        "unregistered AllReduce (fallback), on %d thread ranks: %ld operator new, %ld getenv\n",
        count * sizeof(float), kCalls / 10, kRanks, news, getenvs);
    if (news != 0 || getenvs != 0) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
