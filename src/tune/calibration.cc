#include "tune/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>
#include <thread>

#include "base/debug.h"
#include "base/param.h"
#include "chorus/chorus.h"  // CHORUS_VERSION_STRING (chorus/version.h)

namespace chorus {

namespace {
// The value of the first "key : value" line of /proc/cpuinfo (the first processor's), or "".
std::string cpuinfoField(const char* key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  const size_t n = strlen(key);
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos && line.compare(0, n, key) == 0 &&
        line.find_first_not_of(" \t", n) == colon)
      return line.substr(std::min(line.size(), colon + 2));
  }
  return "";
}
}  // namespace

std::string machineKey() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string cpu = cpuinfoField("model name");
  if (cpu.empty()) cpu = "unknown";
  return std::string(host) + "|" + cpu + "|" + std::to_string(std::thread::hardware_concurrency());
}

std::string tuneCachePath() {
  std::string dir = envStr("XDG_CACHE_HOME");
  if (dir.empty()) dir = envStr("HOME", "/tmp") + "/.cache";
  return dir + "/chorus/tune.txt";
}

namespace {
// One row of the reference VM's fits (reference_fits.inc, written by chorus-tune --reference);
// a row whose algorithm is kInPlaceRow holds a collective's in-place ratios (MachineModel::inPlace)
// in `us`.
struct ReferenceFit {
  const char* collective;
  const char* algo;
  const char* proto;
  int channels;
  int nranks;
  int cores;
  int nknots;
  double bytes[kFitKnots];
  double us[kFitKnots];
};
// The built-in fits, one set per reference CPU (chorus-tune --reference on each): which choice
// wins moves with the CPU, not only its speed. On the 2-core VM's Zen 5 host the FIFO chain
// Broadcast of 2 MiB took 62 us and the single copy 110; on its Zen 4 host 282 and 139.
constexpr ReferenceFit kZen5Fits[] = {
#include "tune/reference_fits.inc"
    {nullptr, nullptr, nullptr, 0, 0, 0, 0, {}, {}},  // the end
};
constexpr ReferenceFit kZen4Fits[] = {
#include "tune/reference_fits_zen4.inc"
    {nullptr, nullptr, nullptr, 0, 0, 0, 0, {}, {}},  // the end
};
struct ReferenceSet {
  const char* name;  // builtInFitsName(), CHORUS_TUNE_REFERENCE
  const ReferenceFit* rows;
};
// The first is the set for a CPU no set was measured on.
constexpr ReferenceSet kReferenceSets[] = {{"zen5", kZen5Fits}, {"zen4", kZen4Fits}};

// The set of this process: the one CHORUS_TUNE_REFERENCE names, else this CPU's kind's.
const ReferenceSet& builtInSet() {
  const std::string want = envStr("CHORUS_TUNE_REFERENCE");
  for (const ReferenceSet& r : kReferenceSets)
    if (want == r.name) return r;
  if (!want.empty())
    CHORUS_WARN(-1,
                "CHORUS_TUNE_REFERENCE=%s: no such set of built-in fits (zen5, zen4); "
                "choosing by this CPU",
                want.c_str());
  const char* name =
      builtInFitsFor(cpuinfoField("vendor_id"), std::atoi(cpuinfoField("cpu family").c_str()));
  for (const ReferenceSet& r : kReferenceSets)
    if (strcmp(r.name, name) == 0) return r;
  return kReferenceSets[0];
}

// Stores `fit` for the named choice in the set of its rank count; false where a name is unknown,
// the channels out of range or every set holds another rank count.
bool setFit(MachineModel* m, const std::string& collective, const std::string& algo,
            const std::string& proto, int channels, const ChoiceFit& fit) {
  if (channels < 1 || channels > kCalibratedChannels || fit.nknots < 1) return false;
  const int set = fitSetFor(*m, fit.nranks);
  if (set < 0) return false;
  ChoiceFit monotone = fit;
  makeMonotone(&monotone);
  const int k = fitKindByName(collective.c_str()), a = algoByName(algo.c_str());
  if (k < 0 || a < 0) return false;
  for (int p = 0; p < kNumProtos; ++p)
    if (proto == protoName(Proto(p))) {
      m->fits[set][k][a][p][channels - 1] = monotone;
      return true;
    }
  return false;
}

// A reference row as a fit (ChoiceFit or InPlaceFit), its `us` into the fit's `values`.
template <class Fit>
Fit fitOfRow(const ReferenceFit& r, double (Fit::*values)[kFitKnots]) {
  Fit fit{};
  fit.nknots = std::min(r.nknots, kFitKnots);
  for (int k = 0; k < fit.nknots; ++k) fit.bytes[k] = r.bytes[k], (fit.*values)[k] = r.us[k];
  fit.nranks = r.nranks;
  fit.cores = r.cores;
  fit.measured = true;
  return fit;
}

// A cache line's knots after its header: `fit->nknots` pairs of bytes (growing) and a value
// (into `values`) of at least `least`; false where one is missing or out of order.
template <class Fit>
bool readKnots(std::istream& in, Fit* fit, double (Fit::*values)[kFitKnots], double least) {
  if (!in || fit->nranks < 2 || fit->cores < 1 || fit->nknots < 1 || fit->nknots > kFitKnots)
    return false;
  for (int k = 0; k < fit->nknots; ++k) {
    in >> fit->bytes[k] >> (fit->*values)[k];
    if (!in || (fit->*values)[k] < least || (k > 0 && fit->bytes[k] <= fit->bytes[k - 1]))
      return false;
  }
  fit->measured = true;
  return true;
}

// And its knots as readKnots reads them.
template <class Fit>
void writeKnots(std::ostream& out, const Fit& fit, const double (&values)[kFitKnots]) {
  out << " " << fit.nknots;
  for (int i = 0; i < fit.nknots; ++i)
    out << " " << static_cast<unsigned long long>(fit.bytes[i]) << " " << values[i];
  out << "\n";
}

// Stores an in-place ratio row (its `us`: the ratios) for `collective` in the set of its rank
// count; false where the name is unknown or every set holds another rank count.
bool setInPlaceFit(MachineModel* m, const std::string& collective, const InPlaceFit& fit) {
  const int set = fitSetFor(*m, fit.nranks), k = fitKindByName(collective.c_str());
  if (set < 0 || k < 0 || fit.nknots < 1) return false;
  m->inPlace[set][k] = fit;
  return true;
}
}  // namespace

