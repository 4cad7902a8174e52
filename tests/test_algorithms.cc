// Every algorithm x protocol the tuner can be forced to, equal to the independent reference, and
// the forced choices honoured.
//
//  * Algorithms/ForcedMatrix.EqualsReference/<Collective>_<n>ranks: for every (algorithm,
//    protocol) that applies to the collective, forced with CHORUS_ALGO / CHORUS_PROTO (AllReduce:
//    ring, tree with simple and ll, naive and oneshot with simple (oneshot up to 4 KiB: larger
//    counts must fall back to ring), cma and twoshot with simple, recursive halving-doubling
//    ("hd") and recursive doubling ("rd") with simple and ll, which also run on 1 and 6 ranks
//    (kExtraRankCounts; AllGather's and ReduceScatter's rd too); Broadcast,
//    Reduce: chain and tree (n > 2) with simple and ll, and Broadcast's eager oneshot up to 8 KiB
//    (248 B on 2 ranks; then chain); AllGather, ReduceScatter: ring with simple and ll), on n = 2,
//    3, 4, 5, 8 ranks (threads of one process, chorusCommInitAll): every type x every op (where the
//    collective reduces) x counts 0, 1, 7, 1000, 70001 (70001: four types only, see kLargeTypes) x
//    in place / out of place x roots 0, n-1 and n/2 (rooted collectives). Each result is compared
//    with tests/support/reference.h (bit for bit; float avg within 1 ULP, as
//    tests/support/matrix.cc allows); inputs must stay unchanged where they are not outputs,
//    non-root outputs of Reduce untouched, and guard bytes around every buffer intact. Rings and
//    chains also run with CHORUS_MIN_NCHANNELS=CHORUS_MAX_NCHANNELS=2, so that the data is split
//    over both channels of the communicator. Before each forced setting runs, chorusTunerChoice
//    must report exactly the forced algorithm and protocol (and 2 channels) for every (count, type)
//    of the matrix, on every rank.
//  * AlgorithmsTuner.*: the override syntax (lists, ^ exclusion, "coll:list;coll:list", case),
//    an impossible request (tree for AllGather) falling back to ring and still computing the
//    right result, and the default choice (ring or tree for AllReduce, deterministic, the same
//    on every rank).
//  * AlgorithmsDebug.*: CHORUS_DEBUG=INFO (read once per process, so in a child process: the
//    benchmark tools) prints each operation's choice, and the choice printed is the forced one.
//
// The environment is changed only while no rank thread runs (the rank threads start after the
// variables are set and are joined before they are restored). A communicator reads CHORUS_ALGO,
// CHORUS_PROTO and CHORUS_MIN/MAX_NCHANNELS when it is created (so the forced matrix creates its
// communicators under each setting); chorusTunerChoice reads them at every call.
//  * AlgorithmsTuner.PlansEqualTheModel: the choice a call looks up in the communicator's plans
//    (decided once per size class) is exactly the model's choice for its size, at every power
//    of two, on both sides of it, and at every boundary between two choices.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checker.h"
#include "comm/comm.h"
#include "comm_set.h"
#include "gtest_helpers.h"
#include "matrix.h"
#include "reference.h"
#include "result_name.h"
#include "run_command.h"
#include "scoped_env.h"
#include "test_types.h"
#include "threads.h"
#include "timing.h"
#include "transport/segment.h"
#include "tune/tuner.h"
#include "values.h"
#include "watchdog.h"

namespace {

using namespace ctest;

constexpr int kRankCounts[] = {2, 3, 4, 5, 8};
// AllReduce, AllGather and ReduceScatter also run the settings marked extraRanks on these: one rank
// (the local copy) and 6 (halving-doubling and recursive doubling fold 2 of them into partners, on
// top of 3 and 5).
constexpr int kExtraRankCounts[] = {1, 6};
constexpr size_t kSmallCounts[] = {0, 1, 7, 1000};
// The large count runs only for these types (every op, both placements, both roots) to keep the
// whole file within its time budget on a 2-core machine: 1-, 2-, 4- and 8-byte elements,
// integer and float, bfloat16 reduced in float32.
constexpr size_t kLargeCount = 70001;
constexpr chorusDataType_t kLargeTypes[] = {chorusFloat32, chorusInt8, chorusBfloat16,
                                            chorusFloat64};
// Float avg may differ from the reference by this many ULPs (the tolerance of RankCase::verify
// in tests/support/matrix.cc); everything else is compared bit for bit.
constexpr uint64_t kAvgUlps = 1;
// A hang becomes an error: seconds without progress before an operation fails (read at init).
constexpr const char* kOpTimeoutSeconds = "30";
constexpr size_t kMaxMessages = 12;

const char* collKey(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return "allreduce";
    case Coll::Broadcast:
      return "broadcast";
    case Coll::Reduce:
      return "reduce";
    case Coll::AllGather:
      return "allgather";
    case Coll::ReduceScatter:
      return "reducescatter";
    default:
      return "?";
  }
}

// ---------------------------------------------------------------------------------------------
// Forced settings

struct Setting {
  const char* algo;     // CHORUS_ALGO (nullptr: unset)
  const char* proto;    // CHORUS_PROTO (nullptr: unset)
  bool twoChannels;     // CHORUS_MIN_NCHANNELS=CHORUS_MAX_NCHANNELS=2 (otherwise both unset)
  int minRanks;         // tree Broadcast / Reduce needs more than 2 ranks
  size_t maxBytes = 0;  // the algorithm's size limit (one-shot); larger sizes fall back
  const char* fallback = "ring";  // what the tuner falls back to beyond maxBytes
  bool limitTimesRanks = false;   // the limit is on count x type size x ranks (ReduceScatter)
  bool extraRanks = false;        // also runs on kExtraRankCounts (halving-doubling)
  size_t maxBytesOnTwo = 0;       // the limit on 2 ranks where it differs (the eager Broadcast)
  // What the tuner must report for an operation of `bytes` (count x type size) on n ranks under
  // this setting.
  const char* algoFor(size_t bytes, int n) const {
    if (limitTimesRanks) bytes *= static_cast<size_t>(n);
    const size_t limit = n == 2 && maxBytesOnTwo != 0 ? maxBytesOnTwo : maxBytes;
    return limit && bytes > limit ? fallback : algo;
  }
  std::string name() const {
    std::string s = std::string(algo ? algo : "-") + "/" + (proto ? proto : "-");
    return twoChannels ? s + "/2ch" : s;
  }
};

