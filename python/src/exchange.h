// The all-to-all family's transfer: one grouped send and receive per peer.
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/chorus.h"

namespace chorus_torch {

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
