// The algorithm table: every algorithm's descriptor (comm/plan.h AlgoDesc, defined in the
// algorithm's own file), in Algo order. Dispatch (algo/select.cc), the tuner (tune/), CHORUS_ALGO
// and every name read it; adding an algorithm is its file plus one row here.
#include "algo/algo.h"

namespace chorus {

extern const AlgoDesc kRingAlgo, kTreeAlgo, kChainAlgo, kDirectAlgo, kNaiveAlgo, kHierAlgo,
    kOneShotAlgo, kCmaAlgo, kTwoShotAlgo;

constinit const AlgoDesc* const kAlgoTable[] = {
    &kRingAlgo,     // Algo::kRing (algo/ring.cc)
    &kTreeAlgo,     // Algo::kTree (algo/tree.cc)
    &kChainAlgo,    // Algo::kChain (algo/chain.cc)
    &kDirectAlgo,   // Algo::kDirect (algo/p2p_collectives.cc)
    &kNaiveAlgo,    // Algo::kNaive (algo/naive.cc)
    &kHierAlgo,     // Algo::kHier (algo/hier.cc)
    &kOneShotAlgo,  // Algo::kOneShot (algo/oneshot.cc)
    &kCmaAlgo,      // Algo::kCma (algo/copy.cc)
    &kTwoShotAlgo,  // Algo::kTwoShot (algo/oneshot.cc)
};
constinit const int kNumAlgoTable = int(sizeof(kAlgoTable) / sizeof(kAlgoTable[0]));
static_assert(sizeof(kAlgoTable) / sizeof(kAlgoTable[0]) <= size_t(kMaxAlgos),
              "TunerEnv's masks hold kMaxAlgos algorithms");

namespace {
// The lower layers (tune/, comm/) read the table through comm/plan.h: registered when the
// library loads, before any communicator exists. runCollective (algo/select.cc) refers to the
// table, so every program that can run a collective links this file.
[[maybe_unused]] const bool gRegistered = (registerAlgos(kAlgoTable, kNumAlgoTable), true);
}  // namespace

}  // namespace chorus