std::vector<Setting> settingsFor(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return {{"ring", "simple", false, 2},
              {"ring", "ll", false, 2},
              {"tree", "simple", false, 2},
              {"tree", "ll", false, 2},
              {"naive", "simple", false, 2},
              {"ring", "simple", true, 2},
              {"ring", "ll", true, 2},
              {"oneshot", "simple", false, 2, 4096},
              {"cma", "simple", false, 2},
              {"twoshot", "simple", false, 2, 65536},
              // Recursive halving-doubling (algo/halving_doubling.cc).
              {"hd", "simple", false, 1, 0, "ring", false, true},
              {"hd", "ll", false, 1, 0, "ring", false, true},
              // Recursive doubling (the same file): float max/min run halving-doubling inside.
              {"rd", "simple", false, 1, 0, "ring", false, true},
              {"rd", "ll", false, 1, 0, "ring", false, true}};
    case Coll::Broadcast:
      return {{"chain", "simple", false, 2},
              {"chain", "ll", false, 2},
              {"tree", "simple", false, 3},
              {"tree", "ll", false, 3},
              {"chain", "simple", true, 2},
              {"chain", "ll", true, 2},
              {"oneshot", "simple", false, 2, 8192, "chain", false, false, 248},
              {"cma", "simple", false, 2}};
    case Coll::Reduce:
      return {{"chain", "simple", false, 2}, {"chain", "ll", false, 2},
              {"tree", "simple", false, 3},  {"tree", "ll", false, 3},
              {"chain", "simple", true, 2},  {"chain", "ll", true, 2}};
    case Coll::AllGather:
      return {{"ring", "simple", false, 2},
              {"ring", "ll", false, 2},
              {"ring", "simple", true, 2},
              {"ring", "ll", true, 2},
              {"oneshot", "simple", false, 2, 4096},
              {"cma", "simple", false, 2},
              // Recursive doubling (algo/halving_doubling.cc), on 1 and 6 ranks too.
              {"rd", "simple", false, 1, 0, "ring", false, true},
              {"rd", "ll", false, 1, 0, "ring", false, true}};
    case Coll::ReduceScatter:
      return {{"ring", "simple", false, 2},
              {"ring", "ll", false, 2},
              {"ring", "simple", true, 2},
              {"ring", "ll", true, 2},
              {"oneshot", "simple", false, 2, 4096, "ring", true},
              // Recursive halving (the rd row: up to its 128 KiB scratch), on 1 and 6 ranks too;
              // beyond its limit the tuner falls back to the ring.
              {"rd", "simple", false, 1, 131072, "ring", true, true}};
    default:
      return {};
  }
}

// Sets every tuner variable for one setting (unsetting the others) for the life of the object.
class ForcedEnv {
 public:
  explicit ForcedEnv(const Setting& s)
      : algo_("CHORUS_ALGO", s.algo),
        proto_("CHORUS_PROTO", s.proto),
        min_("CHORUS_MIN_NCHANNELS", s.twoChannels ? "2" : nullptr),
        max_("CHORUS_MAX_NCHANNELS", s.twoChannels ? "2" : nullptr) {}

 private:
  ScopedEnv algo_, proto_, min_, max_;
};

// No override at all (whatever the environment of the test run says).
Setting noOverride() {
  return Setting{nullptr, nullptr, false, 1};
}

// n communicators made with the default channel count (2), and CHORUS_TIMEOUT so that a hang
// fails the operations instead of the whole test program.
std::unique_ptr<CommSet> makeComms(int n) {
  ScopedEnv maxCh("CHORUS_MAX_NCHANNELS", nullptr), minCh("CHORUS_MIN_NCHANNELS", nullptr);
  ScopedEnv timeout("CHORUS_TIMEOUT", kOpTimeoutSeconds);
  return std::make_unique<CommSet>(n);
}

// n communicators made under a forced setting (a ForcedEnv in scope): a communicator reads the
// tuner variables when it is created, and its operations run what they said then.
std::unique_ptr<CommSet> makeForcedComms(int n) {
  ScopedEnv timeout("CHORUS_TIMEOUT", kOpTimeoutSeconds);
  return std::make_unique<CommSet>(n);
}

chorusChoice_t choiceOf(chorusComm_t comm, const char* coll, size_t count, chorusDataType_t type) {
  chorusChoice_t c{};
  const chorusResult_t res = chorusTunerChoice(comm, coll, count, type, &c);
  EXPECT_EQ(res, chorusSuccess) << "chorusTunerChoice(" << coll << ", " << count << ", "
                                << typeName(type) << "): " << chorusGetLastError(comm);
  return c;
}

std::string describe(const chorusChoice_t& c) {
  return std::string(c.algorithm) + "/" + c.protocol + "/" + std::to_string(c.nchannels) + "ch";
}

// ---------------------------------------------------------------------------------------------
// The matrix

struct Spec {
  Coll coll;
  chorusDataType_t type;
  chorusRedOp_t op;  // kNoOp for Broadcast and AllGather
  size_t count;
  int root;
  uint64_t seed;
  std::string describe(int nranks, bool inPlace) const {
    std::string s = std::string(collName(coll)) + " " + typeName(type);
    if (collReduces(coll)) s += std::string(" ") + opName(op);
    s += " count=" + std::to_string(count) + (inPlace ? " in-place" : " out-of-place");
    if (collHasRoot(coll)) s += " root=" + std::to_string(root);
    return s + " nranks=" + std::to_string(nranks) + " seed=" + std::to_string(seed);
  }
};

std::vector<Spec> specsFor(Coll coll, int n) {
  std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
  counts.push_back(kLargeCount);
  std::vector<chorusRedOp_t> ops{kNoOp};
  if (collReduces(coll)) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  const std::vector<int> roots = collHasRoot(coll) ? rootsFor(n) : std::vector<int>{0};
  std::vector<Spec> specs;
  uint64_t seed = 0xa160000 + static_cast<uint64_t>(coll) * 10000 + static_cast<uint64_t>(n) * 1000;
  for (size_t count : counts) {
    for (chorusDataType_t type : kAllTypes) {
      if (count == kLargeCount && std::find(std::begin(kLargeTypes), std::end(kLargeTypes), type) ==
                                      std::end(kLargeTypes)) {
        continue;
      }
      for (chorusRedOp_t op : ops) {
        for (int root : roots) specs.push_back({coll, type, op, count, root, seed++});
      }
    }
  }
  return specs;
}

RefSpec refSpecOf(const Spec& sp, int n) {
  return RefSpec{sp.type, sp.op, sp.seed, n, sp.count, sp.root};
}

// What the collective must produce (independent of the placement and the algorithm):
// AllReduce, Reduce (root), Broadcast: count elements; AllGather: n*count; ReduceScatter: the
// reduction of all n*count elements, of which rank r must hold block r.
Bytes expectedFor(const Spec& sp, int n) {
  const RefSpec s = refSpecOf(sp, n);
  switch (sp.coll) {
    case Coll::AllReduce:
      return refAllReduce(s);
    case Coll::Reduce:
      return refReduce(s);
    case Coll::Broadcast:
      return refBroadcast(s);
    case Coll::AllGather:
      return refAllGather(s);
    case Coll::ReduceScatter:
      return refReduceElements(s, 0, sp.count * static_cast<size_t>(n));
    default:
      return {};
  }
}

// The references of every spec, computed once (on every core) and shared by every setting and
// every rank.
std::vector<Bytes> expectedAll(const std::vector<Spec>& specs, int n) {
  std::vector<Bytes> out(specs.size());
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  runThreads(workers, [&](int w) {
    for (size_t i = static_cast<size_t>(w); i < specs.size(); i += static_cast<size_t>(workers)) {
      out[i] = expectedFor(specs[i], n);
    }
  });
  return out;
}

constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0x5a;
constexpr unsigned char kSentinel = 0xc3;

// A buffer with guard bytes on both sides; the data starts filled with kSentinel.
class Guarded {
 public:
  explicit Guarded(size_t bytes) : mem_(bytes + 2 * kGuard, kGuardByte), bytes_(bytes) {
    std::memset(data(), kSentinel, bytes);
  }
  unsigned char* data() { return mem_.data() + kGuard; }
  const unsigned char* data() const { return mem_.data() + kGuard; }
  // "" when both guards are intact.
  std::string guardProblem() const {
    const CheckResult front = checkPattern(mem_.data(), kGuard, kGuardByte);
    if (!front.ok()) return "written before the start: " + front.first;
    const CheckResult back = checkPattern(mem_.data() + kGuard + bytes_, kGuard, kGuardByte);
    if (!back.ok()) return "written past the end: " + back.first;
    return "";
  }

 private:
  std::vector<unsigned char> mem_;
  size_t bytes_;
};

