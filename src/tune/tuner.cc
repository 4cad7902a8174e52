#include "tune/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>
#include <strings.h>

#include "algo/algo.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "topo/tree.h"
#include "tune/calibration.h"

namespace chorus {

const char* algoName(Algo a) {
  switch (a) {
    case Algo::kRing: return "ring";
    case Algo::kTree: return "tree";
    case Algo::kChain: return "chain";
    case Algo::kDirect: return "direct";
    case Algo::kNaive: return "naive";
    case Algo::kHier: return "hier";
  }
  return "?";
}

const char* collectiveKey(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kAllGather: return "allgather";
    case OpKind::kReduceScatter: return "reducescatter";
    case OpKind::kAlltoAll: return "alltoall";
    case OpKind::kGather: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
  }
  return "?";
}

namespace {
std::mutex gModelMu;
MachineModel gModel;
bool gModelLoaded = false;

std::string lower(std::string s) {
  for (auto& c : s) c = char(tolower(c));
  return s;
}
}  // namespace

const MachineModel& machineModel() {
  std::lock_guard<std::mutex> l(gModelMu);
  if (!gModelLoaded) {
    gModel = loadOrDefaultModel();
    gModelLoaded = true;
  }
  return gModel;
}

void setMachineModel(const MachineModel& m) {
  std::lock_guard<std::mutex> l(gModelMu);
  gModel = m;
  gModelLoaded = true;
}

bool envAllows(const char* var, const char* collective, const char* name) {
  const char* v = getenv(var);
  if (v == nullptr || *v == 0) return true;
  // Pick the clause for this collective: "coll:list;coll:list" or a plain list for all.
  std::string spec = lower(v), list;
  bool found = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t semi = spec.find(';', start);
    std::string clause = spec.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
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
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item == lower(name)) listed = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !listed : listed;
}

bool algoSupports(Algo a, OpKind kind, const Shape& shape) {
  const int nranks = shape.nranks;
  switch (kind) {
    case OpKind::kAllReduce:
      if (a == Algo::kHier) return shape.nnodes > 1 && shape.evenNodes;
      return a == Algo::kRing || a == Algo::kTree || a == Algo::kNaive;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      return a == Algo::kRing;
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return a == Algo::kChain || (a == Algo::kTree && nranks > 2);
    case OpKind::kAlltoAll:
    case OpKind::kGather:
    case OpKind::kScatter:
    case OpKind::kSend:
    case OpKind::kRecv:
      return a == Algo::kDirect;
  }
  return false;
}

bool protoSupports(Algo a, Proto p) {
  // Point-to-point batches and the naive ring move whole messages through Simple slots.
  if (a == Algo::kDirect || a == Algo::kNaive) return p == Proto::kSimple;
  return true;
}

double modelHops(OpKind kind, Algo a, int n, int depth) {
  const double nn = double(n);
  if (depth < 0) depth = std::max(treeDepth(n, 0), treeDepth(n, 1));  // edges root -> leaf
  switch (kind) {
    case OpKind::kAllReduce:
      if (a == Algo::kTree) return 2.0 * depth;           // up and down
      if (a == Algo::kNaive) return 4.0 * (nn - 1);       // unpipelined exchange + sync per step
      return 2.0 * (nn - 1);                              // ring: 2k-1 steps
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return a == Algo::kTree ? double(depth) : nn - 1;
    default:
      return nn - 1;
  }
}

double modelByteFactor(OpKind kind, Algo a, int n) {
  const double nn = double(n);
  switch (kind) {
    case OpKind::kAllReduce:
      if (a == Algo::kTree) return n > 2 ? 2.0 : 1.0;  // seed 002: tree ratio 0.5 (interior nodes)
      if (a == Algo::kNaive) return 4.0 * (nn - 1) / nn;  // plus a separate reduction pass
      return 2.0 * (nn - 1) / nn;
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return a == Algo::kTree ? 2.0 : 1.0;  // interior tree nodes send twice
    default:
      return (nn - 1) / nn;
  }
}

double predictUs(OpKind kind, Algo a, Proto p, int nch, const Shape& shape, size_t bytes) {
  const MachineModel& m = machineModel();
  const int pi = int(p);
  const int n = shape.nranks;
  if (n <= 1) return m.baseUs[pi];
  const double S = double(bytes);
  if (shape.nnodes > 1) {
    // Across nodes the network link is the bottleneck: per node, a ring sends 2(N-1)/N of the
    // data each way; the hierarchical AllReduce 2(Q-1)/Q of it, after and before node-local
    // reduce-scatter / allgather over shared memory.
    const double Q = shape.nnodes, P = double(n) / Q, nn = n;
    const double netBw = m.netBwGBs * 1e3, shmBw = m.bwGBs[0] * 1e3;
    if (kind == OpKind::kAllReduce && a == Algo::kHier) {
      // K slices through a three-phase pipeline: one slice's phases in full, then the slowest
      // phase for each further slice (the two shared-memory phases counted together, as they
      // share the node's memory bandwidth).
      const double shmT = S * 2 * (P - 1) / P / shmBw, netT = S * 2 * (Q - 1) / Q / netBw;
      const int K = shape.hierPipelined ? hierSlices(bytes, int(P)) : 1;
      const double dataT = (shmT + netT) / K + (K - 1.0) / K * std::max(shmT, netT);
      return m.baseUs[pi] + (K > 1 ? 2 * m.channelSpawnUs : 0.0) + 2 * (P - 1) * m.hopUs[pi] +
             2 * (Q - 1) * m.netHopUs + dataT;
    }
    return m.baseUs[pi] + modelHops(kind, a, int(nn), shape.treeDepth) * m.netHopUs +
           S * modelByteFactor(kind, a, int(nn)) / netBw;
  }
  double hop = m.hopUs[pi], bw = m.bwGBs[pi];
  double extra = 0;
  const ChoiceFit* fit =
      kind == OpKind::kAllReduce && nch <= kModelChannels ? &m.allreduce[int(a)][pi][nch - 1] : nullptr;
  if (fit && fit->measured) {
    hop = fit->hopUs;
    bw = fit->bwGBs;
  } else if (nch > 1) {
    bw *= 1.0 + m.channelGain * (nch - 1);
    extra = m.channelSpawnUs * (nch - 1);
  }
  return m.baseUs[pi] + extra + modelHops(kind, a, n, shape.treeDepth) * hop +
         S * modelByteFactor(kind, a, n) / (bw * 1e3);
}

