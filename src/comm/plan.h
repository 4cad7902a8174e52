// What the tuner keeps per communicator (tune/tuner.h is the tuner): the algorithms it chooses
// from, its view of the communicator's shape, the environment's overrides and the plan cache.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/algo_rows.h"
#include "comm/op.h"
#include "proto/proto.h"

namespace chorus {

// An algorithm is an index into the algorithm table (algo/table.cc): one AlgoDesc per algorithm,
// defined next to its loops in algo/, read by dispatch (algo/select.cc), the tuner (tune/) and
// the names alike. The enumerators are the rows of comm/algo_rows.h, in its order.
#define CHORUS_ALGO_ENUMERATOR(e, d) e,
enum class Algo : int { CHORUS_ALGO_ROWS(CHORUS_ALGO_ENUMERATOR) };
#undef CHORUS_ALGO_ENUMERATOR
#define CHORUS_ALGO_COUNT(e, d) +1
constexpr int kNumAlgoRows = 0 CHORUS_ALGO_ROWS(CHORUS_ALGO_COUNT);
#undef CHORUS_ALGO_COUNT
constexpr int kMaxAlgos = 16;  // TunerEnv's masks hold one bit per algorithm
// The communicator's shape as the model sees it.
struct Shape {
  int nranks;
  int nnodes;
  bool evenNodes;      // every node holds nranks / nnodes ranks
  int treeDepth = -1;  // deepest of the two trees (edges); -1: compute
  // Single-copy Broadcast / AllGather (algo/copy.cc) may run: cleared on every rank of a
  // communicator, together, when the kernel refused cross-memory attach to one of them.
  bool singleCopy = true;
  // The protocols every peer's transport carries (bit p: Proto p; comm/transport.h protocols()):
  // all on one node, Simple alone where a peer is reached through TCP.
  uint8_t protos = 0xff;
  // Some buffers are registered with the communicator (chorusCommRegister, collective: the
  // same on every rank): the zero-copy algorithm (algo/zerocopy.cc) is a candidate.
  bool registered = false;
  // One node with more ranks than online cores (the same on every rank of the node).
  bool oversubscribed = false;
  // Across nodes: the ranks of several nodes run on one machine (one kernel boot id: emulated
  // nodes, containers on one host) and outnumber its online cores, so a hand-off there is mostly
  // the wait for a core that other ranks' work holds, which their transfers fill: the model
  // overlaps a call's hops with its bytes there (tune/tuner.h pipelinedUs). The same on every
  // rank: from the peers' records.
  bool sharedMachine = false;
  // The node's online cores (0: unknown; the tuner then assumes the worst oversubscription).
  int onlineCores = 0;
  // One node: the most channels a call may run at once on separate CPUs: over every rank, the
  // CPUs of its set divided among the ranks of its node that share that set (a rank's channel
  // workers run in its set). 0: no limit (across nodes, where channels are also TCP streams).
  // A rank pinned to one core runs one channel: a second one only takes turns with the first on
  // that core (2 ranks, ReduceScatter of 8 MiB on 2 channels: 450 to 5000 us from one launch to
  // the next; on one, 450 every time).
  int channelCpus = 0;
  // Across nodes: one network hand-off and one node's link bandwidth (each direction), as this
  // communicator measured them at init (core/net_probe.h); 0: the machine model's.
  double netHopUs = 0;
  double netBwGBs = 0;
  // Across nodes: one shared-memory hand-off inside a node with the Simple protocol, measured at
  // init with the network's (core/net_probe.h); 0: the machine model's.
  double nodeHopUs = 0;
  // Across nodes: one call of back-to-back small chain Broadcasts and Reduces, the pipeline's
  // rate (the root, or the Reduce's far end, sends a call and goes on; every rank forwards as it
  // receives), measured at init with the network's (core/net_probe.h); 0: a fifth of the network
  // hop (tune/tuner.h netPipeUs).
  double netPipeUs = 0;
  double netReducePipeUs = 0;
  // Across nodes: one AllReduce of one double by halving-doubling on the whole communicator,
  // whose steps all send one way (algo/halving_doubling.cc hdHopsUs), measured by the link
  // probe; 0: unmeasured (the hops' model alone).
  double netHdUs = 0;
  // Across nodes: one tree AllReduce of treeProbeBytes (algo/tree.cc: its most chunks, each at
  // least the smallest), the mean over the ranks, measured by the link probe; 0: unmeasured (a
  // chunk's step from the chain's pipeline rate).
  double netTreeUs = 0;
  // Across nodes: the network bytes of a halving-doubling and of a recursive-doubling AllReduce,
  // per byte of the call, on the most loaded node's link over its steps (the folds included),
  // from this communicator's placement (algo/halving_doubling.cc doublingLinkLoads); 0: the
  // model's formula for even nodes of a power of two.
  double hdNetBytes = 0;
  double rdNetBytes = 0;
};

// A communicator's Shape, versioned: read anywhere with get(); changed only through change(f),
// which bumps the version. The plan cache records the version its plans were made with
// (tune/tuner.cc choose), so a change (a measurement of the hierarchical AllReduce, the kernel
// refusing single copy, buffers registered, the link probe) can never leave a stale plan served,
// whoever makes it and whether or not it remembers the cache.
class ShapeCell {
 public:
  explicit ShapeCell(const Shape& s) : shape_(s) {}
  const Shape& get() const { return shape_; }
  uint64_t version() const { return version_; }
  template <class F>
  void change(F&& f) {
    f(shape_);
    ++version_;
  }