// One rank's part of one case: buffers, the call, the checks. Problems go to `problems`;
// returns false when the call itself failed (the communicator is then unusable).
bool runRankCase(chorusComm_t comm, int rank, int n, const Spec& sp, bool inPlace,
                 const Bytes& expected, std::vector<std::string>* problems) {
  const size_t esz = typeSize(sp.type), cnt = sp.count, all = cnt * static_cast<size_t>(n);
  const size_t r = static_cast<size_t>(rank);
  const bool isRoot = rank == sp.root;
  const uint64_t ulps = sp.op == chorusAvg && isFloatType(sp.type) ? kAvgUlps : 0;
  // This rank's input: count elements, n*count for ReduceScatter.
  Bytes mine((sp.coll == Coll::ReduceScatter ? all : cnt) * esz);
  fillValues(sp.type, sp.op, sp.seed, rank, 0, mine.size() / esz, mine.data());

  struct Check {
    int buf;
    size_t offset;  // elements
    size_t elements;
    const unsigned char* want;  // nullptr: untouched (kSentinel)
    uint64_t ulps;
    const char* label;
  };
  std::vector<Guarded> bufs;
  bufs.reserve(2);
  std::vector<Check> checks;
  auto newBuf = [&](size_t elements, const unsigned char* init) {
    bufs.emplace_back(elements * esz);
    if (init != nullptr && elements > 0) std::memcpy(bufs.back().data(), init, elements * esz);
    return static_cast<int>(bufs.size()) - 1;
  };
  int sendBuf = -1, recvBuf = -1;
  size_t sendOff = 0, recvOff = 0;  // elements
  switch (sp.coll) {
    case Coll::AllReduce:
      if (inPlace) {
        sendBuf = recvBuf = newBuf(cnt, mine.data());
        checks.push_back({recvBuf, 0, cnt, expected.data(), ulps, "buff (in place)"});
      } else {
        sendBuf = newBuf(cnt, mine.data());
        recvBuf = newBuf(cnt, nullptr);
        checks.push_back({recvBuf, 0, cnt, expected.data(), ulps, "recvbuff"});
        checks.push_back({sendBuf, 0, cnt, mine.data(), 0, "sendbuff (must not change)"});
      }
      break;
    case Coll::Broadcast:
      if (inPlace) {
        sendBuf = recvBuf = newBuf(cnt, isRoot ? mine.data() : nullptr);
        checks.push_back({recvBuf, 0, cnt, expected.data(), 0, "buff (in place)"});
      } else {
        // A non-root's sendbuff is not read: it holds this rank's values, which must stay.
        sendBuf = newBuf(cnt, mine.data());
        recvBuf = newBuf(cnt, nullptr);
        checks.push_back({recvBuf, 0, cnt, expected.data(), 0, "recvbuff"});
        checks.push_back({sendBuf, 0, cnt, mine.data(), 0, "sendbuff (must not change)"});
      }
      break;
    case Coll::Reduce:
      if (inPlace) {
        sendBuf = recvBuf = newBuf(cnt, mine.data());
        if (isRoot) {
          checks.push_back({recvBuf, 0, cnt, expected.data(), ulps, "buff (in place, root)"});
        } else {
          checks.push_back(
              {recvBuf, 0, cnt, mine.data(), 0, "buff (in place, non-root: must not change)"});
        }
      } else {
        sendBuf = newBuf(cnt, mine.data());
        recvBuf = newBuf(cnt, nullptr);
        if (isRoot) {
          checks.push_back({recvBuf, 0, cnt, expected.data(), ulps, "recvbuff (root)"});
        } else {
          checks.push_back(
              {recvBuf, 0, cnt, nullptr, 0, "recvbuff (non-root: must not be written)"});
        }
        checks.push_back({sendBuf, 0, cnt, mine.data(), 0, "sendbuff (must not change)"});
      }
      break;
    case Coll::AllGather:
      if (inPlace) {
        recvBuf = sendBuf = newBuf(all, nullptr);
        if (cnt > 0) std::memcpy(bufs[recvBuf].data() + r * cnt * esz, mine.data(), cnt * esz);
        sendOff = r * cnt;
        checks.push_back({recvBuf, 0, all, expected.data(), 0, "recvbuff (in place)"});
      } else {
        sendBuf = newBuf(cnt, mine.data());
        recvBuf = newBuf(all, nullptr);
        checks.push_back({recvBuf, 0, all, expected.data(), 0, "recvbuff"});
        checks.push_back({sendBuf, 0, cnt, mine.data(), 0, "sendbuff (must not change)"});
      }
      break;
    case Coll::ReduceScatter:
      if (inPlace) {
        sendBuf = recvBuf = newBuf(all, mine.data());
        recvOff = r * cnt;
        checks.push_back(
            {recvBuf, r * cnt, cnt, expected.data() + r * cnt * esz, ulps, "recvbuff (in place)"});
        checks.push_back({sendBuf, 0, r * cnt, mine.data(), 0,
                          "sendbuff blocks before this rank's (in place: must not change)"});
        checks.push_back({sendBuf, (r + 1) * cnt, all - (r + 1) * cnt,
                          mine.data() + (r + 1) * cnt * esz, 0,
                          "sendbuff blocks after this rank's (in place: must not change)"});
      } else {
        sendBuf = newBuf(all, mine.data());
        recvBuf = newBuf(cnt, nullptr);
        checks.push_back({recvBuf, 0, cnt, expected.data() + r * cnt * esz, ulps, "recvbuff"});
        checks.push_back({sendBuf, 0, all, mine.data(), 0, "sendbuff (must not change)"});
      }
      break;
    default:
      problems->push_back("unsupported collective");
      return false;
  }
  const void* send = bufs[sendBuf].data() + sendOff * esz;
  void* recv = bufs[recvBuf].data() + recvOff * esz;

  chorusResult_t res = chorusInternalError;
  switch (sp.coll) {
    case Coll::AllReduce:
      res = chorusAllReduce(send, recv, cnt, sp.type, sp.op, comm, nullptr);
      break;
    case Coll::Broadcast:
      res = chorusBroadcast(send, recv, cnt, sp.type, sp.root, comm, nullptr);
      break;
    case Coll::Reduce:
      res = chorusReduce(send, recv, cnt, sp.type, sp.op, sp.root, comm, nullptr);
      break;
    case Coll::AllGather:
      res = chorusAllGather(send, recv, cnt, sp.type, comm, nullptr);
      break;
    case Coll::ReduceScatter:
      res = chorusReduceScatter(send, recv, cnt, sp.type, sp.op, comm, nullptr);
      break;
    default:
      break;
  }
  const std::string prefix = "[rank " + std::to_string(rank) + "] " + sp.describe(n, inPlace);
  if (res != chorusSuccess) {
    problems->push_back(prefix + ": the call returned " + resultName(res) + ": " +
                        chorusGetLastError(comm));
    return false;
  }
  for (size_t b = 0; b < bufs.size(); ++b) {
    const std::string guard = bufs[b].guardProblem();
    if (!guard.empty()) problems->push_back(prefix + ": buffer " + std::to_string(b) + " " + guard);
  }
  for (const Check& c : checks) {
    const unsigned char* got = bufs[c.buf].data() + c.offset * esz;
    const CheckResult cr = c.want == nullptr
                               ? checkPattern(got, c.elements * esz, kSentinel)
                               : compareElements(sp.type, got, c.want, c.elements, c.ulps);
    if (!cr.ok()) problems->push_back(prefix + ": " + c.label + ": " + cr.first);
  }
  return true;
}

