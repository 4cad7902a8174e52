// The tuner: for every (collective, algorithm, protocol) a time = latency + bytes / bandwidth
// model in the shape of NCCL's tree and tuning design, parameterised by this machine's measured hop
// latency and bandwidth per protocol (chorus-tune measures them and caches them; see
// tune/calibration.h), and NCCL-style overrides CHORUS_ALGO / CHORUS_PROTO,
// CHORUS_MIN/MAX_NCHANNELS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/op.h"
#include "comm/plan.h"
#include "proto/proto.h"

struct chorusComm;

namespace chorus {

struct Choice {
  Algo algo;
  Proto proto;
  int nchannels;
  double predictedUs;
  // CHORUS_ALGO / CHORUS_PROTO allowed nothing that can run here (the transports' protocols
  // counted): the collective's default algorithm with Simple instead.
  bool overridesIgnored = false;
};

// Measured machine parameters: per protocol, the cost of one hand-off between two ranks, the
// fixed cost of an operation, and the bandwidth of one pipelined stream of slots; and, where
// chorus-tune measured an AllReduce choice itself, that choice's own fitted hop latency and
// bandwidth (same formula, so the model tracks what each implementation really costs).
struct ChoiceFit {
  double hopUs;
  double bwGBs;
  bool measured;
};
struct MachineModel {
  double hopUs[kNumProtos];
  double baseUs[kNumProtos];
  double bwGBs[kNumProtos];  // one channel
  double channelGain;        // bandwidth multiplier per extra channel (<= 1 extra)
  // Per call and extra channel: handing its share to the communicator's parked channel worker
  // and waiting for it (algo/channel_workers.h; chorus-tune measures it as the 2-channel
  // overhead at 8 KiB).
  double channelWakeUs;
  ChoiceFit allreduce[kMaxAlgos][kNumProtos][kCalibratedChannels];
  // On one node the fitted bandwidths are those of data beyond the caches (their fit runs to
  // 16 MiB); up to cacheBytes of a collective's size, its bytes move cacheBwGain times faster
  // (the ranks' buffers and slots stay in L2 / L3).
  double cacheBytes;
  double cacheBwGain;
  double netHopUs;  // one hand-off over the TCP transport
  double netBwGBs;  // one node's network bandwidth (each direction)
  bool calibrated;
};

// Up to this size, Broadcast / Reduce on an oversubscribed node model the tree with the chain's
// hops (measured: the chain wins below 16-32 KiB at 4 ranks on 2 cores, the tree above).
constexpr size_t kOversubscribedChainBytes = size_t(16) << 10;
// The algorithm's size limit on the model's bytes (AlgoDesc::slotLimit: the one- and two-shot
// collectives' inputs must fit their slots); SIZE_MAX for the others.
size_t slotLimit(Algo a, OpKind kind, int nranks);
// Hand-offs on the critical path and the share of the bytes a rank moves, per algorithm
// (AlgoDesc::hops, byteFactor; treeDepth -1: the communicator's double binary tree's).
double modelHops(OpKind kind, Algo a, int nranks, int treeDepth = -1);
double modelByteFactor(OpKind kind, Algo a, int nranks);

const MachineModel& machineModel();
// The across-node terms for `shape`: its communicator's measured link (Shape::netHopUs,
// netBwGBs), else the machine model's.
double netHopUs(const Shape& shape);
double netBwGBs(const Shape& shape);
// One hand-off inside a node with protocol p for a communicator across nodes: the measured
// Simple one (Shape::nodeHopUs) scaled by the model's ratio between p and Simple, else the
// model's.
double nodeHopUs(const Shape& shape, Proto p);
void setMachineModel(const MachineModel& m);  // chorus-tune

// Whether algo can run kind at all (on this shape), with protocol p (the algorithm table).
bool algoSupports(Algo a, OpKind kind, const Shape& shape);
bool protoSupports(Algo a, Proto p);
// Predicted microseconds for `bytes` (the nccl-tests size of the operation).
double predictUs(OpKind kind, Algo a, Proto p, int nchannels, const Shape& shape, size_t bytes);
Shape shapeOf(const chorusComm* comm);

TunerEnv readTunerEnv();  // comm/plan.h's TunerEnv, from the environment now

// The model's choice for `bytes` (the size predictUs takes) under the overrides `env`.
Choice chooseFor(const chorusComm* comm, OpKind kind, size_t bytes, const TunerEnv& env);
// The same for a described communicator: its shape and channel count (chorus-tune --cluster
// predicts clusters that do not exist here with it).
Choice chooseForShape(const Shape& shape, int nchannels, OpKind kind, size_t bytes,
                      const TunerEnv& env);
// The size the model sees for `count` elements of `type` (AllGather, ReduceScatter and the
// direct collectives count every rank's block).
size_t modelBytes(OpKind kind, size_t count, chorusDataType_t type, int nranks);

// Bumped by setMachineModel: plans made with an older model are dropped.
uint64_t machineModelGeneration();

// The choice for this call, honouring CHORUS_ALGO / CHORUS_PROTO and channel limits as they
// were when the communicator was created (comm->tunerEnv), from the communicator's plans.
// predictedUs is not filled (NaN): predictChoice gives it.
Choice choose(chorusComm* comm, const OpDesc& op);
double predictChoice(const chorusComm* comm, const OpDesc& op, const Choice& c);
const char* collectiveKey(OpKind kind);  // "allreduce", "broadcast", ...

}  // namespace chorus
