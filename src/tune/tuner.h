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
// fixed cost of an operation, and the bandwidth of one pipelined stream of slots; and, for every
// choice chorus-tune timed on one node (collective, algorithm, protocol, 1 or 2 channels), that
// choice's own measured times at a few sizes (ChoiceFit), so the model tracks what each
// implementation really costs, caches and pipelining included.
constexpr int kCalibratedChannels = 2;
// The collectives fitted per choice: OpKind values below this (AllReduce, Broadcast, Reduce,
// AllGather, ReduceScatter).
constexpr int kFitKinds = 5;
// The sizes (model bytes) chorus-tune times each choice at: every 4x from 8 B to 32 MiB, the sizes
// of the benchmarks' default sweep (-f 4), and the choice's own size limit where that falls
// between two of them (the one-shot collectives).
constexpr int kFitKnots = 14;
constexpr size_t kFitKnotBytes[] = {8,
                                    32,
                                    128,
                                    512,
                                    2048,
                                    8192,
                                    32768,
                                    131072,
                                    524288,
                                    size_t(2) << 20,
                                    size_t(8) << 20,
                                    size_t(32) << 20};
// Each choice is timed on up to kFitSets rank counts (chorus-tune --fit-ranks; built in: 2, 4 and
// 8 ranks on the reference VM's 2 cores, so a core per rank, two and four ranks per core). A
// communicator's prediction starts from the set nearest to it (the same oversubscription first,
// then the nearest rank count).
constexpr int kFitSets = 3;
// One choice's fit on one rank count: its time (us) measured at `bytes[i]` on `nranks` ranks of
// one node of `cores` online cores. Between two sizes the time is linear in the bytes; below the
// first and beyond the last it follows the nearest segment's slope. On another rank count the
// time at 8 B scales with the algorithm's hand-offs and the rest with its bytes per rank
// (AlgoDesc::hops, byteFactor), both with the ranks per core where there are more than cores.
struct ChoiceFit {
  double bytes[kFitKnots];
  double us[kFitKnots];
  int nknots;
  int nranks;
  int cores;
  bool measured;
};
// How an in-place call's time compares with an out-of-place one on one node, per collective and
// fit set: chorus-tune times the tuner's own pick at each of the fit's sizes both ways,
// interleaved round by round (the VM's changing speed slows both alike), and keeps the in-place
// time over the out-of-place one. An in-place call touches one buffer instead of two (2 ranks'
// AllGather of 8 MiB: 16 MiB of buffers against 32, 1.8-2.9x faster where the second does not
// fit the last-level cache) and skips the copy of its own block. The tuner's choice never
// depends on it (every rank must choose alike, and a call may be in place on some ranks only):
// it only scales the predicted time of an in-place call (predictChoice,
// chorusTunerChoiceInPlace). Between two sizes the ratio is linear in log(bytes); beyond the
// first and the last it is theirs.
struct InPlaceFit {
  double bytes[kFitKnots];
  double ratio[kFitKnots];  // in-place time / out-of-place time
  int nknots;
  int nranks;
  int cores;
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
  ChoiceFit fits[kFitSets][kFitKinds][kMaxAlgos][kNumProtos][kCalibratedChannels];
  InPlaceFit inPlace[kFitSets][kFitKinds];  // set s: the rank count of fits[s]
  // The generic model (choices without a fit): its bandwidths are those of data beyond the
  // caches; up to cacheBytes of a collective's size, its bytes move cacheBwGain times faster (the
  // ranks' buffers and slots stay in L2 / L3).
  double cacheBytes;
  double cacheBwGain;
  double netHopUs;  // one hand-off over the TCP transport
  double netBwGBs;  // one node's network bandwidth (each direction)
  bool calibrated;
  const char* builtInFits;  // the set of built-in fits it started from (builtInFitsName)
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
// Where a fit sits in MachineModel::fits, and a call of f(where, fit) for every measured fit of
// `m` (const or not), in table order: the cache, chorus-tune and the cluster model walk them so.
struct FitIndex {
  int set;
  OpKind kind;
  Algo algo;
  Proto proto;
  int channels;
};
template <class Model, class F>
void forEachFit(Model& m, F&& f) {
  for (int set = 0; set < kFitSets; ++set)
    for (int k = 0; k < kFitKinds; ++k)
      for (int a = 0; a < kMaxAlgos; ++a)
        for (int p = 0; p < kNumProtos; ++p)
          for (int ch = 1; ch <= kCalibratedChannels; ++ch)
            if (m.fits[set][k][a][p][ch - 1].measured)
              f(FitIndex{set, OpKind(k), Algo(a), Proto(p), ch}, m.fits[set][k][a][p][ch - 1]);
}
// Whether chorus-tune fits (kind, a, p, channels) on `nranks` ranks of one node: every choice the
// tuner may pick unnamed there, on ordinary buffers or (the zero-copy one) on registered ones.
bool fittable(OpKind kind, Algo a, Proto p, int nchannels, int nranks);
// Whether `a` runs `kind` on `nranks` ranks of one node only on registered buffers (chorus-tune
// times it on chorusMemAlloc buffers registered with the communicator).
bool needsRegisteredBuffers(OpKind kind, Algo a, int nranks);
// A fit's times made never to fall with the size (a larger call is not faster; where one
// measured so, it was noise): each time at least the one before.
void makeMonotone(ChoiceFit* f);
// A fit's time at `bytes` on the rank count it was measured on.
double fitUs(const ChoiceFit& f, double bytes);
// The in-place ratio of `kind` at `bytes` on `shape` from the set nearest to it (as fitFor); 1
// across nodes and where no set has one.
double inPlaceRatio(const MachineModel& m, OpKind kind, const Shape& shape, double bytes);
// Whether a call is in place as the collectives define it (AllGather: the send buffer is the
// rank's block of the receive buffer; ReduceScatter: the receive buffer is the rank's block of
// the send buffer; the others: the same buffer) on `rank`.
bool isInPlace(const OpDesc& op, int rank);
// The fit the model starts from for (kind, a, p, nchannels) on `shape` (one node), or null.
const ChoiceFit* fitFor(const MachineModel& m, OpKind kind, Algo a, Proto p, int nchannels,
                        const Shape& shape);

const MachineModel& machineModel();
// The across-node terms for `shape`: its communicator's measured link (Shape::netHopUs,
// netBwGBs), else the machine model's.
double netHopUs(const Shape& shape);
// A call's time across nodes from its hand-offs' and its bytes' terms: their sum (a hop is the
// wire's and the software's latency, before the bytes), or where the nodes share one machine's
// cores (Shape::sharedMachine: a hop is then mostly the wait for a core, which other ranks'
// transfers fill) the larger and half the smaller. And its inverse: the bytes' term of a call
// that took totalUs with hopsUs of hand-offs (the link probe's bandwidth), at least a quarter of
// the call.
double pipelinedUs(const Shape& shape, double hopsUs, double bytesUs);
double bytesTermUs(const Shape& shape, double totalUs, double hopsUs);
// And the hand-offs' term of a call that took totalUs with bytesUs of bytes, where the hand-offs
// are the larger (a small call the link probe timed); -1 where they cannot be.
double hopsTermUs(const Shape& shape, double totalUs, double bytesUs);
double netBwGBs(const Shape& shape);
// One hand-off inside a node with protocol p for a communicator across nodes: the measured
// Simple one (Shape::nodeHopUs) scaled by the model's ratio between p and Simple, else the
// model's.
double nodeHopUs(const Shape& shape, Proto p);
// One call of back-to-back Broadcasts (Reduces: kind) along a chain across nodes, the pipeline's
// rate: the measured one (Shape::netPipeUs, netReducePipeUs), else kNetPipeShare of the network
// hop.
double netPipeUs(const Shape& shape, OpKind kind = OpKind::kBroadcast);
constexpr double kNetPipeShare = 0.2;
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
// The predicted time of choice c for `op`, an in-place call's scaled by inPlaceRatio.
double predictChoice(const chorusComm* comm, const OpDesc& op, const Choice& c);
const char* collectiveKey(OpKind kind);  // "allreduce", "broadcast", ...
int fitKindByName(const char* name);     // the fitted collective collectiveKey names, or -1

}  // namespace chorus
