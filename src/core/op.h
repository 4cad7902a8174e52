// One operation as the user issued it, after validation.
#pragma once

#include <cstddef>

#include "chorus/chorus.h"

namespace chorus {

enum class OpKind {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv
};

struct OpDesc {
  OpKind kind;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  chorusDataType_t type;
  chorusRedOp_t op;
  int root;  // root for rooted collectives, peer for send/recv
  chorusComm_t comm;
  chorusStream_t stream;
};

const char* opKindName(OpKind kind);
inline bool isP2P(OpKind k) {
  return k == OpKind::kSend || k == OpKind::kRecv;
}

}  // namespace chorus
