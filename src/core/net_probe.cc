// The link probe (core/net_probe.h). Node leaders alone would measure one TCP stream; the
// hierarchical AllReduce, the tuner's choice for large calls across nodes, drives one stream per
// rank of a node at once. So every rank of local index i (i below the smallest node's rank
// count) runs ring AllReduces among the ranks of index i of every node, all rings at once, as
// hier's cross rings do, each phase started together on every rank (bootstrap barriers):
//   - two of X = CHORUS_NET_PROBE_BYTES (1 MiB) per node, split over the node's ranks, to warm
//     up (pages, TCP windows, the proxies awake) and to size the timed calls below;
//   - Q doubles (one per ring position, so every one of the 2(Q-1) steps moves something),
//     kSmallReps times: the median over 2(Q-1) steps is one network hop;
//   - likewise on each node's own ring (shared memory): one hand-off inside a node, which on
//     a node whose cores also run the network's proxy threads costs more than the machine
//     model's (measured on one node, without them); with even nodes, kSmallReps small
//     hierarchical AllReduces too, whose node hand-offs wait behind the cross ring and cost
//     more again: the node hop is then the one that makes the model fit their median;
//   - one X, which empties a shaper's token bucket (tc's tbf lets its burst, 256 KiB under
//     chorusrun --link-rate, through at once), then kLargeReps of k X back to back, at the
//     link's rate (k: 4, or more where one X took less than kTimedSec = 5 ms, at most 16; the
//     slowest rank's warm-up decides, so all agree). The node sends 2(Q-1)/Q of k X each way
//     per call; their mean time, less the 2(Q-1) hops the model adds to it, gives the bandwidth.
//   - along the whole communicator's chain (the tuner's Broadcast and Reduce across nodes), 32
//     Broadcasts of one double from rank 0 back to back to fill the pipeline, then the median
//     of 3 runs of 64 per call: calls overlap along the chain, so one costs the pipeline's rate,
//     not n - 1 hops; then Reduces the same way;
//   - one warm-up then kSmallReps back-to-back halving-doubling AllReduces of one double on the
//     whole communicator, their mean (every step sends one way at that size: the model's hops
//     for the halving-doubling start there, algo/halving_doubling.cc hdHopsUs);
//   - likewise kSmallReps tree AllReduces of its most chunks (algo/tree.cc treeProbeBytes): the
//     model's step per chunk is what gives that call its time (treeNetHopsUs).
// A max-AllReduce over the whole communicator then gives every rank the slowest link's figures
// (the halving-doubling's call: the fastest rank's), so every rank's tuner makes the same
// choices. On 1 Gbit/s links this takes 0.3 s (4 nodes of 1 rank) to 0.5 s (8 of 2): 15 x 1 MiB
// through each link; on unshaped veth links less.
#include "core/net_probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "algo/algo.h"
#include "base/clock.h"
#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "base/test_hook.h"
#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

constexpr int kSmallReps = 9;
constexpr int kLargeReps = 3;
constexpr size_t kMinScale = 4;
constexpr double kTimedSec = 5e-3;
constexpr int kMaxScale = 16;

double envPositive(const char* name) {
  const std::string v = envStr(name);
  if (v.empty()) return 0;
  char* end = nullptr;
  const double d = strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != 0 || !(d > 0))
    fail(chorusInvalidArgument, "%s=%s: expected a positive number", name, v.c_str());
  return d;
}

// The median of N timings (reorders them).
template <size_t N>
double median(double (&t)[N]) {
  std::nth_element(t, t + N / 2, t + N);
  return t[N / 2];
}

// CHORUS_TEST_PROBE_STALL=rank:phase (tests only): that rank stops for good in that phase of the
// probe, after the calls that bring its peers into it, so that a test can kill it while they
// wait in the timed calls. 1: the chain Broadcasts, after their fill; 2: the halving-doubling's
// smallest AllReduces, after their warm-up; 3: the tree's AllReduces, after their warm-up.
constexpr int kStallInChain = 1;
constexpr int kStallInHalvingDoubling = 2;
constexpr int kStallInTree = 3;

void stallIfHooked(const chorusComm* c, int phase) {
  if (testHookFor("CHORUS_TEST_PROBE_STALL", c->rank) != phase) return;
  fprintf(stderr, "CHORUS_TEST_PROBE_STALL: rank %d stops in the link probe (phase %d)\n", c->rank,
          phase);
  fflush(stderr);
  for (;;) pause();
}

// Back-to-back chain Broadcasts or Reduces of one double, root rank 0 (the link probe's pipeline
// rates).
constexpr int kPipeFill = 32;
constexpr int kPipeCalls = 64;
constexpr int kPipeReps = 3;