const char* builtInFitsFor(const std::string& vendor, int family) {
  // AMD family 19h (25): Zen 3 and Zen 4; 1Ah (26): Zen 5. Other CPUs take the first set.
  if (vendor == "AuthenticAMD" && family == 25) return "zen4";
  return kReferenceSets[0].name;
}

const char* builtInFitsName() {
  return builtInSet().name;
}

int fitSetFor(const MachineModel& m, int nranks) {
  int empty = -1;
  for (int set = 0; set < kFitSets; ++set) {
    bool any = false;
    for (const auto& perKind : m.fits[set])
      for (const auto& perAlgo : perKind)
        for (const auto& perProto : perAlgo)
          for (const ChoiceFit& f : perProto)
            if (f.measured) {
              if (f.nranks == nranks) return set;
              any = true;
            }
    if (!any && empty < 0) empty = set;
  }
  return empty;
}

std::unique_ptr<MachineModel> defaultModel() {
  // Measured by chorus-tune on the 2-core reference VM (docs/performance.md, quiet); a cache
  // written by chorus-tune on this machine replaces them. On the heap: a model holds every fit
  // (about 225 KiB), and this may run on any thread, with any stack.
  auto model = std::make_unique<MachineModel>();
  MachineModel& m = *model;
  m.hopUs[int(Proto::kSimple)] = 0.569821;
  m.baseUs[int(Proto::kSimple)] = 0.1607;
  m.bwGBs[int(Proto::kSimple)] = 6.94421;
  m.hopUs[int(Proto::kLL)] = 0.604534;
  m.baseUs[int(Proto::kLL)] = 0.1607;
  m.bwGBs[int(Proto::kLL)] = 2.90505;
  m.channelGain = 0;
  // The 2-channel terms since the persistent channel workers (docs/performance.md "Channel
  // workers (persistent)"): the quiet reference's 2-channel excess (measured when every call
  // started a thread per extra channel) times the after/before ratio of the same quantity,
  // measured by chorus-tune on the two builds interleaved, 6 runs each (medians): the 8 KiB
  // overhead 87.3 -> 45.1 us (38.4333 x 0.517 = 19.86) and the 8 B ring excess over 1 channel,
  // Simple 98.4 -> 4.05 us (x 0.0412), LL 90.75 -> 8.5 us (x 0.0937).
  m.channelWakeUs = 19.86;
  // Where the per-byte time changes (docs/performance.md "The model against the measurement"):
  // 2 ranks' AllReduce moved 25-35 GB/s of its size from 16 KiB to 1 MiB and 5-9 GB/s from
  // 2 MiB, where the fitted bandwidths (7-10 GB/s) were measured.
  m.cacheBytes = double(size_t(1) << 20);
  m.cacheBwGain = 3.0;
  m.netHopUs = 25;  // loopback / LAN TCP hand-off through the proxy
  m.netBwGBs = 1.0;
  // Every fitted choice's times: chorus-tune's run on a reference CPU of this one's kind.
  const ReferenceSet& set = builtInSet();
  m.builtInFits = set.name;
  for (const ReferenceFit* at = set.rows; at->collective != nullptr; ++at) {
    const ReferenceFit& r = *at;
    if (strcmp(r.algo, kInPlaceRow) == 0) continue;  // below, once every choice's set is known
    setFit(&m, r.collective, r.algo, r.proto, r.channels, fitOfRow(r, &ChoiceFit::us));
  }
  for (const ReferenceFit* at = set.rows; at->collective != nullptr; ++at) {
    const ReferenceFit& r = *at;
    if (strcmp(r.algo, kInPlaceRow) == 0)
      setInPlaceFit(&m, r.collective, fitOfRow(r, &InPlaceFit::ratio));
  }
  m.calibrated = false;
  return model;
}

