// The tuner's fitted choices on one node (tune/tuner.h ChoiceFit): the built-in model holds a
// fit for every choice the tuner may pick on 2 ranks, predicts each fit's measured times at its
// sizes and linearly between them, scales them to other rank counts by hand-offs and bytes, and
// the tuner cache keeps them exactly (chorus-tune writes it, communicators read it), with the
// in-place ratios that scale an in-place call's prediction.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "comm/comm.h"
#include "core/placement.h"
#include "run_command.h"
#include "scoped_env.h"
#include "topo/tree.h"
#include "tune/calibration.h"
#include "tune/tuner.h"

namespace {

using namespace chorus;
using namespace ctest;

constexpr OpKind kKinds[] = {OpKind::kAllReduce, OpKind::kBroadcast, OpKind::kReduce,
                             OpKind::kAllGather, OpKind::kReduceScatter};

// The set of `m` measured on `nranks` ranks, or -1.
int setOf(const MachineModel& m, int nranks) {
  for (int set = 0; set < kFitSets; ++set)
    for (const auto& perKind : m.fits[set])
      for (const auto& perAlgo : perKind)
        for (const auto& perProto : perAlgo)
          for (const ChoiceFit& f : perProto)
            if (f.measured && f.nranks == nranks) return set;
  return -1;
}

void fitsEveryChoice(const MachineModel& m, const std::string& name);

// Every choice chorus-tune fits on 2, 4 and 8 ranks has a built-in fit measured on that many
// ranks (of the reference VM's 2 cores), at sizes that grow, with times that are positive.
// Both sets (CHORUS_TUNE_REFERENCE picks one).
TEST(TunerFits, BuiltInModelFitsEveryChoiceOnTwoFourAndEightRanks) {
  for (const char* name : {"zen5", "zen4"}) {
    ScopedEnv set("CHORUS_TUNE_REFERENCE", name);
    const std::unique_ptr<MachineModel> model = defaultModel();
    EXPECT_STREQ(model->builtInFits, name);
    SCOPED_TRACE(name);
    fitsEveryChoice(*model, name);
    // The in-place ratios: measured on the Zen 4 host for every fitted collective on each rank
    // count; the Zen 5 set has none (an in-place call is predicted as an out-of-place one there).
    for (int n : {2, 4, 8})
      for (OpKind k : kKinds) {
        const InPlaceFit& f = model->inPlace[setOf(*model, n)][int(k)];
        EXPECT_EQ(f.measured, std::string(name) == "zen4") << collectiveKey(k) << " on " << n;
        if (!f.measured) continue;
        EXPECT_EQ(f.nranks, n);
        ASSERT_GE(f.nknots, 10) << collectiveKey(k) << " on " << n;
        for (int i = 0; i < f.nknots; ++i) {
          EXPECT_GT(f.ratio[i], 0.2) << collectiveKey(k) << " on " << n << " at " << f.bytes[i];
          EXPECT_LT(f.ratio[i], 5.0) << collectiveKey(k) << " on " << n << " at " << f.bytes[i];
          if (i > 0) {
            EXPECT_GT(f.bytes[i], f.bytes[i - 1]);
          }
        }
      }
  }
}

// The set a CPU takes: AMD's family 25 (Zen 3, Zen 4) the Zen 4 one, every other CPU the Zen 5
// one (Zen 5 and the CPUs no set was measured on).
TEST(TunerFits, BuiltInFitsFollowTheCpu) {
  EXPECT_STREQ(builtInFitsFor("AuthenticAMD", 25), "zen4");  // EPYC 7003 (Milan), 9004 (Genoa)
  EXPECT_STREQ(builtInFitsFor("AuthenticAMD", 26), "zen5");  // EPYC 9005 (Turin)
  EXPECT_STREQ(builtInFitsFor("GenuineIntel", 6), "zen5");
  EXPECT_STREQ(builtInFitsFor("", 0), "zen5");  // no /proc/cpuinfo fields (aarch64)
  // This machine's, read here apart: the first vendor_id and cpu family lines.
  std::ifstream f("/proc/cpuinfo");
  std::string line, vendor;
  int family = -1;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "vendor_id" && vendor.empty()) vendor = value;
    if (key == "cpu family" && family < 0) family = std::atoi(value.c_str());
  }
  {
    ScopedEnv none("CHORUS_TUNE_REFERENCE", nullptr);
    EXPECT_STREQ(builtInFitsName(), builtInFitsFor(vendor, std::max(family, 0)))
        << vendor << " family " << family;
  }
  ScopedEnv named("CHORUS_TUNE_REFERENCE", "zen5");
  EXPECT_STREQ(builtInFitsName(), "zen5");
}

