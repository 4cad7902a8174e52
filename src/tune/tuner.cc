#include "tune/tuner.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "comm/comm.h"
#include "topo/tree.h"
#include "tune/calibration.h"

namespace chorus {

const char* collectiveKey(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "allreduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "allgather";
    case OpKind::kReduceScatter:
      return "reducescatter";
    case OpKind::kAlltoAll:
      return "alltoall";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
  }
  return "?";
}

int fitKindByName(const char* name) {
  for (int k = 0; k < kFitKinds; ++k)
    if (strcmp(name, collectiveKey(OpKind(k))) == 0) return k;
  return -1;
}

namespace {
// The model is loaded on first use and replaced only by setMachineModel (chorus-tune): readers
// take the published pointer without a lock; replaced models stay allocated (they are few and
// a caller may still hold a reference).
std::mutex gModelMu;
std::atomic<const MachineModel*> gModel{nullptr};
std::atomic<uint64_t> gModelGeneration{1};
std::vector<std::unique_ptr<MachineModel>>& modelStore() {
  static std::vector<std::unique_ptr<MachineModel>> store;
  return store;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(tolower(c));
  return s;
}

// Whether the CHORUS_ALGO / CHORUS_PROTO value `v` allows `name` for `collective`, parsed as
// NCCL does: "ring,tree", "^ll", "allreduce:tree;broadcast:chain".
bool allowsIn(const char* v, const char* collective, const char* name) {
  if (v == nullptr || *v == 0) return true;
  // Pick the clause for this collective: "coll:list;coll:list" or a plain list for all.
  std::string spec = lower(v), list;
  bool found = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t semi = spec.find(';', start);
    std::string clause =
        spec.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
    size_t colon = clause.find(':');
    if (colon == std::string::npos) {
      if (!found) list = clause;
    } else if (clause.substr(0, colon) == collective) {
      list = clause.substr(colon + 1);
      found = true;
    }
    if (semi == std::string::npos) break;
    start = semi + 1;
  }
  if (list.empty()) return true;
  bool exclude = list[0] == '^';
  if (exclude) list = list.substr(1);
  bool listed = false;
  start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item == lower(name)) listed = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !listed : listed;
}
}  // namespace

const MachineModel& machineModel() {
  const MachineModel* m = gModel.load(std::memory_order_acquire);
  if (m != nullptr) return *m;
  std::lock_guard<std::mutex> l(gModelMu);
  m = gModel.load(std::memory_order_acquire);
  if (m == nullptr) {
    modelStore().push_back(loadOrDefaultModel());
    m = modelStore().back().get();
    gModel.store(m, std::memory_order_release);
  }
  return *m;
}

void setMachineModel(const MachineModel& m) {
  std::lock_guard<std::mutex> l(gModelMu);
  modelStore().push_back(std::make_unique<MachineModel>(m));
  gModel.store(modelStore().back().get(), std::memory_order_release);
  gModelGeneration.fetch_add(1, std::memory_order_release);
}

uint64_t machineModelGeneration() {
  return gModelGeneration.load(std::memory_order_acquire);
}

TunerEnv readTunerEnv() {
  TunerEnv e{};
  const char* algo = getenv("CHORUS_ALGO");
  const char* proto = getenv("CHORUS_PROTO");
  for (int k = 0; k < kNumOpKinds; ++k) {
    const char* coll = collectiveKey(OpKind(k));
    // Listed by name (not only left in by a "^..." exclusion): what an algorithm needs on the
    // shapes and sizes where the tuner does not pick it unnamed (AlgoDesc::unnamedBelow).
    const bool byName = algo != nullptr && !allowsIn(algo, coll, "__none__");
    for (int a = 0; a < numAlgos(); ++a) {
      if (!allowsIn(algo, coll, algoName(Algo(a)))) continue;
      e.algoAllowed[k] |= uint16_t(1u << a);
      if (byName) e.algoNamed[k] |= uint16_t(1u << a);
    }
    for (int p = 0; p < kNumProtos; ++p)
      if (allowsIn(proto, coll, protoName(Proto(p)))) e.protoAllowed[k] |= uint8_t(1u << p);
  }
  e.minChannels = envInt("CHORUS_MIN_NCHANNELS", 1);
  e.maxChannelsSet = !envStr("CHORUS_MAX_NCHANNELS").empty();
  e.maxChannels = envInt("CHORUS_MAX_NCHANNELS", 0);
  return e;
}

