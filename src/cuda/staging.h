// Host staging plan for a device communicator (no CUDA needed: tested in CI).
//
// Every operation of a batch gets pinned host regions for the device buffers it uses; the host
// engine then runs the operation on those regions exactly as on host memory. Buffers that
// overlap (in place: the same pointer, AllGather's sendbuff = recvbuff + rank*count, ...) share
// one region at the same relative offsets, so the engine sees the same in-place relation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/op.h"

namespace chorus {

// Element counts of sendbuff / recvbuff that an operation uses on `rank` (0: not used), the
// same rule the entry points validate with.
void opBufferElems(const OpDesc& op, int rank, int nranks, size_t* sendElems, size_t* recvElems);

struct StagedOp {
  // Offsets into the staging area (bytes); kUnused when the buffer is not used on this rank.
  static constexpr size_t kUnused = SIZE_MAX;
  size_t sendOffset = kUnused;
  size_t recvOffset = kUnused;
  size_t sendBytes = 0;  // copied device -> host before the operation
  size_t recvBytes = 0;  // copied host -> device after it
};

struct StagingPlan {
  std::vector<StagedOp> ops;
  size_t totalBytes = 0;  // staging area the plan needs
};

// Alignment of every region (bytes).
constexpr size_t kStagingAlign = 256;

StagingPlan planStaging(const std::vector<const OpDesc*>& ops, int rank, int nranks);

// The host view of `op` on a staging area at `base`: buffers replaced by their regions (NULL
// where unused). Other fields are unchanged.
OpDesc stagedView(const OpDesc& op, const StagedOp& s, unsigned char* base);

}  // namespace chorus
