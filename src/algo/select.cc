// Dispatch of a collective to its algorithm. (The tuner that chooses among ring, tree and
// protocols per call comes with the engine work; today each collective has one algorithm.)
#include "algo/algo.h"
#include "core/comm.h"
#include "core/debug.h"

namespace chorus {

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "AllReduce";
    case OpKind::kBroadcast: return "Broadcast";
    case OpKind::kReduce: return "Reduce";
    case OpKind::kAllGather: return "AllGather";
    case OpKind::kReduceScatter: return "ReduceScatter";
    case OpKind::kAlltoAll: return "AlltoAll";
    case OpKind::kGather: return "Gather";
    case OpKind::kScatter: return "Scatter";
    case OpKind::kSend: return "Send";
    case OpKind::kRecv: return "Recv";
  }
  return "?";
}

void runCollective(const OpDesc& op) {
  chorusComm* comm = op.comm;
  CHORUS_INFO(comm->rank, "%s opCount %llu count %zu datatype %d op %d root %d algo %s",
              opKindName(op.kind), (unsigned long long)comm->opCount, op.count, int(op.type),
              int(op.op), op.root,
              op.kind == OpKind::kBroadcast || op.kind == OpKind::kReduce ? "chain"
              : op.kind == OpKind::kAlltoAll || op.kind == OpKind::kGather ||
                      op.kind == OpKind::kScatter
                  ? "direct"
                  : "ring");
  switch (op.kind) {
    case OpKind::kAllReduce: ringAllReduce(comm, 0, op); break;
    case OpKind::kAllGather: ringAllGather(comm, 0, op); break;
    case OpKind::kReduceScatter: ringReduceScatter(comm, 0, op); break;
    case OpKind::kBroadcast: chainBroadcast(comm, 0, op); break;
    case OpKind::kReduce: chainReduce(comm, 0, op); break;
    case OpKind::kAlltoAll:
    case OpKind::kGather:
    case OpKind::kScatter: directCollective(comm, op); break;
    case OpKind::kSend:
    case OpKind::kRecv: break;
  }
  ++comm->opCount;
}

}  // namespace chorus
