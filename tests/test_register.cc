// Registered buffers (chorusMemAlloc, chorusCommRegister) and the zero-copy AllReduce /
// ReduceScatter (algo/zerocopy.cc): results against a reference on threads and processes,
// mixed registered and unregistered ranks, deregistration, argument errors, a killed peer.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "handstart.h"
#include "reg_check.h"

namespace {

using regcheck::Buffers;

// n ranks as threads of this process; rank r's buffers as how(r) says.
std::vector<std::string> runThreads(int n, Buffers (*how)(int)) {
  std::vector<chorusComm_t> comms(static_cast<size_t>(n));
  EXPECT_EQ(chorusCommInitAll(comms.data(), n, nullptr), chorusSuccess);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back(
        [&, r] { errors[size_t(r)] = regcheck::runAll(comms[size_t(r)], r, n, how(r)); });
  for (auto& t : threads) t.join();
  for (chorusComm_t c : comms) chorusCommDestroy(c);
  return errors;
}

class RegisteredThreads : public ::testing::TestWithParam<int> {};

TEST_P(RegisteredThreads, MemAllocBuffers) {
  for (const std::string& e : runThreads(GetParam(), [](int) { return Buffers::kMemAlloc; }))
    EXPECT_EQ(e, "");
}
TEST_P(RegisteredThreads, PlainBuffers) {
  for (const std::string& e : runThreads(GetParam(), [](int) { return Buffers::kPlainRegistered; }))
    EXPECT_EQ(e, "");
}
TEST_P(RegisteredThreads, MixedWithAnUnregisteredRank) {
  for (const std::string& e : runThreads(
           GetParam(), [](int r) { return r == 1 ? Buffers::kUnregistered : Buffers::kMemAlloc; }))
    EXPECT_EQ(e, "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, RegisteredThreads, ::testing::Values(2, 3, 4));

// The same with the zero-copy algorithm forced for every size (CHORUS_ALGO is read at init).
TEST(RegisteredThreadsForced, EverySizeZeroCopy) {
  setenv("CHORUS_ALGO", "allreduce:zerocopy;reducescatter:zerocopy;allgather:zerocopy", 1);
  const auto mem = runThreads(3, [](int) { return Buffers::kMemAlloc; });
  const auto mixed =
      runThreads(3, [](int r) { return r == 2 ? Buffers::kUnregistered : Buffers::kMemAlloc; });
  unsetenv("CHORUS_ALGO");
  for (const std::string& e : mem) EXPECT_EQ(e, "");
  for (const std::string& e : mixed) EXPECT_EQ(e, "");
}

TEST(RegisteredTuner, PicksZeroCopyOnlyOnceRegistered) {
  std::vector<chorusComm_t> comms(2);
  ASSERT_EQ(chorusCommInitAll(comms.data(), 2, nullptr), chorusSuccess);
  chorusChoice_t c{};
  ASSERT_EQ(chorusTunerChoice(comms[0], "allreduce", 1 << 20, chorusFloat32, &c), chorusSuccess);
  EXPECT_STRNE(c.algorithm, "zerocopy");
  std::vector<void*> bufs(2), handles(2);
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r)
    t.emplace_back([&, r] {
      ASSERT_EQ(chorusMemAlloc(&bufs[size_t(r)], 4 << 20), chorusSuccess);
      ASSERT_EQ(chorusCommRegister(comms[size_t(r)], bufs[size_t(r)], 4 << 20, &handles[size_t(r)]),
                chorusSuccess)
          << chorusGetLastError(comms[size_t(r)]);
    });
  for (auto& x : t) x.join();
  ASSERT_EQ(chorusTunerChoice(comms[0], "allreduce", 1 << 20, chorusFloat32, &c), chorusSuccess);
  EXPECT_STREQ(c.algorithm, "zerocopy");
  ASSERT_EQ(chorusTunerChoice(comms[0], "reducescatter", 1 << 19, chorusFloat32, &c),
            chorusSuccess);
  EXPECT_STREQ(c.algorithm, "zerocopy");
  ASSERT_EQ(chorusTunerChoice(comms[0], "allgather", 1 << 18, chorusFloat32, &c), chorusSuccess);
  EXPECT_STREQ(c.algorithm, "zerocopy");
  t.clear();
  for (int r = 0; r < 2; ++r)
    t.emplace_back([&, r] {
      EXPECT_EQ(chorusCommDeregister(comms[size_t(r)], handles[size_t(r)]), chorusSuccess);
    });
  for (auto& x : t) x.join();
  ASSERT_EQ(chorusTunerChoice(comms[0], "allreduce", 1 << 20, chorusFloat32, &c), chorusSuccess);
  EXPECT_STRNE(c.algorithm, "zerocopy");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(chorusMemFree(bufs[size_t(r)]), chorusSuccess);
    chorusCommDestroy(comms[size_t(r)]);
  }
}

TEST(RegisteredErrors, BadArgumentsNameTheArgumentAndTheRank) {
  void* p = nullptr;
  EXPECT_EQ(chorusMemAlloc(nullptr, 10), chorusInvalidArgument);
  EXPECT_EQ(chorusMemAlloc(&p, 0), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("size"), std::string::npos);
  int local = 0;
  EXPECT_EQ(chorusMemFree(&local), chorusInvalidArgument);
  std::vector<chorusComm_t> comms(1);
  ASSERT_EQ(chorusCommInitAll(comms.data(), 1, nullptr), chorusSuccess);
  void* h = nullptr;
  EXPECT_EQ(chorusCommRegister(nullptr, &local, 4, &h), chorusInvalidArgument);
  EXPECT_EQ(chorusCommRegister(comms[0], nullptr, 4, &h), chorusInvalidArgument);
  std::string msg = chorusGetLastError(comms[0]);
  EXPECT_NE(msg.find("buff"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_EQ(chorusCommRegister(comms[0], &local, 0, &h), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(comms[0])).find("size"), std::string::npos);
  EXPECT_EQ(chorusCommRegister(comms[0], &local, 4, nullptr), chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(comms[0])).find("handle"), std::string::npos);
  EXPECT_EQ(chorusCommDeregister(comms[0], reinterpret_cast<void*>(uintptr_t(77))),
            chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(comms[0])).find("handle"), std::string::npos);
  ASSERT_EQ(chorusCommRegister(comms[0], &local, sizeof(local), &h), chorusSuccess);
  EXPECT_EQ(chorusCommDeregister(comms[0], h), chorusSuccess);
  EXPECT_EQ(chorusCommDeregister(comms[0], h), chorusInvalidArgument);  // twice
  chorusCommDestroy(comms[0]);
}