bool algoSupports(Algo a, OpKind kind, const Shape& shape) {
  const AlgoDesc& d = algoDesc(a);
  return ((d.serves >> int(kind)) & 1) && (d.runsOn == nullptr || d.runsOn(kind, shape));
}

bool protoSupports(Algo a, Proto p) {
  return (algoDesc(a).protos >> int(p)) & 1;
}

namespace {
constexpr double kExtraChannelMargin = 1.1;
Shape withDepth(Shape s) {
  if (s.treeDepth < 0) s.treeDepth = std::max(treeDepth(s.nranks, 0), treeDepth(s.nranks, 1));
  return s;
}
}  // namespace

double modelHops(OpKind kind, Algo a, int n, int depth) {
  return algoDesc(a).hops(kind, withDepth(Shape{n, 1, true, depth}), 0);
}

double modelByteFactor(OpKind kind, Algo a, int n) {
  return algoDesc(a).byteFactor(kind, n);
}

size_t slotLimit(Algo a, OpKind kind, int nranks) {
  const AlgoDesc& d = algoDesc(a);
  return d.slotLimit ? d.slotLimit(kind, nranks) : SIZE_MAX;
}

double netHopUs(const Shape& shape) {
  return shape.netHopUs > 0 ? shape.netHopUs : machineModel().netHopUs;
}

double netBwGBs(const Shape& shape) {
  return shape.netBwGBs > 0 ? shape.netBwGBs : machineModel().netBwGBs;
}

double netPipeUs(const Shape& shape, OpKind kind) {
  const double measured = kind == OpKind::kReduce ? shape.netReducePipeUs : shape.netPipeUs;
  return measured > 0 ? measured : kNetPipeShare * netHopUs(shape);
}

double nodeHopUs(const Shape& shape, Proto p) {
  const MachineModel& m = machineModel();
  const double simple = m.hopUs[int(Proto::kSimple)];
  return shape.nodeHopUs > 0 && simple > 0 ? shape.nodeHopUs * m.hopUs[int(p)] / simple
                                           : m.hopUs[int(p)];
}

namespace {
// Of the fit sets' `at(set)` (ChoiceFit or InPlaceFit), the measured one nearest to `shape`: the
// same oversubscription first, then the nearest rank count; null where none is measured.
template <class Fit, class At>
const Fit* nearestFit(const Shape& shape, At at) {
  auto distance = [&](const Fit& f) {
    const bool over = f.cores > 0 && f.nranks > f.cores;
    return (over != shape.oversubscribed ? 1 << 20 : 0) + std::abs(f.nranks - shape.nranks);
  };
  const Fit* best = nullptr;
  for (int set = 0; set < kFitSets; ++set) {
    const Fit& f = at(set);
    if (f.measured && f.nknots >= 1 && (best == nullptr || distance(f) < distance(*best)))
      best = &f;
  }
  return best;
}
}  // namespace

const ChoiceFit* fitFor(const MachineModel& m, OpKind kind, Algo a, Proto p, int nch,
                        const Shape& shape) {
  if (int(kind) >= kFitKinds || nch < 1 || nch > kCalibratedChannels || shape.nnodes != 1)
    return nullptr;
  return nearestFit<ChoiceFit>(shape, [&](int set) -> const ChoiceFit& {
    return m.fits[set][int(kind)][int(a)][int(p)][nch - 1];
  });
}

