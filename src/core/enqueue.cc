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

// Validates and submits. `sendElems` / `recvElems` are the element counts the buffers must
// hold on this rank (0 when the buffer is not used here).
chorusResult_t issue(const char* fn, const OpDesc& op, size_t sendElems, size_t recvElems,
                     bool needsOp, bool rooted) {
  chorusComm_t comm = op.comm;
  try {
    ApiGuard guard(comm, fn);
    Check c{fn, comm};
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

inline int nranksOf(chorusComm_t comm) {
  return comm && isLiveComm(comm) ? comm->nranks : 1;
}
inline int rankOf(chorusComm_t comm) {
  return comm && isLiveComm(comm) ? comm->rank : -1;
}

}  // namespace
}  // namespace chorus

using namespace chorus;

chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                               chorusStream_t stream) {
  OpDesc d{OpKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream};
  return issue("chorusAllReduce", d, count, count, true, false);
}

chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, int root, chorusComm_t comm,
                               chorusStream_t stream) {
  OpDesc d{OpKind::kBroadcast, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream};
  return issue("chorusBroadcast", d, rankOf(comm) == root ? count : 0, count, false, true);
}

chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count,
                            chorusDataType_t datatype, chorusRedOp_t op, int root,
                            chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream};
  return issue("chorusReduce", d, count, rankOf(comm) == root ? count : 0, true, true);
}

chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               chorusDataType_t datatype, chorusComm_t comm,
                               chorusStream_t stream) {
  OpDesc d{OpKind::kAllGather, sendbuff, recvbuff, sendcount, datatype,
           chorusSum,          -1,       comm,     stream};
  return issue("chorusAllGather", d, sendcount, sendcount * size_t(nranksOf(comm)), false, false);
}

chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                   chorusStream_t stream) {
  OpDesc d{OpKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream};
  return issue("chorusReduceScatter", d, recvcount * size_t(nranksOf(comm)), recvcount, true,
               false);
}

chorusResult_t chorusAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                              chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream) {
  size_t total = count * size_t(nranksOf(comm));
  OpDesc d{OpKind::kAlltoAll, sendbuff, recvbuff, count, datatype, chorusSum, -1, comm, stream};
  return issue("chorusAlltoAll", d, total, total, false, false);
}

chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count,
                            chorusDataType_t datatype, int root, chorusComm_t comm,
                            chorusStream_t stream) {
  OpDesc d{OpKind::kGather, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream};
  return issue("chorusGather", d, count, rankOf(comm) == root ? count * size_t(nranksOf(comm)) : 0,
               false, true);
}

chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count,
                             chorusDataType_t datatype, int root, chorusComm_t comm,
                             chorusStream_t stream) {
  OpDesc d{OpKind::kScatter, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream};
  return issue("chorusScatter", d, rankOf(comm) == root ? count * size_t(nranksOf(comm)) : 0, count,
               false, true);
}

chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kSend, sendbuff, nullptr, count, datatype, chorusSum, peer, comm, stream};
  return issue("chorusSend", d, count, 0, false, true);
}

chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream) {
  OpDesc d{OpKind::kRecv, nullptr, recvbuff, count, datatype, chorusSum, peer, comm, stream};
  return issue("chorusRecv", d, 0, count, false, true);
}

// A receive whose OpDesc names kAnySource and carries `source` in sendbuff (comm/op.h); issue
// checks what only an any-source receive needs, and the matching is runP2P's (algo/p2p.cc).
chorusResult_t chorusRecvAny(void* recvbuff, size_t count, chorusDataType_t datatype, int* source,
                             chorusComm_t comm, chorusStream_t stream) {
  if (source != nullptr) *source = -1;
  OpDesc d{OpKind::kRecv, source, recvbuff, count, datatype, chorusSum, kAnySource, comm, stream};
  return issue("chorusRecvAny", d, 0, count, false, false);
}