// Processes: chorusMemAlloc memory mapped by the peers.
std::vector<ctest::HandRank> runProcs(int n, const std::string& mode, double seconds) {
  auto ranks = ctest::startRanksByHand(REG_WORKER_PATH, n, 1, {"--mode", mode}, "reg-" + mode);
  ctest::waitRanksByHand(ranks, seconds);
  return ranks;
}

class RegisteredProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};
TEST_P(RegisteredProcesses, MatchTheReference) {
  const auto [n, mode] = GetParam();
  for (auto& r : runProcs(n, mode, 240)) {
    const std::string out = r.output();
    EXPECT_EQ(r.status, 0) << out;
    EXPECT_NE(out.find("OK rank="), std::string::npos) << out;
    EXPECT_EQ(out.find("cannot map"), std::string::npos) << out;  // the zero-copy path ran
  }
}
INSTANTIATE_TEST_SUITE_P(Modes, RegisteredProcesses,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(std::string("memalloc"),
                                                              std::string("mixed"))));
INSTANTIATE_TEST_SUITE_P(Plain, RegisteredProcesses,
                         ::testing::Combine(::testing::Values(2),
                                            ::testing::Values(std::string("plain"))));

TEST(RegisteredKill, SurvivorsNameTheKilledRank) {
  auto ranks = runProcs(3, "kill", 120);
  ASSERT_EQ(ranks.size(), 3u);
  for (int r : {0, 2}) {
    const std::string out = ranks[size_t(r)].output();
    const size_t at = out.find("FAILED rank=");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    EXPECT_NE(line.find("rank 1"), std::string::npos) << out;
  }
}

}  // namespace
