// Protocols: how a chunk is framed in a slot.
//
// Simple: the data, then the slot's sequence flag stored with release order (fifo.h). Highest
//   bandwidth; the receiver sees nothing until the whole chunk is there.
// LL (low latency): the chunk travels as 8-byte words, each holding 4 data bytes and a 4-byte
//   flag (the step's sequence number) written by one 64-bit store, so a word is valid exactly
//   when its flag matches: no separate flag, no fence. Half the slot carries data.
//
// Both use the FIFO's head counter for flow control. The functions below are the only place
// that knows the framing; primitives and algorithms call them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "reduce/copy_kernel.h"
#include "transport/fifo.h"

namespace chorus {

enum class Proto : int { kSimple = 0, kLL = 1 };
constexpr int kNumProtos = 2;
const char* protoName(Proto p);

// Bytes of user data one slot carries.
inline size_t protoSlotCapacity(Proto p, size_t slotBytes) {
  return p == Proto::kSimple ? slotBytes : (slotBytes / 2) & ~size_t(7);
}

namespace ll {
inline uint64_t* words(char* slot) {
  return reinterpret_cast<uint64_t*>(slot);
}
inline size_t nwords(size_t bytes) {
  return (bytes + 3) / 4;
}
inline uint32_t flagOf(uint64_t seq) {
  return uint32_t(seq);
}

// Writes `bytes` from src as LL words with flag `flag`.
inline void pack(char* slot, const char* src, size_t bytes, uint32_t flag) {
  auto* w = reinterpret_cast<std::atomic<uint64_t>*>(slot);
  size_t full = bytes / 4;
  for (size_t i = 0; i < full; ++i) {
    uint32_t d;
    memcpy(&d, src + 4 * i, 4);
    w[i].store((uint64_t(flag) << 32) | d, std::memory_order_relaxed);
  }
  if (bytes % 4) {
    uint32_t d = 0;
    memcpy(&d, src + 4 * full, bytes % 4);
    w[full].store((uint64_t(flag) << 32) | d, std::memory_order_relaxed);
  }
}
// True when every word of the chunk carries `flag`.
inline bool ready(const char* slot, size_t bytes, uint32_t flag) {
  auto* w = reinterpret_cast<const std::atomic<uint64_t>*>(slot);
  size_t n = nwords(bytes);
  if (uint32_t(w[n - 1].load(std::memory_order_relaxed) >> 32) != flag) return false;
  for (size_t i = 0; i < n; ++i)
    if (uint32_t(w[i].load(std::memory_order_relaxed) >> 32) != flag) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}
inline void unpack(char* dst, const char* slot, size_t bytes) {
  auto* w = reinterpret_cast<const std::atomic<uint64_t>*>(slot);
  size_t full = bytes / 4;
  for (size_t i = 0; i < full; ++i) {
    uint32_t d = uint32_t(w[i].load(std::memory_order_relaxed));
    memcpy(dst + 4 * i, &d, 4);
  }
  if (bytes % 4) {
    uint32_t d = uint32_t(w[full].load(std::memory_order_relaxed));
    memcpy(dst + 4 * full, &d, bytes % 4);
  }
}
}  // namespace ll

// How a call writes its Simple slots (algo/algo.h slotStreaming): through the cache, with
// streaming stores, or as each link's receiver asks (FifoCtrl::streamWish), the posts stamped so
// that it can judge.
enum class SlotStreaming : uint8_t { kCached, kByLink, kStreamed };

// Protocol-independent access to one connection pair. Scratch buffers (one slot each) hold LL
// chunks while they are reduced or copied.
struct ProtoIO {
  Proto proto = Proto::kSimple;
  char* recvScratch = nullptr;
  char* sendScratch = nullptr;
  // Simple: write slots with streaming stores (Prims::setStreamingSlots). A chunk is then
  // composed in the scratch, as LL's is, and streamed into the slot by sendPost.
  bool streamSlots = false;
  // Simple: stamp one post in 16 with the time-stamp counter (SendConn::post), for a receiver
  // that judges the link by its hand-offs (a call that lets the link choose:
  // SlotStreaming::kByLink). Not every post: a stamp waits for the slot's stores to be visible
  // (base/tsc.h tscAfterStores), which made a 2-rank AllGather of 64-512 KiB 5-9% slower, and
  // one in 4 still 3-10% at 64-256 KiB. Not every 16th either: where a call makes a multiple of
  // 16 posts, that would stamp the same step of every call (the first, which its receiver seldom
  // waits for); a hash of the step spreads them.
  bool timeSlots = false;
  static bool stampsPost(uint64_t step) { return (step * 0x9E3779B97F4A7C15ull) >> 60 == 0; }

  // A call's slots (Prims and FanPrims::setStreamingSlots): kByLink streams where any of the
  // `nsend` send peers' receivers asks, and stamps the posts.
  void chooseSlots(SlotStreaming how, SendConn* const* sends, int nsend) {
    const bool simple = proto == Proto::kSimple;
    timeSlots = simple && how == SlotStreaming::kByLink;
    bool wished = false;
    for (int k = 0; k < nsend && timeSlots; ++k) wished = wished || sends[k]->streamWished();
    streamSlots = simple && (how == SlotStreaming::kStreamed || wished);
  }

  bool recvReady(const RecvConn& r, size_t bytes) const {
    if (proto == Proto::kSimple) return r.dataReady();
    return ll::ready(r.slot(), bytes, ll::flagOf(r.head + 1));
  }
  // Simple: the slot's size as sent; LL: the expected size (not carried).
  size_t recvBytes(const RecvConn& r, size_t expected) const {
    return proto == Proto::kSimple ? r.slotSize() : expected;
  }
  const char* recvData(const RecvConn& r, size_t bytes, char* scratch) const {
    if (proto == Proto::kSimple) return r.slot();
    ll::unpack(scratch, r.slot(), bytes);
    return scratch;
  }
  char* sendBuffer(SendConn& s, char* scratch) const {
    return proto == Proto::kSimple && !streamSlots ? s.slot() : scratch;
  }
  // Sends `bytes` from `buffer`: Simple posts the slot, after copying `buffer` into it where it
  // is not that slot (sendBuffer's); LL packs the slot from `buffer`. A reduction's output sent
  // on is reduced into its own buffer and copied here, not stored into the slot by the reduce
  // loop: the slot's lines were last read by the other rank, so a store to one first fetches it
  // from that rank's cache, and the reduce loop stalls on those fetches where glibc's memcpy
  // (string moves at these sizes) does not. Where this VM's two vCPUs share no cache the fused
  // kernel made the 2-rank ring AllReduce of 128 KiB-8 MiB 2.1-2.6x slower (2 MiB: 234-275 us
  // against 116-149) and the 2-rank tree 2.1-3.4x; where they share one, the copy is as fast or
  // faster.
  void sendPost(SendConn& s, const char* buffer, size_t bytes) const {
    if (proto == Proto::kSimple) {
      if (buffer != s.slot()) {
        if (streamSlots)
          streamCopyKernel(s.slot(), buffer, bytes);
        else
          std::memcpy(s.slot(), buffer, bytes);
      }
      return s.post(bytes, timeSlots && stampsPost(s.tail));
    }
    ll::pack(s.slot(), buffer, bytes, ll::flagOf(s.tail + 1));
    ++s.tail;
    s.notify();
  }
};

}  // namespace chorus