// A choice the tuner picks unnamed on one node only where it was measured
// (AlgoDesc::unnamedOnlyFitted) may lack a fit: the recursive doubling's 2-rank AllReduce is
// measured in the Zen 4 set alone, its AllGather and ReduceScatter in neither.
void fitsEveryChoice(const MachineModel& m, const std::string& name) {
  for (int n : {2, 4, 8}) {
    const int set = setOf(m, n);
    ASSERT_GE(set, 0) << "no built-in fits on " << n << " ranks";
    int fitted = 0;
    for (OpKind k : kKinds)
      for (int a = 0; a < numAlgos(); ++a)
        for (int p = 0; p < kNumProtos; ++p)
          for (int ch = 1; ch <= kCalibratedChannels; ++ch) {
            const ChoiceFit& f = m.fits[set][int(k)][a][p][ch - 1];
            const std::string what = std::string(collectiveKey(k)) + " " + algoName(Algo(a)) + "/" +
                                     protoName(Proto(p)) + "/" + std::to_string(ch) + " on " +
                                     std::to_string(n);
            if (!fittable(k, Algo(a), Proto(p), ch, n)) {
              EXPECT_FALSE(f.measured) << what << " is fitted but chorus-tune does not time it";
              continue;
            }
            if (algoDesc(Algo(a)).unnamedOnlyFitted) {
              const bool rdAllReduce = Algo(a) == Algo::kRecursiveDoubling &&
                                       k == OpKind::kAllReduce && n == 2 && ch == 1;
              EXPECT_EQ(f.measured, rdAllReduce && name == "zen4") << what;
              if (!f.measured) continue;
            }
            ++fitted;
            ASSERT_TRUE(f.measured) << what << " has no built-in fit";
            EXPECT_EQ(f.nranks, n) << what;
            EXPECT_EQ(f.cores, 2) << what;
            ASSERT_GE(f.nknots, 2) << what;
            for (int i = 0; i < f.nknots; ++i) {
              EXPECT_GT(f.us[i], 0) << what << " at " << f.bytes[i];
              if (i > 0) {
                EXPECT_GT(f.bytes[i], f.bytes[i - 1]) << what;
              }
            }
          }
    EXPECT_GE(fitted, 15) << n << " ranks";  // ring, tree, chain, one-shot...; protocols; channels
  }
}

// On the fit's own rank count the model returns the measured times at the measured sizes, the
// straight line between two of them, and the last segment's slope beyond the last; the times
// never fall with the size (a larger call is not faster).
TEST(TunerFits, PredictsTheMeasuredTimesAndLinesBetween) {
  const MachineModel& m = machineModel();
  int checked = 0;
  for (int set = 0; set < kFitSets; ++set)
    for (OpKind k : kKinds)
      for (int a = 0; a < numAlgos(); ++a)
        for (int p = 0; p < kNumProtos; ++p)
          for (int ch = 1; ch <= kCalibratedChannels; ++ch) {
            const ChoiceFit& f = m.fits[set][int(k)][a][p][ch - 1];
            if (!f.measured || f.nknots < 2) continue;
            Shape own{f.nranks, 1, true};  // the node it was measured on
            own.onlineCores = f.cores;
            own.oversubscribed = f.nranks > f.cores;
            const std::string what = std::string(collectiveKey(k)) + " " + algoName(Algo(a)) + "/" +
                                     protoName(Proto(p)) + "/" + std::to_string(ch) + " on " +
                                     std::to_string(f.nranks);
            auto predict = [&](double bytes) {
              return predictUs(k, Algo(a), Proto(p), ch, own, size_t(bytes));
            };
            for (int i = 0; i < f.nknots; ++i)
              EXPECT_NEAR(predict(f.bytes[i]), f.us[i], 1e-9 * f.us[i] + 1e-9)
                  << what << " at " << f.bytes[i];
            for (int i = 0; i + 1 < f.nknots; ++i) {
              const double lo = f.bytes[i], hi = f.bytes[i + 1];
              const double mid = std::floor((lo + hi) / 2);
              const double want = f.us[i] + (f.us[i + 1] - f.us[i]) * (mid - lo) / (hi - lo);
              EXPECT_NEAR(predict(mid), want, 1e-9 * want + 1e-9) << what << " at " << mid;
              EXPECT_GE(f.us[i + 1], f.us[i]) << what << " falls at " << hi;
            }
            const size_t limit = slotLimit(Algo(a), k, f.nranks);
            const double last = f.bytes[f.nknots - 1], prev = f.bytes[f.nknots - 2];
            if (double(limit) >= 2 * last) {
              const double slope = (f.us[f.nknots - 1] - f.us[f.nknots - 2]) / (last - prev);
              EXPECT_NEAR(predict(2 * last), f.us[f.nknots - 1] + slope * last,
                          1e-9 * f.us[f.nknots - 1])
                  << what << " beyond its last size";
            }
            ++checked;
          }
  EXPECT_GE(checked, 20);
}

