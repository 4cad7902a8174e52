// The tuner: for every (collective, algorithm, protocol) a time = latency + bytes / bandwidth
// model in the shape of seed 002, parameterised by this machine's measured hop latency and
// bandwidth per protocol (chorus-tune measures them and caches them; see tune/calibration.h),
// and NCCL-style overrides CHORUS_ALGO / CHORUS_PROTO, CHORUS_MIN/MAX_NCHANNELS.
#pragma once

#include <cstddef>
#include <string>

#include "core/op.h"
#include "proto/proto.h"

struct chorusComm;

namespace chorus {

enum class Algo : int { kRing = 0, kTree = 1, kChain = 2, kDirect = 3, kNaive = 4, kHier = 5 };
constexpr int kNumAlgos = 6;
const char* algoName(Algo a);

struct Choice {
  Algo algo;
  Proto proto;
  int nchannels;
  double predictedUs;
};

// Measured machine parameters: per protocol, the cost of one hand-off between two ranks, the
// fixed cost of an operation, and the bandwidth of one pipelined stream of slots; and, where
// chorus-tune measured an AllReduce choice itself, that choice's own fitted hop latency and
// bandwidth (same formula, so the model tracks what each implementation really costs).
constexpr int kModelChannels = 2;
struct ChoiceFit {
  double hopUs;
  double bwGBs;
  bool measured;
};
struct MachineModel {
  double hopUs[kNumProtos];
  double baseUs[kNumProtos];
  double bwGBs[kNumProtos];       // one channel
  double channelGain;             // bandwidth multiplier per extra channel (<= 1 extra)
  double channelSpawnUs;          // cost of starting extra channel threads
  ChoiceFit allreduce[kNumAlgos][kNumProtos][kModelChannels];
  double netHopUs;   // one hand-off over the TCP transport
  double netBwGBs;   // one node's network bandwidth (each direction)
  bool calibrated;
};

// The communicator's shape as the model sees it.
struct Shape {
  int nranks;
  int nnodes;
  bool evenNodes;  // every node holds nranks / nnodes ranks
  int treeDepth = -1;  // deepest of the two trees (edges); -1: compute
  // The hierarchical AllReduce pipelines its phases (assumed until its first large calls have
  // decided: hier.cc).
  bool hierPipelined = true;
};
// Hand-offs on the critical path and the share of the bytes a rank moves, per algorithm.
double modelHops(OpKind kind, Algo a, int nranks, int treeDepth = -1);
double modelByteFactor(OpKind kind, Algo a, int nranks);

const MachineModel& machineModel();
void setMachineModel(const MachineModel& m);  // chorus-tune

// Whether algo can run kind at all (on nranks ranks).
bool algoSupports(Algo a, OpKind kind, const Shape& shape);
bool protoSupports(Algo a, Proto p);
// Predicted microseconds for `bytes` (the nccl-tests size of the operation).
double predictUs(OpKind kind, Algo a, Proto p, int nchannels, const Shape& shape, size_t bytes);
Shape shapeOf(const chorusComm* comm);
// The choice for this call, honouring CHORUS_ALGO / CHORUS_PROTO and channel limits.
Choice choose(chorusComm* comm, const OpDesc& op);
// CHORUS_ALGO / CHORUS_PROTO as NCCL parses them: "ring,tree", "^ll", "allreduce:tree;broadcast:chain".
bool envAllows(const char* var, const char* collective, const char* name);
const char* collectiveKey(OpKind kind);  // "allreduce", "broadcast", ...

}  // namespace chorus
