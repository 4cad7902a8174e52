// The collective and point-to-point entry points: validate every argument (nothing is enqueued
// on error), then hand the operation to the open group, a stream, or run it now.
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/comm.h"
#include "core/exec.h"
#include "core/group.h"
#include "cuda/backend.h"

namespace chorus {

namespace {

struct Check {
  const char* fn;
  chorusComm_t comm;
  [[noreturn]] void bad(chorusResult_t code, const char* what) const {
    fail(code, "%s (rank %d): %s", fn, comm->rank, what);
  }
};

// How many elements a buffer must hold on this rank: none (not used), the count, the count at
// the root only (0 elsewhere), the count times the ranks (everywhere, or at the root only).
enum class Extent : uint8_t { kNone, kCount, kCountAtRoot, kPerRank, kPerRankAtRoot };

size_t elements(Extent e, const OpDesc& op, const chorusComm* comm) {
  const bool atRoot = e == Extent::kCountAtRoot || e == Extent::kPerRankAtRoot;
  if (e == Extent::kNone || (atRoot && comm->rank != op.root)) return 0;
  return e == Extent::kPerRank || e == Extent::kPerRankAtRoot ? op.count * size_t(comm->nranks)
                                                              : op.count;
}

// Validates and submits; the buffers' extents are worked out once the communicator is known to
// be live (its rank and size).
chorusResult_t issue(const char* fn, const OpDesc& op, Extent sendExtent, Extent recvExtent,
                     bool needsOp, bool rooted) {
  chorusComm_t comm = op.comm;
  try {
    ApiGuard guard(comm, fn);
    Check c{fn, comm};
    const size_t sendElems = elements(sendExtent, op, comm);
    const size_t recvElems = elements(recvExtent, op, comm);
    if (int(op.type) < 0 || int(op.type) >= int(chorusNumTypes))
      c.bad(chorusInvalidArgument,
            format("datatype %d is not a chorusDataType_t", int(op.type)).c_str());
    if (needsOp && (int(op.op) < 0 || int(op.op) >= int(chorusNumOps)))
      c.bad(chorusInvalidArgument, format("op %d is not a chorusRedOp_t", int(op.op)).c_str());
    if (rooted && (op.root < 0 || op.root >= comm->nranks))
      c.bad(chorusInvalidArgument, format("%s %d out of range [0, %d)",
                                          isP2P(op.kind) ? "peer" : "root", op.root, comm->nranks)
                                       .c_str());
    const size_t esz = chorusTypeSize(op.type);
    // Bytes past this overflow (kept to SIZE_MAX / 2 so that pointer arithmetic stays in range
    // too); multiplied with an overflow check, not divided: a division costs a call tens of
    // cycles.
    const auto tooMany = [](size_t elems, size_t bytesEach) {
      size_t bytes;
      return __builtin_mul_overflow(elems, bytesEach, &bytes) || bytes > SIZE_MAX / 2;
    };
    if (tooMany(sendElems, esz) || tooMany(recvElems, esz) ||
        tooMany(op.count, esz * size_t(comm->nranks)))
      c.bad(chorusInvalidArgument,
            format("count %zu x %zu bytes overflows the address space", op.count, esz).c_str());
    if (sendElems > 0 && op.sendbuff == nullptr)
      c.bad(chorusInvalidArgument, format("sendbuff is NULL with count %zu", op.count).c_str());
    if (recvElems > 0 && op.recvbuff == nullptr)
      c.bad(chorusInvalidArgument, format("recvbuff is NULL with count %zu", op.count).c_str());
    if (op.stream != nullptr && !isLiveStream(op.stream))
      c.bad(chorusInvalidArgument, "stream is not a live stream (destroyed?)");
    if (const char* why = unusableReason(comm)) c.bad(chorusInvalidUsage, why);
    if (op.kind == OpKind::kRecv && op.root == kAnySource) {  // chorusRecvAny
      if (op.count == 0)
        c.bad(chorusInvalidArgument,
              "count is 0: a message of no bytes sends nothing, so nothing can match it");
      if (comm->cuda != nullptr)
        c.bad(chorusInvalidUsage,
              "not supported on a device communicator (receive from a named peer)");
      if (comm->nranks < 2)
        c.bad(chorusInvalidUsage, "the communicator has no other rank to receive from");
    }
    cudaCheckBuffers(fn, comm, op, sendElems, recvElems);  // host vs device memory
    if (groupDepth() > 0) {
      groupAdd(op);
      return chorusSuccess;
    }
    // The null stream outside a group (the latency-bound case): run now, allocating nothing.
    if (op.stream == nullptr) return executeNow(op);
    return submit({op});
  } catch (...) {
    const bool live = comm && isLiveComm(comm);
    const Failure e = caughtFailure(live ? comm->rank : -1, fn);
    setLastError(live ? comm : nullptr, e.message);
    groupRecordError(e.code);
    return e.code;
  }
}

}  // namespace
}  // namespace chorus