// On another rank count the time at 8 B scales with the algorithm's hand-offs and the rest with
// its bytes per rank: 4 ranks with a core each start from the 2 ranks with a core each (the
// 4 ranks measured on 2 cores shared theirs).
TEST(TunerFits, ScalesToOtherRankCounts) {
  const MachineModel& m = machineModel();
  Shape four{4, 1, true};
  four.onlineCores = 4;
  const int set = setOf(m, 2);
  ASSERT_GE(set, 0);
  const ChoiceFit& f = m.fits[set][int(OpKind::kAllGather)][int(Algo::kRing)][0][0];
  ASSERT_TRUE(f.measured);
  ASSERT_EQ(f.nranks, 2);
  // The ring AllGather: n - 1 hand-offs, (n - 1) / n of the bytes per rank.
  const double hops =
      modelHops(OpKind::kAllGather, Algo::kRing, 4) / modelHops(OpKind::kAllGather, Algo::kRing, 2);
  const double bytes = modelByteFactor(OpKind::kAllGather, Algo::kRing, 4) /
                       modelByteFactor(OpKind::kAllGather, Algo::kRing, 2);
  EXPECT_DOUBLE_EQ(hops, 3.0);
  EXPECT_DOUBLE_EQ(bytes, 1.5);
  const double big = f.bytes[f.nknots - 1];
  EXPECT_NEAR(predictUs(OpKind::kAllGather, Algo::kRing, Proto::kSimple, 1, four, size_t(big)),
              f.us[0] * hops + (f.us[f.nknots - 1] - f.us[0]) * bytes, 1e-9 * big);
}

// The chain's ranks move unequal shares and stream without lockstep, so ranks that share cores
// spread their copies over them (algo/chain.cc chainCoreWork): 3 ranks on 2 cores, scaled from
// the 4 measured there, copy 3.5 / 5 of it for a Broadcast (4 / 5.5 for a Reduce), where the
// busiest core's rank count (2 for both) would keep it; a ring, in lockstep, still scales by the
// busiest core. With a core each (not measured apart here), a chain of 16 copies as 2 ranks do.
// The hand-offs: where ranks share cores, a call costs the chain's 1.5 (back-to-back calls
// overlap along it), Broadcast and Reduce alike, so only the ranks per core scale them.
TEST(TunerFits, ChainCopiesScaleByTheWorkOfItsRanks) {
  const MachineModel& m = machineModel();
  Shape three{3, 1, true};
  three.onlineCores = 2;
  three.oversubscribed = true;
  const int set4 = setOf(m, 4), set2 = setOf(m, 2);
  ASSERT_GE(set4, 0);
  ASSERT_GE(set2, 0);
  const int chain = int(Algo::kChain), simple = int(Proto::kSimple);
  for (OpKind kind : {OpKind::kBroadcast, OpKind::kReduce}) {
    const ChoiceFit& f = m.fits[set4][int(kind)][chain][simple][0];
    ASSERT_TRUE(f.measured);
    ASSERT_EQ(f.nranks, 4);
    ASSERT_EQ(f.cores, 2);
    const double big = f.bytes[f.nknots - 1];
    // Where ranks share cores back-to-back calls overlap along the chain, a Reduce's as a
    // Broadcast's: 1.5 hand-offs a call at 3 ranks as at 4 (with a core each, a Reduce's n - 1).
    const double hops = 1.0;
    EXPECT_DOUBLE_EQ(modelHops(kind, Algo::kChain, 3), kind == OpKind::kBroadcast ? 1.5 : 2.0);
    const double work = kind == OpKind::kBroadcast ? 3.5 / 5 : 4.0 / 5.5;
    const double load = 1.5 / 2;  // the hand-offs: ranks per core on average
    EXPECT_NEAR(predictUs(kind, Algo::kChain, Proto::kSimple, 1, three, size_t(big)),
                load * f.us[0] * hops + (f.us[f.nknots - 1] - f.us[0]) * work, 1e-9 * big)
        << collectiveKey(kind);

    Shape sixteen{16, 1, true};
    sixteen.onlineCores = 16;
    const ChoiceFit& g = m.fits[set2][int(kind)][chain][simple][0];
    ASSERT_TRUE(g.measured);
    ASSERT_EQ(g.nranks, 2);
    const double big2 = g.bytes[g.nknots - 1];
    const double hops2 = modelHops(kind, Algo::kChain, 16) / modelHops(kind, Algo::kChain, 2);
    EXPECT_NEAR(predictUs(kind, Algo::kChain, Proto::kSimple, 1, sixteen, size_t(big2)),
                g.us[0] * hops2 + (g.us[g.nknots - 1] - g.us[0]), 1e-9 * big2)
        << collectiveKey(kind);
  }
  // The ring AllReduce, in lockstep: 3 ranks on 2 cores copy as the 4 do, per byte of a rank.
  const ChoiceFit& r = m.fits[set4][int(OpKind::kAllReduce)][int(Algo::kRing)][simple][0];
  ASSERT_TRUE(r.measured);
  const double big = r.bytes[r.nknots - 1];
  const double hops =
      modelHops(OpKind::kAllReduce, Algo::kRing, 3) / modelHops(OpKind::kAllReduce, Algo::kRing, 4);
  const double bytes = modelByteFactor(OpKind::kAllReduce, Algo::kRing, 3) /
                       modelByteFactor(OpKind::kAllReduce, Algo::kRing, 4);
  EXPECT_NEAR(predictUs(OpKind::kAllReduce, Algo::kRing, Proto::kSimple, 1, three, size_t(big)),
              0.75 * r.us[0] * hops + (r.us[r.nknots - 1] - r.us[0]) * bytes, 1e-9 * big);
}

