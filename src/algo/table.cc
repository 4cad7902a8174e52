// The algorithm table: every algorithm's descriptor (comm/plan.h AlgoDesc, defined in the
// algorithm's own file), in Algo order. Dispatch (algo/select.cc), the tuner (tune/), CHORUS_ALGO
// and every name read it; adding an algorithm is its file plus one row here. Also the
// communicator's algorithm state, made from the rows (createAlgoStates).
#include "algo/algo.h"
#include "algo/channel_workers.h"
#include "comm/comm.h"
#include "prims/prims.h"

namespace chorus {

// One line per algorithm in each list (clang-format keeps them so, so that adding one is one line
// in each), in the order of the Algo enumerators (comm/plan.h), which the static_assert checks.
// clang-format off
extern const AlgoDesc kRingAlgo;  // algo/ring.cc
extern const AlgoDesc kTreeAlgo;  // algo/tree.cc
extern const AlgoDesc kChainAlgo;  // algo/chain.cc
extern const AlgoDesc kDirectAlgo;  // algo/p2p_collectives.cc
extern const AlgoDesc kNaiveAlgo;  // algo/naive.cc
extern const AlgoDesc kHierAlgo;  // algo/hier.cc
extern const AlgoDesc kOneShotAlgo;  // algo/oneshot.cc
extern const AlgoDesc kCmaAlgo;  // algo/copy.cc
extern const AlgoDesc kTwoShotAlgo;  // algo/oneshot.cc
extern const AlgoDesc kHalvingDoublingAlgo;  // algo/halving_doubling.cc
extern const AlgoDesc kZeroCopyAlgo;  // algo/zerocopy.cc

extern constexpr const AlgoDesc* const kAlgoTable[] = {
    &kRingAlgo,  // Algo::kRing
    &kTreeAlgo,  // Algo::kTree
    &kChainAlgo,  // Algo::kChain
    &kDirectAlgo,  // Algo::kDirect
    &kNaiveAlgo,  // Algo::kNaive
    &kHierAlgo,  // Algo::kHier
    &kOneShotAlgo,  // Algo::kOneShot
    &kCmaAlgo,  // Algo::kCma
    &kTwoShotAlgo,  // Algo::kTwoShot
    &kHalvingDoublingAlgo,  // Algo::kHalvingDoubling
    &kZeroCopyAlgo,  // Algo::kZeroCopy
};
// clang-format on
// Each row sits at its enumerator (comm/plan.h Algo): the one identity code uses.
static_assert(kAlgoTable[int(Algo::kRing)] == &kRingAlgo &&
                  kAlgoTable[int(Algo::kTree)] == &kTreeAlgo &&
                  kAlgoTable[int(Algo::kChain)] == &kChainAlgo &&
                  kAlgoTable[int(Algo::kDirect)] == &kDirectAlgo &&
                  kAlgoTable[int(Algo::kNaive)] == &kNaiveAlgo &&
                  kAlgoTable[int(Algo::kHier)] == &kHierAlgo &&
                  kAlgoTable[int(Algo::kOneShot)] == &kOneShotAlgo &&
                  kAlgoTable[int(Algo::kCma)] == &kCmaAlgo &&
                  kAlgoTable[int(Algo::kTwoShot)] == &kTwoShotAlgo &&
                  kAlgoTable[int(Algo::kHalvingDoubling)] == &kHalvingDoublingAlgo &&
                  kAlgoTable[int(Algo::kZeroCopy)] == &kZeroCopyAlgo,
              "the table's rows follow the Algo enumerators");
constinit const int kNumAlgoTable = int(sizeof(kAlgoTable) / sizeof(kAlgoTable[0]));
static_assert(sizeof(kAlgoTable) / sizeof(kAlgoTable[0]) <= size_t(kMaxAlgos),
              "TunerEnv's masks hold kMaxAlgos algorithms");

namespace {
// The lower layers (tune/, comm/) read the table through comm/plan.h: registered when the
// library loads, before any communicator exists. runCollective (algo/select.cc) refers to the
// table, so every program that can run a collective links this file.
[[maybe_unused]] const bool gRegistered = (registerAlgos(kAlgoTable, kNumAlgoTable), true);
}  // namespace

void createAlgoStates(chorusComm* comm) {
  for (int a = 0; a < kNumAlgoTable; ++a)
    if (kAlgoTable[a]->createState != nullptr)
      comm->algoState[a].reset(kAlgoTable[a]->createState(comm));
  comm->scratch = new ChannelScratch(comm->nchannels, comm->slotBytes[0]);
}

void destroyAlgoStates(chorusComm* comm) {
  stopChannelWorkers(comm);  // parked: no call is in flight here
  for (auto& state : comm->algoState) state.reset();
  delete comm->scratch;
  comm->scratch = nullptr;
}

// Called by communicator init: a program linked statically that creates a communicator links
// this file (and its registration) even if it never runs a collective (chorusTunerChoice alone).
void linkAlgoTable() {}

}  // namespace chorus