double inPlaceRatio(const MachineModel& m, OpKind kind, const Shape& shape, double bytes) {
  if (int(kind) >= kFitKinds || shape.nnodes != 1) return 1.0;
  const InPlaceFit* best = nearestFit<InPlaceFit>(
      shape, [&](int set) -> const InPlaceFit& { return m.inPlace[set][int(kind)]; });
  if (best == nullptr) return 1.0;
  const InPlaceFit& f = *best;
  if (bytes <= f.bytes[0]) return f.ratio[0];
  for (int i = 1; i < f.nknots; ++i)
    if (bytes <= f.bytes[i]) {
      const double x = std::log(bytes / f.bytes[i - 1]) / std::log(f.bytes[i] / f.bytes[i - 1]);
      return f.ratio[i - 1] + x * (f.ratio[i] - f.ratio[i - 1]);
    }
  return f.ratio[f.nknots - 1];
}

bool isInPlace(const OpDesc& op, int rank) {
  const size_t block = op.count * chorusTypeSize(op.type) * size_t(rank);
  switch (op.kind) {
    case OpKind::kAllGather:
      return op.sendbuff == static_cast<const char*>(op.recvbuff) + block;
    case OpKind::kReduceScatter:
      return op.recvbuff == static_cast<const char*>(op.sendbuff) + block;
    default:
      return op.sendbuff == op.recvbuff;
  }
}

// The share of the smaller term that does not overlap the larger on a shared machine.
constexpr double kSharedOverlap = 0.5;

double pipelinedUs(const Shape& shape, double hopsUs, double bytesUs) {
  if (!shape.sharedMachine) return hopsUs + bytesUs;
  return std::max(hopsUs, bytesUs) + kSharedOverlap * std::min(hopsUs, bytesUs);
}

double bytesTermUs(const Shape& shape, double totalUs, double hopsUs) {
  double bytes = totalUs - hopsUs;
  if (shape.sharedMachine) {
    // totalUs = bytes + k hops where the bytes are the larger, else hops + k bytes.
    bytes = totalUs - kSharedOverlap * hopsUs;
    if (bytes < hopsUs) bytes = (totalUs - hopsUs) / kSharedOverlap;
  }
  return std::max(bytes, totalUs / 4);
}

double hopsTermUs(const Shape& shape, double totalUs, double bytesUs) {
  const double hops = totalUs - (shape.sharedMachine ? kSharedOverlap : 1.0) * bytesUs;
  return hops >= bytesUs ? hops : -1.0;
}

