// CUDA IPC between the ranks of one node: what each rank publishes about its device buffer
// (a 64-byte cudaIpcMemHandle_t plus offsets and flags) and the checks every rank applies to
// what it receives. Pure functions and one bootstrap exchange: no CUDA calls, so CI tests them.
// The data path that opens these handles is described in docs/cuda.md (CHORUS_CUDA_IPC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct chorusComm;

namespace chorus {

constexpr size_t kIpcHandleBytes = 64;       // sizeof(cudaIpcMemHandle_t)
constexpr uint32_t kIpcMagic = 0x43495043u;  // "CIPC"
constexpr uint16_t kIpcVersion = 1;

enum IpcFlags : uint16_t {
  kIpcHasBuffer = 1,  // handle/offset/bytes describe a buffer peers may open
  kIpcHasFlags = 2,   // flagOffset is a ready-flag array inside that allocation
};

// One rank's record, exchanged with the bootstrap allgather (fixed layout, no pointers).
struct IpcRecord {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint32_t size;  // sizeof(IpcRecord) of the sender's build
  int32_t rank;
  int32_t device;  // the CUDA ordinal in the sender's process
  int32_t pid;
  uint64_t hostHash;  // node identity (PeerInfo::hostHash)
  uint8_t uuid[16];   // the device's UUID: the same GPU whatever the ordinals
  uint8_t handle[kIpcHandleBytes];
  uint64_t offset;      // of the buffer inside the allocation the handle names
  uint64_t bytes;       // usable bytes from offset
  uint64_t flagOffset;  // of the ready flags inside the allocation (kIpcHasFlags)
  uint64_t address;     // the allocation's address in the sender's process (same-process peers
                        // use it directly: a process cannot open its own IPC handles)
  uint64_t checksum;    // over every byte above
};
static_assert(sizeof(IpcRecord) == 152, "IpcRecord layout is part of the wire format");

uint64_t ipcChecksum(const IpcRecord& r);
// Fills magic, version, size and checksum (call after the other fields).
void sealIpcRecord(IpcRecord* r);

struct IpcPeers {
  std::vector<bool> usable;   // by rank: a valid buffer on this node that this rank may open
  std::vector<bool> sameGpu;  // by rank: the same physical GPU as this rank's (uuid)
};

// Checks every record of an allgather of `nranks` records (index = rank). Returns "" and fills
// *peers when every record is well formed; otherwise a message naming the first bad record:
// wrong size/magic/version/checksum, a rank that is not its index, a negative device, a buffer
// smaller than minBytes, offsets that overflow or a flag array outside the buffer. Peers on
// other nodes are well formed but never usable (no IPC across nodes).
std::string validateIpcRecords(const std::vector<IpcRecord>& all, int myRank, uint64_t minBytes,
                               IpcPeers* peers);

// Exchanges `mine` among the communicator's ranks (bootstrap allgather) and validates the
// result; throws Failure (chorusRemoteError) naming this rank and the bad record.
std::vector<IpcRecord> exchangeIpcRecords(chorusComm* comm, const IpcRecord& mine,
                                          uint64_t minBytes, IpcPeers* peers);

}  // namespace chorus
