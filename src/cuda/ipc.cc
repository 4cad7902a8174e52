#include "cuda/ipc.h"

#include <cstddef>
#include <cstring>

#include "base/error.h"
#include "comm/comm.h"

namespace chorus {

uint64_t ipcChecksum(const IpcRecord& r) {
  // FNV-1a over the bytes before the checksum (the record has no padding).
  const auto* p = reinterpret_cast<const unsigned char*>(&r);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < offsetof(IpcRecord, checksum); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void sealIpcRecord(IpcRecord* r) {
  r->magic = kIpcMagic;
  r->version = kIpcVersion;
  r->size = uint32_t(sizeof(IpcRecord));
  r->checksum = ipcChecksum(*r);
}

std::string validateIpcRecords(const std::vector<IpcRecord>& all, int myRank, uint64_t minBytes,
                               IpcPeers* peers) {
  const int n = int(all.size());
  if (myRank < 0 || myRank >= n) return format("rank %d out of range of %d records", myRank, n);
  const IpcRecord& me = all[size_t(myRank)];
  IpcPeers out;
  out.usable.assign(size_t(n), false);
  out.sameGpu.assign(size_t(n), false);
  for (int p = 0; p < n; ++p) {
    const IpcRecord& r = all[size_t(p)];
    auto bad = [&](const std::string& what) {
      return format("IPC record of rank %d: %s", p, what.c_str());
    };
    if (r.size != sizeof(IpcRecord))
      return bad(
          format("size %u, expected %zu (a different Chorus build?)", r.size, sizeof(IpcRecord)));
    if (r.magic != kIpcMagic) return bad(format("bad magic 0x%08x", r.magic));
    if (r.version != kIpcVersion)
      return bad(format("version %u, expected %u", r.version, kIpcVersion));
    if (r.checksum != ipcChecksum(r)) return bad("checksum mismatch (corrupted)");
    if (r.rank != p) return bad(format("claims rank %d", r.rank));
    if (r.device < 0) return bad(format("device %d is not a CUDA device", r.device));
    if ((r.flags & ~uint16_t(kIpcHasBuffer | kIpcHasFlags)) != 0)
      return bad(format("unknown flags 0x%x", r.flags));
    if (r.flags & kIpcHasBuffer) {
      if (r.offset > UINT64_MAX - r.bytes) return bad("offset + bytes overflows");
      if (r.bytes < minBytes)
        return bad(format("buffer of %llu bytes, at least %llu needed",
                          static_cast<unsigned long long>(r.bytes),
                          static_cast<unsigned long long>(minBytes)));
      bool allZero = true;
      for (uint8_t b : r.handle) allZero = allZero && b == 0;
      if (allZero) return bad("empty memory handle");
      if ((r.flags & kIpcHasFlags) &&
          (r.flagOffset < r.offset || r.flagOffset - r.offset > r.bytes - sizeof(uint64_t) ||
           r.bytes < sizeof(uint64_t) || r.flagOffset % sizeof(uint64_t) != 0))
        return bad("ready flags outside the buffer or misaligned");
    } else if (r.flags & kIpcHasFlags) {
      return bad("ready flags without a buffer");
    }
    const bool sameNode = r.hostHash == me.hostHash;
    out.sameGpu[size_t(p)] = sameNode && std::memcmp(r.uuid, me.uuid, sizeof r.uuid) == 0;
    out.usable[size_t(p)] = sameNode && p != myRank && (r.flags & kIpcHasBuffer) != 0;
  }
  if (peers) *peers = std::move(out);
  return "";
}

std::vector<IpcRecord> exchangeIpcRecords(chorusComm* comm, const IpcRecord& mine,
                                          uint64_t minBytes, IpcPeers* peers) {
  std::vector<IpcRecord> all(size_t(comm->nranks));
  comm->bootstrap->allGather(&mine, sizeof(IpcRecord), all.data(), deadlineIn(60));
  const std::string err = validateIpcRecords(all, comm->rank, minBytes, peers);
  if (!err.empty())
    fail(chorusRemoteError, "rank %d: CUDA IPC exchange: %s", comm->rank, err.c_str());
  return all;
}

}  // namespace chorus