double predictUs(OpKind kind, Algo a, Proto p, int nch, const Shape& shape, size_t bytes) {
  const MachineModel& m = machineModel();
  const AlgoDesc& d = algoDesc(a);
  const int pi = int(p);
  const int n = shape.nranks;
  double extra = 0;
  if (bytes > slotLimit(a, kind, n))  // does not fit its slots
    return std::numeric_limits<double>::infinity();
  if (n <= 1) return m.baseUs[pi];
  if (d.setupUs) extra += d.setupUs(kind);
  const double S = double(bytes);
  if (shape.nnodes > 1) {
    // Across nodes every hand-off is counted as a network hop, and the bytes move at the
    // slower of the node's link and a rank's shared memory: per node, a ring (or a tree edge)
    // sends 2(N-1)/N of the data each way over its one network edge while each of the node's
    // other edges carries as much through shared memory, concurrently (seed 001's ideal is the
    // same min). Algorithms that split the work between the two (hier, hd) model themselves.
    if (d.multiNodeUs) return d.multiNodeUs(kind, p, shape, bytes);
    const double bw = std::min(netBwGBs(shape), m.bwGBs[pi]) * 1e3;
    Shape s = withDepth(shape);
    s.oversubscribed = false;
    const double factor = d.netByteFactor ? d.netByteFactor(kind, shape) : d.byteFactor(kind, n);
    const double bytesUs = S * factor / bw;
    const double hopsUs = d.netHopsUs ? d.netHopsUs(kind, p, s, bytes, bytesUs)
                                      : d.hops(kind, s, bytes) * netHopUs(shape);
    return m.baseUs[pi] + pipelinedUs(shape, hopsUs, bytesUs);
  }
  if (const ChoiceFit* fit = fitFor(m, kind, a, p, nch, shape)) {
    // The measured times, scaled from the fit's rank count to this one: the 8 B time by the
    // hand-offs, the rest by the bytes per rank, both by the ranks that share a core (more
    // ranks than cores take turns: each hand-off waits for the core, and the copies of the ranks
    // on one core run one after the other). The hand-offs wait for the ranks per core on
    // average; the copies for the busiest core's, which holds ceil(ranks / cores) of them (3
    // ranks on 2 cores: one core copies for two ranks, as with 4), or what the algorithm says
    // its busiest core copies (AlgoDesc::coreWork: a pipeline whose ranks move unequal shares).
    Shape at = withDepth(Shape{fit->nranks, 1, true});
    at.onlineCores = fit->cores;
    at.oversubscribed = fit->cores > 0 && fit->nranks > fit->cores;
    const double hops0 = d.hops(kind, at, bytes), hops = d.hops(kind, withDepth(shape), bytes);
    const double f0 = d.byteFactor(kind, fit->nranks), f = d.byteFactor(kind, n);
    auto perCore = [](int ranks, int cores) {
      return cores > 0 ? std::max(1.0, double(ranks) / cores) : 1.0;
    };
    auto busiestCore = [](int ranks, int cores) {
      return cores > 0 ? std::max(1.0, double((ranks + cores - 1) / cores)) : 1.0;
    };
    const double load = perCore(n, shape.onlineCores) / perCore(fit->nranks, fit->cores);
    auto copyWork = [&](int ranks, int cores, double bytesFactor) {
      return d.coreWork ? d.coreWork(kind, ranks, cores) : busiestCore(ranks, cores) * bytesFactor;
    };
    const double w0 = copyWork(fit->nranks, fit->cores, f0);
    const double w = copyWork(n, shape.onlineCores, f);
    const double lat = fit->us[0];
    const double rest = fitUs(*fit, S) - lat;  // >= 0: the times never fall (makeMonotone)
    return load * lat * (hops0 > 0 ? hops / hops0 : 1.0) + rest * (w0 > 0 ? w / w0 : 1.0);
  }
  const double wakeups = shape.oversubscribed && d.wakeups ? d.wakeups(shape) : 1.0;
  const double hop = m.hopUs[pi];
  double bw = m.bwGBs[pi];
  if (nch > 1) {
    bw *= 1.0 + m.channelGain * (nch - 1);
    extra = m.channelWakeUs * (nch - 1);
  }
  const double cached = std::min(S, m.cacheBytes);
  const double gain = m.cacheBwGain > 0 ? m.cacheBwGain : 1.0;
  return m.baseUs[pi] + extra + wakeups * d.hops(kind, withDepth(shape), bytes) * hop +
         (cached / gain + (S - cached)) * d.byteFactor(kind, n) / (bw * 1e3);
}

void makeMonotone(ChoiceFit* f) {
  for (int k = 1; k < f->nknots; ++k) f->us[k] = std::max(f->us[k], f->us[k - 1]);
}

double fitUs(const ChoiceFit& f, double bytes) {
  if (f.nknots < 1) return 0;
  if (f.nknots == 1) return f.us[0];
  int i = 0;  // the segment [i, i + 1]: the first whose end is at or beyond bytes, else the last
  while (i + 2 < f.nknots && bytes > f.bytes[i + 1]) ++i;
  const double slope = (f.us[i + 1] - f.us[i]) / (f.bytes[i + 1] - f.bytes[i]);
  return f.us[i] + slope * (bytes - f.bytes[i]);
}

bool fittable(OpKind kind, Algo a, Proto p, int nchannels, int nranks) {
  if (int(kind) >= kFitKinds || nchannels < 1 || nchannels > kCalibratedChannels) return false;
  const AlgoDesc& d = algoDesc(a);
  // Registered buffers (Shape::registered): every algorithm runs there, the zero-copy one only.
  Shape s = withDepth(Shape{nranks, 1, true});
  s.registered = true;
  if (!algoSupports(a, kind, s) || !protoSupports(a, p)) return false;
  if (nchannels > 1 && !d.channels) return false;
  return !(d.unnamedBelow && d.unnamedBelow(s) == 0);  // only ever run when named
}

