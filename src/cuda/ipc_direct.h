// The direct IPC AllReduce on user buffers (CHORUS_CUDA_IPC=1, docs/cuda.md): its pure parts, no
// CUDA calls, so CI tests them. Rank r reduces block r of the count, reading block r of every
// rank's sendbuff and writing the result into block r of every rank's recvbuff, so every input
// byte is read once and every output byte written once (2nS bytes of HBM traffic for n ranks of
// S bytes on one GPU: the minimum).
//
// - the block plan: which elements each rank reduces;
// - the per-call key table: what each rank publishes about its two buffers at every call (the
//   allocation's base, the driver's buffer id, the offset inside it), gathered through the host
//   engine, which doubles as the barrier "every rank's inputs are ready";
// - the registration cache: opened peer mappings by (peer, allocation base, buffer id). Every rank
//   applies the same lookups and insertions to the same gathered table, so the caches of all ranks
//   hold the same keys and every rank reaches the same decision (exchange records or not) without
//   another round; only the mapped addresses differ from rank to rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

// ---- Block plan. ----

constexpr size_t kIpcBlockAlign = 16;  // bytes: a block start keeps the buffer's 16-byte alignment

struct IpcBlock {
  size_t first = 0;  // elements
  size_t count = 0;  // elements (0: this rank reduces nothing)
};

// Elements per block: ceil(count / nranks) rounded up to a multiple of 16 bytes' worth of elements
// when the element size divides 16 (every Chorus type), so that every block starts 16-byte aligned
// relative to the buffer. The last blocks may be shorter or empty.
size_t ipcBlockElems(size_t count, size_t elemSize, int nranks);
// Block `rank` of `nranks`; the blocks are disjoint and cover [0, count) in rank order.
IpcBlock ipcBlock(size_t count, size_t elemSize, int nranks, int rank);

// ---- The per-call key table (host-engine AllGather of one IpcCallKey per rank). ----

constexpr uint32_t kIpcCallMagic = 0x43495043u + 1;  // differs from the record's

struct IpcBufKey {
  uint64_t base = 0;    // the allocation's address in the owner's process
  uint64_t id = 0;      // the driver's process-wide unique buffer id of that allocation
  uint64_t size = 0;    // the allocation's size
  uint64_t offset = 0;  // of the call's buffer inside the allocation
};

struct IpcCallKey {
  uint32_t magic = 0;
  int32_t rank = -1;
  int32_t ok = 0;  // 1: this rank's buffers can take the direct schedule (else every rank stages)
  int32_t pid = 0;
  int32_t device = -1;
  int32_t pad = 0;
  uint64_t bytes = 0;  // count * element size of the call: the same on every rank
  IpcBufKey buf[2];    // [0] sendbuff, [1] recvbuff
};
static_assert(sizeof(IpcCallKey) == 96, "IpcCallKey is exchanged as bytes");

// Checks a gathered table: "" when well formed, else a message naming the first bad key (magic,
// rank, a call size that differs from this rank's, a buffer outside its allocation, a rank's
// sendbuff and recvbuff that overlap without being equal). Keys with ok = 0 are checked for
// magic, rank and bytes only.
std::string checkIpcCallKeys(const std::vector<IpcCallKey>& table, uint64_t bytes);
// Whether every rank can take the direct schedule (all ok).
bool ipcCallAllOk(const std::vector<IpcCallKey>& table);
// Whether mapping the buffers of the peers in `missing` needs the record exchange: some missing
// peer lives in another process than some rank (a process maps its own memory directly).
bool ipcNeedsExchange(const std::vector<IpcCallKey>& table, const std::vector<int>& missing);

// ---- Registration cache. ----

struct IpcRegKey {
  int peer = -1;
  uint64_t base = 0;
  uint64_t id = 0;
  bool operator==(const IpcRegKey&) const = default;
};

struct IpcRegEntry {
  IpcRegKey key;
  uint64_t size = 0;       // of the allocation
  void* mapped = nullptr;  // the allocation's base in this process (nullptr: mapping failed)
  bool opened = false;     // by cudaIpcOpenMemHandle (closed on eviction), else used directly
  uint64_t lastUse = 0;    // the call that last used it
};

// A bounded LRU of entries. Entries used by the current call (beginCall .. next beginCall) are
// never evicted; the capacity is raised to 2 * nranks so that one call's entries always fit.
class IpcRegCache {
 public:
  IpcRegCache(size_t capacity, int nranks);

  // Starts a call: entries found or inserted from now on belong to it.
  void beginCall();
  // The entry for `key`, marked as used by this call; nullptr on a miss.
  IpcRegEntry* find(const IpcRegKey& key);
  // Inserts after a miss. Returns the entries removed, which the caller unmaps: entries of the
  // same peer and base with another buffer id (the peer freed that allocation and got a new one
  // at the same address: stale for good), then the least recently used entries not used by this
  // call while the cache is over capacity.
  std::vector<IpcRegEntry> insert(const IpcRegEntry& entry);
  // Removes everything (communicator destroy, a failed call); the caller unmaps the result.
  std::vector<IpcRegEntry> clear();

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  const std::vector<IpcRegEntry>& entries() const { return entries_; }

 private:
  size_t capacity_;
  uint64_t call_ = 0;
  std::vector<IpcRegEntry> entries_;  // small (tens of entries): linear search
};

}  // namespace chorus
