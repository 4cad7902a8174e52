// Every error path: the NCCL result code, and chorusGetLastError naming the argument and the
// rank. Argument errors are detected by the calling rank alone, before any communication, so
// most cases call one rank (rank 1 of a 2-rank chorusCommInitAll) from the test's thread.
//
// Codes expected (NCCL's): bad arguments -> chorusInvalidArgument; a call while another thread
// is inside a call on the same communicator, and chorusGroupEnd without chorusGroupStart ->
// chorusInvalidUsage. A destroyed or aborted communicator: chorusInvalidArgument or
// chorusInvalidUsage (NCCL leaves this undefined; either is accepted, success is not).
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm_set.h"
#include "gtest_helpers.h"
#include "result_name.h"
#include "test_types.h"
#include "threads.h"
#include "watchdog.h"

namespace {

using namespace ctest;

constexpr size_t kCount = 16;
// Unknown values within the enums' value ranges (0..15 and 0..7: other values cannot be held by
// a C++ enum object without undefined behaviour).
constexpr chorusDataType_t kBadTypes[] = {static_cast<chorusDataType_t>(chorusNumTypes),
                                          static_cast<chorusDataType_t>(15)};
constexpr chorusRedOp_t kBadOps[] = {static_cast<chorusRedOp_t>(chorusNumOps),
                                     static_cast<chorusRedOp_t>(7)};

struct ErrorCase {
  std::string name;
  std::function<chorusResult_t(chorusComm_t comm)> call;
  chorusResult_t expected;
  std::string arg;  // the argument's name ("a|b": either)
};

class Errors : public ShmCheckedTest {
 protected:
  static constexpr int kRank = 1;  // the rank the bad calls are made on
  static constexpr int kNranks = 2;

  void SetUp() override {
    ShmCheckedTest::SetUp();
    comms_ = std::make_unique<CommSet>(kNranks);
    ASSERT_EQ(comms_->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    a_.assign(kCount * kNranks * 8, 0);
    b_.assign(kCount * kNranks * 8, 0);
  }
  void TearDown() override {
    if (comms_) {
      EXPECT_EQ(comms_->destroyAll(), chorusSuccess);
    }
    comms_.reset();
    ShmCheckedTest::TearDown();
  }

  void expectAll(const std::vector<ErrorCase>& cases) {
    for (const auto& c : cases) {
      SCOPED_TRACE(c.name);
      chorusComm_t comm = (*comms_)[kRank];
      const chorusResult_t res = c.call(comm);
      EXPECT_EQ(res, c.expected) << c.name << ": got " << resultName(res) << " ("
                                 << chorusGetLastError(comm) << ")";
      if (res != c.expected) continue;
      EXPECT_TRUE(Mentions(chorusGetLastError(comm), c.arg, kRank)) << c.name;
      EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), c.arg, kRank))
          << c.name << " (the thread's last error)";
    }
  }

  void* a() { return a_.data(); }
  void* b() { return b_.data(); }

  std::unique_ptr<CommSet> comms_;
  std::vector<unsigned char> a_, b_;
};

// ---------------------------------------------------------------------------------------------

