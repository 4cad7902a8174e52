// Communicator life cycle: InitAll / InitRank / nonblocking InitRankConfig, Count / UserRank,
// Split (odd/even, reversed keys, equal keys, NOCOLOR, split of a split), Finalize / Destroy,
// Abort, GetAsyncError, GetVersion, GetErrorString, several communicators at once.
#include <chorus/chorus.h>
#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/wait.h"
#include "comm_set.h"
#include "gtest_helpers.h"
#include "result_name.h"
#include "scoped_env.h"
#include "threads.h"
#include "timing.h"
#include "transport/fifo.h"
#include "watchdog.h"

namespace {

using namespace ctest;

class Comm : public ShmCheckedTest {};

TEST(Version, MatchesHeader) {
  int v = -1;
  ASSERT_EQ(chorusGetVersion(&v), chorusSuccess);
  EXPECT_EQ(v, CHORUS_VERSION_CODE);
}

TEST(ErrorString, EveryCodeHasItsOwnString) {
  std::set<std::string> seen;
  for (int r = 0; r < chorusNumResults; ++r) {
    const char* s = chorusGetErrorString(static_cast<chorusResult_t>(r));
    ASSERT_NE(s, nullptr) << r;
    EXPECT_GT(std::strlen(s), 3u) << r;
    EXPECT_TRUE(seen.insert(s).second) << "duplicate string for " << r << ": " << s;
  }
  for (int r : {static_cast<int>(chorusNumResults), 15}) {  // unknown codes (in the enum range)
    const char* s = chorusGetErrorString(static_cast<chorusResult_t>(r));
    ASSERT_NE(s, nullptr) << r;
    EXPECT_GT(std::strlen(s), 0u) << r;
  }
  EXPECT_NE(chorusGetLastError(nullptr), nullptr);
}

TEST_F(Comm, InitAllCountAndUserRank) {
  Watchdog watchdog(60, "InitAllCountAndUserRank");
  for (int n : {1, 2, 3, 4, 5, 8}) {
    CommSet comms(n);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    std::set<chorusComm_t> distinct;
    for (int r = 0; r < n; ++r) {
      int count = -1, rank = -1;
      ASSERT_NE(comms[r], nullptr);
      distinct.insert(comms[r]);
      EXPECT_EQ(chorusCommCount(comms[r], &count), chorusSuccess);
      EXPECT_EQ(chorusCommUserRank(comms[r], &rank), chorusSuccess);
      EXPECT_EQ(count, n);
      EXPECT_EQ(rank, r);
      chorusResult_t async = chorusInternalError;
      EXPECT_EQ(chorusCommGetAsyncError(comms[r], &async), chorusSuccess);
      EXPECT_EQ(async, chorusSuccess);
    }
    EXPECT_EQ(static_cast<int>(distinct.size()), n);
    EXPECT_EQ(comms.destroyAll(), chorusSuccess);
  }
}

// An AllReduce of rank numbers on each communicator, one thread per rank: sum of ranks.
void expectWorking(const std::vector<chorusComm_t>& comms, const std::string& what) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    std::vector<int64_t> in(100, r), out(100, -1);
    const chorusResult_t res =
        chorusAllReduce(in.data(), out.data(), 100, chorusInt64, chorusSum, comms[r], nullptr);
    if (res != chorusSuccess) {
      errors[r] = std::string("AllReduce returned ") + resultName(res);
    } else if (out[99] != n * (n - 1) / 2) {
      errors[r] = "AllReduce gave " + std::to_string(out[99]);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << what << ", rank " << r;
}

TEST_F(Comm, InitRankWithUniqueIdFromThreads) {
  Watchdog watchdog(60, "InitRankWithUniqueIdFromThreads");
  for (int n : {1, 3, 4}) {
    chorusUniqueId id;
    ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
    std::vector<chorusComm_t> comms(n, nullptr);
    std::vector<chorusResult_t> res(n);
    runThreads(n, [&](int r) { res[r] = chorusCommInitRank(&comms[r], n, id, r); });
    for (int r = 0; r < n; ++r) ASSERT_EQ(res[r], chorusSuccess) << chorusGetLastError(nullptr);
    for (int r = 0; r < n; ++r) {
      int rank = -1, count = -1;
      EXPECT_EQ(chorusCommUserRank(comms[r], &rank), chorusSuccess);
      EXPECT_EQ(chorusCommCount(comms[r], &count), chorusSuccess);
      EXPECT_EQ(rank, r);
      EXPECT_EQ(count, n);
    }
    expectWorking(comms, "InitRank n=" + std::to_string(n));
    runThreads(n, [&](int r) { res[r] = chorusCommDestroy(comms[r]); });
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], chorusSuccess);
  }
}

