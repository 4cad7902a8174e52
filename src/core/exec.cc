#include "core/exec.h"

#include <algorithm>
#include <optional>
#include <span>
#include <thread>

#include "algo/algo.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/wait.h"
#include "cuda/backend.h"

namespace chorus {

namespace {
// In a catch block: what was caught, as comm's last error; its code. For calls refused before
// anything moved (the communicator stays usable).
chorusResult_t refused(chorusComm* comm, const char* doing) {
  const Failure e = caughtFailure(comm->rank, doing);
  setLastError(comm, e.message);
  return e.code;
}

// Claims the communicator for execution; two concurrent executions would interleave their
// slots, so the second is refused. One locked instruction per call (the claim); the release is
// a plain store, which the next claim acquires.
struct ExecGuard {
  chorusComm* comm;
  explicit ExecGuard(chorusComm* c) : comm(c) {
    int idle = 0;
    if (!comm->executing.compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) {
      fail(chorusInvalidUsage,
           "rank %d: the communicator is already executing an operation from another thread or "
           "stream (a communicator must be used by one thread or stream at a time)",
           comm->rank);
    }
  }
  ~ExecGuard() { comm->executing.store(0, std::memory_order_release); }
};

void checkUsable(chorusComm* comm) {
  if (const char* why = unusableReason(comm)) {
    if (comm->state.load() == CommState::kFailed)
      fail(chorusInvalidUsage, "rank %d: %s (it failed with %s)", comm->rank, why,
           chorusGetErrorString(chorusResult_t(comm->asyncError.load())));
    fail(chorusInvalidUsage, "rank %d: %s", comm->rank, why);
  }
}

using OpSpan = std::span<const OpDesc* const>;

void runCommOpsHost(chorusComm* comm, OpSpan ops) {
  if (ops.size() == 1 && !isP2P(ops[0]->kind)) {  // one collective: the common case
    runCollective(*ops[0]);
    return;
  }
  // Reused (the point-to-point state, algo/algo.h P2PState): no allocation in steady state.
  std::vector<P2PTransfer>& p2p = algoState<P2PState>(comm, Algo::kDirect).ops;
  p2p.clear();
  const OpDesc* firstP2P = nullptr;
  for (const OpDesc* op : ops) {
    if (isP2P(op->kind)) {
      if (firstP2P == nullptr) firstP2P = op;
      char* buf = op->kind == OpKind::kSend
                      ? const_cast<char*>(static_cast<const char*>(op->sendbuff))
                      : static_cast<char*>(op->recvbuff);
      const bool send = op->kind == OpKind::kSend;
      // chorusRecvAny's OpDesc carries its `int* source` in sendbuff (comm/op.h kAnySource).
      int* source = !send && op->root == kAnySource
                        ? static_cast<int*>(const_cast<void*>(op->sendbuff))
                        : nullptr;
      p2p.push_back({send, op->root, buf, op->count * chorusTypeSize(op->type), send, source});
    } else {
      runCollective(*op);
    }
  }
  if (!p2p.empty()) {
    if (p2p.size() == 1)
      traceBegin(comm->trace, comm->opCount,
                 traceDesc(firstP2P->kind, firstP2P->type, firstP2P->op, uint64_t(Algo::kDirect),
                           kTraceNoChoice, kTraceNoChoice),
                 firstP2P->count, firstP2P->root);
    else
      traceBegin(comm->trace, comm->opCount, kTraceP2PGroup, p2p.size(), -1);
    runP2P(comm, p2p, p2p.size() == 1 ? (p2p[0].isSend ? "Send" : "Recv") : "Send/Recv group");
    ++comm->opCount;
    traceEnd(comm->trace);
  }
}

void runCommOpsHostVector(chorusComm* comm, const std::vector<const OpDesc*>& ops) {
  runCommOpsHost(comm, OpSpan(ops));
}

// A device communicator runs the same operations on pinned host copies of its buffers.
void runCommOps(chorusComm* comm, OpSpan ops) {
  if (comm->cuda != nullptr) {
    cudaRunStaged(comm, std::vector<const OpDesc*>(ops.begin(), ops.end()), &runCommOpsHostVector,
                  &streamCudaHandle);
  } else {
    runCommOpsHost(comm, ops);
  }
}

// `claim`: take the communicator for execution (ExecGuard). A caller that holds its ApiGuard
// and has seen no stream work pending passes false: no other thread can then be executing on it
// (only an API call, which the ApiGuard excludes, queues stream work), and the claim's locked
// instruction, a tenth of a short call, is saved.
chorusResult_t runCommOpsCaught(chorusComm* comm, OpSpan ops, bool claim = true) {
  std::optional<ExecGuard> guard;
  try {
    checkUsable(comm);
    if (claim) guard.emplace(comm);
  } catch (...) {  // refused before anything moved: the communicator stays usable
    return refused(comm, "starting an operation");
  }
  try {
    runCommOps(comm, ops);
    return chorusSuccess;
  } catch (...) {
    const Failure e = namingRank(caughtFailure(comm->rank, "running an operation"), comm->rank);
    // A failure in the middle of an operation leaves the connections in an unknown state: the
    // communicator can only be aborted or destroyed from now on, and peers are told.
    setLastError(comm, e.message);
    if (!comm->abortFlag.load()) markFailed(comm, e.code, e.message, e.cause);
    return e.code;
  }
}

}  // namespace

chorusResult_t executeBatch(const std::vector<OpDesc>& ops) {
  std::vector<chorusComm*> comms;
  std::vector<std::vector<const OpDesc*>> perComm;
  for (const auto& op : ops) {
    auto it = std::find(comms.begin(), comms.end(), op.comm);
    if (it == comms.end()) {
      comms.push_back(op.comm);
      perComm.emplace_back();
      it = comms.end() - 1;
    }
    perComm[size_t(it - comms.begin())].push_back(&op);
  }
  if (comms.size() == 1) return runCommOpsCaught(comms[0], perComm[0]);
  // Several communicators driven from one thread (NCCL's single-thread, many-ranks pattern):
  // each runs on its own thread so that they progress together.
  std::vector<chorusResult_t> results(comms.size(), chorusSuccess);
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (size_t i = 1; i < comms.size(); ++i) {
    try {
      threads.emplace_back([&, i] { results[i] = runCommOpsCaught(comms[i], perComm[i]); });
    } catch (...) {
      // No thread for this communicator: it fails (its peers are told, so the communicators
      // already running stop too) instead of leaving them waiting for it.
      const Failure e = caughtFailure(comms[i]->rank, "starting a thread for a communicator");
      setLastError(comms[i], e.message);
      markFailed(comms[i], e.code, e.message, comms[i]->rank);
      results[i] = e.code;
    }
  }
  results[0] = runCommOpsCaught(comms[0], perComm[0]);
  for (auto& t : threads) t.join();
  for (auto r : results)
    if (r != chorusSuccess) return r;
  return chorusSuccess;
}

namespace {
// The null stream orders after the communicator's queued stream work.
void waitQueued(chorusComm* comm) {
  if (comm->pending.load() == 0) return;
  Waiter w(comm, -1, "waiting for the communicator's queued stream operations");
  while (comm->pending.load() != 0) w.pause();
}
}  // namespace

chorusResult_t executeNow(const OpDesc& op) {
  try {
    waitQueued(op.comm);
  } catch (...) {
    return refused(op.comm, "waiting for queued operations");
  }
  // The caller (enqueue.cc's issue) holds the ApiGuard, and nothing is queued.
  const OpDesc* one = &op;
  return runCommOpsCaught(op.comm, OpSpan(&one, 1), /*claim=*/false);
}

chorusResult_t executeGroupNow(const std::vector<OpDesc>& ops) {
  chorusComm* comm = ops[0].comm;
  try {
    waitQueued(comm);
  } catch (...) {
    return refused(comm, "waiting for queued operations");
  }
  static thread_local std::vector<const OpDesc*> ptrs;  // keeps its capacity
  ptrs.clear();
  for (const OpDesc& op : ops) ptrs.push_back(&op);
  // chorusGroupEnd holds the communicator's ApiGuard, and nothing is queued.
  return runCommOpsCaught(comm, OpSpan(ptrs), /*claim=*/false);
}

chorusResult_t submit(std::vector<OpDesc> ops) {
  if (ops.empty()) return chorusSuccess;
  // Split by stream, keeping order.
  std::vector<chorusStream_t> streams;
  for (auto& op : ops)
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end())
      streams.push_back(op.stream);
  chorusResult_t result = chorusSuccess;
  for (chorusStream_t s : streams) {
    std::vector<OpDesc> batch;
    for (auto& op : ops)
      if (op.stream == s) batch.push_back(op);
    // A stream wrapping a cudaStream_t runs its operations now, ordered after the CUDA
    // stream's prior work (src/cuda/backend.h); other streams queue them.
    if (s != nullptr && streamCudaHandle(s) == nullptr) {
      for (auto& op : batch) op.comm->pending.fetch_add(1);
      streamEnqueue(s, std::move(batch));
      continue;
    }
    try {
      for (auto& op : batch) waitQueued(op.comm);
    } catch (...) {
      return refused(batch[0].comm, "waiting for queued operations");
    }
    chorusResult_t r = executeBatch(batch);
    if (r != chorusSuccess && result == chorusSuccess) result = r;
  }
  return result;
}

}  // namespace chorus