bool needsRegisteredBuffers(OpKind kind, Algo a, int nranks) {
  Shape s = withDepth(Shape{nranks, 1, true});
  s.registered = true;
  if (!algoSupports(a, kind, s)) return false;
  s.registered = false;
  return !algoSupports(a, kind, s);
}

Shape shapeOf(const chorusComm* comm) {
  Shape s{comm->nranks, comm->nnodes, true};
  std::vector<int> per(size_t(comm->nnodes), 0);
  for (int r = 0; r < comm->nranks; ++r) ++per[size_t(comm->nodeOf[size_t(r)])];
  for (int c : per) s.evenNodes = s.evenNodes && c == per[0];
  s.treeDepth = std::max(treeDepth(comm->nranks, 0), treeDepth(comm->nranks, 1));
  return s;
}

size_t modelBytes(OpKind kind, size_t count, chorusDataType_t type, int nranks) {
  size_t bytes = count * chorusTypeSize(type);
  if (kind == OpKind::kAllGather || kind == OpKind::kReduceScatter || kind == OpKind::kAlltoAll ||
      kind == OpKind::kGather || kind == OpKind::kScatter)
    bytes *= size_t(nranks);
  return bytes;
}

// A call of no bytes moves nothing: every algorithm returns at once (an AllGather of 8 bytes
// over 16 ranks is 0 per rank), where the model of a choice counts its hops. Its predicted time
// is at most a call's fixed cost; the choice itself is left as the model made it.
namespace {
double nothingMovesUs(double predictedUs, Proto p, size_t bytes) {
  return bytes == 0 ? std::min(predictedUs, machineModel().baseUs[int(p)]) : predictedUs;
}
}  // namespace

Choice chooseFor(const chorusComm* comm, OpKind kind, size_t bytes, const TunerEnv& env) {
  return chooseForShape(comm->shape.get(), comm->nchannels, kind, bytes, env);
}

Choice chooseForShape(const Shape& shape, int nchannels, OpKind kind, size_t bytes,
                      const TunerEnv& env) {
  const int k = int(kind);
  const int minCh = int(std::clamp<int64_t>(env.minChannels, 1, nchannels));
  // Channels beyond the CPUs a rank has (Shape::channelCpus) take turns on them: not candidates
  // unless CHORUS_MIN_NCHANNELS asks for them.
  const int64_t cpuCap = shape.channelCpus > 0 ? shape.channelCpus : nchannels;
  const int maxCh = int(std::clamp<int64_t>(
      std::min(env.maxChannelsSet ? env.maxChannels : nchannels, cpuCap), minCh, nchannels));
  Choice best{Algo::kRing, Proto::kSimple, 1, 1e300};
  double bestWeighed = 1e300;
  bool any = false;
  for (int ai = 0; ai < numAlgos(); ++ai) {
    Algo a = Algo(ai);
    const AlgoDesc& d = algoDesc(a);
    if (!algoSupports(a, kind, shape)) continue;
    if (d.unnamedBelow && bytes >= d.unnamedBelow(shape) && !(env.algoNamed[k] & (1u << ai)))
      continue;
    if (!(env.algoAllowed[k] & (1u << ai))) continue;
    const bool needsFit =
        d.unnamedOnlyFitted && shape.nnodes == 1 && !(env.algoNamed[k] & (1u << ai));
    for (int pi = 0; pi < kNumProtos; ++pi) {
      Proto p = Proto(pi);
      if (!protoSupports(a, p) || !(env.protoAllowed[k] & (1u << pi))) continue;
      if (!((shape.protos >> pi) & 1)) continue;  // a peer's transport does not carry it
      // Channels split rings and chains; trees use one channel per tree.
      const bool multi = d.channels;
      for (int ch = multi ? minCh : 1; ch <= (multi ? maxCh : 1); ++ch) {
        if (needsFit && fitFor(machineModel(), kind, a, p, ch, shape) == nullptr) continue;
        double t = predictUs(kind, a, p, ch, shape, bytes);
        if (std::isinf(t)) continue;  // cannot run this size
        // Each channel beyond the first takes another core (its worker), which a node whose
        // cores also compute does not have to spare: it must be predicted kExtraChannelMargin
        // faster to be picked, not win by the measurements' noise.
        const double weighed = ch > 1 ? t * kExtraChannelMargin : t;
        if (weighed < bestWeighed) best = {a, p, ch, t}, bestWeighed = weighed;
        any = true;
      }
    }
  }
  if (!any) {
    // Overrides excluded everything that can run this collective: fall back to its default.
    Algo a = Algo::kRing;
    for (int ai = numAlgos() - 1; ai >= 0; --ai)
      if ((algoDesc(Algo(ai)).fallbackFor >> k) & 1) a = Algo(ai);
    best = {a, Proto::kSimple, 1, predictUs(kind, a, Proto::kSimple, 1, shape, bytes), true};
  }
  best.predictedUs = nothingMovesUs(best.predictedUs, best.proto, bytes);
  return best;
}

