// The correctness matrix with threads: chorusCommInitAll(n) and one std::thread per rank (null
// streams and created streams), and the single-thread group pattern (chorusGroupStart; the call
// on every communicator; chorusGroupEnd). Plus stream ordering, chorusStreamQuery and
// chorusStreamSynchronize.
//
// What runs (see tests/support/matrix.h), n in {1, 2, 3, 4, 5, 8}:
//  * Threads/NullStream.Matrix/<collective>_<n>ranks: every type x op x placement x root at
//    counts 0, 1, 7, 1000; at count 1048579 the "subset" policy: reducing collectives run every
//    type with sum, float32 and int32 with every op, and one (type, op) rotating with n; data
//    movement runs one type per element size (1, 2, 4, 8 bytes) rotating with n; each
//    combination with one placement and one root (alternating / rotating).
//  * Threads/Stream.Matrix/<n>ranks: every collective, the same small matrix, batches enqueued
//    on a created stream per rank; the big count with the "minimal" policy (two combinations).
//  * SingleThread/Grouped.*/<n>ranks: one thread drives all n communicators inside groups; small
//    counts and the "minimal" big-count policy (null streams), or four types and small counts
//    (created streams).
//  * Threads/SmallSlots.Matrix/*: 4 KiB slots and 3 channels, counts up to 12345, with the
//    tuner's choice and with every algorithm/protocol forced.
//  * Threads/StreamingSlots.Matrix/*: the same with every slot written by streaming stores
//    (CHORUS_SLOT_STREAM_THRESHOLD=0), each algorithm that passes Simple slots forced.
//  * Semantics.*: groups, stream order, chorusStreamQuery, null-stream completion.
//  * Support.*: self-tests of tests/support.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "comm_set.h"
#include "gtest_helpers.h"
#include "matrix.h"
#include "result_name.h"
#include "scoped_env.h"
#include "test_types.h"
#include "threads.h"
#include "values.h"
#include "watchdog.h"