 private:
  Shape shape_;
  uint64_t version_ = 1;
};

// The tuner's environment (CHORUS_ALGO, CHORUS_PROTO, CHORUS_MIN/MAX_NCHANNELS), parsed once:
// per collective, which algorithms and protocols the overrides allow.
struct TunerEnv {
  uint16_t algoAllowed[kNumOpKinds];  // bit a: CHORUS_ALGO allows algorithm a
  uint8_t protoAllowed[kNumOpKinds];  // bit p: CHORUS_PROTO allows protocol p
  uint16_t algoNamed[kNumOpKinds];    // bit a: CHORUS_ALGO lists algorithm a by name
  int64_t minChannels;                // CHORUS_MIN_NCHANNELS, 1 when unset
  bool maxChannelsSet;                // CHORUS_MAX_NCHANNELS is set (else: every channel)
  int64_t maxChannels;
  bool operator==(const TunerEnv&) const = default;
};

// The share of an operation one call of an algorithm's entry point runs: elements [begin, end)
// of the operation's count (of each rank's block for AllGather / ReduceScatter) on one channel
// with one protocol. Algorithms that split over channels get one share per channel; the others
// one call with channel 0 and every element.
struct Work {
  int channel;
  Proto proto;
  size_t begin;
  size_t end;
};
using AlgoEntry = void (*)(chorusComm* comm, const OpDesc& op, const Work& w);
// What an algorithm keeps per communicator (sequence numbers, reused batches, measurements):
// each stateful algorithm derives its own type in its own file. The communicator holds one per
// table row (chorusComm::algoState), made by the row's createState when the communicator is
// set up and deleted (through this virtual destructor) when it is freed, so that a call
// allocates nothing and reaches its state with one pointer load.
struct AlgoState {
  virtual ~AlgoState() = default;
};
struct AlgoEntries {
  AlgoEntry of[kNumOpKinds] = {};  // per OpKind: what runCollective calls
};

// One algorithm: what it serves, its cost terms for the tuner's latency + bytes / bandwidth model
// (tune/tuner.cc predictUs puts them together) and its entry points. A null hook means the
// default named beside it.
struct AlgoDesc {
  const char* name = nullptr;  // CHORUS_ALGO, logs, status reports, the tuner cache
  uint16_t serves = 0;         // bit k: runs OpKind k
  uint8_t protos = 0;          // bit p: runs Proto p
  // Shapes it runs on beyond `serves` (one node only, more than 2 ranks, ...). Null: every one.
  bool (*runsOn)(OpKind kind, const Shape& shape) = nullptr;
  bool channels = false;  // splits the elements over channels (one entry call per channel)
  // The tuner picks it without CHORUS_ALGO listing it by name only for operations of fewer
  // model bytes than this on `shape` (0: never; it then runs only when named). Null: always.
  size_t (*unnamedBelow)(const Shape& shape) = nullptr;
  // On one node, unnamed only where the model holds a measured fit of it (chorus-tune's, or the
  // built-in set of this CPU): its generic cost terms do not rank it against measured choices.
  bool unnamedOnlyFitted = false;
  uint16_t fallbackFor = 0;  // bit k: what kind k runs when the overrides exclude everything
  // Cost terms. Hand-offs on the critical path for an operation of `bytes` (shape.treeDepth
  // resolved; shape.oversubscribed set only on one node).
  double (*hops)(OpKind kind, const Shape& shape, size_t bytes) = nullptr;
  // Bytes a rank moves, as a multiple of the operation's bytes.
  double (*byteFactor)(OpKind kind, int nranks) = nullptr;
  // The same across nodes (the generic multi-node model), where it differs from one node's.
  // Null: byteFactor.
  double (*netByteFactor)(OpKind kind, const Shape& shape) = nullptr;
  // Across nodes (the generic multi-node model): the hand-offs' time on the critical path,
  // where they are not all network hops (some run inside a node), given the model's time for
  // the bytes (bytesUs). Null: hops x the network hop.
  double (*netHopsUs)(OpKind kind, Proto proto, const Shape& shape, size_t bytes,
                      double bytesUs) = nullptr;
  // Largest operation (model bytes) it can run. Null: no limit.
  size_t (*slotLimit)(OpKind kind, int nranks) = nullptr;
  // On one node, the copy work of the core that works longest, in bytes moved per byte of the
  // operation, with `ranks` on `cores` CPUs (0: a core each). The tuner scales a fit's copy
  // time from its rank count to another by it. Null: the ranks on the busiest core,
  // ceil(ranks / cores), times byteFactor (every rank moves as much, in lockstep).
  double (*coreWork)(OpKind kind, int ranks, int cores) = nullptr;
  // On an oversubscribed node: how many times each hand-off counts. Null: 1.
  double (*wakeups)(const Shape& shape) = nullptr;
  // Fixed cost beyond the hand-offs on one node (system calls, page walks). Null: 0.
  double (*setupUs)(OpKind kind) = nullptr;
  // Time across nodes where the generic model (every hand-off a network hop, the bytes through
  // the node's network link) does not fit it. Null: the generic model.
  double (*multiNodeUs)(OpKind kind, Proto proto, const Shape& shape, size_t bytes) = nullptr;
  AlgoEntries run;
  // Its per-communicator state (algo/table.cc createAlgoStates calls it once per communicator,
  // after the transport is up). Null: it keeps none.
  AlgoState* (*createState)(chorusComm* comm) = nullptr;
};

// The table: algo/table.cc registers it at load time (before any communicator exists).
void registerAlgos(const AlgoDesc* const* table, int n);
int numAlgos();
const AlgoDesc& algoDesc(Algo a);
const char* algoName(Algo a);      // "?" outside the table
int algoByName(const char* name);  // the Algo algoName gives `name`, or -1

// A communicator's plans: the tuner's choice per collective and size class (log2 of the bytes),
// decided on the first call of a class and looked up afterwards, so that a call evaluates no
// model and parses no environment. A class keeps every boundary at which the model's choice
// changes inside it (found by bisection: each candidate's predicted time is affine in the
// bytes, so the sizes where one candidate wins form an interval), so a lookup gives exactly the
// choice chooseFor would make. Used by the executing thread only (one at a time: ApiGuard,
// ExecGuard).
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
  uint64_t shapeVersion = 0;     // and the communicator's shape (ShapeCell::version)
  PlanClass classes[kNumOpKinds][kPlanClasses] = {};
  uint32_t overridesWarned = 0;  // bit k: the overrides-ignored warning was given for OpKind k
  void clear();
};
inline int planClassOf(size_t bytes) {
  return bytes == 0 ? 0 : 64 - __builtin_clzll(static_cast<unsigned long long>(bytes));
}

}  // namespace chorus