namespace {

// Builds the segments of one size class: [lo, hi] is cut into pieces on which every candidate's
// predicted time is affine in the bytes (cut where the model's terms bend, below); on such a piece
// the sizes where one candidate wins form an interval, so a piece whose two ends pick the same
// candidate picks it throughout, and a piece whose ends differ is bisected until the boundaries are
// exact.
class PlanBuilder {
 public:
  PlanBuilder(chorusComm* comm, OpKind kind) : comm_(comm), kind_(kind) {}

  void build(int cls, PlanClass* out) {
    out_ = out;
    out_->nsegments = 0;
    overflow_ = false;
    const uint64_t lo = cls == 0 ? 0 : uint64_t(1) << (cls - 1);
    const uint64_t hi = cls == 0 ? 0 : cls == 64 ? UINT64_MAX : (uint64_t(1) << cls) - 1;
    // Sizes where a candidate stops being one: its size limit (beyond it, it cannot run) and
    // the size from which the tuner no longer picks it unnamed.
    constexpr int kMaxCuts = 2 * kMaxAlgos + 2 + 4 * kFitKnots;
    uint64_t cuts[kMaxCuts];
    int ncuts = 0;
    // And the sizes of the fits this shape starts from, between which their times are linear
    // (mostly the same sizes for every choice: each is cut at once).
    const MachineModel& m = machineModel();
    const Shape& shape = comm_->shape.get();
    for (int ai = 0; ai < numAlgos(); ++ai)
      for (int pi = 0; pi < kNumProtos; ++pi)
        for (int ch = 1; ch <= kCalibratedChannels; ++ch)
          if (const ChoiceFit* f = fitFor(m, kind_, Algo(ai), Proto(pi), ch, shape))
            for (int k = 0; k < f->nknots; ++k) {
              const uint64_t cut = uint64_t(f->bytes[k]) + 1;
              if (std::find(cuts, cuts + ncuts, cut) == cuts + ncuts &&
                  ncuts < kMaxCuts - 2 - 2 * kMaxAlgos)
                cuts[ncuts++] = cut;
            }
    // And where the generic model's terms bend: the end of the cache-sized bytes, and the size up
    // to which a tree Broadcast / Reduce on an oversubscribed node is given the chain's hops.
    const double cacheBytes = m.cacheBytes;
    if (cacheBytes >= 1 && cacheBytes < 1e18) cuts[ncuts++] = uint64_t(cacheBytes) + 1;
    if (comm_->shape.get().oversubscribed) cuts[ncuts++] = kOversubscribedChainBytes + 1;
    for (int ai = 0; ai < numAlgos(); ++ai) {
      const Algo a = Algo(ai);
      if (!algoSupports(a, kind_, comm_->shape.get())) continue;
      const size_t limit = slotLimit(a, kind_, comm_->shape.get().nranks);
      if (limit != SIZE_MAX) cuts[ncuts++] = limit + 1;
      const AlgoDesc& d = algoDesc(a);
      const size_t below = d.unnamedBelow ? d.unnamedBelow(comm_->shape.get()) : 0;
      if (below != 0 && below != SIZE_MAX) cuts[ncuts++] = below;
    }
    std::sort(cuts, cuts + ncuts);
    uint64_t a = lo;
    for (int i = 0; i < ncuts; ++i) {
      const uint64_t cut = cuts[i];  // a new piece starts here
      if (cut <= a || cut > hi) continue;
      piece(a, cut - 1);
      a = cut;
    }
    piece(a, hi);
    out_->state = overflow_ ? 2 : 1;
  }