namespace {

using namespace ctest;

constexpr int kRankCounts[] = {1, 2, 3, 4, 5, 8};

// Runs the matrix with one thread per rank on the communicators of `comms`.
MatrixResult runThreaded(const CommSet& comms, const MatrixOptions& opt, bool createdStreams) {
  const int n = comms.size();
  std::vector<MatrixResult> results(n);
  runThreads(n, [&](int r) {
    chorusStream_t stream = nullptr;
    if (createdStreams) {
      const chorusResult_t res = chorusStreamCreate(&stream);
      if (res != chorusSuccess) {
        results[r].fail(
            "[rank " + std::to_string(r) + "] chorusStreamCreate returned " + resultName(res),
            opt.maxMessages);
        return;
      }
    }
    results[r] = runMatrix(comms[r], r, n, opt, stream);
    if (stream != nullptr) {
      const chorusResult_t res = chorusStreamDestroy(stream);
      if (res != chorusSuccess) {
        results[r].fail(
            "[rank " + std::to_string(r) + "] chorusStreamDestroy returned " + resultName(res),
            opt.maxMessages);
      }
    }
  });
  MatrixResult all;
  for (const auto& r : results) all.merge(r, opt.maxMessages * 2);
  return all;
}

// ---------------------------------------------------------------------------------------------
// The matrix, one collective per test, null stream.

struct CollParam {
  Coll coll;
  int nranks;
};

// Readable parameters in test listings (ctest shows them).
void PrintTo(const CollParam& p, std::ostream* os) {
  *os << collName(p.coll) << " x " << p.nranks << " ranks";
}

class NullStream : public ShmCheckedTestP<CollParam> {};

TEST_P(NullStream, Matrix) {
  const auto [coll, n] = GetParam();
  Watchdog watchdog(400, std::string("NullStream ") + collName(coll));
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  MatrixOptions opt;
  opt.colls = {coll};
  const MatrixResult res = runThreaded(comms, opt, false);
  EXPECT_GT(res.cases, 0u);
  EXPECT_EQ(res.failures, 0u) << res.summary();
  EXPECT_EQ(comms.destroyAll(), chorusSuccess);
}

std::vector<CollParam> allCollParams() {
  std::vector<CollParam> v;
  for (Coll c : kAllColls) {
    for (int n : kRankCounts) v.push_back({c, n});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Threads, NullStream, ::testing::ValuesIn(allCollParams()),
                         [](const ::testing::TestParamInfo<CollParam>& info) {
                           return std::string(collName(info.param.coll)) + "_" +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

// ---------------------------------------------------------------------------------------------
// Created streams, every collective.

class Stream : public ShmCheckedTestP<int> {};

TEST_P(Stream, Matrix) {
  const int n = GetParam();
  Watchdog watchdog(400, "Stream matrix");
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  MatrixOptions opt;
  opt.big = BigPolicy::Minimal;
  opt.seed = 777;
  const MatrixResult res = runThreaded(comms, opt, true);
  EXPECT_GT(res.cases, 0u);
  EXPECT_EQ(res.failures, 0u) << res.summary();
  EXPECT_EQ(comms.destroyAll(), chorusSuccess);
}

// ---------------------------------------------------------------------------------------------
// One thread drives every communicator inside groups.

class Grouped : public ShmCheckedTestP<int> {};

TEST_P(Grouped, NullStreams) {
  const int n = GetParam();
  Watchdog watchdog(400, "Grouped matrix");
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  MatrixOptions opt;
  opt.big = BigPolicy::Minimal;
  opt.seed = 4242;
  const MatrixResult res = runMatrixGrouped(comms.comms(), opt);
  EXPECT_GT(res.cases, 0u);
  EXPECT_EQ(res.failures, 0u) << res.summary();
}

TEST_P(Grouped, CreatedStreams) {
  const int n = GetParam();
  Watchdog watchdog(400, "Grouped matrix, streams");
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  std::vector<chorusStream_t> streams(n, nullptr);
  for (auto& s : streams) ASSERT_EQ(chorusStreamCreate(&s), chorusSuccess);
  MatrixOptions opt;
  opt.big = BigPolicy::None;
  opt.types = {chorusInt8, chorusFloat16, chorusFloat32, chorusUint64};
  opt.seed = 99;
  const MatrixResult res = runMatrixGrouped(comms.comms(), opt, streams);
  EXPECT_GT(res.cases, 0u);
  EXPECT_EQ(res.failures, 0u) << res.summary();
  for (auto s : streams) EXPECT_EQ(chorusStreamDestroy(s), chorusSuccess);
}

INSTANTIATE_TEST_SUITE_P(Threads, Stream, ::testing::ValuesIn(kRankCounts),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });
INSTANTIATE_TEST_SUITE_P(SingleThread, Grouped, ::testing::ValuesIn(kRankCounts),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// ---------------------------------------------------------------------------------------------
// Small slots: the smallest slot size (CHORUS_BUFFSIZE, CHORUS_LL_BUFFSIZE: 4 KiB per slot) and
// 3 channels, so that counts 1000 and 12345 take many slot-sized steps on every channel; with
// the tuner's own choice, and with every algorithm and protocol forced through CHORUS_ALGO /
// CHORUS_PROTO (collectives an algorithm does not implement fall back to their default).
// test_algorithms.cc covers the forced algorithms at the default slot size on more rank counts.

struct AlgoParam {
  const char* algo;  // nullptr: the tuner's choice
  const char* proto;
  int nranks;
};

void PrintTo(const AlgoParam& p, std::ostream* os) {
  *os << (p.algo ? p.algo : "tuner") << "/" << (p.proto ? p.proto : "tuner") << " x " << p.nranks
      << " ranks";
}

class SmallSlots : public ShmCheckedTestP<AlgoParam> {};

// The matrix at counts up to 12345 on n thread ranks, with the settings of the caller's scope
// (small slots: many chunks per call).
void expectSmallMatrix(int n, uint64_t seed, const char* what) {
  Watchdog watchdog(120, what);
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  MatrixOptions opt;
  opt.counts = {0, 1, 7, 1000, 12345};
  opt.big = BigPolicy::None;
  opt.seed = seed;
  const MatrixResult res = runThreaded(comms, opt, false);
  EXPECT_GT(res.cases, 0u);
  EXPECT_EQ(res.failures, 0u) << res.summary();
}

TEST_P(SmallSlots, Matrix) {
  const AlgoParam p = GetParam();
  ScopedEnv algo("CHORUS_ALGO", p.algo), proto("CHORUS_PROTO", p.proto);
  ScopedEnv buff("CHORUS_BUFFSIZE", "32768"), ll("CHORUS_LL_BUFFSIZE", "32768");
  ScopedEnv channels("CHORUS_MAX_NCHANNELS", "3");
  expectSmallMatrix(p.nranks, 5150, "SmallSlots matrix");
}

std::vector<AlgoParam> smallSlotParams() {
  std::vector<AlgoParam> v = {{nullptr, nullptr, 3}, {nullptr, nullptr, 8}};
  for (const char* algo :
       {"ring", "tree", "chain", "direct", "naive", "oneshot", "twoshot", "cma"}) {
    for (const char* proto : {"simple", "ll"}) {
      // Direct (point-to-point batches), naive, one-/two-shot and single-copy move whole messages:
      // Simple only.
      if (std::string(proto) == "ll" &&
          (std::string(algo) == "direct" || std::string(algo) == "naive" ||
           std::string(algo) == "oneshot" || std::string(algo) == "twoshot" ||
           std::string(algo) == "cma")) {
        continue;
      }
      v.push_back({algo, proto, 5});
    }
  }
  return v;
}

std::string algoParamName(const ::testing::TestParamInfo<AlgoParam>& info) {
  return std::string(info.param.algo ? info.param.algo : "tuner") + "_" +
         (info.param.proto ? info.param.proto : "tuner") + "_" + std::to_string(info.param.nranks) +
         "ranks";
}

INSTANTIATE_TEST_SUITE_P(Threads, SmallSlots, ::testing::ValuesIn(smallSlotParams()),
                         algoParamName);

// Streamed slots (prims/prims.h setStreamingSlots): every primitive's Simple path that writes a
// slot (send, copy-send, receive-copy-send, the reductions that send on, the trees' fan-in and
// fan-out) on small slots, so that a call moves many chunks, against the reference (off unless
// CHORUS_SLOT_STREAM_THRESHOLD is set; 0 streams every call).
class StreamingSlots : public ShmCheckedTestP<AlgoParam> {};

TEST_P(StreamingSlots, Matrix) {
  const AlgoParam p = GetParam();
  ScopedEnv algo("CHORUS_ALGO", p.algo), proto("CHORUS_PROTO", p.proto);
  ScopedEnv stream("CHORUS_SLOT_STREAM_THRESHOLD", "0");
  ScopedEnv buff("CHORUS_BUFFSIZE", "32768");
  expectSmallMatrix(p.nranks, 6160, "StreamingSlots matrix");
}

INSTANTIATE_TEST_SUITE_P(
    Threads, StreamingSlots,
    ::testing::Values(AlgoParam{nullptr, "simple", 3}, AlgoParam{"ring", "simple", 2},
                      AlgoParam{"ring", "simple", 5}, AlgoParam{"tree", "simple", 5},
                      AlgoParam{"chain", "simple", 4}, AlgoParam{"allreduce:hd", "simple", 4},
                      AlgoParam{"allreduce:hd", "simple", 6}),
    [](const ::testing::TestParamInfo<AlgoParam>& info) {
      std::string name = algoParamName(info);
      for (char& c : name)
        if (c == ':') c = '_';
      return name;
    });

// ---------------------------------------------------------------------------------------------
// Explicit group and stream semantics.

class Semantics : public ShmCheckedTest {};

// The classic NCCL single-thread pattern, spelled out.
TEST_F(Semantics, SingleThreadGroupAllReduce) {
  Watchdog watchdog(60, "SingleThreadGroupAllReduce");
  const int n = 4;
  const size_t count = 4099;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::vector<int64_t>> send(n, std::vector<int64_t>(count));
  std::vector<std::vector<int64_t>> recv(n, std::vector<int64_t>(count, -1));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<int64_t>(i) * (r + 1);
  }
  ASSERT_EQ(chorusGroupStart(), chorusSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(chorusAllReduce(send[r].data(), recv[r].data(), count, chorusInt64, chorusSum,
                              comms[r], nullptr),
              chorusSuccess);
  }
  ASSERT_EQ(chorusGroupEnd(), chorusSuccess) << chorusGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(recv[r][i], static_cast<int64_t>(i) * 10) << "rank " << r << " element " << i;
    }
  }
}

// Several different collectives on every communicator inside one group, from one thread.
TEST_F(Semantics, SingleThreadGroupMixedCollectives) {
  Watchdog watchdog(60, "SingleThreadGroupMixedCollectives");
  const int n = 3;
  const size_t count = 1000;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::vector<float>> a(n), ar(n), b(n), g(n);
  for (int r = 0; r < n; ++r) {
    a[r].assign(count, static_cast<float>(r + 1));
    ar[r].assign(count, -1.f);
    b[r].assign(count, r == 1 ? 5.f : 0.f);
    g[r].assign(count * n, -1.f);
  }
  ASSERT_EQ(chorusGroupStart(), chorusSuccess);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(chorusAllReduce(a[r].data(), ar[r].data(), count, chorusFloat32, chorusMax, comms[r],
                              nullptr),
              chorusSuccess);
    EXPECT_EQ(chorusBroadcast(b[r].data(), b[r].data(), count, chorusFloat32, 1, comms[r], nullptr),
              chorusSuccess);
    EXPECT_EQ(chorusAllGather(a[r].data(), g[r].data(), count, chorusFloat32, comms[r], nullptr),
              chorusSuccess);
  }
  ASSERT_EQ(chorusGroupEnd(), chorusSuccess) << chorusGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(ar[r][i], 3.f) << "allreduce rank " << r;
      ASSERT_EQ(b[r][i], 5.f) << "broadcast rank " << r;
      for (int k = 0; k < n; ++k) ASSERT_EQ(g[r][k * count + i], k + 1.f) << "allgather rank " << r;
    }
  }
}

