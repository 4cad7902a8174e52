#include "comm/op.h"

namespace chorus {

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kBroadcast:
      return "Broadcast";
    case OpKind::kReduce:
      return "Reduce";
    case OpKind::kAllGather:
      return "AllGather";
    case OpKind::kReduceScatter:
      return "ReduceScatter";
    case OpKind::kAlltoAll:
      return "AlltoAll";
    case OpKind::kGather:
      return "Gather";
    case OpKind::kScatter:
      return "Scatter";
    case OpKind::kSend:
      return "Send";
    case OpKind::kRecv:
      return "Recv";
  }
  return "?";
}

}  // namespace chorus
