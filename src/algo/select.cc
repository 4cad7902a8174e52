// Runs a collective with the tuner's choice: the algorithm (its entry point for the collective,
// from the algorithm table), the protocol, and for algorithms that split over channels the number
// of channels (each channel takes a contiguous share of the elements; the caller runs channel 0
// and the communicator's persistent channel workers the others: algo/channel_workers.h).
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "algo/algo.h"
#include "algo/channel_workers.h"
#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

// A single rank: the result is the input (avg of one value divides by one, exactly).
void runSingleRank(const OpDesc& op) {
  const size_t esz = chorusTypeSize(op.type), bytes = op.count * esz;
  if (bytes == 0 || op.recvbuff == nullptr || op.sendbuff == op.recvbuff) return;
  memmove(op.recvbuff, op.sendbuff, bytes);
}

// CHORUS_CHECK=1: before a collective every rank learns what every other rank called (a ring
// allgather of a fixed-size descriptor, so it cannot itself mismatch) and all fail together
// with a message listing the calls if anything differs.
struct CallDesc {
  uint64_t seq;
  int32_t kind, type, op, root;
  uint64_t count;
};

std::string describe(const CallDesc& d) {
  return format("%s(seq %llu, count %llu, %s, op %s, root %d)", opKindName(OpKind(d.kind)),
                (unsigned long long)d.seq, (unsigned long long)d.count, dataTypeName(d.type),
                d.op >= 0 ? redOpName(d.op) : "none", d.root);
}

void checkMatching(chorusComm* comm, const OpDesc& op) {
  const bool reduces = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce ||
                       op.kind == OpKind::kReduceScatter;
  const bool rooted = op.kind == OpKind::kBroadcast || op.kind == OpKind::kReduce ||
                      op.kind == OpKind::kGather || op.kind == OpKind::kScatter;
  CallDesc mine{comm->opCount,         int32_t(op.kind),
                int32_t(op.type),      reduces ? int32_t(op.op) : -1,
                rooted ? op.root : -1, op.count};
  std::vector<CallDesc> all(static_cast<size_t>(comm->nranks));
  OpDesc g{OpKind::kAllGather, &mine, all.data(), sizeof(CallDesc), chorusUint8,
           chorusSum,          -1,    comm,       nullptr};
  ringAllGather(comm, g, Work{0, Proto::kSimple, 0, sizeof(CallDesc)});
  bool same = true;
  for (const auto& d : all) same = same && memcmp(&d, &mine, sizeof(d)) == 0;
  if (same) return;
  std::string msg;
  for (int r = 0; r < comm->nranks; ++r)
    msg += format("%s rank %d: %s", r ? ";" : "", r, describe(all[size_t(r)]).c_str());
  fail(chorusInvalidUsage, "rank %d: mismatched collective calls (CHORUS_CHECK):%s", comm->rank,
       msg.c_str());
}

// One multi-channel call: what every channel's share needs (on the caller's stack: nothing is
// allocated per call).
struct ChannelCall {
  chorusComm* comm;
  const OpDesc* op;
  AlgoEntry run;
  Proto proto;
  const LineBlocks* shares;
  LaneFailures failures;

  static void runShare(void* ctx, int ch) {
    auto* c = static_cast<ChannelCall*>(ctx);
    // A channel worker's top: whatever the share throws fails the call and the communicator.
    try {
      c->run(c->comm, *c->op, Work{ch, c->proto, c->shares->begin(ch), c->shares->begin(ch + 1)});
    } catch (...) {
      c->failures.failed(c->comm, ch, "running a channel's share of a collective");
    }
  }
};
static_assert(kMaxCommChannels <= LaneFailures::kMaxLanes);

}  // namespace

void LaneFailures::failed(chorusComm* comm, int lane, const char* doing) noexcept {
  const Failure e = caughtFailure(comm->rank, doing);
  try {
    errors[lane] = std::make_exception_ptr(e);
  } catch (...) {  // (std::make_exception_ptr may allocate)
  }
  int none = -1;
  first.compare_exchange_strong(none, lane);
  try {
    markFailed(comm, e.code, e.message, e.cause);  // stops the other lanes
  } catch (...) {  // no memory for the notice: the failed state set first still stops them
  }
}

void LaneFailures::rethrowFirst() const {
  const int f = first.load();
  if (f < 0) return;
  if (errors[f]) std::rethrow_exception(errors[f]);
  fail(chorusSystemError, "out of memory while keeping a failure");
}

void runCollective(const OpDesc& op) {
  chorusComm* comm = op.comm;
  // The status trace (comm/status.h): in flight from here, the algorithm known once chosen.
  traceBegin(comm->trace, comm->opCount,
             traceDesc(op.kind, op.type, op.op, kTraceNoChoice, kTraceNoChoice, kTraceNoChoice),
             op.count, op.root);
  if (comm->nranks == 1 && op.kind != OpKind::kAlltoAll && op.kind != OpKind::kGather &&
      op.kind != OpKind::kScatter) {
    runSingleRank(op);
    ++comm->opCount;
    traceEnd(comm->trace);
    return;
  }
  if (comm->checkCalls) checkMatching(comm, op);
  const Choice c = choose(comm, op);
  traceChoice(comm->trace, traceDesc(op.kind, op.type, op.op, uint64_t(c.algo), uint64_t(c.proto),
                                     uint64_t(c.nchannels)));
  CHORUS_INFO(comm->rank,
              "%s opCount %llu count %zu datatype %d op %d root %d: algo %s proto %s "
              "nchannels %d (predicted %.1f us)",
              opKindName(op.kind), (unsigned long long)comm->opCount, op.count, int(op.type),
              int(op.op), op.root, algoName(c.algo), protoName(c.proto), c.nchannels,
              predictChoice(comm, op, c));
  // The chosen algorithm's entry point for this collective (the algorithm table).
  const AlgoDesc& d = *kAlgoTable[int(c.algo)];
  const AlgoEntry run = d.run.of[int(op.kind)];
  if (run == nullptr)
    fail(chorusInternalError, "rank %d: %s has no %s", comm->rank, d.name, opKindName(op.kind));
  if (!d.channels) {
    run(comm, op, Work{0, c.proto, 0, op.count});
  } else {
    // Split the elements over channels in 64-byte aligned shares.
    const int nch = c.nchannels;
    const LineBlocks shares(op.count, nch, chorusTypeSize(op.type));
    if (nch == 1) {  // no thread to start, nothing to allocate
      run(comm, op, Work{0, c.proto, 0, op.count});
      ++comm->opCount;
      traceEnd(comm->trace);
      return;
    }
    // The extra channels run on the communicator's persistent workers (algo/channel_workers.h):
    // handing them the call is a store and, for a parked worker, one futex wake, where starting
    // a thread per channel cost a clone per channel per call. The first failure is reported
    // (not a sibling's "failed on another channel"); markFailed stops the sibling channels.
    if (nch > kMaxCommChannels)
      fail(chorusInternalError, "rank %d: %d channels (at most %d)", comm->rank, nch,
           kMaxCommChannels);
    ChannelWorkers& workers = channelWorkers(comm);
    ChannelCall call{comm, &op, run, c.proto, &shares, {}};
    workers.start(nch, &ChannelCall::runShare, &call);
    ChannelCall::runShare(&call, 0);
    workers.wait(comm->spinIters);
    call.failures.rethrowFirst();
  }
  ++comm->opCount;
  traceEnd(comm->trace);
}

}  // namespace chorus