Shape shapeOf(const chorusComm* comm) {
  Shape s{comm->nranks, comm->nnodes, true};
  std::vector<int> per(size_t(comm->nnodes), 0);
  for (int r = 0; r < comm->nranks; ++r) ++per[size_t(comm->nodeOf[size_t(r)])];
  for (int c : per) s.evenNodes = s.evenNodes && c == per[0];
  s.treeDepth = std::max(treeDepth(comm->nranks, 0), treeDepth(comm->nranks, 1));
  return s;
}

Choice choose(chorusComm* comm, const OpDesc& op) {
  const int n = comm->nranks;
  const Shape& shape = comm->shape;  // computed once at init
  const char* coll = collectiveKey(op.kind);
  size_t bytes = op.count * chorusTypeSize(op.type);
  if (op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter ||
      op.kind == OpKind::kAlltoAll || op.kind == OpKind::kGather || op.kind == OpKind::kScatter)
    bytes *= size_t(n);
  const int minCh = int(std::clamp<int64_t>(envInt("CHORUS_MIN_NCHANNELS", 1), 1, comm->nchannels));
  const int maxCh = int(std::clamp<int64_t>(envInt("CHORUS_MAX_NCHANNELS", comm->nchannels), minCh,
                                            comm->nchannels));
  Choice best{Algo::kRing, Proto::kSimple, 1, 1e300};
  bool any = false;
  for (int ai = 0; ai < kNumAlgos; ++ai) {
    Algo a = Algo(ai);
    if (!algoSupports(a, op.kind, shape)) continue;
    // The naive ring exists to be compared against: only when asked for by name.
    if (a == Algo::kNaive && !(getenv("CHORUS_ALGO") && envAllows("CHORUS_ALGO", coll, "naive") &&
                               !envAllows("CHORUS_ALGO", coll, "__none__")))
      continue;
    if (!envAllows("CHORUS_ALGO", coll, algoName(a))) continue;
    for (int pi = 0; pi < kNumProtos; ++pi) {
      Proto p = Proto(pi);
      if (!protoSupports(a, p) || !envAllows("CHORUS_PROTO", coll, protoName(p))) continue;
      if (p == Proto::kLL && comm->nnodes > 1) continue;  // LL does not cross the TCP proxy
      // Channels split rings and chains; trees use one channel per tree.
      bool multi = a == Algo::kRing || a == Algo::kChain;
      for (int ch = multi ? minCh : 1; ch <= (multi ? maxCh : 1); ++ch) {
        double t = predictUs(op.kind, a, p, ch, shape, bytes);
        if (t < best.predictedUs) best = {a, p, ch, t};
        any = true;
      }
    }
  }
  if (!any) {
    // Overrides excluded everything that can run this collective: fall back to its default.
    Algo a = op.kind == OpKind::kAllReduce || op.kind == OpKind::kAllGather ||
                     op.kind == OpKind::kReduceScatter
                 ? Algo::kRing
             : op.kind == OpKind::kBroadcast || op.kind == OpKind::kReduce ? Algo::kChain
                                                                           : Algo::kDirect;
    best = {a, Proto::kSimple, 1, predictUs(op.kind, a, Proto::kSimple, 1, shape, bytes)};
  }
  return best;
}

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusTunerChoice(chorusComm_t comm, const char* collective, size_t count,
                                 chorusDataType_t datatype, chorusChoice_t* choice) {
  if (comm == nullptr || !isLiveComm(comm) || collective == nullptr || choice == nullptr ||
      chorusTypeSize(datatype) == 0) {
    setThreadLastError("chorusTunerChoice: NULL or invalid argument");
    return chorusInvalidArgument;
  }
  static const OpKind kinds[] = {OpKind::kAllReduce, OpKind::kBroadcast,     OpKind::kReduce,
                                 OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAlltoAll,
                                 OpKind::kGather,    OpKind::kScatter};
  for (OpKind k : kinds)
    if (strcasecmp(collectiveKey(k), collective) == 0) {
      if (comm->nranks == 1) {  // a single rank only copies (runCollective's local path)
        snprintf(choice->algorithm, sizeof(choice->algorithm), "local");
        snprintf(choice->protocol, sizeof(choice->protocol), "none");
        choice->nchannels = 0;
        choice->predictedUs = machineModel().baseUs[0];
        return chorusSuccess;
      }
      OpDesc op{k, nullptr, nullptr, count, datatype, chorusSum, 0, comm, nullptr};
      Choice c = choose(comm, op);
      snprintf(choice->algorithm, sizeof(choice->algorithm), "%s", algoName(c.algo));
      snprintf(choice->protocol, sizeof(choice->protocol), "%s", protoName(c.proto));
      choice->nchannels = c.nchannels;
      choice->predictedUs = c.predictedUs;
      return chorusSuccess;
    }
  setThreadLastError(std::string("chorusTunerChoice: unknown collective ") + collective);
  return chorusInvalidArgument;
}