// The chain's entry for `kind` from the algorithm table, as runCollective takes it.
void chainCalls(chorusComm* c, OpKind kind, double* buf, int calls) {
  const AlgoEntry run = algoDesc(Algo::kChain).run.of[int(kind)];
  const OpDesc op{kind, buf, buf, 1, chorusFloat64, chorusSum, 0, c, nullptr};
  for (int i = 0; i < calls; ++i) run(c, op, Work{0, Proto::kSimple, 0, 1});
}

// Seconds per call of back-to-back chain calls of `kind` on this rank: between ring AllReduces
// that bring the ranks in step, kPipeFill calls fill the pipeline, then the median of kPipeReps
// runs of kPipeCalls (the fastest ran 10-30% below what broadcast_perf measures next: turns lost
// to other processes are part of the rate where ranks share cores).
double chainRate(chorusComm* c, OpKind kind) {
  double buf[1] = {1.0};
  // Every rank in step first: a bootstrap barrier lets ranks go tens of ms apart here, which
  // would stall the timed runs; a ring AllReduce ends on every rank within a few hops.
  OpDesc sync{OpKind::kAllReduce, buf, buf, 1, chorusFloat64, chorusSum, -1, c, nullptr};
  ringAllReduce(c, sync, Work{0, Proto::kSimple, 0, 1});
  chainCalls(c, kind, buf, kPipeFill);
  if (kind == OpKind::kBroadcast) stallIfHooked(c, kStallInChain);
  double t[kPipeReps];
  for (double& ti : t) {
    const auto t0 = Clock::now();
    chainCalls(c, kind, buf, kPipeCalls);
    ti = secondsSince(t0) / kPipeCalls;
  }
  // And in step after: a rank that finished its calls early (a Reduce's far end, a Broadcast's
  // root) would otherwise start the probe's next phase, whose megabytes on the same links
  // slowed the other ranks' last run 3-5x.
  ringAllReduce(c, sync, Work{0, Proto::kSimple, 0, 1});
  return median(t);
}

// Seconds per AllReduce of one double by `algo` on the whole communicator (the
// halving-doubling's smallest calls): one call to warm up, which also brings the ranks in step,
// then kSmallReps back to back, their mean on this rank, as the benchmarks time them. (The
// median of calls timed one by one spread 1.5x over the ranks of 8 x 2 for the recursive
// doubling, one rank waiting in a call where another waited in the next.)
// The same for `count` doubles (the tree's call of its most chunks). `stallPhase`: this phase's
// CHORUS_TEST_PROBE_STALL number, checked after the warm-up.
double smallAllReduce(chorusComm* c, Algo algo, int stallPhase, size_t count = 1) {
  const AlgoEntry run = algoDesc(algo).run.of[int(OpKind::kAllReduce)];
  std::vector<double> buf(std::max(count, size_t(1)), 1.0);
  const OpDesc op{OpKind::kAllReduce, buf.data(), buf.data(), count,  chorusFloat64,
                  chorusSum,          -1,         c,          nullptr};
  run(c, op, Work{0, Proto::kSimple, 0, count});
  stallIfHooked(c, stallPhase);
  const auto t0 = Clock::now();
  for (int i = 0; i < kSmallReps; ++i) run(c, op, Work{0, Proto::kSimple, 0, count});
  return secondsSince(t0) / kSmallReps;
}

// Seconds one ring AllReduce of `count` doubles among `ring` takes on this rank.
double timedAllReduce(chorusComm* c, const std::vector<int>& ring, int pos, double* buf,
                      size_t count) {
  OpDesc op{OpKind::kAllReduce, buf, buf, count, chorusFloat64, chorusSum, -1, c, nullptr};
  const auto t0 = Clock::now();
  ringAllReduceOn(c, ring, pos, op, Work{0, Proto::kSimple, 0, count});
  return secondsSince(t0);
}

}  // namespace