// A fit (ChoiceFit or InPlaceFit) as the cache gave it back: the same sizes, rank count and
// cores, its `values` to 6 digits.
template <class Fit>
void sameFit(const Fit& w, const Fit& g, double (Fit::*values)[kFitKnots]) {
  ASSERT_EQ(w.measured, g.measured);
  if (!w.measured) return;
  ASSERT_EQ(w.nknots, g.nknots);
  EXPECT_EQ(w.nranks, g.nranks);
  EXPECT_EQ(w.cores, g.cores);
  for (int i = 0; i < w.nknots; ++i) {
    EXPECT_EQ(w.bytes[i], g.bytes[i]);
    EXPECT_NEAR((w.*values)[i], (g.*values)[i], 1e-5 * (w.*values)[i]);
  }
}

// The tuner cache keeps every fit exactly (sizes as integers, times to 6 digits), and a line it
// cannot read is skipped with the rest of the cache kept.
TEST(TunerFits, CacheKeepsTheFits) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("chorus_fits_" + std::to_string(getpid())))
          .string();
  const char* old = getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  unsetenv("CHORUS_TUNE_CACHE_DISABLE");
  std::unique_ptr<MachineModel> wanted = defaultModel();
  MachineModel& want = *wanted;
  ChoiceFit& f = want.fits[0][int(OpKind::kBroadcast)][int(Algo::kChain)][0][0];
  ASSERT_TRUE(f.measured);
  f.us[1] = (f.us[0] + f.us[2]) / 2;  // a time the built-in table does not hold
  f.bytes[f.nknots - 1] = double(size_t(48) << 20);
  InPlaceFit& ip = want.inPlace[0][int(OpKind::kAllGather)];  // in-place ratios of set 0's ranks
  ip.nknots = 2;
  ip.bytes[0] = 8, ip.bytes[1] = double(size_t(32) << 20);
  ip.ratio[0] = 0.987654, ip.ratio[1] = 0.456789;
  ip.nranks = f.nranks;
  ip.cores = f.cores;
  ip.measured = true;
  std::string err;
  ASSERT_TRUE(saveModel(want, &err)) << err;
  {
    std::ofstream add(tuneCachePath(), std::ios::app);
    add << "fit broadcast chain simple 1 2 2 3 8 1.0 4 2.0\n";  // sizes that do not grow
    add << "fit nosuch ring simple 1 2 2 1 8 1.0\n";
    add << "fit broadcast chain simple 1 6 2 1 8 1.0\n";  // a fourth rank count: no set left
    add << "inplace reduce 2 2 2 8 1.0 4 0.5\n";          // sizes that do not grow
    add << "inplace reduce 2 2 1 8 0\n";                  // a ratio that is not positive
    add << "inplace nosuch 2 2 1 8 1.0\n";
  }
  const std::unique_ptr<MachineModel> loaded = loadOrDefaultModel();
  const MachineModel& got = *loaded;
  EXPECT_TRUE(got.calibrated);
  for (int set = 0; set < kFitSets; ++set)
    for (OpKind k : kKinds)
      for (int a = 0; a < numAlgos(); ++a)
        for (int p = 0; p < kNumProtos; ++p)
          for (int ch = 0; ch < kCalibratedChannels; ++ch)
            sameFit(want.fits[set][int(k)][a][p][ch], got.fits[set][int(k)][a][p][ch],
                    &ChoiceFit::us);
  for (int set = 0; set < kFitSets; ++set)
    for (OpKind k : kKinds)
      sameFit(want.inPlace[set][int(k)], got.inPlace[set][int(k)], &InPlaceFit::ratio);
  EXPECT_EQ(got.cacheBytes, want.cacheBytes);
  std::filesystem::remove_all(dir);
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
}