 private:
  uint32_t key(uint64_t bytes) {
    const Choice c = chooseFor(comm_, kind_, size_t(bytes), comm_->tunerEnv);
    if (c.overridesIgnored) warnIgnored(bytes, c);
    return uint32_t(c.algo) | uint32_t(c.proto) << 8 | uint32_t(c.nchannels) << 16;
  }
  void piece(uint64_t lo, uint64_t hi) {
    const uint32_t klo = key(lo);
    solve(lo, hi, klo, hi == lo ? klo : key(hi));
  }
  void solve(uint64_t lo, uint64_t hi, uint32_t klo, uint32_t khi) {
    if (klo == khi) return append(lo, klo);
    if (hi - lo <= 1) {
      append(lo, klo);
      return append(hi, khi);
    }
    const uint64_t mid = lo + (hi - lo) / 2;
    const uint32_t kmid = key(mid);
    solve(lo, mid, klo, kmid);
    solve(mid, hi, kmid, khi);
  }
  void append(uint64_t first, uint32_t k) {
    PlanClass& c = *out_;
    if (c.nsegments > 0) {
      const PlanSegment& last = c.segments[c.nsegments - 1];
      if ((uint32_t(last.algo) | uint32_t(last.proto) << 8 | uint32_t(last.nchannels) << 16) == k)
        return;
    }
    if (c.nsegments == kPlanSegments) {
      overflow_ = true;
      return;
    }
    c.segments[c.nsegments++] = {first, uint8_t(k & 0xff), uint8_t((k >> 8) & 0xff),
                                 uint16_t(k >> 16)};
  }

  // Once per communicator and collective, where the user asked for what cannot run.
  void warnIgnored(uint64_t bytes, const Choice& c) {
    uint32_t& warned = comm_->plans.overridesWarned;
    if (warned & (1u << int(kind_))) return;
    warned |= 1u << int(kind_);
    CHORUS_WARN(comm_->rank,
                "%s: CHORUS_ALGO and CHORUS_PROTO allow no algorithm and protocol that can run it "
                "on this communicator (%d ranks on %d nodes%s) at %llu bytes: running %s/%s "
                "instead",
                collectiveKey(kind_), comm_->nranks, comm_->nnodes,
                comm_->shape.get().protos == (1u << int(Proto::kSimple))
                    ? "; a transport here carries Simple only"
                    : "",
                static_cast<unsigned long long>(bytes), algoName(c.algo), protoName(c.proto));
  }

  chorusComm* comm_;
  OpKind kind_;
  PlanClass* out_ = nullptr;
  bool overflow_ = false;
};

}  // namespace

Choice choose(chorusComm* comm, const OpDesc& op) {
  const size_t bytes = modelBytes(op.kind, op.count, op.type, comm->nranks);
  PlanCache& plans = comm->plans;
  const uint64_t gen = machineModelGeneration();
  if (plans.modelGeneration != gen || plans.shapeVersion != comm->shape.version()) {
    plans.clear();
    plans.modelGeneration = gen;
    plans.shapeVersion = comm->shape.version();
  }
  PlanClass& pc = plans.classes[int(op.kind)][planClassOf(bytes)];
  if (pc.state == 0) PlanBuilder(comm, op.kind).build(planClassOf(bytes), &pc);
  if (pc.state == 1) {
    int i = pc.nsegments - 1;
    while (i > 0 && pc.segments[i].firstBytes > bytes) --i;
    const PlanSegment& s = pc.segments[i];
    return {Algo(s.algo), Proto(s.proto), int(s.nchannels),
            std::numeric_limits<double>::quiet_NaN()};
  }
  return chooseFor(comm, op.kind, bytes, comm->tunerEnv);  // more boundaries than segments
}