TEST_F(Comm, UniqueIdsDiffer) {
  chorusUniqueId a, b;
  ASSERT_EQ(chorusGetUniqueId(&a), chorusSuccess);
  ASSERT_EQ(chorusGetUniqueId(&b), chorusSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof a), 0);
}

// Without launcher variables: process 0 of 1 and a usable id.
TEST_F(Comm, UniqueIdFromEnvWithoutLauncher) {
  Watchdog watchdog(60, "UniqueIdFromEnvWithoutLauncher");
  for (const char* v : {"CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_COMM_ID", "OMPI_COMM_WORLD_RANK",
                        "PMI_RANK", "SLURM_PROCID", "RANK", "WORLD_SIZE", "MASTER_ADDR"}) {
    if (std::getenv(v) != nullptr) GTEST_SKIP() << v << " is set in this environment";
  }
  chorusUniqueId id;
  int procRank = -1, nprocs = -1;
  ASSERT_EQ(chorusUniqueIdFromEnv(&id, &procRank, &nprocs), chorusSuccess);
  EXPECT_EQ(procRank, 0);
  EXPECT_EQ(nprocs, 1);
  const int n = 2;
  std::vector<chorusComm_t> comms(n, nullptr);
  std::vector<chorusResult_t> res(n);
  runThreads(n, [&](int r) { res[r] = chorusCommInitRank(&comms[r], n, id, r); });
  for (int r = 0; r < n; ++r) ASSERT_EQ(res[r], chorusSuccess);
  expectWorking(comms, "from UniqueIdFromEnv");
  runThreads(n, [&](int r) { res[r] = chorusCommDestroy(comms[r]); });
}