// reference_fits.inc's rows (three lines each, after the comment lines), by their first line
// (collective, algorithm, protocol, channels, ranks, cores, sizes).
std::map<std::string, std::string> referenceRows(const std::string& path, std::string* comments) {
  std::ifstream in(path);
  std::map<std::string, std::string> rows;
  std::string line, key, body;
  int inRow = 0;
  while (std::getline(in, line)) {
    if (inRow == 0 && line.rfind("//", 0) == 0) {
      *comments += line + "\n";
      continue;
    }
    if (inRow == 0) key = line, body.clear();
    body += line + "\n";
    if (++inRow == 3) rows[key] = body, inRow = 0;
  }
  return rows;
}

// Runs chorus-tune with `args` on 2 ranks, one sweep, writing the reference rows to a temporary
// file, and checks them against the built-in model's: the rows `retimed` names (2-rank rows of
// what was asked for) hold this run's times over the same sizes, every other row is as it was,
// and a line says what was timed again (`note`). Returns how many rows were re-timed.
template <class Retimed>
int checkRetimed(std::vector<std::string> args, const std::string& note, Retimed retimed) {
  const std::string out = testing::TempDir() + "/reference_fits_" + std::to_string(getpid());
  args.insert(args.begin(), CHORUS_TUNE_PATH);
  for (const char* a : {"--fit-ranks", "2", "--runs", "1", "--no-save", "--reference"})
    args.push_back(a);
  args.push_back(out);
  const CommandResult r = runCommand(args, 300);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  std::string wasNotes, notes;
  // The built-in model's rows: the set this CPU takes.
  const bool zen4 = std::string(builtInFitsName()) == "zen4";
  const auto was = referenceRows(zen4 ? REFERENCE_FITS_ZEN4_PATH : REFERENCE_FITS_PATH, &wasNotes);
  const auto now = referenceRows(out, &notes);
  std::remove(out.c_str());
  EXPECT_NE(notes.find(note), std::string::npos) << notes;
  int count = 0;
  size_t added = 0;  // in-place rows of a set that had none (the Zen 5 one)
  for (const auto& [key, body] : now)
    if (was.count(key) == 0) {
      ++added;
      if (key.find("\"inplace\"") != std::string::npos && retimed(key) &&
          key.find(", 2, 2, ") != std::string::npos)
        ++count;
      else
        ADD_FAILURE() << "a row the built-in model does not hold: " << key;
    }
  EXPECT_EQ(now.size(), was.size() + added) << notes;
  for (const auto& [key, body] : was) {
    if (now.count(key) != 1u) {
      ADD_FAILURE() << "missing row " << key;
      continue;
    }
    if (retimed(key) && key.find(", 2, 2, ") != std::string::npos) {
      ++count;  // the times are this run's: the sizes line is the same
      EXPECT_EQ(now.at(key).substr(0, now.at(key).rfind(" {")), body.substr(0, body.rfind(" {")));
      EXPECT_NE(now.at(key), body) << key;
      continue;
    }
    EXPECT_EQ(now.at(key), body) << key;
  }
  return count;
}

// chorus-tune --collective NAME --reference FILE times that collective's choices alone (here on
// 2 ranks, one sweep), and its in-place ratios, and writes every other row of the built-in model
// as it was, with a line that says what was timed again; an unknown collective is refused.
TEST(TunerFits, ToolRetimesOneCollectiveAndKeepsTheRest) {
  const int retimed =
      checkRetimed({"--collective", "broadcast"}, "broadcast on 2 ranks re-timed alone",
                   [](const std::string& key) { return key.rfind("{\"broadcast\", ", 0) == 0; });
  EXPECT_GE(retimed, 5);  // chain (Simple, LL; 1, 2 channels), one-shot, single copy; in place
  const CommandResult bad =
      runCommand({CHORUS_TUNE_PATH, "--collective", "alltoall", "--no-save"}, 60);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.output.find("unknown collective 'alltoall'"), std::string::npos) << bad.output;
}

// chorus-tune --algo zerocopy times that algorithm's choices alone, on registered chorusMemAlloc
// buffers as it runs (on ordinary ones it would fall back to another algorithm), and keeps every
// other row, the in-place ratios too; an unknown algorithm is refused.
TEST(TunerFits, ToolRetimesZeroCopyOnRegisteredBuffersAndKeepsTheRest) {
  const int retimed = checkRetimed(
      {"--algo", "zerocopy"}, "zerocopy on 2 ranks re-timed alone",
      [](const std::string& key) { return key.find("\"zerocopy\"") != std::string::npos; });
  EXPECT_EQ(retimed, 3);  // AllReduce, AllGather, ReduceScatter
  const CommandResult bad = runCommand({CHORUS_TUNE_PATH, "--algo", "warp", "--no-save"}, 60);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.output.find("unknown algorithm 'warp'"), std::string::npos) << bad.output;
}