struct Outcome {
  size_t cases = 0;     // rank-cases run
  size_t failures = 0;  // rank-cases with a problem
  bool callFailed = false;
  std::vector<std::string> messages;
};

// Every spec, both placements, one thread per rank, with the environment as it is now.
Outcome runSpecs(const CommSet& comms, const std::vector<Spec>& specs,
                 const std::vector<Bytes>& expected) {
  const int n = comms.size();
  std::vector<Outcome> perRank(static_cast<size_t>(n));
  runThreads(n, [&](int rank) {
    Outcome& out = perRank[static_cast<size_t>(rank)];
    for (size_t i = 0; i < specs.size(); ++i) {
      for (bool inPlace : {false, true}) {
        setProgress(rank, specs[i].describe(n, inPlace));
        std::vector<std::string> problems;
        const bool called =
            runRankCase(comms[rank], rank, n, specs[i], inPlace, expected[i], &problems);
        ++out.cases;
        if (!problems.empty()) ++out.failures;
        for (auto& p : problems) {
          if (out.messages.size() < kMaxMessages) out.messages.push_back(std::move(p));
        }
        if (!called) {
          out.callFailed = true;
          return;
        }
      }
    }
  });
  Outcome all;
  for (auto& o : perRank) {
    all.cases += o.cases;
    all.failures += o.failures;
    all.callFailed = all.callFailed || o.callFailed;
    for (auto& m : o.messages) {
      if (all.messages.size() < kMaxMessages) all.messages.push_back(std::move(m));
    }
  }
  return all;
}

std::string summary(const Outcome& o) {
  std::string s =
      std::to_string(o.failures) + " of " + std::to_string(o.cases) + " rank-cases failed";
  for (const auto& m : o.messages) s += "\n  " + m;
  return s;
}

// Problems with what the tuner reports under the forced setting `s`, for every (count, type) of
// the matrix, on every rank's communicator.
std::vector<std::string> forcedChoiceProblems(const CommSet& comms, Coll coll, const Setting& s,
                                              const std::vector<Spec>& specs) {
  std::vector<std::string> problems;
  std::set<std::pair<size_t, chorusDataType_t>> seen;
  for (const Spec& sp : specs) {
    if (!seen.insert({sp.count, sp.type}).second) continue;
    for (int r = 0; r < comms.size(); ++r) {
      const chorusChoice_t c = choiceOf(comms[r], collKey(coll), sp.count, sp.type);
      // A single rank only copies, whatever is forced ("local").
      const bool ok =
          comms.size() == 1
              ? std::string(c.algorithm) == "local"
              : std::string(c.algorithm) == s.algoFor(sp.count * typeSize(sp.type), comms.size()) &&
                    std::string(c.protocol) == s.proto && (!s.twoChannels || c.nchannels == 2);
      if (!ok && problems.size() < kMaxMessages) {
        problems.push_back(std::string(collKey(coll)) + " count " + std::to_string(sp.count) + " " +
                           typeName(sp.type) + " rank " + std::to_string(r) + ": forced " +
                           s.name() + ", the tuner reports " + describe(c));
      }
    }
  }
  return problems;
}

struct MatrixParam {
  Coll coll;
  int nranks;
};

class ForcedMatrix : public ShmCheckedTestP<MatrixParam> {};

