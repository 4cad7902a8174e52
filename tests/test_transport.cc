// The transport seam (src/comm/transport.h): the loopback transport (src/loopback/), written
// against the interface only, carries every FIFO when CHORUS_TRANSPORT=loopback. Thread ranks
// run AllReduce, AllGather, Broadcast, ReduceScatter and Send/Recv through it, at 2, 3 and 4
// ranks, with the tuner's choice and with ring / tree forced in both protocols; tests/support's
// matrix checks every result against its own reference (tests/support/reference.h). Its FIFO
// blocks exist while the communicators do and are freed with them. An unknown transport name
// fails init with a message naming it. FifoLayout and FifoHandoff check the FIFO itself: where
// its slots lie, and how a receiver judges a link from the sender's time stamps.
#include <chorus/chorus.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "base/tsc.h"
#include "comm/plan.h"
#include "comm_set.h"
#include "loopback/loopback.h"
#include "matrix.h"
#include "net/tcp.h"
#include "scoped_env.h"
#include "threads.h"
#include "transport/fifo.h"
#include "tune/tuner.h"
#include "watchdog.h"

namespace {

using namespace ctest;

struct SeamParam {
  const char* algo;  // nullptr: the tuner's choice
  const char* proto;
  int nranks;
};

void PrintTo(const SeamParam& p, std::ostream* os) {
  *os << (p.algo ? p.algo : "tuner") << "/" << (p.proto ? p.proto : "tuner") << " x " << p.nranks
      << " ranks";
}

class Loopback : public ::testing::TestWithParam<SeamParam> {};

TEST_P(Loopback, Matrix) {
  const SeamParam p = GetParam();
  ScopedEnv transport("CHORUS_TRANSPORT", "loopback");
  ScopedEnv algo("CHORUS_ALGO", p.algo), proto("CHORUS_PROTO", p.proto);
  ScopedEnv buff("CHORUS_BUFFSIZE", "65536"), ll("CHORUS_LL_BUFFSIZE", "65536");
  Watchdog watchdog(120, "loopback transport matrix");
  const long before = chorus::loopbackBlocksLive();
  {
    CommSet comms(p.nranks);
    ASSERT_EQ(comms.initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    // One FIFO block per rank: the FIFOs are the loopback transport's.
    EXPECT_EQ(chorus::loopbackBlocksLive() - before, p.nranks);
    MatrixOptions opt;
    opt.colls = {Coll::AllReduce, Coll::AllGather, Coll::Broadcast, Coll::ReduceScatter,
                 Coll::SendRecv};
    opt.counts = {0, 1, 7, 1000, 54321};
    opt.big = BigPolicy::None;
    opt.seed = 4242;
    std::vector<MatrixResult> results(size_t(p.nranks));
    runThreads(p.nranks,
               [&](int r) { results[size_t(r)] = runMatrix(comms[r], r, p.nranks, opt); });
    MatrixResult all;
    for (const auto& r : results) all.merge(r, opt.maxMessages);
    EXPECT_GT(all.cases, 0u);
    EXPECT_EQ(all.failures, 0u) << all.summary();
    EXPECT_EQ(comms.destroyAll(), chorusSuccess);
  }
  EXPECT_EQ(chorus::loopbackBlocksLive(), before);
}

std::vector<SeamParam> seamParams() {
  std::vector<SeamParam> v;
  for (int n : {2, 3, 4}) {
    v.push_back({nullptr, nullptr, n});
    for (const char* algo : {"ring", "tree"})
      for (const char* proto : {"simple", "ll"}) v.push_back({algo, proto, n});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Transport, Loopback, ::testing::ValuesIn(seamParams()),
                         [](const ::testing::TestParamInfo<SeamParam>& info) {
                           return std::string(info.param.algo ? info.param.algo : "tuner") + "_" +
                                  (info.param.proto ? info.param.proto : "tuner") + "_" +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

// The tuner picks only the protocols every peer's transport carries (Shape::protos, set by init
// from Transport::protocols). With the overrides allowing LL alone (as CHORUS_PROTO=ll would),
// the full set picks LL at every size; the TCP transport's set (Simple alone) never does, the
// collective falling back to Simple. Across nodes, where TCP carries the FIFOs, LL could not run.
TEST(TransportSeam, TheTunerPicksOnlyWhatTheTransportsCarry) {
  EXPECT_EQ(chorus::kTcpProtocols, 1u << int(chorus::Proto::kSimple));
  chorus::TunerEnv env = chorus::readTunerEnv();
  for (uint8_t& allowed : env.protoAllowed) allowed = 1u << int(chorus::Proto::kLL);
  for (uint8_t protos : {uint8_t(0xff), chorus::kTcpProtocols})
    for (int n : {2, 4})
      for (chorus::OpKind k :
           {chorus::OpKind::kAllReduce, chorus::OpKind::kAllGather, chorus::OpKind::kReduceScatter})
        for (size_t bytes = 8; bytes <= (size_t{1} << 20); bytes *= 4) {
          chorus::Shape shape{n, 1, true};
          shape.treeDepth = 1;
          shape.protos = protos;
          const chorus::Choice c = chorus::chooseForShape(shape, 2, k, bytes, env);
          EXPECT_EQ(c.proto, protos == 0xff ? chorus::Proto::kLL : chorus::Proto::kSimple)
              << chorus::collectiveKey(k) << " " << bytes << " bytes on " << n
              << " ranks, transports carry 0x" << std::hex << int(protos);
          // Flagged (init warns once per collective) only where the overrides were set aside.
          EXPECT_EQ(c.overridesIgnored, protos != 0xff)
              << chorus::collectiveKey(k) << " " << bytes << " bytes on " << n << " ranks";
        }
}

TEST(TransportSeam, UnknownNameFailsInit) {
  ScopedEnv transport("CHORUS_TRANSPORT", "carrier-pigeon");
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  chorusComm_t comm = nullptr;
  EXPECT_EQ(chorusCommInitRank(&comm, 1, id, 0), chorusInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("carrier-pigeon"), std::string::npos)
      << chorusGetLastError(nullptr);
}

// Where a Simple FIFO's slots lie (fifo.h): their data at least 32 bytes, mod 4 KiB, from the
// page offsets users' buffers start at (0 mod 32: pages, tensors; 16: a large malloc), so copies
// and reductions between them never stall on 4K aliasing; no two slots overlap; the slots take at
// most one page beyond their data (8 ranks' FIFOs must fit a container's 64 MiB /dev/shm).
TEST(FifoLayout, SimpleSlotsStayOffUsersPageOffsetsAndPacked) {
  for (size_t slotBytes = chorus::kSlotPage; slotBytes <= (size_t{512} << 10); slotBytes *= 2) {
    const size_t bytes = chorus::fifoSlotsBytes(slotBytes);
    EXPECT_EQ(bytes % chorus::kSlotPage, 0u) << slotBytes;
    EXPECT_LE(bytes, chorus::kNSteps * slotBytes + chorus::kSlotPage) << slotBytes;
    char* slots = static_cast<char*>(std::aligned_alloc(chorus::kSlotPage, bytes));
    ASSERT_NE(slots, nullptr);
    const char* prevEnd = slots;
    for (uint64_t s = 0; s < 2 * chorus::kNSteps; ++s) {
      const char* header = chorus::slotAt(slots, s, slotBytes);
      const char* data = header + chorus::kSlotHeaderBytes;
      const size_t at = size_t(data - slots);
      EXPECT_EQ(size_t(header - slots) % 16, 0u) << slotBytes << " slot " << s;
      EXPECT_LE(at + slotBytes, bytes) << slotBytes << " slot " << s;
      if (s < chorus::kNSteps) {
        EXPECT_GE(header, prevEnd) << slotBytes << " slot " << s;
        prevEnd = data + slotBytes;
      } else {
        EXPECT_EQ(header, chorus::slotAt(slots, s - chorus::kNSteps, slotBytes));
      }
      for (size_t user : {size_t{0}, size_t{16}}) {
        const size_t d = (at + chorus::kSlotPage - user) % chorus::kSlotPage;
        EXPECT_GE(std::min(d, chorus::kSlotPage - d), 32u)
            << slotBytes << "-byte slot " << s << ": data " << at % chorus::kSlotPage
            << " bytes into a page, a user buffer " << user;
      }
    }
    std::free(slots);
  }
}

// How a receiver judges a link (fifo.h RecvConn::noteHandoff), on a FIFO in this process's
// memory: posts it sees long after they were stamped (a sleep between) make it ask for streamed
// slots after a window, posts it sees at once (the same thread) make it ask for cached ones again;
// the stamp never shows in the slot's size, and a post without one is not judged.
TEST(FifoHandoff, SlowHandOffsAskForStreamedSlotsAndFastOnesForCachedAgain) {
  if (!chorus::tscUsable()) GTEST_SKIP() << "no time-stamp counter that every core reads alike";
  const size_t slotBytes = chorus::kSlotPage;
  const size_t bytes = chorus::kSlotPage + chorus::fifoSlotsBytes(slotBytes);
  char* block = static_cast<char*>(std::aligned_alloc(chorus::kSlotPage, bytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 0, bytes);
  chorus::SendConn s;
  chorus::RecvConn r;
  s.ctrl = r.ctrl = reinterpret_cast<chorus::FifoCtrl*>(block);
  s.slots = r.slots = block + chorus::kSlotPage;
  s.slotBytes = r.slotBytes = slotBytes;
  r.timed = true;
  const chorus::HandoffJudge judge = chorus::HandoffJudge::forCounter(chorus::tscPerNs());
  auto handOff = [&](bool stamp, int sleepUs, uint64_t size) {
    ASSERT_TRUE(s.slotFree());
    s.post(size | chorus::kSlotMessageStart, stamp);
    if (sleepUs > 0) usleep(useconds_t(sleepUs));
    ASSERT_TRUE(r.dataReady());
    r.noteHandoff(judge);
    EXPECT_EQ(r.slotSize(), size);
    EXPECT_EQ(r.slotWord(), size | chorus::kSlotMessageStart);
    EXPECT_TRUE(r.slotStartsMessage());
    r.release();
  };
  for (uint32_t i = 0; i + 1 < chorus::HandoffJudge::kWindow; ++i) handOff(true, 200, 1000 + i);
  EXPECT_FALSE(s.streamWished()) << "judged before a whole window";
  for (int i = 0; i < 40; ++i) handOff(false, 200, 77);  // no stamps: not judged
  EXPECT_FALSE(s.streamWished());
  handOff(true, 200, 4096);
  EXPECT_TRUE(s.streamWished()) << "a window of hand-offs 200 us late";
  // At once: a few tens of nanoseconds on one core. A preempted one may be late, so up to three
  // windows.
  for (uint32_t i = 0; i < 3 * chorus::HandoffJudge::kWindow && s.streamWished(); ++i)
    handOff(true, 0, 64);
  EXPECT_FALSE(s.streamWished()) << "windows of hand-offs seen at once";
  std::free(block);
}

}  // namespace