TEST_F(Errors, NullBufferWithPositiveCount) {
  const auto i32 = chorusInt32;
  const size_t n = kCount;
  const int self = kRank, other = 0;
  std::vector<ErrorCase> cases = {
      {"AllReduce sendbuff",
       [&](chorusComm_t c) { return chorusAllReduce(nullptr, b(), n, i32, chorusSum, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"AllReduce recvbuff",
       [&](chorusComm_t c) { return chorusAllReduce(a(), nullptr, n, i32, chorusSum, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
      {"Broadcast sendbuff (root)",
       [&](chorusComm_t c) { return chorusBroadcast(nullptr, b(), n, i32, self, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"Broadcast recvbuff",
       [&](chorusComm_t c) { return chorusBroadcast(a(), nullptr, n, i32, other, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
      {"Reduce sendbuff",
       [&](chorusComm_t c) {
         return chorusReduce(nullptr, b(), n, i32, chorusSum, other, c, nullptr);
       },
       chorusInvalidArgument, "sendbuff"},
      {"Reduce recvbuff (root)",
       [&](chorusComm_t c) {
         return chorusReduce(a(), nullptr, n, i32, chorusSum, self, c, nullptr);
       },
       chorusInvalidArgument, "recvbuff"},
      {"AllGather sendbuff",
       [&](chorusComm_t c) { return chorusAllGather(nullptr, b(), n, i32, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"AllGather recvbuff",
       [&](chorusComm_t c) { return chorusAllGather(a(), nullptr, n, i32, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
      {"ReduceScatter sendbuff",
       [&](chorusComm_t c) {
         return chorusReduceScatter(nullptr, b(), n, i32, chorusSum, c, nullptr);
       },
       chorusInvalidArgument, "sendbuff"},
      {"ReduceScatter recvbuff",
       [&](chorusComm_t c) {
         return chorusReduceScatter(a(), nullptr, n, i32, chorusSum, c, nullptr);
       },
       chorusInvalidArgument, "recvbuff"},
      {"AlltoAll sendbuff",
       [&](chorusComm_t c) { return chorusAlltoAll(nullptr, b(), n, i32, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"AlltoAll recvbuff",
       [&](chorusComm_t c) { return chorusAlltoAll(a(), nullptr, n, i32, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
      {"Gather sendbuff",
       [&](chorusComm_t c) { return chorusGather(nullptr, b(), n, i32, other, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"Gather recvbuff (root)",
       [&](chorusComm_t c) { return chorusGather(a(), nullptr, n, i32, self, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
      {"Scatter sendbuff (root)",
       [&](chorusComm_t c) { return chorusScatter(nullptr, b(), n, i32, self, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"Scatter recvbuff",
       [&](chorusComm_t c) { return chorusScatter(a(), nullptr, n, i32, other, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
      {"Send sendbuff",
       [&](chorusComm_t c) { return chorusSend(nullptr, n, i32, other, c, nullptr); },
       chorusInvalidArgument, "sendbuff"},
      {"Recv recvbuff",
       [&](chorusComm_t c) { return chorusRecv(nullptr, n, i32, other, c, nullptr); },
       chorusInvalidArgument, "recvbuff"},
  };
  expectAll(cases);
}

TEST_F(Errors, UnknownDatatype) {
  std::vector<ErrorCase> cases;
  for (chorusDataType_t t : kBadTypes) {
    const std::string tn = " type " + std::to_string(static_cast<int>(t));
    cases.push_back({"AllReduce" + tn,
                     [&, t](chorusComm_t c) {
                       return chorusAllReduce(a(), b(), kCount, t, chorusSum, c, nullptr);
                     },
                     chorusInvalidArgument, "datatype"});
    cases.push_back(
        {"Broadcast" + tn,
         [&, t](chorusComm_t c) { return chorusBroadcast(a(), b(), kCount, t, 0, c, nullptr); },
         chorusInvalidArgument, "datatype"});
    cases.push_back({"Reduce" + tn,
                     [&, t](chorusComm_t c) {
                       return chorusReduce(a(), b(), kCount, t, chorusSum, 0, c, nullptr);
                     },
                     chorusInvalidArgument, "datatype"});
    cases.push_back(
        {"AllGather" + tn,
         [&, t](chorusComm_t c) { return chorusAllGather(a(), b(), kCount, t, c, nullptr); },
         chorusInvalidArgument, "datatype"});
    cases.push_back({"ReduceScatter" + tn,
                     [&, t](chorusComm_t c) {
                       return chorusReduceScatter(a(), b(), kCount, t, chorusSum, c, nullptr);
                     },
                     chorusInvalidArgument, "datatype"});
    cases.push_back(
        {"AlltoAll" + tn,
         [&, t](chorusComm_t c) { return chorusAlltoAll(a(), b(), kCount, t, c, nullptr); },
         chorusInvalidArgument, "datatype"});
    cases.push_back(
        {"Gather" + tn,
         [&, t](chorusComm_t c) { return chorusGather(a(), b(), kCount, t, 0, c, nullptr); },
         chorusInvalidArgument, "datatype"});
    cases.push_back(
        {"Scatter" + tn,
         [&, t](chorusComm_t c) { return chorusScatter(a(), b(), kCount, t, 0, c, nullptr); },
         chorusInvalidArgument, "datatype"});
    cases.push_back({"Send" + tn,
                     [&, t](chorusComm_t c) { return chorusSend(a(), kCount, t, 0, c, nullptr); },
                     chorusInvalidArgument, "datatype"});
    cases.push_back({"Recv" + tn,
                     [&, t](chorusComm_t c) { return chorusRecv(b(), kCount, t, 0, c, nullptr); },
                     chorusInvalidArgument, "datatype"});
  }
  expectAll(cases);
}

TEST_F(Errors, UnknownOp) {
  std::vector<ErrorCase> cases;
  for (chorusRedOp_t op : kBadOps) {
    const std::string on = " op " + std::to_string(static_cast<int>(op));
    cases.push_back({"AllReduce" + on,
                     [&, op](chorusComm_t c) {
                       return chorusAllReduce(a(), b(), kCount, chorusFloat32, op, c, nullptr);
                     },
                     chorusInvalidArgument, "op"});
    cases.push_back({"Reduce" + on,
                     [&, op](chorusComm_t c) {
                       return chorusReduce(a(), b(), kCount, chorusFloat32, op, 0, c, nullptr);
                     },
                     chorusInvalidArgument, "op"});
    cases.push_back({"ReduceScatter" + on,
                     [&, op](chorusComm_t c) {
                       return chorusReduceScatter(a(), b(), kCount, chorusFloat32, op, c, nullptr);
                     },
                     chorusInvalidArgument, "op"});
  }
  expectAll(cases);
}

TEST_F(Errors, RootOutOfRange) {
  std::vector<ErrorCase> cases;
  for (int root : {kNranks, -1, 1000}) {
    const std::string rn = " root " + std::to_string(root);
    cases.push_back({"Broadcast" + rn,
                     [&, root](chorusComm_t c) {
                       return chorusBroadcast(a(), b(), kCount, chorusInt8, root, c, nullptr);
                     },
                     chorusInvalidArgument, "root"});
    cases.push_back({"Reduce" + rn,
                     [&, root](chorusComm_t c) {
                       return chorusReduce(a(), b(), kCount, chorusInt8, chorusMax, root, c,
                                           nullptr);
                     },
                     chorusInvalidArgument, "root"});
    cases.push_back({"Gather" + rn,
                     [&, root](chorusComm_t c) {
                       return chorusGather(a(), b(), kCount, chorusInt8, root, c, nullptr);
                     },
                     chorusInvalidArgument, "root"});
    cases.push_back({"Scatter" + rn,
                     [&, root](chorusComm_t c) {
                       return chorusScatter(a(), b(), kCount, chorusInt8, root, c, nullptr);
                     },
                     chorusInvalidArgument, "root"});
  }
  expectAll(cases);
}

TEST_F(Errors, PeerOutOfRange) {
  std::vector<ErrorCase> cases;
  for (int peer : {kNranks, -1, 1000}) {
    const std::string pn = " peer " + std::to_string(peer);
    cases.push_back({"Send" + pn,
                     [&, peer](chorusComm_t c) {
                       return chorusSend(a(), kCount, chorusUint8, peer, c, nullptr);
                     },
                     chorusInvalidArgument, "peer"});
    cases.push_back({"Recv" + pn,
                     [&, peer](chorusComm_t c) {
                       return chorusRecv(b(), kCount, chorusUint8, peer, c, nullptr);
                     },
                     chorusInvalidArgument, "peer"});
  }
  expectAll(cases);
}

// count * element size (times nranks where the buffer holds nranks blocks) overflows size_t.
TEST_F(Errors, CountTimesSizeOverflows) {
  const size_t over8 = SIZE_MAX / 8 + 1;  // * 8 overflows
  const size_t over2 = SIZE_MAX / 2 + 1;  // * 2 overflows
  // * 4 fits, * 4 * nranks (2) does not.
  const size_t overBlocks = SIZE_MAX / 8 + 1;
  std::vector<ErrorCase> cases = {
      {"AllReduce float64",
       [&](chorusComm_t c) {
         return chorusAllReduce(a(), b(), over8, chorusFloat64, chorusSum, c, nullptr);
       },
       chorusInvalidArgument, "count"},
      {"AllReduce float16",
       [&](chorusComm_t c) {
         return chorusAllReduce(a(), b(), over2, chorusFloat16, chorusSum, c, nullptr);
       },
       chorusInvalidArgument, "count"},
      {"Broadcast int64",
       [&](chorusComm_t c) { return chorusBroadcast(a(), b(), over8, chorusInt64, 0, c, nullptr); },
       chorusInvalidArgument, "count"},
      {"Reduce bfloat16",
       [&](chorusComm_t c) {
         return chorusReduce(a(), b(), over2, chorusBfloat16, chorusSum, 0, c, nullptr);
       },
       chorusInvalidArgument, "count"},
      {"AllGather int32 x nranks",
       [&](chorusComm_t c) {
         return chorusAllGather(a(), b(), overBlocks, chorusInt32, c, nullptr);
       },
       chorusInvalidArgument, "sendcount|count"},
      {"ReduceScatter int32 x nranks",
       [&](chorusComm_t c) {
         return chorusReduceScatter(a(), b(), overBlocks, chorusInt32, chorusSum, c, nullptr);
       },
       chorusInvalidArgument, "recvcount|count"},
      {"AlltoAll int32 x nranks",
       [&](chorusComm_t c) {
         return chorusAlltoAll(a(), b(), overBlocks, chorusInt32, c, nullptr);
       },
       chorusInvalidArgument, "count"},
      {"Gather int32 x nranks",
       [&](chorusComm_t c) {
         return chorusGather(a(), b(), overBlocks, chorusInt32, 0, c, nullptr);
       },
       chorusInvalidArgument, "count"},
      {"Scatter int32 x nranks",
       [&](chorusComm_t c) {
         return chorusScatter(a(), b(), overBlocks, chorusInt32, 0, c, nullptr);
       },
       chorusInvalidArgument, "count"},
      {"Send uint64",
       [&](chorusComm_t c) { return chorusSend(a(), over8, chorusUint64, 0, c, nullptr); },
       chorusInvalidArgument, "count"},
      {"Recv float32",
       [&](chorusComm_t c) {
         return chorusRecv(b(), SIZE_MAX / 4 + 1, chorusFloat32, 0, c, nullptr);
       },
       chorusInvalidArgument, "count"},
  };
  expectAll(cases);
}

TEST_F(Errors, NullCommunicator) {
  const chorusResult_t res =
      chorusAllReduce(a(), b(), kCount, chorusInt32, chorusSum, nullptr, nullptr);
  EXPECT_EQ(res, chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "comm"));
  EXPECT_EQ(chorusSend(a(), kCount, chorusInt32, 0, nullptr, nullptr), chorusInvalidArgument);
  EXPECT_EQ(chorusBroadcast(a(), b(), kCount, chorusInt32, 0, nullptr, nullptr),
            chorusInvalidArgument);
  int v = 0;
  EXPECT_EQ(chorusCommCount(nullptr, &v), chorusInvalidArgument);
  EXPECT_EQ(chorusCommUserRank(nullptr, &v), chorusInvalidArgument);
  chorusResult_t async;
  EXPECT_EQ(chorusCommGetAsyncError(nullptr, &async), chorusInvalidArgument);
  chorusComm_t out = nullptr;
  EXPECT_EQ(chorusCommSplit(nullptr, 0, 0, &out, nullptr), chorusInvalidArgument);
  // NCCL: destroying or aborting NULL is a no-op that succeeds.
  EXPECT_EQ(chorusCommDestroy(nullptr), chorusSuccess);
  EXPECT_EQ(chorusCommAbort(nullptr), chorusSuccess);
}

TEST_F(Errors, NullOutputPointers) {
  chorusComm_t c = (*comms_)[kRank];
  EXPECT_EQ(chorusCommCount(c, nullptr), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(c), "count"));
  EXPECT_EQ(chorusCommUserRank(c, nullptr), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(c), "rank"));
  EXPECT_EQ(chorusCommGetAsyncError(c, nullptr), chorusInvalidArgument);
  EXPECT_EQ(chorusGetVersion(nullptr), chorusInvalidArgument);
  EXPECT_EQ(chorusGetUniqueId(nullptr), chorusInvalidArgument);
  EXPECT_EQ(chorusStreamCreate(nullptr), chorusInvalidArgument);
  int procRank, nprocs;
  EXPECT_EQ(chorusUniqueIdFromEnv(nullptr, &procRank, &nprocs), chorusInvalidArgument);
}

// Inside a group the bad call fails at once, and chorusGroupEnd reports the group's error.
TEST_F(Errors, BadCallInsideGroup) {
  chorusComm_t c = (*comms_)[kRank];
  ASSERT_EQ(chorusGroupStart(), chorusSuccess);
  EXPECT_EQ(chorusAllReduce(nullptr, b(), kCount, chorusInt32, chorusSum, c, nullptr),
            chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(c), "sendbuff", kRank));
  EXPECT_EQ(chorusGroupEnd(), chorusInvalidArgument);
}

TEST_F(Errors, GroupEndWithoutStart) {
  EXPECT_EQ(chorusGroupEnd(), chorusInvalidUsage);
  // And the group machinery still works afterwards.
  EXPECT_EQ(chorusGroupStart(), chorusSuccess);
  EXPECT_EQ(chorusGroupEnd(), chorusSuccess);
}

// After argument errors the communicator works normally.
TEST_F(Errors, CommunicatorUsableAfterArgumentErrors) {
  Watchdog watchdog(60, "CommunicatorUsableAfterArgumentErrors");
  chorusComm_t c = (*comms_)[kRank];
  EXPECT_EQ(chorusAllReduce(nullptr, b(), kCount, chorusInt32, chorusSum, c, nullptr),
            chorusInvalidArgument);
  EXPECT_EQ(chorusBroadcast(a(), b(), kCount, chorusInt32, 7, c, nullptr), chorusInvalidArgument);
  EXPECT_EQ(chorusSend(a(), kCount, chorusInt32, 9, c, nullptr), chorusInvalidArgument);
  std::vector<std::vector<int32_t>> in(kNranks, std::vector<int32_t>(kCount)), out = in;
  std::vector<chorusResult_t> res(kNranks);
  runThreads(kNranks, [&](int r) {
    for (size_t i = 0; i < kCount; ++i) in[r][i] = r * 100 + static_cast<int>(i);
    res[r] = chorusAllReduce(in[r].data(), out[r].data(), kCount, chorusInt32, chorusSum,
                             (*comms_)[r], nullptr);
  });
  for (int r = 0; r < kNranks; ++r) {
    ASSERT_EQ(res[r], chorusSuccess) << "rank " << r;
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[r][i], 100 + 2 * static_cast<int>(i));
  }
}

// Count 0 with null buffers is not an error (every rank calls, as for any collective).
TEST_F(Errors, ZeroCountWithNullBuffersSucceeds) {
  Watchdog watchdog(60, "ZeroCountWithNullBuffersSucceeds");
  std::vector<std::string> errors(kNranks);
  runThreads(kNranks, [&](int r) {
    chorusComm_t c = (*comms_)[r];
    auto check = [&](const char* what, chorusResult_t res) {
      if (res != chorusSuccess && errors[r].empty()) {
        errors[r] =
            std::string(what) + " returned " + resultName(res) + ": " + chorusGetLastError(c);
      }
    };
    check("AllReduce", chorusAllReduce(nullptr, nullptr, 0, chorusFloat32, chorusSum, c, nullptr));
    check("Broadcast", chorusBroadcast(nullptr, nullptr, 0, chorusFloat32, 0, c, nullptr));
    check("Reduce", chorusReduce(nullptr, nullptr, 0, chorusFloat32, chorusSum, 1, c, nullptr));
    check("AllGather", chorusAllGather(nullptr, nullptr, 0, chorusFloat32, c, nullptr));
    check("ReduceScatter",
          chorusReduceScatter(nullptr, nullptr, 0, chorusFloat32, chorusSum, c, nullptr));
    check("AlltoAll", chorusAlltoAll(nullptr, nullptr, 0, chorusFloat32, c, nullptr));
    check("Gather", chorusGather(nullptr, nullptr, 0, chorusFloat32, 0, c, nullptr));
    check("Scatter", chorusScatter(nullptr, nullptr, 0, chorusFloat32, 1, c, nullptr));
    check("GroupStart", chorusGroupStart());
    check("Send", chorusSend(nullptr, 0, chorusFloat32, 1 - r, c, nullptr));
    check("Recv", chorusRecv(nullptr, 0, chorusFloat32, 1 - r, c, nullptr));
    check("GroupEnd", chorusGroupEnd());
  });
  for (int r = 0; r < kNranks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Buffers a rank does not use may be NULL: Gather's recvbuff and Scatter's sendbuff on
// non-roots (the header: "root only").
TEST_F(Errors, GatherScatterNonRootUnusedBufferMayBeNull) {
  Watchdog watchdog(60, "GatherScatterNonRootUnusedBufferMayBeNull");
  std::vector<std::string> errors(kNranks);
  runThreads(kNranks, [&](int r) {
    chorusComm_t c = (*comms_)[r];
    std::vector<int32_t> mine(kCount, r + 1), all(kCount * kNranks, -1);
    chorusResult_t res = chorusGather(mine.data(), r == 0 ? all.data() : nullptr, kCount,
                                      chorusInt32, 0, c, nullptr);
    if (res != chorusSuccess) {
      errors[r] = std::string("Gather returned ") + resultName(res) + ": " + chorusGetLastError(c);
      return;
    }
    if (r == 0 && (all[0] != 1 || all[kCount] != 2)) errors[r] = "Gather result wrong";
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    std::vector<int32_t> got(kCount, -1);
    res = chorusScatter(r == 0 ? all.data() : nullptr, got.data(), kCount, chorusInt32, 0, c,
                        nullptr);
    if (res != chorusSuccess) {
      errors[r] = std::string("Scatter returned ") + resultName(res) + ": " + chorusGetLastError(c);
      return;
    }
    if (got[0] != static_cast<int32_t>(r * kCount)) errors[r] = "Scatter result wrong";
  });
  for (int r = 0; r < kNranks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// NCCL: Broadcast reads sendbuff only on the root, Reduce writes recvbuff only on the root, so
// non-roots may pass NULL there.
TEST_F(Errors, BroadcastReduceNonRootUnusedBufferMayBeNull) {
  Watchdog watchdog(60, "BroadcastReduceNonRootUnusedBufferMayBeNull");
  std::vector<std::string> errors(kNranks);
  runThreads(kNranks, [&](int r) {
    chorusComm_t c = (*comms_)[r];
    std::vector<int32_t> src(kCount, 42), dst(kCount, -1);
    chorusResult_t res = chorusBroadcast(r == 1 ? src.data() : nullptr, dst.data(), kCount,
                                         chorusInt32, 1, c, nullptr);
    if (res != chorusSuccess) {
      errors[r] =
          std::string("Broadcast returned ") + resultName(res) + ": " + chorusGetLastError(c);
      return;
    }
    if (dst[kCount - 1] != 42) errors[r] = "Broadcast result wrong";
    std::vector<int32_t> out(kCount, -1);
    res = chorusReduce(src.data(), r == 1 ? out.data() : nullptr, kCount, chorusInt32, chorusSum, 1,
                       c, nullptr);
    if (res != chorusSuccess) {
      errors[r] = std::string("Reduce returned ") + resultName(res) + ": " + chorusGetLastError(c);
      return;
    }
    if (r == 1 && out[0] != 84) errors[r] = "Reduce result wrong";
  });
  for (int r = 0; r < kNranks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A call on a communicator while another thread is inside a call on it: chorusInvalidUsage,
// and the call in progress is not disturbed.
TEST_F(Errors, CallWhileAnotherThreadIsInsideACall) {
  Watchdog watchdog(60, "CallWhileAnotherThreadIsInsideACall");
  const size_t n = 1000;
  std::vector<int32_t> in0(n, 3), out0(n, -1), in1(n, 4), out1(n, -1), inX(n, 5), outX(n, -1);
  std::atomic<int> done{0};
  std::atomic<bool> calling{false};
  chorusResult_t res0 = chorusInternalError, res1 = chorusInternalError;
  std::thread t0([&] {
    calling = true;
    res0 =
        chorusAllReduce(in0.data(), out0.data(), n, chorusInt32, chorusSum, (*comms_)[0], nullptr);
    done++;
  });
  // Rank 0's thread is then waiting inside AllReduce for rank 1.
  while (!calling) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(done.load(), 0) << "AllReduce returned without its peer";
  const chorusResult_t wrong =
      chorusAllReduce(inX.data(), outX.data(), n, chorusInt32, chorusSum, (*comms_)[0], nullptr);
  EXPECT_EQ(wrong, chorusInvalidUsage) << resultName(wrong);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "", 0)) << "the thread's last error";
  EXPECT_NE(std::string(chorusGetLastError(nullptr)), "");
  // Another kind of call is refused as well.
  const chorusResult_t wrong2 =
      chorusBroadcast(inX.data(), outX.data(), n, chorusInt32, 0, (*comms_)[0], nullptr);
  EXPECT_EQ(wrong2, chorusInvalidUsage) << resultName(wrong2);
  std::thread t1([&] {
    res1 =
        chorusAllReduce(in1.data(), out1.data(), n, chorusInt32, chorusSum, (*comms_)[1], nullptr);
  });
  t0.join();
  t1.join();
  EXPECT_EQ(res0, chorusSuccess);
  EXPECT_EQ(res1, chorusSuccess);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out0[i], 7);
    ASSERT_EQ(out1[i], 7);
    ASSERT_EQ(outX[i], -1) << "the refused call wrote its recvbuff";
  }
}

// ---------------------------------------------------------------------------------------------
// Destroyed and aborted communicators, init errors: their own fixture.

class CommErrors : public ShmCheckedTest {};

TEST_F(CommErrors, DestroyedCommunicator) {
  Watchdog watchdog(60, "DestroyedCommunicator");
  chorusComm_t c = nullptr;
  ASSERT_EQ(chorusCommInitAll(&c, 1, nullptr), chorusSuccess);
  ASSERT_EQ(chorusCommDestroy(c), chorusSuccess);
  std::vector<float> a(8, 1.f), b(8, 0.f);
  const chorusResult_t res =
      chorusAllReduce(a.data(), b.data(), 8, chorusFloat32, chorusSum, c, nullptr);
  EXPECT_TRUE(res == chorusInvalidArgument || res == chorusInvalidUsage) << resultName(res);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "comm"));
  int v;
  const chorusResult_t cnt = chorusCommCount(c, &v);
  EXPECT_TRUE(cnt == chorusInvalidArgument || cnt == chorusInvalidUsage) << resultName(cnt);
  const chorusResult_t again = chorusCommDestroy(c);
  EXPECT_TRUE(again == chorusInvalidArgument || again == chorusInvalidUsage)
      << "destroying twice: " << resultName(again);
  EXPECT_EQ(b[0], 0.f);
}

TEST_F(CommErrors, AbortedCommunicator) {
  Watchdog watchdog(60, "AbortedCommunicator");
  chorusComm_t c[2] = {nullptr, nullptr};
  ASSERT_EQ(chorusCommInitAll(c, 2, nullptr), chorusSuccess);
  ASSERT_EQ(chorusCommAbort(c[0]), chorusSuccess);
  std::vector<float> a(8, 1.f), b(8, 0.f);
  const chorusResult_t res =
      chorusAllReduce(a.data(), b.data(), 8, chorusFloat32, chorusSum, c[0], nullptr);
  EXPECT_TRUE(res == chorusInvalidArgument || res == chorusInvalidUsage) << resultName(res);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "comm"));
  const chorusResult_t send = chorusSend(a.data(), 8, chorusFloat32, 1, c[0], nullptr);
  EXPECT_TRUE(send == chorusInvalidArgument || send == chorusInvalidUsage) << resultName(send);
  EXPECT_EQ(chorusCommAbort(c[1]), chorusSuccess);
}

TEST_F(CommErrors, InitArguments) {
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  chorusComm_t c = nullptr;
  EXPECT_EQ(chorusCommInitRank(&c, 0, id, 0), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "nranks"));
  EXPECT_EQ(chorusCommInitRank(&c, -3, id, 0), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "nranks"));
  EXPECT_EQ(chorusCommInitRank(&c, 2, id, 2), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "rank"));
  EXPECT_EQ(chorusCommInitRank(&c, 2, id, -1), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "rank"));
  EXPECT_EQ(chorusCommInitRank(nullptr, 1, id, 0), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "comm"));
  EXPECT_EQ(c, nullptr);

  chorusComm_t comms[2];
  EXPECT_EQ(chorusCommInitAll(comms, 0, nullptr), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "ndev"));
  EXPECT_EQ(chorusCommInitAll(nullptr, 2, nullptr), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "comms|comm"));

  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_EQ(chorusCommInitRankConfig(&c, 1, id, 0, &config), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "config"));
  chorusConfig_t config2 = CHORUS_CONFIG_INITIALIZER;
  config2.size = 3;
  EXPECT_EQ(chorusCommInitRankConfig(&c, 1, id, 0, &config2), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(nullptr), "config"));
}

TEST_F(CommErrors, SplitArguments) {
  Watchdog watchdog(60, "SplitArguments");
  CommSet comms(1);
  ASSERT_EQ(comms.initResult(), chorusSuccess);
  EXPECT_EQ(chorusCommSplit(comms[0], 0, 0, nullptr, nullptr), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(comms[0]), "newcomm", 0));
  chorusComm_t out = nullptr;
  EXPECT_EQ(chorusCommSplit(comms[0], -5, 0, &out, nullptr), chorusInvalidArgument);
  EXPECT_TRUE(Mentions(chorusGetLastError(comms[0]), "color", 0));
  EXPECT_EQ(out, nullptr);
}

TEST(TypeSize, MatchesTheTypes) {
  for (chorusDataType_t t : kAllTypes) EXPECT_EQ(chorusTypeSize(t), typeSize(t)) << typeName(t);
  for (chorusDataType_t t : kBadTypes) EXPECT_EQ(chorusTypeSize(t), 0u);
}

}  // namespace
