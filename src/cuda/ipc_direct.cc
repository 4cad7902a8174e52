#include "cuda/ipc_direct.h"

#include <algorithm>

#include "base/error.h"

namespace chorus {

size_t ipcBlockElems(size_t count, size_t elemSize, int nranks) {
  if (count == 0 || nranks <= 0) return 0;
  const size_t n = size_t(nranks);
  size_t elems = count / n + (count % n != 0 ? 1 : 0);
  if (elemSize > 0 && elemSize <= kIpcBlockAlign && kIpcBlockAlign % elemSize == 0) {
    const size_t lanes = kIpcBlockAlign / elemSize;
    elems = (elems + lanes - 1) / lanes * lanes;
  }
  return elems;
}

IpcBlock ipcBlock(size_t count, size_t elemSize, int nranks, int rank) {
  IpcBlock b;
  if (rank < 0 || rank >= nranks) return b;
  const size_t per = ipcBlockElems(count, elemSize, nranks);
  // rank * per cannot overflow in practice (per <= count + 15, rank < nranks), but clamp anyway.
  const size_t first = per == 0 ? count : std::min(count, size_t(rank) * per);
  b.first = first;
  b.count = std::min(per, count - first);
  return b;
}

std::string checkIpcCallKeys(const std::vector<IpcCallKey>& table, uint64_t bytes) {
  for (size_t p = 0; p < table.size(); ++p) {
    const IpcCallKey& k = table[p];
    auto bad = [&](const std::string& what) {
      return format("IPC AllReduce key of rank %zu: %s", p, what.c_str());
    };
    if (k.magic != kIpcCallMagic) return bad(format("bad magic 0x%08x", k.magic));
    if (k.rank != int32_t(p)) return bad(format("claims rank %d", k.rank));
    if (k.bytes != bytes)
      return bad(format("%llu bytes, this rank has %llu (count or type differ between ranks)",
                        static_cast<unsigned long long>(k.bytes),
                        static_cast<unsigned long long>(bytes)));
    if (!k.ok) continue;
    if (k.device < 0) return bad(format("device %d", k.device));
    for (int s = 0; s < 2; ++s) {
      const IpcBufKey& b = k.buf[s];
      const char* name = s == 0 ? "sendbuff" : "recvbuff";
      if (b.offset > b.size || b.size - b.offset < bytes)
        return bad(format("%s at offset %llu of an allocation of %llu bytes cannot hold %llu", name,
                          static_cast<unsigned long long>(b.offset),
                          static_cast<unsigned long long>(b.size),
                          static_cast<unsigned long long>(bytes)));
      if (b.base > UINT64_MAX - b.size) return bad(format("%s: allocation wraps around", name));
    }
    // sendbuff and recvbuff: the same (in place) or disjoint; a partial overlap would let one
    // thread's write reach an element another thread has yet to read.
    const uint64_t s0 = k.buf[0].base + k.buf[0].offset, r0 = k.buf[1].base + k.buf[1].offset;
    if (s0 != r0 && s0 < r0 + bytes && r0 < s0 + bytes)
      return bad("sendbuff and recvbuff overlap without being equal");
  }
  return "";
}

bool ipcCallAllOk(const std::vector<IpcCallKey>& table) {
  return std::all_of(table.begin(), table.end(), [](const IpcCallKey& k) { return k.ok != 0; });
}

bool ipcNeedsExchange(const std::vector<IpcCallKey>& table, const std::vector<int>& missing) {
  for (int p : missing)
    for (const IpcCallKey& k : table)
      if (k.pid != table[size_t(p)].pid) return true;
  return false;
}

IpcRegCache::IpcRegCache(size_t capacity, int nranks)
    : capacity_(std::max(capacity, size_t(2) * size_t(std::max(nranks, 1)))) {}

void IpcRegCache::beginCall() {
  ++call_;
}

IpcRegEntry* IpcRegCache::find(const IpcRegKey& key) {
  for (IpcRegEntry& e : entries_) {
    if (e.key == key) {
      e.lastUse = call_;
      return &e;
    }
  }
  return nullptr;
}

std::vector<IpcRegEntry> IpcRegCache::insert(const IpcRegEntry& entry) {
  std::vector<IpcRegEntry> removed;
  // Same peer and base, another buffer id: that allocation was freed (ids are never reused).
  for (size_t i = 0; i < entries_.size();) {
    const IpcRegKey& k = entries_[i].key;
    if (k.peer == entry.key.peer && k.base == entry.key.base && k.id != entry.key.id) {
      removed.push_back(entries_[i]);
      entries_.erase(entries_.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  IpcRegEntry e = entry;
  e.lastUse = call_;
  entries_.push_back(e);
  while (entries_.size() > capacity_) {
    // The least recently used entry not used by this call; the oldest insertion on ties.
    size_t victim = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].lastUse == call_) continue;
      if (victim == entries_.size() || entries_[i].lastUse < entries_[victim].lastUse) victim = i;
    }
    if (victim == entries_.size()) break;  // everything belongs to this call (cannot happen)
    removed.push_back(entries_[victim]);
    entries_.erase(entries_.begin() + std::ptrdiff_t(victim));
  }
  return removed;
}

std::vector<IpcRegEntry> IpcRegCache::clear() {
  std::vector<IpcRegEntry> all;
  all.swap(entries_);
  return all;
}

}  // namespace chorus
