// Execution of validated operations: one at a time, or a group's batch.
#pragma once

#include <vector>

#include "comm/op.h"

namespace chorus {

// Runs a group's operations (possibly on several communicators) to completion: per
// communicator, collectives in issue order, then every send/recv together.
chorusResult_t executeBatch(const std::vector<OpDesc>& ops);
// Queues on op.stream, or executes now in the calling thread for the null stream.
chorusResult_t submit(std::vector<OpDesc> ops);
// submit() of one operation on the null stream outside a group, without allocating: waits for
// the communicator's queued stream work, then runs the operation in the calling thread. The
// caller holds the communicator's ApiGuard (comm/comm.h).
chorusResult_t executeNow(const OpDesc& op);
// The same for a group's operations, all on one communicator and the null stream (the caller
// holds its ApiGuard too).
chorusResult_t executeGroupNow(const std::vector<OpDesc>& ops);

// Stream internals used by submit.
void streamEnqueue(chorusStream_t stream, std::vector<OpDesc> ops);
bool isLiveStream(chorusStream_t stream);
// The cudaStream_t a Chorus stream wraps (cuda/backend.h kLegacyCudaStream for the default
// stream 0), nullptr when it wraps none.
void* streamCudaHandle(chorusStream_t stream);

}  // namespace chorus