std::unique_ptr<MachineModel> loadOrDefaultModel() {
  std::unique_ptr<MachineModel> m = defaultModel();
  if (envInt("CHORUS_TUNE_CACHE_DISABLE", 0)) return m;
  std::ifstream f(tuneCachePath());
  if (!f) {
    CHORUS_INFO(-1, "tuner: no cache at %s, using built-in defaults, the %s fits (run chorus-tune)",
                tuneCachePath().c_str(), m->builtInFits);
    return m;
  }
  std::string line, machine, version;
  auto cached = std::make_unique<MachineModel>(*m);
  MachineModel& c = *cached;
  bool fitsCleared = false;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "machine")
      std::getline(in >> std::ws, machine);
    else if (key == "version")
      in >> version;
    else if (key == "simple")
      in >> c.hopUs[0] >> c.baseUs[0] >> c.bwGBs[0];
    else if (key == "ll")
      in >> c.hopUs[1] >> c.baseUs[1] >> c.bwGBs[1];
    else if (key == "channels")
      in >> c.channelGain >> c.channelWakeUs;
    else if (key == "net")
      in >> c.netHopUs >> c.netBwGBs;
    else if (key == "cache")
      in >> c.cacheBytes >> c.cacheBwGain;
    else if (key == "fit") {
      // fit COLLECTIVE ALGO PROTO CHANNELS NRANKS CORES NKNOTS (BYTES US) x NKNOTS
      std::string coll, algo, proto;
      int ch = 0;
      ChoiceFit fit{};
      in >> coll >> algo >> proto >> ch >> fit.nranks >> fit.cores >> fit.nknots;
      const bool ok = readKnots(in, &fit, &ChoiceFit::us, 0.0);
      if (ok && !fitsCleared) {  // a cache's fits replace the built-in ones, all of them, and
        // the built-in in-place ratios with them (a cache without them has none: ratio 1)
        forEachFit(c, [](FitIndex, ChoiceFit& f) { f.measured = false; });
        for (auto& perSet : c.inPlace)
          for (InPlaceFit& f : perSet) f.measured = false;
        fitsCleared = true;
      }
      if (!ok || !setFit(&c, coll, algo, proto, ch, fit))
        CHORUS_WARN(-1, "tuner: ignoring a malformed line of %s: %s", tuneCachePath().c_str(),
                    line.c_str());
    } else if (key == kInPlaceRow) {
      // inplace COLLECTIVE NRANKS CORES NKNOTS (BYTES RATIO) x NKNOTS, after the fits
      std::string coll;
      InPlaceFit fit{};
      in >> coll >> fit.nranks >> fit.cores >> fit.nknots;
      const bool ok = fitsCleared && readKnots(in, &fit, &InPlaceFit::ratio, 1e-9);
      if (!ok || !setInPlaceFit(&c, coll, fit))
        CHORUS_WARN(-1, "tuner: ignoring a malformed line of %s: %s", tuneCachePath().c_str(),
                    line.c_str());
    }
  }
  if (machine != machineKey() || version != CHORUS_VERSION_STRING) {
    CHORUS_WARN(-1,
                "tuner: ignoring %s: written for '%s' version %s, this is '%s' version %s; "
                "run chorus-tune again",
                tuneCachePath().c_str(), machine.c_str(), version.c_str(), machineKey().c_str(),
                CHORUS_VERSION_STRING);
    return m;
  }
  c.calibrated = true;
  return cached;
}