// chorus-tune --in-place-only times the in-place ratios alone (the tuner's pick of each of the 5
// fitted collectives, in place against out of place) and keeps every fit; each ratio row has the
// sizes of the collective's fits and positive ratios.
TEST(TunerFits, ToolTimesTheInPlaceRatiosAloneAndKeepsTheFits) {
  const int retimed = checkRetimed(
      {"--in-place-only"}, "the in-place ratios on 2 ranks re-timed alone",
      [](const std::string& key) { return key.find("\"inplace\"") != std::string::npos; });
  EXPECT_EQ(retimed, 5);
}

// A measured in-place ratio (MachineModel::inPlace): linear in log(bytes) between its sizes, its
// first and last beyond them, 1 across nodes and for a collective without one; it scales the
// predicted time of an in-place call only (chorusTunerChoiceInPlace, predictChoice), never the
// choice, on a communicator of 2 thread ranks.
TEST(TunerFits, InPlaceRatioScalesOnlyAnInPlaceCallsPrediction) {
  const MachineModel saved = machineModel();
  MachineModel m = saved;
  const int set = setOf(m, 2);
  ASSERT_GE(set, 0);
  for (auto& perSet : m.inPlace) perSet[int(OpKind::kAllGather)] = InPlaceFit{};
  for (auto& perSet : m.inPlace) perSet[int(OpKind::kBroadcast)] = InPlaceFit{};
  InPlaceFit& f = m.inPlace[set][int(OpKind::kAllGather)];
  f.nknots = 3;
  f.bytes[0] = 8, f.bytes[1] = double(1 << 20), f.bytes[2] = double(32 << 20);
  f.ratio[0] = 1.0, f.ratio[1] = 0.5, f.ratio[2] = 0.8;
  f.nranks = 2;
  f.cores = 2;
  f.measured = true;
  Shape two{2, 1, true};
  two.onlineCores = 2;
  EXPECT_DOUBLE_EQ(inPlaceRatio(m, OpKind::kAllGather, two, 4), 1.0);
  EXPECT_DOUBLE_EQ(inPlaceRatio(m, OpKind::kAllGather, two, 8), 1.0);
  EXPECT_DOUBLE_EQ(inPlaceRatio(m, OpKind::kAllGather, two, double(1 << 20)), 0.5);
  // Halfway between 1 and 32 MiB in log(bytes): halfway between the ratios.
  EXPECT_NEAR(inPlaceRatio(m, OpKind::kAllGather, two, std::sqrt(double(1 << 20) * (32 << 20))),
              0.65, 1e-12);
  EXPECT_DOUBLE_EQ(inPlaceRatio(m, OpKind::kAllGather, two, double(size_t(1) << 30)), 0.8);
  EXPECT_DOUBLE_EQ(inPlaceRatio(m, OpKind::kBroadcast, two, double(1 << 20)), 1.0);
  Shape nodes{4, 2, true};
  EXPECT_DOUBLE_EQ(inPlaceRatio(m, OpKind::kAllGather, nodes, double(1 << 20)), 1.0);

  setMachineModel(m);
  chorusComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(chorusCommInitAll(comms, 2, nullptr), chorusSuccess);
  const size_t count = (size_t(1) << 20) / 2 / sizeof(float);  // 1 MiB of AllGather output
  chorusChoice_t out{}, in{};
  ASSERT_EQ(chorusTunerChoice(comms[0], "allgather", count, chorusFloat32, &out), chorusSuccess);
  ASSERT_EQ(chorusTunerChoiceInPlace(comms[0], "allgather", count, chorusFloat32, &in),
            chorusSuccess);
  EXPECT_STREQ(in.algorithm, out.algorithm);
  EXPECT_STREQ(in.protocol, out.protocol);
  EXPECT_EQ(in.nchannels, out.nchannels);
  EXPECT_GT(out.predictedUs, 0);
  EXPECT_NEAR(in.predictedUs, 0.5 * out.predictedUs, 1e-9 * out.predictedUs);
  // A collective without a ratio, and a call of nothing, predict alike in place.
  ASSERT_EQ(chorusTunerChoice(comms[1], "broadcast", count, chorusFloat32, &out), chorusSuccess);
  ASSERT_EQ(chorusTunerChoiceInPlace(comms[1], "broadcast", count, chorusFloat32, &in),
            chorusSuccess);
  EXPECT_EQ(in.predictedUs, out.predictedUs);
  ASSERT_EQ(chorusTunerChoice(comms[0], "allgather", 0, chorusFloat32, &out), chorusSuccess);
  ASSERT_EQ(chorusTunerChoiceInPlace(comms[0], "allgather", 0, chorusFloat32, &in), chorusSuccess);
  EXPECT_EQ(in.predictedUs, out.predictedUs);
  // A bad argument names the call and the rank.
  EXPECT_EQ(chorusTunerChoiceInPlace(comms[1], nullptr, count, chorusFloat32, &in),
            chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(comms[1])).find("chorusTunerChoiceInPlace (rank 1)"),
            std::string::npos)
      << chorusGetLastError(comms[1]);

  // predictChoice tells an in-place call by its buffers, as each collective defines it.
  chorusComm* c1 = comms[1];
  std::vector<float> buf(4 * count);
  OpDesc op{OpKind::kAllGather,
            buf.data() + count,
            buf.data(),
            count,
            chorusFloat32,
            chorusSum,
            0,
            comms[1],
            nullptr};
  const Choice pick = choose(c1, op);
  EXPECT_TRUE(isInPlace(op, 1));
  EXPECT_FALSE(isInPlace(op, 0));
  const double inPlaceUs = predictChoice(c1, op, pick);
  op.sendbuff = buf.data() + 2 * count;  // another buffer's block: out of place
  EXPECT_FALSE(isInPlace(op, 1));
  EXPECT_NEAR(inPlaceUs, 0.5 * predictChoice(c1, op, pick), 1e-9 * inPlaceUs);
  OpDesc rs{OpKind::kReduceScatter,
            buf.data(),
            buf.data() + count,
            count,
            chorusFloat32,
            chorusSum,
            0,
            comms[1],
            nullptr};
  EXPECT_TRUE(isInPlace(rs, 1));
  EXPECT_FALSE(isInPlace(rs, 0));
  OpDesc ar{OpKind::kAllReduce, buf.data(), buf.data(), count,  chorusFloat32,
            chorusSum,          0,          comms[0],   nullptr};
  EXPECT_TRUE(isInPlace(ar, 0));
  ar.sendbuff = buf.data() + count;
  EXPECT_FALSE(isInPlace(ar, 0));
  for (chorusComm_t c : comms) EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
  setMachineModel(saved);
}

