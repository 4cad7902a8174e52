// Calls issued as one group (the coalesced collectives) and the all-to-all family's transfer:
// one grouped send and receive per peer.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "chorus/chorus.h"

namespace chorus_torch {

// Issues call(0) ... call(n - 1) between chorusGroupStart and chorusGroupEnd; throws (check, naming
// `op`) the first call's failure, else chorusGroupEnd's.
void grouped(chorusComm_t comm, const char* op, size_t n,
             const std::function<chorusResult_t(size_t)>& call);

// One block each way per peer for the all-to-all family: `send` (sendBytes) goes to the peer,
// `recv` (recvBytes) comes from it. Empty blocks are skipped.
struct Block {
  const char* send;
  size_t sendBytes;
  char* recv;
  size_t recvBytes;
};

// Runs one grouped send and receive per peer; this rank's own block is copied (same size,
// checked when the call was issued).
void exchange(chorusComm_t comm, int me, const std::vector<Block>& blocks, const char* op);

}  // namespace chorus_torch