// config.blocking = 0: init returns chorusSuccess or chorusInProgress; chorusCommGetAsyncError
// says chorusInProgress until the communicator is ready, then chorusSuccess.
TEST_F(Comm, NonblockingInit) {
  Watchdog watchdog(60, "NonblockingInit");
  const int n = 3;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  std::vector<chorusComm_t> comms(n, nullptr);
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
    config.blocking = 0;
    const chorusResult_t res = chorusCommInitRankConfig(&comms[r], n, id, r, &config);
    if (res != chorusSuccess && res != chorusInProgress) {
      errors[r] = std::string("init returned ") + resultName(res);
      return;
    }
    if (comms[r] == nullptr) {
      errors[r] = "no communicator handle after a nonblocking init";
      return;
    }
    chorusResult_t state = chorusInProgress;
    const double deadline = nowSeconds() + 30 * timeoutScale();
    while (state == chorusInProgress && nowSeconds() < deadline) {
      const chorusResult_t q = chorusCommGetAsyncError(comms[r], &state);
      if (q != chorusSuccess) {
        errors[r] = std::string("GetAsyncError returned ") + resultName(q);
        return;
      }
      if (state == chorusInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state != chorusSuccess) {
      errors[r] = std::string("init finished with ") + resultName(state);
      return;
    }
    // A collective on a nonblocking communicator may also answer chorusInProgress.
    std::vector<int32_t> in(64, r + 1), out(64, 0);
    chorusResult_t ar =
        chorusAllReduce(in.data(), out.data(), 64, chorusInt32, chorusSum, comms[r], nullptr);
    while (ar == chorusInProgress && nowSeconds() < deadline) {
      chorusCommGetAsyncError(comms[r], &ar);
      if (ar == chorusInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (ar != chorusSuccess) {
      errors[r] = std::string("AllReduce returned ") + resultName(ar);
    } else if (out[63] != n * (n + 1) / 2) {
      errors[r] = "AllReduce gave " + std::to_string(out[63]);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  std::vector<chorusResult_t> res(n, chorusSuccess);
  runThreads(n, [&](int r) {
    if (comms[r] != nullptr) res[r] = chorusCommDestroy(comms[r]);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], chorusSuccess);
}

// ---------------------------------------------------------------------------------------------
// Split

// What the split result holds before chorusCommSplit writes it.
const chorusComm_t kUnset = reinterpret_cast<chorusComm_t>(uintptr_t{1});

struct SplitResult {
  std::vector<chorusComm_t> comms;  // per old rank; nullptr for NOCOLOR
  std::vector<chorusResult_t> res;
};

SplitResult splitAll(const std::vector<chorusComm_t>& parent, const std::function<int(int)>& color,
                     const std::function<int(int)>& key) {
  const int n = static_cast<int>(parent.size());
  SplitResult out{std::vector<chorusComm_t>(n, nullptr), std::vector<chorusResult_t>(n)};
  runThreads(n, [&](int r) {
    out.comms[r] = kUnset;  // must be overwritten
    out.res[r] = chorusCommSplit(parent[r], color(r), key(r), &out.comms[r], nullptr);
  });
  return out;
}

// On every new communicator: Count, UserRank, and an AllGather of the old ranks, which must
// list the members in new-rank order. expected[newcomm][newrank] = old rank.
void checkSplit(const SplitResult& s, const std::vector<std::vector<int>>& groups,
                const std::string& what) {
  const int n = static_cast<int>(s.comms.size());
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(s.res[r], chorusSuccess) << what << " rank " << r;
    ASSERT_NE(s.comms[r], kUnset) << what << " rank " << r << ": newcomm was not written";
  }
  std::vector<int> groupOf(n, -1), newRankOf(n, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = 0; k < groups[g].size(); ++k) {
      groupOf[groups[g][k]] = static_cast<int>(g);
      newRankOf[groups[g][k]] = static_cast<int>(k);
    }
  }
  for (int r = 0; r < n; ++r) {
    if (groupOf[r] < 0) {
      EXPECT_EQ(s.comms[r], nullptr) << what << ": NOCOLOR rank " << r << " got a communicator";
      continue;
    }
    ASSERT_NE(s.comms[r], nullptr) << what << " rank " << r;
    int count = -1, rank = -1;
    EXPECT_EQ(chorusCommCount(s.comms[r], &count), chorusSuccess);
    EXPECT_EQ(chorusCommUserRank(s.comms[r], &rank), chorusSuccess);
    EXPECT_EQ(count, static_cast<int>(groups[groupOf[r]].size())) << what << " rank " << r;
    EXPECT_EQ(rank, newRankOf[r]) << what << " rank " << r;
  }
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    if (groupOf[r] < 0) return;
    const auto& members = groups[groupOf[r]];
    std::vector<int32_t> gathered(members.size(), -1);
    int32_t mine = r;
    const chorusResult_t res =
        chorusAllGather(&mine, gathered.data(), 1, chorusInt32, s.comms[r], nullptr);
    if (res != chorusSuccess) {
      errors[r] = std::string("AllGather returned ") + resultName(res);
      return;
    }
    for (size_t k = 0; k < members.size(); ++k) {
      if (gathered[k] != members[k]) {
        errors[r] = "AllGather: new rank " + std::to_string(k) + " is old rank " +
                    std::to_string(gathered[k]) + ", expected " + std::to_string(members[k]);
        return;
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << what << " rank " << r;
}

void destroyAll(std::vector<chorusComm_t>& comms) {
  std::vector<chorusResult_t> res(comms.size(), chorusSuccess);
  runThreads(static_cast<int>(comms.size()), [&](int r) {
    if (comms[r] != nullptr && comms[r] != kUnset) res[r] = chorusCommDestroy(comms[r]);
  });
  for (size_t r = 0; r < comms.size(); ++r) EXPECT_EQ(res[r], chorusSuccess) << "rank " << r;
  std::fill(comms.begin(), comms.end(), nullptr);
}

class Split : public ShmCheckedTestP<int> {};

TEST_P(Split, OddEven) {
  Watchdog watchdog(60, "Split OddEven");
  const int n = GetParam();
  CommSet parent(n);
  ASSERT_EQ(parent.initResult(), chorusSuccess);
  SplitResult s = splitAll(
      parent.comms(), [](int r) { return r % 2; }, [](int r) { return r; });
  std::vector<std::vector<int>> groups(2);
  for (int r = 0; r < n; ++r) groups[r % 2].push_back(r);
  if (groups[1].empty()) groups.pop_back();
  checkSplit(s, groups, "odd/even");
  // The parent still works while the children exist.
  expectWorking(parent.comms(), "parent after split");
  destroyAll(s.comms);
}

TEST_P(Split, ReversedKeys) {
  Watchdog watchdog(60, "Split ReversedKeys");
  const int n = GetParam();
  CommSet parent(n);
  ASSERT_EQ(parent.initResult(), chorusSuccess);
  SplitResult s = splitAll(
      parent.comms(), [](int) { return 7; }, [n](int r) { return n - r; });
  std::vector<int> reversed;
  for (int r = n - 1; r >= 0; --r) reversed.push_back(r);
  checkSplit(s, {reversed}, "reversed keys");
  destroyAll(s.comms);
}

// Equal keys: the old rank order decides.
TEST_P(Split, EqualKeysKeepOrder) {
  Watchdog watchdog(60, "Split EqualKeysKeepOrder");
  const int n = GetParam();
  CommSet parent(n);
  ASSERT_EQ(parent.initResult(), chorusSuccess);
  SplitResult s = splitAll(
      parent.comms(), [](int) { return 0; }, [](int) { return 5; });
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  checkSplit(s, {all}, "equal keys");
  destroyAll(s.comms);
}

TEST_P(Split, NoColor) {
  Watchdog watchdog(60, "Split NoColor");
  const int n = GetParam();
  CommSet parent(n);
  ASSERT_EQ(parent.initResult(), chorusSuccess);
  // Ranks 0, 3, 6, ... stay out; the others form one communicator ordered by descending rank.
  SplitResult s = splitAll(
      parent.comms(), [](int r) { return r % 3 == 0 ? CHORUS_SPLIT_NOCOLOR : 1; },
      [](int r) { return -r; });
  std::vector<std::vector<int>> groups(1);
  for (int r = n - 1; r >= 0; --r) {
    if (r % 3 != 0) groups[0].push_back(r);
  }
  if (groups[0].empty()) groups.clear();
  checkSplit(s, groups, "NOCOLOR");
  destroyAll(s.comms);
}

// A split of a split, and collectives on every level interleaved.
TEST_P(Split, SplitOfSplit) {
  Watchdog watchdog(60, "Split SplitOfSplit");
  const int n = GetParam();
  CommSet parent(n);
  ASSERT_EQ(parent.initResult(), chorusSuccess);
  SplitResult s1 = splitAll(
      parent.comms(), [](int r) { return r % 2; }, [](int r) { return r; });
  for (auto res : s1.res) ASSERT_EQ(res, chorusSuccess);
  // Inside each half: new rank k -> color k / 2 (pairs), key -k (reversed within a pair).
  std::vector<int> newRank(n);
  for (int r = 0; r < n; ++r) newRank[r] = r / 2;
  SplitResult s2 = splitAll(
      s1.comms, [&](int r) { return newRank[r] / 2; }, [&](int r) { return -newRank[r]; });
  std::vector<std::vector<int>> groups;
  for (int parity = 0; parity < 2; ++parity) {
    std::vector<int> half;
    for (int r = parity; r < n; r += 2) half.push_back(r);
    for (size_t k = 0; k < half.size(); k += 2) {
      std::vector<int> g;
      if (k + 1 < half.size()) g.push_back(half[k + 1]);
      g.push_back(half[k]);
      groups.push_back(g);
    }
  }
  checkSplit(s2, groups, "split of split");
  expectWorking(parent.comms(), "parent after two splits");
  destroyAll(s2.comms);
  destroyAll(s1.comms);
}

INSTANTIATE_TEST_SUITE_P(Threads, Split, ::testing::Values(1, 2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// ---------------------------------------------------------------------------------------------
// Finalize, Destroy, Abort, several communicators.

TEST_F(Comm, FinalizeThenDestroy) {
  Watchdog watchdog(60, "FinalizeThenDestroy");
  const int n = 4;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  expectWorking(comms.comms(), "before finalize");
  std::vector<chorusResult_t> fin(n), des(n);
  runThreads(n, [&](int r) {
    fin[r] = chorusCommFinalize(comms[r]);
    des[r] = chorusCommDestroy(comms[r]);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(fin[r], chorusSuccess) << "rank " << r;
    EXPECT_EQ(des[r], chorusSuccess) << "rank " << r;
    comms.forget(r);
  }
}

// Finalize completes operations still queued on a stream.
TEST_F(Comm, FinalizeCompletesQueuedWork) {
  Watchdog watchdog(60, "FinalizeCompletesQueuedWork");
  const int n = 3;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    chorusStream_t s;
    if (chorusStreamCreate(&s) != chorusSuccess) {
      errors[r] = "stream create";
      return;
    }
    std::vector<float> in(50000, 1.f), out(50000, 0.f);
    chorusResult_t res =
        chorusAllReduce(in.data(), out.data(), in.size(), chorusFloat32, chorusSum, comms[r], s);
    if (res == chorusSuccess) res = chorusCommFinalize(comms[r]);
    if (res == chorusSuccess) res = chorusStreamSynchronize(s);
    if (res != chorusSuccess) errors[r] = resultName(res);
    if (errors[r].empty() && out.back() != static_cast<float>(n)) errors[r] = "wrong result";
    if (chorusCommDestroy(comms[r]) != chorusSuccess && errors[r].empty()) errors[r] = "destroy";
    chorusStreamDestroy(s);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    comms.forget(r);
  }
}

// The NCCL example pattern: for (i) chorusCommDestroy(comms[i]) from one thread.
TEST_F(Comm, DestroyAllFromOneThread) {
  Watchdog watchdog(60, "DestroyAllFromOneThread");
  const int n = 4;
  std::vector<chorusComm_t> comms(n, nullptr);
  ASSERT_EQ(chorusCommInitAll(comms.data(), n, nullptr), chorusSuccess);
  expectWorking(comms, "before destroy");
  for (int r = 0; r < n; ++r) EXPECT_EQ(chorusCommDestroy(comms[r]), chorusSuccess) << r;
}

TEST_F(Comm, AbortEveryRank) {
  Watchdog watchdog(60, "AbortEveryRank");
  const int n = 3;
  std::vector<chorusComm_t> comms(n, nullptr);
  ASSERT_EQ(chorusCommInitAll(comms.data(), n, nullptr), chorusSuccess);
  expectWorking(comms, "before abort");
  std::vector<chorusResult_t> res(n);
  runThreads(n, [&](int r) { res[r] = chorusCommAbort(comms[r]); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], chorusSuccess) << "rank " << r;
}

// Abort from another thread ends a call that waits for a peer that never comes.
TEST_F(Comm, AbortEndsAStuckCall) {
  Watchdog watchdog(60, "AbortEndsAStuckCall");
  std::vector<chorusComm_t> comms(2, nullptr);
  ASSERT_EQ(chorusCommInitAll(comms.data(), 2, nullptr), chorusSuccess);
  std::vector<int32_t> in(1000, 1), out(1000, 0);
  std::atomic<bool> returned{false}, calling{false};
  chorusResult_t stuck = chorusSuccess;
  std::thread t([&] {
    calling = true;
    stuck = chorusAllReduce(in.data(), out.data(), 1000, chorusInt32, chorusSum, comms[0], nullptr);
    returned = true;
  });
  while (!calling) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_FALSE(returned.load()) << "AllReduce returned without its peer";
  EXPECT_EQ(chorusCommAbort(comms[0]), chorusSuccess);
  t.join();
  EXPECT_NE(stuck, chorusSuccess) << "the aborted AllReduce reported success";
  EXPECT_EQ(chorusCommAbort(comms[1]), chorusSuccess);
}

// Two communicators over the same ranks, used alternately by the same threads.
TEST_F(Comm, TwoCommunicatorsInterleaved) {
  Watchdog watchdog(60, "TwoCommunicatorsInterleaved");
  const int n = 4;
  CommSet a(n), b(n);
  ASSERT_EQ(a.initResult(), chorusSuccess);
  ASSERT_EQ(b.initResult(), chorusSuccess);
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    for (int iter = 0; iter < 20 && errors[r].empty(); ++iter) {
      std::vector<int32_t> x(300, r), xs(300, -1), y(300, r * 10), ys(300, -1);
      chorusResult_t e1 =
          chorusAllReduce(x.data(), xs.data(), 300, chorusInt32, chorusSum, a[r], nullptr);
      chorusResult_t e2 =
          chorusAllReduce(y.data(), ys.data(), 300, chorusInt32, chorusMax, b[r], nullptr);
      if (e1 != chorusSuccess || e2 != chorusSuccess) {
        errors[r] = "calls failed";
      } else if (xs[299] != n * (n - 1) / 2 || ys[299] != (n - 1) * 10) {
        errors[r] = "iteration " + std::to_string(iter) + ": " + std::to_string(xs[299]) + " " +
                    std::to_string(ys[299]);
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Communicators created and destroyed many times: no resources pile up.
TEST_F(Comm, CreateDestroyRepeatedly) {
  Watchdog watchdog(120, "CreateDestroyRepeatedly");
  for (int iter = 0; iter < 20; ++iter) {
    CommSet comms(3);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << "iteration " << iter;
    if (iter % 5 == 0) expectWorking(comms.comms(), "iteration " + std::to_string(iter));
    ASSERT_EQ(comms.destroyAll(), chorusSuccess);
  }
}

}  // namespace

// No silent hang by default: without CHORUS_TIMEOUT a communicator bounds every wait by 30
// minutes (PyTorch's and Gloo's default); CHORUS_TIMEOUT=0 turns the bound off, and a config's
// timeoutMs overrides both.
TEST(Timeout, DefaultBoundIsThirtyMinutes) {
  auto timeoutOf = [](const chorusConfig_t* cfg) {
    chorusUniqueId id;
    EXPECT_EQ(chorusGetUniqueId(&id), chorusSuccess);
    chorusComm_t comm = nullptr;
    chorusConfig_t c = cfg ? *cfg : chorusConfig_t CHORUS_CONFIG_INITIALIZER;
    EXPECT_EQ(chorusCommInitRankConfig(&comm, 1, id, 0, &c), chorusSuccess);
    const double t = comm->timeoutSec;
    chorusCommDestroy(comm);
    return t;
  };
  {
    ctest::ScopedEnv unset("CHORUS_TIMEOUT", nullptr);
    EXPECT_EQ(timeoutOf(nullptr), 1800.0);
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 2500;
    EXPECT_EQ(timeoutOf(&cfg), 2.5);
  }
  {
    ctest::ScopedEnv off("CHORUS_TIMEOUT", "0");
    EXPECT_EQ(timeoutOf(nullptr), 0.0);
  }
}

// Every wake-up arrives (transport/fifo.h postFence): where a rank's waits arm their doorbell
// with the heavy barrier, its peers post without a fence, and a post that neither the sleeper's
// re-check saw nor rang the bell would leave it asleep until its sleep ends. The sleep is made
// 5 s here (10 ms normally), and rank 1 comes late to every call, by about as long as rank 0
// polls before it arms and sleeps: no call of rank 0 may take anywhere near 5 s. On
// the ring (FIFO posts, notifySleeper) and the one-shot Broadcast (its receivers' doorbells,
// ringPeers), the heavy arm on and, as a control, off.
TEST_F(Comm, EveryWakeUpArrivesWithAndWithoutTheFence) {
  Watchdog watchdog(240, "EveryWakeUpArrivesWithAndWithoutTheFence");
  ScopedEnv poll("CHORUS_POLL_US", "50");
  for (const bool heavy : {true, false}) {
    std::vector<chorusComm_t> comms(2, nullptr);
    ASSERT_EQ(chorusCommInitAll(comms.data(), 2, nullptr), chorusSuccess);
    if (heavy && !comms[0]->lightPosts) {
      for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
      GTEST_SKIP() << "membarrier's global expedited barrier is not available here";
    }
    for (auto c : comms) {
      c->bellSleepNs = 5'000'000'000L;
      if (!heavy) {
        c->mySegment.header()->bell.heavyArm.store(0);
        c->lightPosts = false;
      }
    }
    std::vector<std::string> errors(2);
    double slowest = 0;
    runThreads(2, [&](int r) {
      // Rank 1 late: spinning 30-90 us (rank 0's wait arms its doorbell after 50 us of polling:
      // some posts land as it arms, where a missing barrier loses them), every 16th time 2 ms
      // more asleep.
      const auto late = [r](int i) {
        if (r != 1) return;
        const auto spin = std::chrono::nanoseconds(30'000 + (i * 7919) % 60'000);
        const auto until = std::chrono::steady_clock::now() + spin;
        while (std::chrono::steady_clock::now() < until) {
        }
        if (i % 16 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      };
      const auto timed = [&](auto call) {
        const auto t0 = std::chrono::steady_clock::now();
        const chorusResult_t e = call();
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r == 0) slowest = std::max(slowest, s);
        return e;
      };
      for (int i = 0; i < 2000 && errors[r].empty(); ++i) {
        int32_t x = r + 1, y = 0, b = r == 1 ? 7 + i : -1;
        late(i);
        chorusResult_t e = timed(
            [&] { return chorusAllReduce(&x, &y, 1, chorusInt32, chorusSum, comms[r], nullptr); });
        late(i + 1);
        if (e == chorusSuccess)  // rank 1 the root: rank 0 waits for its post
          e = timed([&] { return chorusBroadcast(&b, &b, 1, chorusInt32, 1, comms[r], nullptr); });
        if (e != chorusSuccess || y != 3 || b != 7 + i)
          errors[r] = "call " + std::to_string(i) + ": " + resultName(e) + ", " +
                      std::to_string(y) + ", " + std::to_string(b);
      }
    });
    for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    std::printf("[ wake     ] heavy arm %s: rank 0's slowest call %.1f ms\n", heavy ? "on" : "off",
                slowest * 1e3);
    EXPECT_LT(slowest, 2.5) << "a wake-up was missed (heavy arm " << (heavy ? "on" : "off") << ")";
    for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
  }
}

// A process forked after the library registered membarrier (a DataLoader-style fork, then new
// communicators in the child) keeps the registration: the kernel copies the address space's
// membarrier state on fork and clears it only on exec. The child's private expedited barrier
// works without registering again, its communicators post without the fence, and every wake-up
// arrives (the sleep bound is 5 s: a lost one shows as a call over 2.5 s).
TEST_F(Comm, AForkedChildKeepsTheMembarrierRegistration) {
  Watchdog watchdog(120, "AForkedChildKeepsTheMembarrierRegistration");
  {
    std::vector<chorusComm_t> comms(2, nullptr);
    ASSERT_EQ(chorusCommInitAll(comms.data(), 2, nullptr), chorusSuccess);
    const bool light = comms[0]->lightPosts;
    for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
    if (!light) GTEST_SKIP() << "membarrier's global expedited barrier is not available here";
  }
  // As the API guard's revocation does (comm/comm.cc processBarrierReady).
  ASSERT_EQ(syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0), 0)
      << strerror(errno);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << strerror(errno);
  if (pid == 0) {
    // Unregistered, this would fail with EPERM.
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) _exit(2);
    std::vector<chorusComm_t> comms(2, nullptr);
    if (chorusCommInitAll(comms.data(), 2, nullptr) != chorusSuccess) _exit(3);
    int status = 0;
    if (!comms[0]->lightPosts || !chorus::heavyBarrierRegistered()) status = 4;
    for (auto c : comms) c->bellSleepNs = 5'000'000'000L;
    std::vector<int> bad(2, 0);
    runThreads(2, [&](int r) {
      for (int i = 0; i < 200 && !bad[size_t(r)]; ++i) {
        if (r == 1 && i % 8 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        int32_t x = r + 1, y = 0;
        const auto t0 = std::chrono::steady_clock::now();
        if (chorusAllReduce(&x, &y, 1, chorusInt32, chorusSum, comms[size_t(r)], nullptr) !=
                chorusSuccess ||
            y != 3 || std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(2500))
          bad[size_t(r)] = 1;
      }
    });
    if (bad[0] || bad[1]) status = 5;
    for (auto c : comms)
      if (chorusCommDestroy(c) != chorusSuccess) status = 6;
    _exit(status);
  }
  int status = -1;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: the child's private expedited barrier refused (not registered), 3: init failed, "
         "4: posts with the fence (lightPosts off), 5: a call failed or took over 2.5 s (a "
         "wake-up lost), 6: destroy failed";
}

// The FIFO waits' poll phase (comm/wait.cc): a wait that slept on the doorbell and ended soon
// after (under 1 ms) lengthens it to twice that wait, up to 500 us (a sleeping peer's wake-up
// would otherwise be paid on every hand-off); one that slept long (over 20 ms) halves it, never
// below the base; the waits between leave it.
TEST(PollPhase, FollowsTheWaitsThatSlept) {
  using chorus::nextPollNs;
  EXPECT_EQ(nextPollNs(50'000, 50'000, 130'000), 260'000);      // the VM's wake-up: poll through it
  EXPECT_EQ(nextPollNs(260'000, 50'000, 100'000), 260'000);     // never shortened by a short wait
  EXPECT_EQ(nextPollNs(50'000, 50'000, 900'000), 500'000);      // at most 500 us
  EXPECT_EQ(nextPollNs(50'000, 50'000, 10'000), 50'000);        // never below the base
  EXPECT_EQ(nextPollNs(400'000, 50'000, 5'000'000), 400'000);   // 1-20 ms: left as it is
  EXPECT_EQ(nextPollNs(400'000, 50'000, 30'000'000), 200'000);  // a long sleep halves it
  EXPECT_EQ(nextPollNs(80'000, 50'000, 30'000'000), 50'000);    // down to the base
  EXPECT_EQ(nextPollNs(0, 0, 30'000'000), 0);
}

// And on communicators: two thread ranks on the ring (FIFO waits), each bound to a core of its
// own and marked so (as chorusrun places processes; thread ranks are not bound by Chorus, so
// their phase is fixed), rank 1 late to every call by 200 us (rank 0 polls 50 us, then sleeps
// until rank 1 rings), then by 30 ms. The results stay right and the phase within its bounds
// whatever the cores do meanwhile (how long a wake-up takes decides whether it grows: beside
// busy processes a woken rank waits for a core longer than 1 ms and the phase stays short,
// which is meant); CHORUS_POLL_US fixes it.
TEST_F(Comm, PollPhaseStaysInItsBoundsAndCanBeFixed) {
  Watchdog watchdog(120, "PollPhaseStaysInItsBoundsAndCanBeFixed");
  ScopedEnv algo("CHORUS_ALGO", "ring");
  const int ncpu = std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN)));
  const auto calls = [ncpu](std::vector<chorusComm_t>& comms, int n,
                            std::chrono::microseconds late) {
    std::vector<std::string> errors(2);
    runThreads(2, [&](int r) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(r % ncpu, &one);
      sched_setaffinity(0, sizeof(one), &one);
      for (int i = 0; i < n && errors[r].empty(); ++i) {
        if (r == 1 && late < std::chrono::milliseconds(1)) {
          const auto until = std::chrono::steady_clock::now() + late;
          while (std::chrono::steady_clock::now() < until) {
          }
        } else if (r == 1) {
          std::this_thread::sleep_for(late);
        }
        int32_t x = r + 1, y = 0;
        const chorusResult_t e =
            chorusAllReduce(&x, &y, 1, chorusInt32, chorusSum, comms[r], nullptr);
        if (e != chorusSuccess || y != 3)
          errors[r] = "call " + std::to_string(i) + ": " + resultName(e) + ", " + std::to_string(y);
      }
    });
    for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  };
  {
    ScopedEnv poll("CHORUS_POLL_US", nullptr);
    std::vector<chorusComm_t> comms(2, nullptr);
    ASSERT_EQ(chorusCommInitAll(comms.data(), 2, nullptr), chorusSuccess);
    EXPECT_FALSE(comms[0]->pollAdaptive) << "unbound thread ranks: a fixed phase";
    for (auto c : comms) c->pinned = c->pollAdaptive = true;
    EXPECT_EQ(comms[0]->pollNs.load(), 50'000);
    calls(comms, 30, std::chrono::microseconds(200));
    std::printf("[ poll     ] after 30 calls 200 us late: %lld ns\n",
                (long long)comms[0]->pollNs.load());
    EXPECT_GE(comms[0]->pollNs.load(), 50'000);
    EXPECT_LE(comms[0]->pollNs.load(), 500'000);
    calls(comms, 8, std::chrono::milliseconds(30));
    std::printf("[ poll     ] after 8 calls 30 ms late: %lld ns\n",
                (long long)comms[0]->pollNs.load());
    EXPECT_GE(comms[0]->pollNs.load(), 50'000);
    EXPECT_LE(comms[0]->pollNs.load(), 500'000);
    for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
  }
  {
    ScopedEnv poll("CHORUS_POLL_US", "50");
    std::vector<chorusComm_t> comms(2, nullptr);
    ASSERT_EQ(chorusCommInitAll(comms.data(), 2, nullptr), chorusSuccess);
    EXPECT_FALSE(comms[0]->pollAdaptive) << "CHORUS_POLL_US=50 did not fix it";
    for (auto c : comms) c->pinned = true;
    calls(comms, 30, std::chrono::microseconds(200));
    EXPECT_EQ(comms[0]->pollNs.load(), 50'000) << "CHORUS_POLL_US=50 did not fix it";
    for (auto c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
  }
}
