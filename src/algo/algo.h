// Algorithms: each a loop over primitives (ring, chain) or a batch of point-to-point transfers.
#pragma once

#include <vector>

#include "core/op.h"

struct chorusComm;

namespace chorus {

// Ring algorithms (algo/ring.cc), on one channel.
void ringAllReduce(chorusComm* comm, int channel, const OpDesc& op);
void ringAllGather(chorusComm* comm, int channel, const OpDesc& op);
void ringReduceScatter(chorusComm* comm, int channel, const OpDesc& op);
// Pipelined chains along the ring (algo/chain.cc).
void chainBroadcast(chorusComm* comm, int channel, const OpDesc& op);
void chainReduce(chorusComm* comm, int channel, const OpDesc& op);

// Point-to-point (algo/p2p.cc): every transfer of the batch progresses together, so no call
// order can deadlock. Transfers to the same peer keep their order.
struct P2PTransfer {
  bool isSend;
  int peer;
  char* buf;
  size_t bytes;
};
void runP2P(chorusComm* comm, const std::vector<P2PTransfer>& transfers, const char* what);
// Direct algorithms built on runP2P: AlltoAll, Gather, Scatter (algo/direct.cc).
void directCollective(chorusComm* comm, const OpDesc& op);

// Runs one collective (not send/recv) to completion with the algorithm chosen for it.
void runCollective(const OpDesc& op);

}  // namespace chorus