// Each rank's thread issues a group with a collective and Send/Recv.
TEST_F(Semantics, PerThreadGroupCollectiveAndP2P) {
  Watchdog watchdog(60, "PerThreadGroupCollectiveAndP2P");
  const int n = 4;
  const size_t count = 777;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    std::vector<int32_t> s(count, r), sum(count, -1), fromPrev(count, -1);
    chorusGroupStart();
    chorusResult_t e1 =
        chorusAllReduce(s.data(), sum.data(), count, chorusInt32, chorusSum, comms[r], nullptr);
    chorusResult_t e2 = chorusSend(s.data(), count, chorusInt32, (r + 1) % n, comms[r], nullptr);
    chorusResult_t e3 =
        chorusRecv(fromPrev.data(), count, chorusInt32, (r + n - 1) % n, comms[r], nullptr);
    chorusResult_t e4 = chorusGroupEnd();
    if (e1 || e2 || e3 || e4) {
      errors[r] = "calls returned " + std::to_string(e1) + std::to_string(e2) + std::to_string(e3) +
                  std::to_string(e4);
      return;
    }
    for (size_t i = 0; i < count; ++i) {
      if (sum[i] != n * (n - 1) / 2 || fromPrev[i] != (r + n - 1) % n) {
        errors[r] = "element " + std::to_string(i) + ": sum " + std::to_string(sum[i]) +
                    ", from previous " + std::to_string(fromPrev[i]);
        return;
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Operations on one stream run in the order they were enqueued: each step reads the previous
// step's output, and only one synchronize comes at the end.
TEST_F(Semantics, StreamRunsInOrder) {
  Watchdog watchdog(60, "StreamRunsInOrder");
  const int n = 3;
  const size_t count = 20000;
  const int steps = 12;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    chorusStream_t s;
    if (chorusStreamCreate(&s) != chorusSuccess) {
      errors[r] = "chorusStreamCreate failed";
      return;
    }
    // bufs[k+1] = step_k(bufs[k]); the steps alternate AllReduce(sum) and Broadcast from a
    // rotating root.
    std::vector<std::vector<int64_t>> bufs(steps + 1, std::vector<int64_t>(count, -7));
    for (size_t i = 0; i < count; ++i) bufs[0][i] = static_cast<int64_t>(i % 97) + r;
    for (int k = 0; k < steps; ++k) {
      chorusResult_t res;
      if (k % 2 == 0) {
        res = chorusAllReduce(bufs[k].data(), bufs[k + 1].data(), count, chorusInt64, chorusSum,
                              comms[r], s);
      } else {
        const int root = k % n;
        res = chorusBroadcast(bufs[k].data(), bufs[k + 1].data(), count, chorusInt64, root,
                              comms[r], s);
      }
      if (res != chorusSuccess) {
        errors[r] = "enqueue step " + std::to_string(k) + " returned " + resultName(res);
        return;
      }
    }
    const chorusResult_t sync = chorusStreamSynchronize(s);
    if (sync != chorusSuccess) {
      errors[r] = std::string("synchronize returned ") + resultName(sync);
      return;
    }
    if (chorusStreamQuery(s) != chorusSuccess) errors[r] = "query after synchronize not success";
    // Expected: x0 = i%97 + r; sum: n*(i%97) + n(n-1)/2; broadcast keeps it (all equal);
    // each later sum multiplies by n.
    for (size_t i = 0; i < count && errors[r].empty(); ++i) {
      int64_t v = n * static_cast<int64_t>(i % 97) + n * (n - 1) / 2;
      for (int k = 2; k < steps; k += 2) v *= n;
      if (bufs[steps][i] != v) {
        errors[r] = "element " + std::to_string(i) + ": expected " + std::to_string(v) + ", got " +
                    std::to_string(bufs[steps][i]);
      }
    }
    chorusStreamDestroy(s);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// chorusStreamQuery says chorusInProgress while the operation cannot complete (the peer has not
// called yet), and chorusSuccess after chorusStreamSynchronize.
TEST_F(Semantics, StreamQueryInProgressThenSuccess) {
  Watchdog watchdog(60, "StreamQueryInProgressThenSuccess");
  CommSet comms(2);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  chorusStream_t s0;
  ASSERT_EQ(chorusStreamCreate(&s0), chorusSuccess);
  EXPECT_EQ(chorusStreamQuery(s0), chorusSuccess) << "an empty stream is complete";
  std::vector<double> a0(1000, 1.5), r0(1000, 0), a1(1000, 2.25), r1(1000, 0);
  ASSERT_EQ(chorusAllReduce(a0.data(), r0.data(), 1000, chorusFloat64, chorusSum, comms[0], s0),
            chorusSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(chorusStreamQuery(s0), chorusInProgress);
  std::thread peer([&] {
    EXPECT_EQ(
        chorusAllReduce(a1.data(), r1.data(), 1000, chorusFloat64, chorusSum, comms[1], nullptr),
        chorusSuccess);
  });
  EXPECT_EQ(chorusStreamSynchronize(s0), chorusSuccess);
  peer.join();
  EXPECT_EQ(chorusStreamQuery(s0), chorusSuccess);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(r0[i], 3.75);
    ASSERT_EQ(r1[i], 3.75);
  }
  EXPECT_EQ(chorusStreamDestroy(s0), chorusSuccess);
}

// A null stream: the result is there when the call returns (no synchronize exists to call).
TEST_F(Semantics, NullStreamCompletesBeforeReturn) {
  Watchdog watchdog(60, "NullStreamCompletesBeforeReturn");
  const int n = 3;
  CommSet comms(n);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  std::vector<std::string> errors(n);
  runThreads(n, [&](int r) {
    for (int iter = 0; iter < 50 && errors[r].empty(); ++iter) {
      std::vector<uint32_t> in(257, static_cast<uint32_t>(r + iter)), out(257, 0);
      const chorusResult_t res =
          chorusAllReduce(in.data(), out.data(), 257, chorusUint32, chorusMax, comms[r], nullptr);
      const uint32_t want = static_cast<uint32_t>(n - 1 + iter);
      if (res != chorusSuccess) errors[r] = resultName(res);
      for (uint32_t v : out) {
        if (v != want) {
          errors[r] = "iteration " + std::to_string(iter) + ": got " + std::to_string(v);
          break;
        }
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Self-tests of the support code (no communication).
TEST(Support, HalfAndBf16Conversions) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(5.9604645e-08f), 0x0001);
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00);  // tie, to even
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);  // tie, to even
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(floatToHalf(halfToFloat(static_cast<uint16_t>(h))), h);
  }
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(1.00390625f), 0x3f80);  // tie, to even
  EXPECT_EQ(floatToBf16(1.01171875f), 0x3f82);  // tie, to even
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    ASSERT_EQ(floatToBf16(bf16ToFloat(static_cast<uint16_t>(b))), b);
  }
}

TEST(Support, ReferenceAverages) {
  // int8: wrapped sum / nranks, truncated toward zero.
  RefSpec s{chorusInt8, chorusAvg, 5, 3, 64, 0};
  Bytes avg = refAllReduce(s);
  for (size_t i = 0; i < 64; ++i) {
    uint8_t sum = 0;
    for (int r = 0; r < 3; ++r) {
      int8_t v;
      value(chorusInt8, chorusAvg, 5, r, i, &v);
      sum = static_cast<uint8_t>(sum + static_cast<uint8_t>(v));
    }
    EXPECT_EQ(static_cast<int8_t>(avg[i]), static_cast<int8_t>(static_cast<int8_t>(sum) / 3));
  }
}

// The reference's view of the inputs agrees with the generated buffers: with one rank every
// reduction is the input itself.
TEST(Support, ReferenceOfOneRankIsTheInput) {
  for (chorusDataType_t t : kAllTypes) {
    for (chorusRedOp_t op : kAllOps) {
      const RefSpec s{t, op, 77, 1, 5000, 0};
      Bytes input(5000 * typeSize(t));
      fillValues(t, op, 77, 0, 0, 5000, input.data());
      const Bytes ref = refAllReduce(s);
      ASSERT_EQ(ref, input) << typeName(t) << " " << opName(op);
    }
  }
}

TEST(Support, CaseEnumerationIsDeterministicAndCovers) {
  MatrixOptions opt;
  for (int n : kRankCounts) {
    const auto a = enumerateCases(opt, n);
    const auto b = enumerateCases(opt, n);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].describe(n), b[i].describe(n));
    size_t big = 0;
    for (const auto& c : a) big += c.count == kBigCount;
    EXPECT_GT(big, 9u) << "every collective runs the big count";
  }
}

}  // namespace
