// A rank's receive segment: a header, then one FIFO per (channel, peer) including itself.
// Segments of ranks in other processes of the node are POSIX shared memory, unlinked as soon as
// every peer has mapped them, so a crash leaves nothing in /dev/shm. When every rank of the node
// lives in one process the segment is anonymous memory and nothing touches /dev/shm at all.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/fifo.h"

namespace chorus {

// Single-copy collectives (algo/copy.cc): the buffer this rank exposes to its peers for one call
// and how far it got. Written by the owner only.
struct alignas(64) CopyPost {
  std::atomic<uint64_t> seq;   // (call << 2) | status (algo/copy.cc): `addr` belongs to `call`
  std::atomic<uint64_t> addr;  // the buffer peers read (its address in the owner's process)
  std::atomic<uint64_t> done;  // 2 call - 1: its first step done (AllReduce); 2 call: all done
  std::atomic<uint64_t> head;  // Broadcast root: the leading bytes it writes into every receiver
  std::atomic<uint64_t> out;   // AllReduce: the owner's recvbuff (its reduced block is read there)
  // The last call whose peers' buffers the owner no longer touches because that call failed
  // (a thread of the same process waits for it before its own failed call returns).
  std::atomic<uint64_t> quit;
};

// Zero-copy collectives on registered buffers (algo/zerocopy.cc): this rank's buffers for one
// call and how far it got. Written by the owner only.
struct alignas(64) RegPost {
  std::atomic<uint64_t> seq;   // (call << 2) | status (algo/zerocopy.cc): the words below belong
                               // to `call`
  std::atomic<uint64_t> send;  // sendbuff, its address in the owner's process
  std::atomic<uint64_t> recv;  // recvbuff, likewise
  std::atomic<uint32_t> sendSlot, recvSlot;  // their registrations (comm/register.h slots)
  std::atomic<uint64_t> done;  // the last call the owner finished touching its peers' buffers for
  std::atomic<uint64_t> quit;  // the last call the owner gave up on (it failed): see zerocopy.cc
};

struct SegmentHeader {
  uint64_t magic;
  // 0 while healthy; cause + 1 once the owner failed or aborted (cause: the rank whose death or
  // failure started it, the owner itself if it failed on its own): peers stop waiting and name
  // the cause.
  std::atomic<int32_t> failed;
  std::atomic<int32_t> refs;  // users in the owner's process (owner + in-process peers)
  int32_t pid;
  int32_t rank;
  int32_t nranks;
  int32_t nchannels;
  uint64_t slotBytes[2];
  uint64_t totalBytes;
  Doorbell bell;  // the owner sleeps here in long waits for its FIFOs (fifo.h)
  CopyPost copy;  // single-copy Broadcast / AllGather (algo/copy.cc)
  RegPost reg;    // zero-copy collectives on registered buffers (algo/zerocopy.cc)
  // peer + 1 while the owner is in a long wait (past its spin) for that peer, else 0: a rank
  // that times out follows these to the rank that is behind (comm/hang_report.cc).
  std::atomic<int32_t> waitingFor;
  // Liveness (comm/wait.cc), on a line of its own (the owner writes it on every call; peers
  // read it only when they time out): the owner's last sign of life, steady-clock ns, positive
  // inside a call (its start, and every pause of a long wait: a rank that waits keeps it fresh,
  // a rank that stopped, e.g. SIGSTOP or a debugger, lets it age), negated between calls (the
  // end of the last one); and the operation of its current long wait (sequence number;
  // kind + 1, 0 while none).
  alignas(64) std::atomic<int64_t> aliveNs;
  std::atomic<uint64_t> waitSeq;
  std::atomic<uint32_t> waitOp;
  // The CPU the owner last waited on (comm/wait.cc), -1 before: a rank that may move (not pinned)
  // yields its core in a wait only when the peer it waits for was last seen on the same CPU.
  std::atomic<int32_t> cpu;
};

// chorusCommShrink's mailbox (core/shrink.cc), in the header page after SegmentHeader: the owner
// publishes its latest agreement message (core/shrink_wire.h) here for its same-node peers,
// who read it even after the owner died. `version` is a seqlock (odd while the owner writes);
// `left` is set when the owner destroys or aborts the communicator (it takes part in no shrink).
constexpr size_t kShrinkBoxOffset = 1024;
struct ShrinkBox {
  std::atomic<uint32_t> version;
  std::atomic<uint32_t> left;
  uint32_t bytes;
  uint32_t pad;
  char data[3072 - 16];
};
static_assert(sizeof(SegmentHeader) <= kShrinkBoxOffset);
// The header page every segment starts with (the header, the shrink box), mapped on its own by
// a peer in another process (Segment::attach).
constexpr size_t kSegmentHeaderBytes = 4096;
static_assert(kShrinkBoxOffset + sizeof(ShrinkBox) <= kSegmentHeaderBytes);

// One-shot slots (algo/oneshot.cc) at the end of every segment: two per rank, used by call
// parity, each a sequence word and a `reduced` word on cache lines of their own, then an input
// area of kTwoShotMaxBytes and a result area of the same size. The one-shot collectives use the
// input area up to kOneShotMaxBytes (their model's limit); the two-shot AllReduce all of it, and
// the result area for the block this rank reduced.
constexpr size_t kOneShotMaxBytes = 4096;
constexpr size_t kTwoShotMaxBytes = 64 * 1024;
constexpr size_t kOneShotDataOffset = 128;
constexpr size_t kOneShotSlotStride = kOneShotDataOffset + 2 * kTwoShotMaxBytes;
struct OneShotSlot {
  std::atomic<uint64_t> seq;  // the one-shot call whose input the data holds (0: none yet)
  char pad[56];
  std::atomic<uint64_t> reduced;  // the two-shot call whose reduced block the result area holds
};
static_assert(sizeof(OneShotSlot) <= kOneShotDataOffset);

// Eager Broadcast (algo/oneshot.cc), before the one-shot slots: a ring of kEagerCells cells in
// the root's segment, each a sequence word followed by up to kEagerMaxBytes of data (a small
// message and its word share a line; consecutive calls use consecutive cells), then one line per
// rank where that rank, as a receiver, acknowledges the root's calls it has read (every
// kEagerAckEvery calls). The root runs ahead of its receivers by up to kEagerCells calls.
constexpr size_t kEagerCells = 256;
constexpr size_t kEagerCellBytes = 256;
constexpr size_t kEagerMaxBytes = kEagerCellBytes - 8;
constexpr uint64_t kEagerAckEvery = 32;
static_assert(kEagerAckEvery < kEagerCells);
struct EagerCell {
  std::atomic<uint64_t> seq;  // the root's eager call whose data follows (0: none yet)
};
// The medium eager ring (after the small one's acknowledgement lines): larger calls, up to
// kEagerMedMaxBytes, the same protocol in kEagerMedCells cells, each a line for the sequence word
// and then the data (line-aligned, for copies of up to 8 KiB); then one acknowledgement line per
// receiver.
constexpr size_t kEagerMedCells = 16;
constexpr size_t kEagerMedMaxBytes = 8192;
constexpr size_t kEagerMedDataOffset = 64;
constexpr size_t kEagerMedCellBytes = kEagerMedDataOffset + kEagerMedMaxBytes;
constexpr uint64_t kEagerMedAckEvery = 4;
static_assert(kEagerMedAckEvery < kEagerMedCells);
inline size_t eagerSmallBytes(int nranks) {
  return kEagerCells * kEagerCellBytes + size_t(nranks) * 64;
}
inline size_t eagerBytes(int nranks) {
  return eagerSmallBytes(nranks) + kEagerMedCells * kEagerMedCellBytes + size_t(nranks) * 64;
}
// The end of every segment: the eager rings, then the two one-shot slots.
inline size_t tailBytes(int nranks) {
  return eagerBytes(nranks) + 2 * kOneShotSlotStride;
}

// Two sets of FIFOs, one per protocol (index 0: Simple, 1: LL), each nchannels x nranks, so
// that a slot only ever holds one protocol's framing.
struct SegmentLayout {
  int nranks;
  int nchannels;
  size_t slotBytes[2];  // per protocol
  size_t headerBytes() const { return kSegmentHeaderBytes; }
  size_t fifoStride(int proto) const;
  size_t setBytes(int proto) const {
    return fifoStride(proto) * size_t(nranks) * size_t(nchannels);
  }
  size_t totalBytes() const {
    return headerBytes() + setBytes(0) + setBytes(1) + tailBytes(nranks);
  }
  size_t fifoOffset(int proto, int channel, int peer) const {
    return headerBytes() + (proto == 1 ? setBytes(0) : 0) +
           fifoStride(proto) * (size_t(channel) * size_t(nranks) + size_t(peer));
  }
};

class Segment {
 public:
  // Creates this rank's segment. shared: in /dev/shm (name returned by name()), else anonymous.
  // The name is "/chorus-<pid>-<rank>-<commNonce>": every rank can compute every peer's name, so
  // survivors of a rank that died during init remove its segment (unlinkPeerName).
  static Segment create(const SegmentLayout& layout, int rank, bool shared, uint64_t commNonce);
  static std::string nameFor(int pid, int rank, uint64_t commNonce);
  // The /dev/shm space that `ranks` segments of this layout take when they are created one after
  // another (create: what each reserves, and the whole size free for one not reserved whole).
  static size_t shmBytesNeeded(const SegmentLayout& layout, int ranks);
  static void unlinkPeerName(int pid, int rank, uint64_t commNonce);
  // Maps a peer's segment for rank `sender`: same process -> its address (the whole segment);
  // else shm by name, and then only what `sender` touches there: the header page, the FIFOs that
  // carry its own sends to the owner (one per protocol and channel) and the tail (eager cells,
  // one-shot slots), so that a process maps its peers' segments in O(N) bytes, not N segments of
  // N FIFOs each; fifoCtrl and fifoData then serve peer == sender only.
  // Throws chorusRemoteError when the segment is gone (its owner removed or released it, or died).
  static Segment attach(const std::string& name, void* addrInOwner, pid_t ownerPid, int sender);
  Segment() = default;