double predictChoice(const chorusComm* comm, const OpDesc& op, const Choice& c) {
  const size_t bytes = modelBytes(op.kind, op.count, op.type, comm->nranks);
  const Shape& shape = comm->shape.get();
  double us = predictUs(op.kind, c.algo, c.proto, c.nchannels, shape, bytes);
  if (isInPlace(op, comm->rank)) us *= inPlaceRatio(machineModel(), op.kind, shape, double(bytes));
  return nothingMovesUs(us, c.proto, bytes);
}

}  // namespace chorus

using namespace chorus;

namespace {
// chorusTunerChoice and chorusTunerChoiceInPlace (`api`: its name, for the messages).
chorusResult_t tunerChoice(const char* api, bool inPlace, chorusComm_t comm, const char* collective,
                           size_t count, chorusDataType_t datatype, chorusChoice_t* choice) {
  if (!liveCommOrRefuse(comm, api)) return chorusInvalidArgument;
  const char* bad = collective == nullptr           ? "collective is NULL"
                    : choice == nullptr             ? "choice is NULL"
                    : chorusTypeSize(datatype) == 0 ? "datatype is not a chorusDataType_t"
                                                    : nullptr;
  if (bad != nullptr) {
    setLastError(comm, format("%s (rank %d): %s", api, comm->rank, bad));
    return chorusInvalidArgument;
  }
  if (numAlgos() == 0) {  // cannot happen: communicator init links algo/table.cc
    setThreadLastError(std::string(api) + ": the algorithm table is not linked in");
    return chorusInternalError;
  }
  static const OpKind kinds[] = {OpKind::kAllReduce, OpKind::kBroadcast,     OpKind::kReduce,
                                 OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAlltoAll,
                                 OpKind::kGather,    OpKind::kScatter};
  for (OpKind k : kinds)
    if (strcasecmp(collectiveKey(k), collective) == 0) {
      if (comm->nranks == 1) {  // a single rank only copies (runCollective's local path)
        choice->algorithm = "local";
        choice->protocol = "none";
        choice->nchannels = 0;
        choice->predictedUs = machineModel().baseUs[0];
        return chorusSuccess;
      }
      // The environment as it is now (a communicator's calls use it as it was at init; the
      // two agree unless the environment changed since).
      Choice c;
      const size_t bytes = modelBytes(k, count, datatype, comm->nranks);
      try {
        c = chooseFor(comm, k, bytes, readTunerEnv());
      } catch (...) {
        const Failure f = caughtFailure(comm->rank, api);
        setLastError(comm, f.message);
        return f.code;
      }
      choice->algorithm = algoName(c.algo);  // the table's own strings: no copy, no length limit
      choice->protocol = protoName(c.proto);
      choice->nchannels = c.nchannels;
      choice->predictedUs =
          inPlace && bytes > 0
              ? c.predictedUs * inPlaceRatio(machineModel(), k, comm->shape.get(), double(bytes))
              : c.predictedUs;
      return chorusSuccess;
    }
  setThreadLastError(std::string(api) + ": unknown collective " + collective);
  return chorusInvalidArgument;
}
}  // namespace

chorusResult_t chorusTunerChoice(chorusComm_t comm, const char* collective, size_t count,
                                 chorusDataType_t datatype, chorusChoice_t* choice) {
  return tunerChoice("chorusTunerChoice", false, comm, collective, count, datatype, choice);
}

chorusResult_t chorusTunerChoiceInPlace(chorusComm_t comm, const char* collective, size_t count,
                                        chorusDataType_t datatype, chorusChoice_t* choice) {
  return tunerChoice("chorusTunerChoiceInPlace", true, comm, collective, count, datatype, choice);
}
