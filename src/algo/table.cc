// The algorithm table: every algorithm's descriptor (comm/plan.h AlgoDesc, defined in the
// algorithm's own file), in Algo order: the rows of comm/algo_rows.h. Dispatch (algo/select.cc),
// the tuner (tune/), CHORUS_ALGO and every name read it; adding an algorithm is its file plus
// one row there. Also the communicator's algorithm state, made from the rows (createAlgoStates).
#include "algo/algo.h"
#include "algo/channel_workers.h"
#include "comm/comm.h"
#include "prims/prims.h"

namespace chorus {

// The rows of comm/algo_rows.h: each descriptor (defined in its algorithm's file), in order, so
// that a row's index is its Algo enumerator.
#define CHORUS_ALGO_DECLARE(e, d) extern const AlgoDesc d;
CHORUS_ALGO_ROWS(CHORUS_ALGO_DECLARE)
#undef CHORUS_ALGO_DECLARE
#define CHORUS_ALGO_ROW(e, d) &d,
extern constexpr const AlgoDesc* const kAlgoTable[] = {CHORUS_ALGO_ROWS(CHORUS_ALGO_ROW)};
#undef CHORUS_ALGO_ROW
constinit const int kNumAlgoTable = int(sizeof(kAlgoTable) / sizeof(kAlgoTable[0]));
static_assert(sizeof(kAlgoTable) / sizeof(kAlgoTable[0]) == size_t(kNumAlgoRows) &&
                  kNumAlgoRows <= kMaxAlgos,
              "one row per algorithm; TunerEnv's masks hold kMaxAlgos algorithms");

namespace {
// The lower layers (tune/, comm/) read the table through comm/plan.h: registered when the
// library loads, before any communicator exists; a static program keeps this file through the
// build's link option (the anchor at the end).
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

SlotStreaming slotStreaming(const chorusComm* comm, const OpDesc& op) {
  size_t bytes = op.count * chorusTypeSize(op.type);
  if (op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter)
    bytes *= size_t(comm->nranks);
  if (bytes >= comm->slotStreamThreshold) return SlotStreaming::kStreamed;
  return bytes >= comm->slotStreamByLink ? SlotStreaming::kByLink : SlotStreaming::kCached;
}

}  // namespace chorus

// A program linked statically holds this file (the table and its registration above) whatever it
// calls, because the build asks the linker for this symbol: chorus_static's link option
// (CMakeLists.txt, exported to find_package users) and chorus.pc's Libs.private pass
// -Wl,--undefined=chorusAlgoTableAnchor. Nothing reads it.
extern "C" {
extern const int chorusAlgoTableAnchor;
const int chorusAlgoTableAnchor = 1;
}