TEST_P(ForcedMatrix, EqualsReference) {
  const auto [coll, n] = GetParam();
  Watchdog watchdog(
      240, std::string("ForcedMatrix ") + collName(coll) + " " + std::to_string(n) + " ranks");
  const std::vector<Spec> specs = specsFor(coll, n);
  const std::vector<Bytes> expected = expectedAll(specs, n);
  size_t settingsRun = 0;
  const bool extra =
      std::find(std::begin(kRankCounts), std::end(kRankCounts), n) == std::end(kRankCounts);
  for (const Setting& s : settingsFor(coll)) {
    if (n < s.minRanks || (extra && !s.extraRanks)) continue;
    SCOPED_TRACE("forced " + s.name());
    ForcedEnv env(s);
    auto comms = makeForcedComms(n);  // the setting applies to communicators created under it
    ASSERT_EQ(comms->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    const auto choiceProblems = forcedChoiceProblems(*comms, coll, s, specs);
    EXPECT_TRUE(choiceProblems.empty()) << choiceProblems.front();
    const double start = nowSeconds();
    const Outcome out = runSpecs(*comms, specs, expected);
    ++settingsRun;
    EXPECT_EQ(out.cases, specs.size() * 2 * static_cast<size_t>(n));
    EXPECT_EQ(out.failures, 0u) << summary(out);
    std::printf("[ timing   ] %s %d ranks forced %s: %zu rank-cases in %.2f s\n", collName(coll), n,
                s.name().c_str(), out.cases, nowSeconds() - start);
  }
  EXPECT_GT(settingsRun, 0u);
}

std::vector<MatrixParam> matrixParams() {
  std::vector<MatrixParam> v;
  for (Coll c :
       {Coll::AllReduce, Coll::Broadcast, Coll::Reduce, Coll::AllGather, Coll::ReduceScatter}) {
    for (int n : kRankCounts) v.push_back({c, n});
  }
  for (int n : kExtraRankCounts) v.push_back({Coll::AllReduce, n});
  for (int n : kExtraRankCounts) v.push_back({Coll::AllGather, n});
  for (int n : kExtraRankCounts) v.push_back({Coll::ReduceScatter, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ForcedMatrix, ::testing::ValuesIn(matrixParams()),
                         [](const ::testing::TestParamInfo<MatrixParam>& info) {
                           return std::string(collName(info.param.coll)) + "_" +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

// ---------------------------------------------------------------------------------------------
// The tuner's choice under the override syntax

// Counts from 0 to 2^26 elements (float32: up to 256 MiB), enough to cross every crossover of
// the model.
std::vector<size_t> sweepCounts() {
  std::vector<size_t> v{0};
  for (size_t c = 1; c <= (size_t{1} << 26); c *= 4) {
    v.push_back(c);
    v.push_back(c * 3 / 2 + 1);
  }
  return v;
}

// Failure descriptions, counted, the first kMaxMessages kept (so that a broken rule reports a
// readable list instead of one failure per choice).
class Problems {
 public:
  void add(const std::string& what) {
    if (count_++ < kMaxMessages) text_ += "\n  " + what;
  }
  bool empty() const { return count_ == 0; }
  std::string str() const {
    return std::to_string(count_) + " problem(s)" + text_ +
           (count_ > kMaxMessages ? "\n  ..." : "");
  }

 private:
  size_t count_ = 0;
  std::string text_;
};

constexpr const char* kTunedColls[] = {"allreduce", "broadcast", "reduce", "allgather",
                                       "reducescatter"};

class AlgorithmsTuner : public ShmCheckedTest {
 protected:
  void SetUp() override {
    ShmCheckedTest::SetUp();
    for (int n : kRankCounts) {
      sets_.push_back(makeComms(n));
      ASSERT_EQ(sets_.back()->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    }
  }
  void TearDown() override {
    sets_.clear();
    ShmCheckedTest::TearDown();
  }
  // Every (n, collective, count) choice, rank 0's, with the environment as it is now.
  struct Seen {
    int n;
    std::string coll;
    size_t count;
    chorusChoice_t c;
  };
  std::vector<Seen> sweep(const std::vector<std::string>& colls) {
    std::vector<Seen> v;
    for (const auto& set : sets_) {
      for (const auto& coll : colls) {
        for (size_t count : sweepCounts()) {
          v.push_back(
              {set->size(), coll, count, choiceOf((*set)[0], coll.c_str(), count, chorusFloat32)});
        }
      }
    }
    return v;
  }
  const CommSet& setFor(int n) const {
    for (const auto& set : sets_) {
      if (set->size() == n) return *set;
    }
    throw std::logic_error("no communicators of that size");
  }
  static std::string where(const Seen& s) {
    return s.coll + " on " + std::to_string(s.n) + " ranks, count " + std::to_string(s.count) +
           ": " + describe(s.c);
  }
  std::vector<std::unique_ptr<CommSet>> sets_;
};

// Every forced setting of the matrix, for every collective it applies to, rank count and count:
// exactly the forced algorithm and protocol (and 2 channels when forced).
TEST_F(AlgorithmsTuner, ForcedSettingsAreReported) {
  size_t checked = 0;
  Problems problems;
  for (Coll coll :
       {Coll::AllReduce, Coll::Broadcast, Coll::Reduce, Coll::AllGather, Coll::ReduceScatter}) {
    for (const Setting& s : settingsFor(coll)) {
      ForcedEnv env(s);
      for (const Seen& seen : sweep({collKey(coll)})) {
        if (seen.n < s.minRanks) continue;
        ++checked;
        const bool ok = seen.c.algorithm == std::string(s.algoFor(seen.count * 4, seen.n)) &&
                        seen.c.protocol == std::string(s.proto) &&
                        (s.twoChannels ? seen.c.nchannels == 2
                                       : seen.c.nchannels >= 1 && seen.c.nchannels <= 2);
        if (!ok) problems.add("forced " + s.name() + ": " + where(seen));
      }
    }
  }
  EXPECT_GT(checked, 0u);
  EXPECT_TRUE(problems.empty()) << problems.str();
}

// CHORUS_ALGO=^tree: never tree; CHORUS_PROTO=^ll: never ll. Without the exclusion both are
// chosen somewhere in the sweep, so the exclusion is what removes them. The one-shot AllReduce
// (which the default model prefers to ring/LL at small sizes) is excluded throughout, so that
// LL has sizes to win.
TEST_F(AlgorithmsTuner, ExclusionSyntax) {
  const std::vector<std::string> colls(std::begin(kTunedColls), std::end(kTunedColls));
  size_t treeBefore = 0, llBefore = 0;
  {
    ForcedEnv env(noOverride());
    ScopedEnv noOneShot("CHORUS_ALGO", "^oneshot,twoshot");
    for (const Seen& s : sweep(colls)) {
      treeBefore += s.c.algorithm == std::string("tree");
      llBefore += s.c.protocol == std::string("ll");
    }
  }
  ASSERT_GT(treeBefore, 0u) << "the default model never picks tree: the exclusion test is moot";
  ASSERT_GT(llBefore, 0u) << "the default model never picks ll: the exclusion test is moot";
  {
    ScopedEnv algo("CHORUS_ALGO", "^tree,oneshot,twoshot"), proto("CHORUS_PROTO", nullptr);
    Problems problems;
    size_t ll = 0;
    for (const Seen& s : sweep(colls)) {
      if (s.c.algorithm == std::string("tree")) problems.add("CHORUS_ALGO=^tree: " + where(s));
      if (s.c.algorithm == std::string("naive")) problems.add("naive only when named: " + where(s));
      ll += s.c.protocol == std::string("ll");
    }
    EXPECT_TRUE(problems.empty()) << problems.str();
    EXPECT_GT(ll, 0u) << "CHORUS_ALGO=^tree must not restrict the protocol";
  }
  {
    ScopedEnv algo("CHORUS_ALGO", "^oneshot,twoshot"), proto("CHORUS_PROTO", "^ll");
    Problems problems;
    size_t tree = 0;
    for (const Seen& s : sweep(colls)) {
      if (s.c.protocol == std::string("ll")) problems.add("CHORUS_PROTO=^ll: " + where(s));
      tree += s.c.algorithm == std::string("tree");
    }
    EXPECT_TRUE(problems.empty()) << problems.str();
    EXPECT_GT(tree, 0u) << "CHORUS_PROTO=^ll must not restrict the algorithm";
  }
  {
    // A list: AllReduce can only be tree; Broadcast / Reduce tree or chain (never tree on 2).
    ScopedEnv algo("CHORUS_ALGO", "tree,chain"), proto("CHORUS_PROTO", "simple,ll");
    Problems problems;
    for (const Seen& s : sweep({"allreduce", "broadcast", "reduce"})) {
      const std::string a = s.c.algorithm;
      const bool ok = s.coll == "allreduce" ? a == "tree"
                      : s.n == 2            ? a == "chain"
                                            : a == "tree" || a == "chain";
      if (!ok) problems.add("CHORUS_ALGO=tree,chain: " + where(s));
    }
    EXPECT_TRUE(problems.empty()) << problems.str();
  }
}

// "allreduce:tree;broadcast:chain": AllReduce tree, Broadcast chain, Reduce unrestricted.
TEST_F(AlgorithmsTuner, PerCollectiveSyntax) {
  std::vector<Seen> before;
  {
    ForcedEnv env(noOverride());
    before = sweep({"allreduce", "broadcast", "reduce"});
  }
  // The default picks something else than the chain for Broadcast somewhere (the eager
  // oneshot for small sizes, single copy for large ones), so forcing the chain changes choices.
  size_t broadcastNotChainBefore = 0;
  for (const Seen& s : before) {
    broadcastNotChainBefore += s.coll == "broadcast" && s.c.algorithm != std::string("chain");
  }
  ASSERT_GT(broadcastNotChainBefore, 0u) << "the default model always picks chain for Broadcast";
  {
    ScopedEnv algo("CHORUS_ALGO", "allreduce:tree;broadcast:chain"), proto("CHORUS_PROTO", nullptr);
    const std::vector<Seen> after = sweep({"allreduce", "broadcast", "reduce"});
    ASSERT_EQ(after.size(), before.size());
    Problems problems;
    for (size_t i = 0; i < after.size(); ++i) {
      const Seen& s = after[i];
      const bool ok = s.coll == "allreduce"   ? s.c.algorithm == std::string("tree")
                      : s.coll == "broadcast" ? s.c.algorithm == std::string("chain")
                                              : describe(s.c) == describe(before[i].c);
      if (!ok) {
        problems.add("CHORUS_ALGO=allreduce:tree;broadcast:chain: " + where(s) +
                     " (without it: " + describe(before[i].c) + ")");
      }
    }
    EXPECT_TRUE(problems.empty()) << problems.str();
  }
  {
    // The protocol too, and the order of the clauses does not matter.
    ScopedEnv algo("CHORUS_ALGO", "broadcast:tree;allreduce:ring"),
        proto("CHORUS_PROTO", "reduce:ll;allreduce:simple");
    Problems problems;
    for (const Seen& s : sweep({"allreduce", "broadcast", "reduce"})) {
      const bool ok = s.coll == "allreduce" ? describe(s.c).rfind("ring/simple/", 0) == 0
                      : s.coll == "broadcast"
                          ? s.c.algorithm == std::string(s.n > 2 ? "tree" : "chain")
                          : s.c.protocol == std::string("ll");
      if (!ok) {
        problems.add(
            "CHORUS_ALGO=broadcast:tree;allreduce:ring CHORUS_PROTO=reduce:ll;allreduce:simple: " +
            where(s));
      }
    }
    EXPECT_TRUE(problems.empty()) << problems.str();
  }
}

TEST_F(AlgorithmsTuner, CaseInsensitive) {
  Problems problems;
  for (const char* spelling : {"TREE", "Tree", "AllReduce:TREE"}) {
    ScopedEnv algo("CHORUS_ALGO", spelling), proto("CHORUS_PROTO", "LL");
    for (const Seen& s : sweep({"allreduce"})) {
      if (describe(s.c).rfind("tree/ll/", 0) != 0) {
        problems.add(std::string("CHORUS_ALGO=") + spelling + " CHORUS_PROTO=LL: " + where(s));
      }
    }
  }
  {
    // Whatever the tuner picks instead (the tree, or on 2 ranks of one node the halving-doubling
    // exchange), it is not the ring and it runs LL.
    ScopedEnv algo("CHORUS_ALGO", "^RING"), proto("CHORUS_PROTO", "^Simple");
    for (const Seen& s : sweep({"allreduce"})) {
      if (s.c.algorithm == std::string("ring") || s.c.protocol != std::string("ll")) {
        problems.add("CHORUS_ALGO=^RING CHORUS_PROTO=^Simple: " + where(s));
      }
    }
  }
  EXPECT_TRUE(problems.empty()) << problems.str();
}

// Without overrides: AllReduce is one-shot, two-shot, ring, tree or (2 ranks) halving-doubling,
// the same for the same size every time, and the same on every rank (ranks that disagreed would run
// different algorithms and hang).
TEST_F(AlgorithmsTuner, DefaultIsRingOrTreeAndDeterministic) {
  ForcedEnv env(noOverride());
  std::set<std::string> algos;
  Problems problems;
  for (const auto& set : sets_) {
    for (const char* coll : kTunedColls) {
      for (size_t count : sweepCounts()) {
        for (chorusDataType_t type : {chorusInt8, chorusFloat32, chorusFloat64}) {
          const chorusChoice_t first = choiceOf((*set)[0], coll, count, type);
          const std::string what = std::string(coll) + " on " + std::to_string(set->size()) +
                                   " ranks, count " + std::to_string(count) + " " + typeName(type) +
                                   ": " + describe(first);
          if (std::string(coll) == "allreduce") {
            algos.insert(first.algorithm);
            const std::string a = first.algorithm;
            const bool hdHere = a == "hd" && set->size() == 2;  // 2 ranks of one node
            // and the recursive doubling there up to one slot, where its fit is measured
            const bool rdHere = a == "rd" && set->size() == 2 &&
                                count * chorusTypeSize(type) <= (size_t(128) << 10);
            if (a != "ring" && a != "tree" && a != "oneshot" && a != "twoshot" && a != "cma" &&
                !hdHere && !rdHere) {
              problems.add("not ring, tree, oneshot, twoshot, cma or (2 ranks) hd or rd: " + what);
            }
          }
          if (first.protocol != std::string("simple") && first.protocol != std::string("ll")) {
            problems.add("unknown protocol: " + what);
          }
          for (int r = 0; r < set->size(); ++r) {
            for (int again = 0; again < 2; ++again) {
              const chorusChoice_t c = choiceOf((*set)[r], coll, count, type);
              if (describe(c) != describe(first) || c.predictedUs != first.predictedUs) {
                problems.add("rank " + std::to_string(r) + " says " + describe(c) + " (" +
                             std::to_string(c.predictedUs) + " us), rank 0 said " + what + " (" +
                             std::to_string(first.predictedUs) + " us)");
              }
            }
          }
        }
      }
    }
  }
  EXPECT_TRUE(problems.empty()) << problems.str();
  // The sweep crosses from the one-shot to the two-shot to the ring. The tree, halving-doubling,
  // recursive doubling and the single copy win where the measured fits say so
  // (src/tune/reference_fits*.inc): allowed above, not required.
  for (const char* a : {"oneshot", "twoshot", "ring"})
    EXPECT_EQ(algos.count(a), 1u) << "the sweep should reach " << a;
}

// The plans a communicator looks up (tune/tuner.h: one class per power of two, split where the
// choice changes) give exactly the model's choice: at every size near a power of two, at sizes
// in between, and on both sides of every boundary where the model's choice changes, for every
// collective the tuner decides, on every rank count, with and without overrides.
TEST_F(AlgorithmsTuner, PlansEqualTheModel) {
  const chorus::OpKind kinds[] = {chorus::OpKind::kAllReduce, chorus::OpKind::kBroadcast,
                                  chorus::OpKind::kReduce, chorus::OpKind::kAllGather,
                                  chorus::OpKind::kReduceScatter};
  auto check = [&](const CommSet& set, Problems* problems, size_t* boundaries) {
    for (int r = 0; r < set.size(); ++r) {
      chorusComm* comm = set[r];
      const chorus::TunerEnv env = chorus::readTunerEnv();
      ASSERT_TRUE(env == comm->tunerEnv) << "the environment changed since init";
      for (chorus::OpKind kind : kinds) {
        std::vector<size_t> sizes;
        for (int b = 0; b < 40; ++b) {
          const size_t p = size_t{1} << b;
          for (size_t s : {p - 1, p, p + 1, p + p / 3, p + p / 2 + 7}) sizes.push_back(s);
        }
        auto model = [&](size_t bytes) { return chorus::chooseFor(comm, kind, bytes, env); };
        // Boundaries of the model's choice between consecutive sizes of the sweep, found by
        // bisection here (independently of the plans).
        std::vector<size_t> extra;
        for (size_t i = 1; i < sizes.size(); ++i) {
          size_t lo = sizes[i - 1], hi = sizes[i];
          if (hi <= lo) continue;
          auto same = [&](size_t a, size_t b) {
            const chorus::Choice x = model(a), y = model(b);
            return x.algo == y.algo && x.proto == y.proto && x.nchannels == y.nchannels;
          };
          if (same(lo, hi)) continue;
          while (hi - lo > 1) {
            const size_t mid = lo + (hi - lo) / 2;
            (same(lo, mid) ? lo : hi) = mid;
          }
          extra.push_back(lo);
          extra.push_back(hi);
          ++*boundaries;
        }
        sizes.insert(sizes.end(), extra.begin(), extra.end());
        for (size_t bytes : sizes) {
          // The collective's count for `bytes` (AllGather / ReduceScatter: bytes / n per rank).
          const bool perRank =
              kind == chorus::OpKind::kAllGather || kind == chorus::OpKind::kReduceScatter;
          if (perRank && bytes % size_t(set.size()) != 0) continue;
          const size_t count = perRank ? bytes / size_t(set.size()) : bytes;
          const chorus::OpDesc op{kind,      nullptr, nullptr, count,  chorusUint8,
                                  chorusSum, 0,       comm,    nullptr};
          const chorus::Choice got = chorus::choose(comm, op);
          const chorus::Choice want = model(bytes);
          if (got.algo != want.algo || got.proto != want.proto || got.nchannels != want.nchannels) {
            problems->add(std::string(chorus::collectiveKey(kind)) + " on " +
                          std::to_string(set.size()) + " ranks, " + std::to_string(bytes) +
                          " bytes: plan " + chorus::algoName(got.algo) + "/" +
                          chorus::protoName(got.proto) + "/" + std::to_string(got.nchannels) +
                          ", model " + chorus::algoName(want.algo) + "/" +
                          chorus::protoName(want.proto) + "/" + std::to_string(want.nchannels));
          }
        }
      }
    }
  };
  Problems problems;
  size_t boundaries = 0;
  {
    ForcedEnv env(noOverride());
    for (int n : kRankCounts) {
      auto comms = makeForcedComms(n);
      ASSERT_EQ(comms->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
      check(*comms, &problems, &boundaries);
    }
  }
  EXPECT_GT(boundaries, 0u) << "the sweep should cross a boundary between two choices";
  // Overrides that leave several candidates (ring with both protocols and 1 or 2 channels).
  {
    ForcedEnv env(Setting{"ring", nullptr, false, 1});
    auto forced = makeForcedComms(3);
    ASSERT_EQ(forced->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
    check(*forced, &problems, &boundaries);
  }
  EXPECT_TRUE(problems.empty()) << problems.str();
}

// chorusConfig_t.minChannels: rank 0's value holds on every rank (the others' differ here and are
// ignored), and every call of an algorithm that splits over channels uses at least that many.
TEST_F(AlgorithmsTuner, ConfigMinChannelsOfRankZeroHolds) {
  ForcedEnv env(noOverride());
  const int n = 3;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  std::vector<chorusComm_t> comms(n, nullptr);
  std::vector<chorusResult_t> res(n);
  runThreads(n, [&](int r) {
    chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
    config.maxChannels = 4;
    config.minChannels = r == 0 ? 3 : r == 1 ? 1 : -1;
    res[r] = chorusCommInitRankConfig(&comms[r], n, id, r, &config);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(res[r], chorusSuccess) << "rank " << r;
  size_t split = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(comms[r]->tunerEnv.minChannels, 3) << "rank " << r;
    for (size_t bytes = 8; bytes <= (size_t{1} << 26); bytes *= 4) {
      const chorus::OpDesc op{chorus::OpKind::kAllGather,
                              nullptr,
                              nullptr,
                              bytes,
                              chorusUint8,
                              chorusSum,
                              0,
                              comms[r],
                              nullptr};
      const chorus::Choice c = chorus::choose(comms[r], op);
      if (!chorus::algoDesc(c.algo).channels) continue;
      ++split;
      EXPECT_GE(c.nchannels, 3) << "rank " << r << ", " << bytes
                                << " bytes: " << chorus::algoName(c.algo);
    }
  }
  EXPECT_GT(split, 0u) << "no AllGather size chose an algorithm that splits over channels";
  runThreads(n, [&](int r) { res[r] = chorusCommDestroy(comms[r]); });
}

// A change of the communicator's shape (here: the node seen as oversubscribed, as a 2-core
// machine's 4 ranks are) renews the plans already decided: every later call gets the new model's
// choice, and the change alters some choice (so a stale plan would have been caught).
TEST_F(AlgorithmsTuner, AShapeChangeRenewsThePlans) {
  ForcedEnv env(noOverride());
  auto comms = makeForcedComms(4);
  ASSERT_EQ(comms->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
  chorusComm* comm = (*comms)[0];
  const chorus::TunerEnv tenv = chorus::readTunerEnv();
  const chorus::OpKind kinds[] = {chorus::OpKind::kAllReduce, chorus::OpKind::kBroadcast,
                                  chorus::OpKind::kReduce};
  auto sweep = [&](std::vector<chorus::Choice>* plans) {
    for (chorus::OpKind kind : kinds)
      for (size_t bytes = 1; bytes <= (size_t{1} << 28); bytes *= 2) {
        const chorus::OpDesc op{kind,      nullptr, nullptr, bytes,  chorusUint8,
                                chorusSum, 0,       comm,    nullptr};
        const chorus::Choice got = chorus::choose(comm, op);
        const chorus::Choice want = chorus::chooseFor(comm, kind, bytes, tenv);
        EXPECT_TRUE(got.algo == want.algo && got.proto == want.proto &&
                    got.nchannels == want.nchannels)
            << chorus::collectiveKey(kind) << " " << bytes << " bytes: plan "
            << chorus::algoName(got.algo) << ", model " << chorus::algoName(want.algo);
        plans->push_back(got);
      }
  };
  std::vector<chorus::Choice> before, after;
  sweep(&before);  // decides (and caches) every class
  const bool was = comm->shape.get().oversubscribed;
  comm->shape.change([&](chorus::Shape& s) {
    s.oversubscribed = !was;
    s.onlineCores = was ? 64 : 2;
  });
  sweep(&after);
  size_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i)
    changed += before[i].algo != after[i].algo || before[i].proto != after[i].proto ||
               before[i].nchannels != after[i].nchannels;
  EXPECT_GT(changed, 0u) << "the shape change should alter some choice";
  comm->shape.change([&](chorus::Shape& s) { s.oversubscribed = was; });
}

// An algorithm the collective does not have: the tuner falls back to the default (ring), and the
// collective still computes the right result.
TEST_F(AlgorithmsTuner, ImpossibleRequestFallsBack) {
  const Setting treeOnly{"tree", nullptr, false, 1};
  {
    ForcedEnv env(treeOnly);
    Problems problems;
    for (const Seen& s : sweep({"allgather", "reducescatter"})) {
      if (s.c.algorithm != std::string("ring")) problems.add("CHORUS_ALGO=tree: " + where(s));
    }
    EXPECT_TRUE(problems.empty()) << problems.str();
  }
  for (int n : {2, 3, 5}) {
    for (Coll coll : {Coll::AllGather, Coll::ReduceScatter}) {
      std::vector<Spec> specs;
      for (Spec sp : specsFor(coll, n)) {
        if (sp.type == chorusFloat32 || sp.type == chorusInt8 || sp.type == chorusFloat16) {
          specs.push_back(sp);
        }
      }
      const std::vector<Bytes> expected = expectedAll(specs, n);
      ForcedEnv env(treeOnly);
      auto forced = makeForcedComms(n);
      ASSERT_EQ(forced->initResult(), chorusSuccess) << chorusGetLastError(nullptr);
      const Outcome out = runSpecs(*forced, specs, expected);
      EXPECT_GT(out.cases, 0u);
      EXPECT_EQ(out.failures, 0u) << "CHORUS_ALGO=tree, " << collName(coll) << ": " << summary(out);
      ASSERT_FALSE(out.callFailed);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// CHORUS_DEBUG=INFO in a child process: the benchmark tools

const char* benchFor(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return "all_reduce_perf";
    case Coll::Broadcast:
      return "broadcast_perf";
    case Coll::Reduce:
      return "reduce_perf";
    case Coll::AllGather:
      return "all_gather_perf";
    case Coll::ReduceScatter:
      return "reduce_scatter_perf";
    default:
      return "";
  }
}

// Runs a benchmark with `env` ("NAME=value" words) added to its environment.
CommandResult runBench(const std::vector<std::string>& env, const std::string& bench,
                       const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/env"};
  for (const char* unset : {"CHORUS_ALGO", "CHORUS_PROTO", "CHORUS_MIN_NCHANNELS",
                            "CHORUS_MAX_NCHANNELS", "CHORUS_DEBUG"}) {
    argv.push_back("-u");
    argv.push_back(unset);
  }
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(std::string(BENCH_DIR) + "/" + bench);
  argv.insert(argv.end(), args.begin(), args.end());
  return runCommand(argv, 60);
}

// The lines in which the library reports the choice for an operation of collective `name`.
std::vector<std::string> choiceLines(const std::string& output, const std::string& name) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(start, end - start);
    if (line.find("CHORUS INFO " + name + " opCount") != std::string::npos) lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

TEST(AlgorithmsDebug, InfoPrintsTheChoice) {
  // The benchmark needs more than one rank (-t): a single rank runs no algorithm and prints no
  // choice.
  const std::vector<std::string> args{"-b", "8", "-e", "8", "-n", "1",
                                      "-w", "0", "-c", "1", "-t", "3"};
  const CommandResult tree =
      runBench({"CHORUS_DEBUG=INFO", "CHORUS_ALGO=tree"}, "all_reduce_perf", args);
  ASSERT_FALSE(tree.timedOut) << tree.output;
  EXPECT_EQ(tree.exitCode, 0) << tree.output;
  EXPECT_NE(tree.output.find("algo tree"), std::string::npos) << tree.output;
  // Every AllReduce of the run (the benchmark's own and the measured ones) says tree, and with
  // CHORUS_ALGO=ring every one says ring: the line follows the choice.
  const CommandResult ring =
      runBench({"CHORUS_DEBUG=INFO", "CHORUS_ALGO=ring"}, "all_reduce_perf", args);
  EXPECT_EQ(ring.exitCode, 0) << ring.output;
  for (const auto& [out, algo] : {std::pair<std::string, std::string>{tree.output, "tree"},
                                  std::pair<std::string, std::string>{ring.output, "ring"}}) {
    const auto lines = choiceLines(out, "AllReduce");
    EXPECT_GE(lines.size(), 3u) << "one line per rank and operation at least\n" << out;
    for (const auto& line : lines) {
      EXPECT_NE(line.find(": algo " + algo + " proto "), std::string::npos)
          << "CHORUS_ALGO=" << algo << ": " << line;
    }
  }
  // Without CHORUS_DEBUG nothing is printed.
  const CommandResult quiet = runBench({"CHORUS_ALGO=tree"}, "all_reduce_perf", args);
  EXPECT_EQ(quiet.exitCode, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("CHORUS INFO"), std::string::npos) << quiet.output;
}

// Every forced setting of the matrix, on 4 ranks: every operation of that collective the
// benchmark runs reports the forced algorithm, protocol (and 2 channels), and the benchmark's
// own check passes.
TEST(AlgorithmsDebug, OperationsRunTheForcedChoice) {
  for (Coll coll :
       {Coll::AllReduce, Coll::Broadcast, Coll::Reduce, Coll::AllGather, Coll::ReduceScatter}) {
    for (const Setting& s : settingsFor(coll)) {
      std::vector<std::string> env{"CHORUS_DEBUG=INFO", std::string("CHORUS_ALGO=") + s.algo,
                                   std::string("CHORUS_PROTO=") + s.proto};
      if (s.twoChannels) {
        env.push_back("CHORUS_MIN_NCHANNELS=2");
        env.push_back("CHORUS_MAX_NCHANNELS=2");
      }
      // 4 KiB, or a size within the algorithm's limit.
      const std::string size = s.maxBytes != 0 && s.maxBytes < 4096 ? "128" : "4K";
      const CommandResult res =
          runBench(env, benchFor(coll),
                   {"-b", size, "-e", size, "-n", "1", "-w", "0", "-c", "1", "-t", "4", "-r", "3"});
      const std::string what = std::string(benchFor(coll)) + " forced " + s.name();
      ASSERT_FALSE(res.timedOut) << what << "\n" << res.output;
      EXPECT_EQ(res.exitCode, 0) << what << "\n" << res.output;
      const auto lines = choiceLines(res.output, collName(coll));
      EXPECT_FALSE(lines.empty()) << what << ": no choice printed\n" << res.output;
      const std::string want = std::string("algo ") + s.algo + " proto " + s.proto + " nchannels ";
      for (const auto& line : lines) {
        EXPECT_NE(line.find(want), std::string::npos) << what << ": " << line;
        if (s.twoChannels) {
          EXPECT_NE(line.find(want + "2"), std::string::npos) << what << ": " << line;
        }
      }
    }
  }
}

// The eager Broadcast (CHORUS_ALGO=broadcast:oneshot): 1500 calls back to back, two in three
// small (1-248 bytes, the 256-cell ring) and one in three medium (249 bytes-8 KiB, the 16-cell
// ring), wrap both of each root's rings, with the root moving (every 250 calls: root 0 makes 333
// small and 167 medium calls) and in place or not; a receiver pauses after each change of root,
// so that the root fills a ring and waits for acknowledgements. Every rank checks every call's
// bytes against what the root wrote (a function of the call and the index), and the root's input
// stays unchanged.
TEST(EagerBroadcast, BackToBackWrapsTheRingWithMovingRootsAndASlowReceiver) {
  Watchdog watchdog(120, "EagerBroadcast");
  constexpr int n = 3, calls = 1500;
  ScopedEnv algo("CHORUS_ALGO", "broadcast:oneshot"), proto("CHORUS_PROTO", nullptr);
  std::unique_ptr<CommSet> comms = makeForcedComms(n);
  ASSERT_EQ(comms->initResult(), chorusSuccess);
  std::vector<int> wrong(n, 0), failed(n, 0);
  std::vector<std::string> why(n);
  runThreads(n, [&](int r) {
    chorusComm_t comm = (*comms)[r];
    std::vector<uint8_t> in(chorus::kEagerMedMaxBytes + 1), out(chorus::kEagerMedMaxBytes + 1);
    for (int i = 0; i < calls; ++i) {
      const int root = (i / 250) % n;
      const size_t small = chorus::kEagerMaxBytes, medium = chorus::kEagerMedMaxBytes;
      const size_t count = i % 3 != 2 ? size_t(1 + (i * 37) % small)
                                      : size_t(small + 1 + (i * 7919) % (medium - small));
      const bool inPlace = (i / n) % 2 == 0;
      auto value = [&](size_t k) { return uint8_t((i * 131 + int(k) * 7 + root) & 0xff); };
      for (size_t k = 0; k < in.size(); ++k) in[k] = r == root ? value(k) : uint8_t(0xee);
      std::fill(out.begin(), out.end(), uint8_t(0xdd));
      uint8_t* recv = inPlace ? in.data() : out.data();
      // A late receiver: the root fills its ring and waits for acknowledgements.
      if (r == (root + 1) % n && i % 250 == 3)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const chorusResult_t res =
          chorusBroadcast(in.data(), recv, count, chorusUint8, root, comm, nullptr);
      if (res != chorusSuccess) {
        ++failed[size_t(r)];
        why[size_t(r)] = chorusGetLastError(comm);
        return;
      }
      for (size_t k = 0; k < count; ++k)
        if (recv[k] != value(k) || (r == root && in[k] != value(k))) ++wrong[size_t(r)];
      if (!inPlace && recv[count] != 0xdd) ++wrong[size_t(r)];  // nothing past the count
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(failed[size_t(r)], 0) << "rank " << r << ": " << why[size_t(r)];
    EXPECT_EQ(wrong[size_t(r)], 0) << "rank " << r;
  }
  // Every call of the run was the eager one (up to 8 KiB), and a larger one cannot be.
  chorusChoice_t c{};
  ASSERT_EQ(chorusTunerChoice((*comms)[0], "broadcast", chorus::kEagerMedMaxBytes, chorusUint8, &c),
            chorusSuccess);
  EXPECT_EQ(std::string(c.algorithm), "oneshot");
  ASSERT_EQ(
      chorusTunerChoice((*comms)[0], "broadcast", chorus::kEagerMedMaxBytes + 1, chorusUint8, &c),
      chorusSuccess);
  EXPECT_NE(std::string(c.algorithm), "oneshot");
  // A call of no elements moves nothing: its predicted time is the fixed cost, no more than one
  // element's.
  for (const char* coll : {"allreduce", "broadcast", "reduce", "allgather", "reducescatter"}) {
    chorusChoice_t none{}, one{};
    ASSERT_EQ(chorusTunerChoice((*comms)[0], coll, 0, chorusFloat32, &none), chorusSuccess);
    ASSERT_EQ(chorusTunerChoice((*comms)[0], coll, 1, chorusFloat32, &one), chorusSuccess);
    EXPECT_GT(none.predictedUs, 0) << coll;
    EXPECT_LE(none.predictedUs, one.predictedUs) << coll;
  }
}

}  // namespace
