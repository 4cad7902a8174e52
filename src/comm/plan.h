// What the tuner keeps per communicator (tune/tuner.h is the tuner): the algorithms it chooses
// from, its view of the communicator's shape, the environment's overrides and the plan cache.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/op.h"

namespace chorus {

enum class Algo : int {
  kRing = 0,
  kTree = 1,
  kChain = 2,
  kDirect = 3,
  kNaive = 4,
  kHier = 5,
  kOneShot = 6,
  kCma = 7,     // single copy straight from the peers' buffers (algo/copy.cc)
  kTwoShot = 8  // AllReduce: publish, reduce one block, publish it, gather (algo/oneshot.cc)
};
constexpr int kNumAlgos = 9;
const char* algoName(Algo a);

// The communicator's shape as the model sees it.
struct Shape {
  int nranks;
  int nnodes;
  bool evenNodes;      // every node holds nranks / nnodes ranks
  int treeDepth = -1;  // deepest of the two trees (edges); -1: compute
  // The hierarchical AllReduce pipelines its phases (assumed until its first large calls have
  // decided: hier.cc).
  bool hierPipelined = true;
  // Single-copy Broadcast / AllGather (algo/copy.cc) may run: cleared on every rank of a
  // communicator, together, when the kernel refused cross-memory attach to one of them.
  bool singleCopy = true;
  // One node with more ranks than online cores (the same on every rank of the node).
  bool oversubscribed = false;
  // The node's online cores (0: unknown; the tuner then assumes the worst oversubscription).
  int onlineCores = 0;
};

// The tuner's environment (CHORUS_ALGO, CHORUS_PROTO, CHORUS_MIN/MAX_NCHANNELS), parsed once:
// per collective, which algorithms and protocols the overrides allow.
struct TunerEnv {
  uint16_t algoAllowed[kNumOpKinds];  // bit a: CHORUS_ALGO allows algorithm a
  uint8_t protoAllowed[kNumOpKinds];  // bit p: CHORUS_PROTO allows protocol p
  bool naiveNamed[kNumOpKinds];       // CHORUS_ALGO names the naive ring for this collective
  int64_t minChannels;                // CHORUS_MIN_NCHANNELS, 1 when unset
  bool maxChannelsSet;                // CHORUS_MAX_NCHANNELS is set (else: every channel)
  int64_t maxChannels;
  bool operator==(const TunerEnv&) const = default;
};

// A communicator's plans: the tuner's choice per collective and size class (log2 of the bytes),
// decided on the first call of a class and looked up afterwards, so that a call evaluates no
// model and parses no environment. A class keeps every boundary at which the model's choice
// changes inside it (found by bisection: each candidate's predicted time is affine in the
// bytes, so the sizes where one candidate wins form an interval), so a lookup gives exactly the
// choice chooseFor would make. Used by the executing thread only (one at a time: ExecGuard).
constexpr int kPlanClasses = 65;  // 0 bytes, then [2^(c-1), 2^c) for c = 1..64
constexpr int kPlanSegments = 6;
struct PlanSegment {
  uint64_t firstBytes;  // the segment runs from here to the next segment's first byte
  uint8_t algo, proto;
  uint16_t nchannels;
};
struct PlanClass {
  uint8_t state;  // 0: not decided yet; 1: segments; 2: too many boundaries: evaluate per call
  uint8_t nsegments;
  PlanSegment segments[kPlanSegments];
};
struct PlanCache {
  uint64_t modelGeneration = 0;  // the machine model the plans were made with
  PlanClass classes[kNumOpKinds][kPlanClasses] = {};
  void clear();
};
inline int planClassOf(size_t bytes) {
  return bytes == 0 ? 0 : 64 - __builtin_clzll(static_cast<unsigned long long>(bytes));
}

}  // namespace chorus