bool saveModel(const MachineModel& m, std::string* error) {
  std::string path = tuneCachePath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream f(path);
  if (!f) {
    *error = "cannot write " + path;
    return false;
  }
  f << "# chorus-tune: hop_us base_us bandwidth_GBps per protocol; channel gain and wake cost;\n"
    << "# fit collective algo proto channels nranks cores nknots, then bytes us per knot;\n"
    << "# inplace collective nranks cores nknots, then bytes (in-place / out-of-place) per knot\n";
  f << "machine " << machineKey() << "\n";
  f << "version " << CHORUS_VERSION_STRING << "\n";
  f << "simple " << m.hopUs[0] << " " << m.baseUs[0] << " " << m.bwGBs[0] << "\n";
  f << "ll " << m.hopUs[1] << " " << m.baseUs[1] << " " << m.bwGBs[1] << "\n";
  f << "channels " << m.channelGain << " " << m.channelWakeUs << "\n";
  f << "net " << m.netHopUs << " " << m.netBwGBs << "\n";
  f << "cache " << static_cast<unsigned long long>(m.cacheBytes) << " " << m.cacheBwGain << "\n";
  forEachFit(m, [&](FitIndex at, const ChoiceFit& fit) {
    f << "fit " << collectiveKey(at.kind) << " " << algoName(at.algo) << " " << protoName(at.proto)
      << " " << at.channels << " " << fit.nranks << " " << fit.cores;
    writeKnots(f, fit, fit.us);
  });
  for (int set = 0; set < kFitSets; ++set)
    for (int k = 0; k < kFitKinds; ++k) {
      const InPlaceFit& fit = m.inPlace[set][k];
      if (!fit.measured) continue;
      f << kInPlaceRow << " " << collectiveKey(OpKind(k)) << " " << fit.nranks << " " << fit.cores;
      writeKnots(f, fit, fit.ratio);
    }
  return bool(f);
}

}  // namespace chorus