  void unlinkName();  // after every peer has mapped it
  void release();     // unmap (or drop the in-process reference)

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  ShrinkBox* shrinkBox() const { return reinterpret_cast<ShrinkBox*>(base_ + kShrinkBoxOffset); }
  char* base() const { return base_; }
  const std::string& name() const { return name_; }
  FifoCtrl* fifoCtrl(int proto, int channel, int peer) const;
  char* fifoData(int proto, int channel, int peer) const;
  EagerCell* eagerCell(uint64_t call) const {
    return reinterpret_cast<EagerCell*>(eager_ + (call % kEagerCells) * kEagerCellBytes);
  }
  std::atomic<uint64_t>* eagerAck(int receiver) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(eager_ + kEagerCells * kEagerCellBytes +
                                                    size_t(receiver) * 64);
  }
  // The medium ring's cell of a call (its data kEagerMedDataOffset bytes on), and a receiver's
  // acknowledgement line.
  EagerCell* eagerMedCell(uint64_t call) const {
    return reinterpret_cast<EagerCell*>(eagerMed_ + (call % kEagerMedCells) * kEagerMedCellBytes);
  }
  std::atomic<uint64_t>* eagerMedAck(int receiver) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(
        eagerMed_ + kEagerMedCells * kEagerMedCellBytes + size_t(receiver) * 64);
  }
  // One-shot slot `parity` (0 or 1); its input area starts kOneShotDataOffset bytes after it.
  OneShotSlot* oneShotSlot(int parity) const {
    return reinterpret_cast<OneShotSlot*>(end_ - 2 * kOneShotSlotStride +
                                          size_t(parity) * kOneShotSlotStride);
  }

 private:
  // A mapping of part of a peer's segment in another process (attach).
  struct Window {
    char* at;
    size_t bytes;
  };
  char* base_ = nullptr;
  size_t bytes_ = 0;
  char* end_ = nullptr;  // one past the segment's last byte, where this process sees it
  // A peer's in another process: the header page, then the sender's FIFOs (index 1 + proto *
  // nchannels + channel), then the tail; empty where the whole segment is mapped (this rank's
  // own, or one of this process).
  std::vector<Window> windows_;
  int sender_ = -1;
  std::string name_;
  char* eager_ = nullptr;     // the eager Broadcast's cells (set where the layout is known)
  char* eagerMed_ = nullptr;  // its medium ring
  // Sets eager_ and eagerMed_ from end_.
  void placeTail(int nranks) {
    eager_ = end_ - tailBytes(nranks);
    eagerMed_ = eager_ + eagerSmallBytes(nranks);
  }
  bool inProcess_ = false;  // base_ belongs to this process's owner; reference counted
  bool linked_ = false;
};

}  // namespace chorus