// The recursive doubling on 2 ranks of one node (AlgoDesc::unnamedOnlyFitted): picked unnamed up
// to 128 KiB where its measured fit is the fastest, never on its generic cost terms alone (which
// predict it ahead of the ring's measured times), not beyond 128 KiB nor on more ranks unless
// named, and whenever CHORUS_ALGO names it.
TEST(TunerFits, RecursiveDoublingOnOneNodeOnlyWhereMeasured) {
  ScopedEnv algo("CHORUS_ALGO", nullptr), proto("CHORUS_PROTO", nullptr);
  const MachineModel saved = machineModel();
  MachineModel m = saved;
  const int set = setOf(m, 2);
  ASSERT_GE(set, 0);
  const int k = int(OpKind::kAllReduce), rd = int(Algo::kRecursiveDoubling);
  const int ring = int(Algo::kRing), simple = int(Proto::kSimple);
  auto shapeOf = [](int n) {
    Shape s{n, 1, true};
    s.treeDepth = std::max(treeDepth(n, 0), treeDepth(n, 1));
    s.onlineCores = 2;
    s.oversubscribed = n > 2;
    return s;
  };
  const Shape two = shapeOf(2), four = shapeOf(4);
  // The ring and rd alone, neither named (as CHORUS_ALGO=^... leaves them), the ring's fit 100x
  // slower: rd's generic terms alone predict it ahead at every size.
  TunerEnv env = readTunerEnv();
  env.algoAllowed[k] = uint16_t(1u << ring | 1u << rd);
  env.algoNamed[k] = 0;
  for (auto& perProto : m.fits[set][k][ring])
    for (ChoiceFit& f : perProto)
      for (int i = 0; i < f.nknots; ++i) f.us[i] *= 100;
  auto pick = [&](const Shape& s, size_t bytes, const TunerEnv& e) {
    return chooseForShape(s, 1, OpKind::kAllReduce, bytes, e).algo;
  };
  constexpr size_t kSlot = size_t(128) << 10;
  auto withoutRdFits = [&] {
    for (auto& perProto : m.fits[set][k][rd])
      for (ChoiceFit& f : perProto) f.measured = false;
    setMachineModel(m);
  };

  withoutRdFits();
  for (size_t bytes = 8; bytes <= kSlot; bytes *= 4)
    ASSERT_LT(predictUs(OpKind::kAllReduce, Algo(rd), Proto(simple), 1, two, bytes),
              predictUs(OpKind::kAllReduce, Algo(ring), Proto(simple), 1, two, bytes))
        << bytes;
  for (size_t bytes = 8; bytes <= (size_t(32) << 20); bytes *= 4)
    EXPECT_EQ(pick(two, bytes, env), Algo(ring)) << bytes << " bytes, no fit";

  ChoiceFit fast = m.fits[set][k][ring][simple][0];
  ASSERT_TRUE(fast.measured);
  for (int i = 0; i < fast.nknots; ++i) fast.us[i] /= 1000;
  m.fits[set][k][rd][simple][0] = fast;
  setMachineModel(m);
  for (size_t bytes : {size_t(8), size_t(8192), kSlot})
    EXPECT_EQ(pick(two, bytes, env), Algo(rd)) << bytes << " bytes, the fastest fit";
  EXPECT_NE(pick(two, kSlot + 1, env), Algo(rd));
  EXPECT_NE(pick(four, 8192, env), Algo(rd));
  {
    ScopedEnv named("CHORUS_ALGO", "rd");
    const TunerEnv rdEnv = readTunerEnv();
    withoutRdFits();
    for (size_t bytes : {size_t(8), kSlot, size_t(8) << 20}) {
      EXPECT_EQ(pick(two, bytes, rdEnv), Algo(rd)) << bytes << " bytes, named";
      EXPECT_EQ(pick(four, bytes, rdEnv), Algo(rd)) << bytes << " bytes, named, 4 ranks";
    }
  }
  setMachineModel(saved);
}