using namespace chorus;

chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                               chorusStream_t stream) {
  OpDesc d{OpKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream};
  return issue("chorusAllReduce", d, Extent::kCount, Extent::kCount, true, false);
}

chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, int root, chorusComm_t comm,
                               chorusStream_t stream) {
  OpDesc d{OpKind::kBroadcast, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream};
  return issue("chorusBroadcast", d, Extent::kCountAtRoot, Extent::kCount, false, true);
}

chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count,
                            chorusDataType_t datatype, chorusRedOp_t op, int root,
                            chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream};
  return issue("chorusReduce", d, Extent::kCount, Extent::kCountAtRoot, true, true);
}

chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               chorusDataType_t datatype, chorusComm_t comm,
                               chorusStream_t stream) {
  OpDesc d{OpKind::kAllGather, sendbuff, recvbuff, sendcount, datatype,
           chorusSum,          -1,       comm,     stream};
  return issue("chorusAllGather", d, Extent::kCount, Extent::kPerRank, false, false);
}

chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                   chorusStream_t stream) {
  OpDesc d{OpKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream};
  return issue("chorusReduceScatter", d, Extent::kPerRank, Extent::kCount, true, false);
}

chorusResult_t chorusAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                              chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kAlltoAll, sendbuff, recvbuff, count, datatype, chorusSum, -1, comm, stream};
  return issue("chorusAlltoAll", d, Extent::kPerRank, Extent::kPerRank, false, false);
}

chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count,
                            chorusDataType_t datatype, int root, chorusComm_t comm,
                            chorusStream_t stream) {
  OpDesc d{OpKind::kGather, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream};
  return issue("chorusGather", d, Extent::kCount, Extent::kPerRankAtRoot, false, true);
}

chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count,
                             chorusDataType_t datatype, int root, chorusComm_t comm,
                             chorusStream_t stream) {
  OpDesc d{OpKind::kScatter, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream};
  return issue("chorusScatter", d, Extent::kPerRankAtRoot, Extent::kCount, false, true);
}

chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kSend, sendbuff, nullptr, count, datatype, chorusSum, peer, comm, stream};
  return issue("chorusSend", d, Extent::kCount, Extent::kNone, false, true);
}

chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kRecv, nullptr, recvbuff, count, datatype, chorusSum, peer, comm, stream};
  return issue("chorusRecv", d, Extent::kNone, Extent::kCount, false, true);
}

// A receive whose OpDesc names kAnySource and carries `source` in sendbuff (comm/op.h); issue
// checks what only an any-source receive needs, and the matching is runP2P's (algo/p2p.cc).
chorusResult_t chorusRecvAny(void* recvbuff, size_t count, chorusDataType_t datatype, int* source,
                             chorusComm_t comm, chorusStream_t stream) {
  if (source != nullptr) *source = -1;
  OpDesc d{OpKind::kRecv, source, recvbuff, count, datatype, chorusSum, kAnySource, comm, stream};
  return issue("chorusRecvAny", d, Extent::kNone, Extent::kCount, false, false);
}
