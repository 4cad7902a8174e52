// One operation as the user issued it, after validation, and one transfer of a point-to-point
// batch.
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
constexpr int kNumOpKinds = 10;  // OpKind's values

struct OpDesc {
  OpKind kind;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  chorusDataType_t type;
  chorusRedOp_t op;
  int root;  // root for rooted collectives, peer for send/recv (kAnySource: chorusRecvAny)
  chorusComm_t comm;
  chorusStream_t stream;
};

// The peer of chorusRecvAny's receive (OpDesc::root, P2PTransfer::peer); its OpDesc carries the
// caller's `int* source` in sendbuff (unused by a receive).
constexpr int kAnySource = CHORUS_ANY_SOURCE;

// One send or receive of a point-to-point batch (algo/p2p.cc runP2P).
struct P2PTransfer {
  bool isSend;
  int peer;  // kAnySource: a receive from whichever peer's message comes first
  char* buf;
  size_t bytes;
  // A send: the transfer is a chorusSend message, its first slot marked (transport/fifo.h
  // kSlotMessageStart) so that an any-source receive can tell it from a collective's data.
  bool message = false;
  int* source = nullptr;  // an any-source receive: where the matched peer is written (or null)
};

const char* opKindName(OpKind kind);  // "AllReduce", ...
// Names of a chorusDataType_t / chorusRedOp_t value as an int ("float32", "sum"); "?" when out
// of range (status reports and call checks print values read back from other ranks).
const char* dataTypeName(int type);
const char* redOpName(int op);
inline bool isP2P(OpKind k) {
  return k == OpKind::kSend || k == OpKind::kRecv;
}

}  // namespace chorus