void probeNetwork(chorusComm* c) {
  if (c->nnodes < 2) return;
  const auto start = Clock::now();
  const double gbs = envPositive("CHORUS_NET_GBS"), hopUs = envPositive("CHORUS_NET_HOP_US");
  const bool probe = envInt("CHORUS_NET_PROBE", 1) != 0 && (gbs == 0 || hopUs == 0);
  // This rank's measurements (0: none).
  double hopSec = 0, secPerByte = 0, nodeHopSec = 0, pipeSec = 0, reducePipeSec = 0, hdSec = 0,
         treeSec = 0;
  if (probe) {
    // The hierarchical AllReduce's rings (this node's, and index i of every node), and the
    // smallest node's rank count: only indices every node has cross all of them.
    const HierPlan h = hierPlan(c);
    const std::vector<int>& mine = h.local;
    std::vector<int> perNode(size_t(c->nnodes), 0);
    for (int r : c->ring) ++perNode[size_t(c->nodeOf[size_t(r)])];
    const int P = *std::min_element(perNode.begin(), perNode.end());
    const int local = h.i;
    const bool crossing = local < P;  // this rank's index exists on every node
    const std::vector<int> cross = crossing ? h.cross : std::vector<int>{};
    const int Q = int(cross.size());
    const int pos = h.qpos;
    const long total = std::max(envSize("CHORUS_NET_PROBE_BYTES", kNetProbeBytes), 64L << 10);
    const size_t elems = crossing ? size_t(total) / size_t(P) / sizeof(double) : 0;
    const size_t hierElems = size_t(P) * size_t(c->nnodes) * 8;
    std::vector<double> buf(std::max({elems, mine.size(), hierElems}), 1.0);
    // The median of kSmallReps calls of one double per ring position (so that every one of the
    // 2(n-1) steps moves something), per step.
    auto hop = [&](const std::vector<int>& ring, int at) {
      const size_t n = ring.size();
      double t[kSmallReps];
      for (double& ti : t) ti = timedAllReduce(c, ring, at, buf.data(), n);
      return median(t) / (2.0 * double(n - 1));
    };
    // Each phase starts on every rank at once (the barriers, met by every rank): the link is the
    // node's, shared by its rings. Warm-up first (pages, TCP windows, the proxies awake).
    const Deadline deadline = deadlineIn(bootstrapTimeout());
    // A second one's time, the slowest rank's, decides how many times X the timed calls move: at
    // least kTimedSec each where the link is fast, so that the hops are a small part of them (at
    // most kMaxScale x X). Every rank takes part, so every rank scales alike.
    if (crossing) timedAllReduce(c, cross, pos, buf.data(), elems);
    double warm[1] = {crossing ? timedAllReduce(c, cross, pos, buf.data(), elems) : 0.0};
    OpDesc maxOp{OpKind::kAllReduce, warm, warm, 1, chorusFloat64, chorusMax, -1, c, nullptr};
    ringAllReduce(c, maxOp, Work{0, Proto::kSimple, 0, 1});
    const size_t scale =
        size_t(std::clamp(std::ceil(kTimedSec / std::max(warm[0], 1e-6)), 1.0, double(kMaxScale)));
    c->bootstrap->barrier(deadline);
    if (crossing) hopSec = hop(cross, pos);
    c->bootstrap->barrier(deadline);
    // The node's own hand-offs, beside the network's proxies as in a call across nodes.
    if (mine.size() > 1) nodeHopSec = hop(mine, local);
    c->bootstrap->barrier(deadline);
    // Broadcasts and Reduces along the chain (the tuner's across nodes) back to back: the root
    // (a Reduce's far end) sends a call and goes on, every rank forwards as it receives, so
    // calls overlap along the chain and one costs the pipeline's rate, not its n - 1 hand-offs
    // (a fraction of a hop, where the hop is mostly the wait for a core: the other ranks' turns
    // carry the other calls). A Reduce's ranks also add, and where ranks share cores it costs
    // up to 1.5x a Broadcast's. Timed on every rank, with no barrier between the runs (a
    // barrier costs tens of ms here, a call tens of us); the Reduces follow the Broadcasts on
    // the same FIFOs, in order.
    pipeSec = chainRate(c, OpKind::kBroadcast);
    reducePipeSec = chainRate(c, OpKind::kReduce);
    // The halving-doubling's smallest AllReduce, whose steps all send one way (a binomial
    // reduce and broadcast: 2(n - 1) messages against the recursive doubling's n log2 n): where
    // ranks share cores a hop is mostly the wait for one, and fewer messages wait less than
    // its 2 log2 n hops say.
    hdSec = smallAllReduce(c, Algo::kHalvingDoubling, kStallInHalvingDoubling);
    // The tree's smallest call of its most chunks: each chunk's step waits for both children,
    // which the chain's streamed calls above do not tell (algo/tree.cc treeNetHopsUs).
    treeSec = smallAllReduce(c, Algo::kTree, kStallInTree,
                             treeProbeBytes(c->shape.get()) / sizeof(double));
    if (c->shape.get().evenNodes && P > 1) {
      // Inside a small hierarchical AllReduce (the tuner's usual choice across nodes) a node's
      // hand-offs cost more: a rank that waited on the cross ring sleeps and must be woken.
      // The model counts 2Q(P-1) node hops and 2(Q-1) network hops for it (its ReduceScatter
      // and AllGather: algo/hier.cc hierUs); the node hop is what makes the measured call (the
      // median of kSmallReps) fit that, if more than the above.
      double t[kSmallReps];
      for (double& ti : t) {
        OpDesc op{OpKind::kAllReduce, buf.data(), buf.data(), hierElems, chorusFloat64,
                  chorusSum,          -1,         c,          nullptr};
        const auto t0 = Clock::now();
        hierAllReduce(c, op, Proto::kSimple);
        ti = secondsSince(t0);
      }
      const double Q = c->nnodes, fit = (median(t) - 2 * (Q - 1) * hopSec) / (2 * Q * (P - 1));
      nodeHopSec = std::max(nodeHopSec, fit);
    }
    if (crossing) {
      // One X empties a shaper's bucket, then kLargeReps calls of k X back to back run at the
      // link's rate. Their time together, not the fastest: the rings of a node share its link,
      // and one that ran ahead would see it alone. k is at least kMinScale, so that the
      // calls' fixed costs are a small part of them: those are larger than the 2(Q-1) hops
      // measured alone where more ranks than cores share the machine (16 ranks on 2 cores:
      // every step waits for wake-ups), and with k = 1 the probe gave 0.08 GB/s for a 0.125
      // GB/s link there.
      const size_t timed = elems * std::max(scale, kMinScale);
      buf.resize(timed, 1.0);
      timedAllReduce(c, cross, pos, buf.data(), elems);
      double t = 0;
      for (int i = 0; i < kLargeReps; ++i) t += timedAllReduce(c, cross, pos, buf.data(), timed);
      t /= kLargeReps;
      // Bytes each node sends each way per call: 2(Q-1)/Q of its P shares. The model adds
      // 2(Q-1) hops to the bytes' time (tune/tuner.h pipelinedUs), so they come off here as it
      // adds them (at most 3/4 of the call).
      const double bytes = 2.0 * (Q - 1) / Q * double(P) * double(timed) * sizeof(double);
      const double dataSec =
          bytesTermUs(c->shape.get(), t * 1e6, 2.0 * (Q - 1) * hopSec * 1e6) * 1e-6;
      secPerByte = dataSec / bytes;
      CHORUS_INFO(c->rank,
                  "network probe, this rank: hop %.1f us, %.0f B per node in %.3f ms, node hop "
                  "%.1f us, chain Broadcast %.1f and Reduce %.1f us per call, one double's "
                  "halving-doubling AllReduce %.1f us, a %zu-byte tree AllReduce %.1f us",
                  hopSec * 1e6, bytes, t * 1e3, nodeHopSec * 1e6, pipeSec * 1e6,
                  reducePipeSec * 1e6, hdSec * 1e6, treeProbeBytes(c->shape.get()), treeSec * 1e6);
    }
  }
  // The slowest link decides, the same figures on every rank.
  // The halving-doubling's small call: the fastest rank's (negated for the max). Its ranks'
  // means spread 3x on 8 x 1 (544-1671 us per call in one launch) where the benchmark, timing
  // the same calls for longer, took 448-479; on 8 x 2 they spread 10%.
  double v[6] = {hopSec, secPerByte, nodeHopSec, pipeSec, reducePipeSec, -hdSec};
  OpDesc op{OpKind::kAllReduce, v, v, 6, chorusFloat64, chorusMax, -1, c, nullptr};
  if (probe) ringAllReduce(c, op, Work{0, Proto::kSimple, 0, 6});
  // The tree's call: the ranks' mean, as the benchmarks report a call (its root and leaves wait
  // differently; the slowest rank's was 1.2-1.4x what all_reduce_perf timed on 8 x 1).
  double tree[1] = {treeSec / c->nranks};
  OpDesc sum{OpKind::kAllReduce, tree, tree, 1, chorusFloat64, chorusSum, -1, c, nullptr};
  if (probe) ringAllReduce(c, sum, Work{0, Proto::kSimple, 0, 1});
  c->shape.change([&](Shape& s) {
    s.netHopUs = hopUs > 0 ? hopUs : v[0] * 1e6;
    s.nodeHopUs = v[2] * 1e6;
    s.netPipeUs = v[3] * 1e6;
    s.netReducePipeUs = v[4] * 1e6;
    s.netHdUs = -v[5] * 1e6;
    s.netTreeUs = tree[0] * 1e6;
    s.netBwGBs = gbs > 0 ? gbs : v[1] > 0 ? 1e-9 / v[1] : 0;
  });
  const double ms = secondsSince(start) * 1e3;
  CHORUS_INFO(c->rank,
              "network link: %.1f us per hop, %.3f GB/s per node, %.1f us per hop in a node, "
              "%.1f and %.1f us per back-to-back chain Broadcast and Reduce (%s) in %.1f ms",
              c->shape.get().netHopUs, c->shape.get().netBwGBs, c->shape.get().nodeHopUs,
              c->shape.get().netPipeUs, c->shape.get().netReducePipeUs,
              !probe ? "set by CHORUS_NET_GBS / CHORUS_NET_HOP_US; 0: the machine model's"
              : gbs > 0 || hopUs > 0 ? "measured at init, in part set by the environment"
                                     : "measured at init, slowest rank",
              ms);
}

}  // namespace chorus