// Shape::channelCpus: the CPUs a rank's set has, shared by the ranks of its node placed on that
// set, least over the ranks; the tuner runs no more channels than that, unless
// CHORUS_MIN_NCHANNELS asks for them.
TEST(TunerFits, NoMoreChannelsThanTheRanksHaveCpus) {
  auto peer = [](uint64_t host, uint64_t digest, int cpus) {
    PeerInfo p{};
    p.hostHash = host;
    p.cpuSetDigest = digest;
    p.cpuCount = cpus;
    return p;
  };
  EXPECT_EQ(channelCpusOf({peer(1, 10, 1), peer(1, 11, 1)}), 1);    // pinned: a core each
  EXPECT_EQ(channelCpusOf({peer(1, 10, 2), peer(1, 10, 2)}), 1);    // unplaced on 2 cores
  EXPECT_EQ(channelCpusOf({peer(1, 10, 16), peer(1, 10, 16)}), 8);  // unplaced on 16
  EXPECT_EQ(channelCpusOf({peer(1, 10, 16), peer(1, 10, 16), peer(2, 10, 4)}), 4);
  EXPECT_EQ(channelCpusOf({peer(1, 10, 3), peer(1, 10, 3), peer(1, 10, 3), peer(1, 10, 3)}), 1);

  // A model where two channels of the ring run twice as fast as one on 2 ranks.
  const MachineModel saved = machineModel();
  MachineModel m = saved;
  const int set = setOf(m, 2);
  ASSERT_GE(set, 0);
  const int k = int(OpKind::kAllReduce), ring = int(Algo::kRing), simple = int(Proto::kSimple);
  ChoiceFit& one = m.fits[set][k][ring][simple][0];
  ChoiceFit& two = m.fits[set][k][ring][simple][1];
  ASSERT_TRUE(one.measured && two.measured);
  two = one;
  for (int i = 0; i < two.nknots; ++i) two.us[i] = one.us[i] / 2;
  setMachineModel(m);
  TunerEnv env = readTunerEnv();
  env.algoAllowed[k] = 1u << ring;
  env.protoAllowed[k] = 1u << simple;
  Shape shape{2, 1, true};
  shape.treeDepth = 1;
  shape.onlineCores = 2;
  auto channelsAt = [&](int cpus, size_t bytes) {
    shape.channelCpus = cpus;
    return chooseForShape(shape, 2, OpKind::kAllReduce, bytes, env).nchannels;
  };
  for (size_t bytes = 4096; bytes <= (size_t(32) << 20); bytes *= 4) {
    EXPECT_EQ(channelsAt(0, bytes), 2) << bytes;  // no limit known: the faster two
    EXPECT_EQ(channelsAt(2, bytes), 2) << bytes;
    EXPECT_EQ(channelsAt(1, bytes), 1) << bytes;  // a core each: one
  }
  env.minChannels = 2;  // CHORUS_MIN_NCHANNELS=2 asks for two anyway
  EXPECT_EQ(channelsAt(1, size_t(8) << 20), 2);
  setMachineModel(saved);
}

}  // namespace
