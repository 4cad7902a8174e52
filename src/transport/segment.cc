#include "transport/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "base/error.h"
#include "bootstrap/socket.h"

namespace chorus {

namespace {
constexpr uint64_t kSegmentMagic = 0x43484f5255534547ULL;  // "CHORUSEG"
constexpr size_t kCtrlBytes = 4096;
static_assert(sizeof(FifoCtrl) <= kCtrlBytes);
static_assert(kCtrlBytes % kSlotPage == 0);  // the slots start on a page (fifo.h)
}  // namespace

size_t SegmentLayout::fifoStride(int proto) const {
  return kCtrlBytes + fifoSlotsBytes(slotBytes[proto]);
}

std::string Segment::nameFor(int pid, int rank, uint64_t commNonce) {
  char name[96];
  snprintf(name, sizeof(name), "/chorus-%d-%d-%016llx", pid, rank, (unsigned long long)commNonce);
  return name;
}

void Segment::unlinkPeerName(int pid, int rank, uint64_t commNonce) {
  shm_unlink(nameFor(pid, rank, commNonce).c_str());  // ENOENT when it is already gone: fine
}

namespace {
// A segment's pages are faulted in when it is mapped (MAP_POPULATE), not by the first calls that
// touch them: one fault per 4 KiB page costs a microsecond or more on a VM, and the first
// collectives of a program (the first size of a benchmark, the first steps of training) would
// pay them: 8 B AllGather averaged 0.40 us over its first 200 calls against 0.13 after. Such a
// segment's pages are also reserved in /dev/shm at creation, so that a full /dev/shm fails init
// clearly instead of a later write failing as a SIGBUS. Up to this size only (a segment is about
// 2.6 MiB a rank of the node: up to 25 ranks), so that a node with many ranks commits no memory
// for FIFOs that its algorithms never use. Above it, a FIFO's pages are faulted in by the first
// calls that use it (the benchmarks' warm-up calls), and the node needs room for what its ranks
// touch (docs/scaling.md).
constexpr size_t kPrefaultBytes = size_t(64) << 20;
int prefault(size_t bytes) {
  return bytes <= kPrefaultBytes ? MAP_POPULATE : 0;
}

// This process's segments by name. A peer rank in the same process reaches a segment by its
// address, which stays valid only while some rank holds it: the owner's init may fail and
// release it just as a peer attaches (the soak, 2026-11-29: a SIGSEGV reading the header of a
// segment its owner thread had unmapped). Lookup and reference count change under one lock, so
// an attach either finds the segment held or reports it gone. Setup and teardown only.
std::mutex gInProcessLock;
std::unordered_map<std::string, char*>& inProcessSegments() {
  static auto* m = new std::unordered_map<std::string, char*>();  // outlives static destructors
  return *m;
}
}  // namespace

size_t Segment::shmBytesNeeded(const SegmentLayout& layout, int ranks) {
  const size_t total = layout.totalBytes();
  if (ranks <= 0) return 0;
  if (prefault(total) != 0) return total * size_t(ranks);
  const size_t reserved = layout.headerBytes() + tailBytes(layout.nranks);
  return reserved * size_t(ranks - 1) + total;
}

Segment Segment::create(const SegmentLayout& layout, int rank, bool shared, uint64_t commNonce) {
  Segment s;
  s.bytes_ = layout.totalBytes();
  if (shared) {
    std::string nm = nameFor(int(getpid()), rank, commNonce);
    const char* name = nm.c_str();
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) fail(chorusSystemError, "shm_open %s: %s", name, strerror(errno));
    if (ftruncate(fd, off_t(s.bytes_)) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(name);
      fail(chorusSystemError, "ftruncate %s to %zu bytes: %s (is /dev/shm large enough?)", name,
           s.bytes_, strerror(e));
    }
    // A full /dev/shm must fail here, clearly, not later as a SIGBUS on the first write into a
    // page tmpfs cannot supply. A small segment is reserved whole (as many pages as MAP_POPULATE
    // commits anyway). A larger one reserves the parts every rank touches (the header, the eager
    // cells and the one-shot slots) and needs as much free space as its size: about 2.6 MiB a
    // rank of the node, more than its ranks touched together in the 64- and 128-rank runs of
    // docs/scaling.md (1.1-1.5 MiB a rank).
    struct statvfs vfs {};
    const bool haveVfs = fstatvfs(fd, &vfs) == 0;
    const unsigned long long freeBytes =
        haveVfs ? (unsigned long long)vfs.f_bavail * vfs.f_frsize : 0;
    const size_t tail = tailBytes(layout.nranks);
    int rc = 0;
    if (prefault(s.bytes_) != 0) {
      rc = posix_fallocate(fd, 0, off_t(s.bytes_));
    } else {
      rc = posix_fallocate(fd, 0, off_t(layout.headerBytes()));
      if (rc == 0) rc = posix_fallocate(fd, off_t(s.bytes_ - tail), off_t(tail));
      if (rc == 0 && haveVfs && freeBytes < s.bytes_) rc = ENOSPC;
    }
    if (rc != 0) {
      close(fd);
      shm_unlink(name);
      fail(chorusSystemError,
           "rank %d: cannot reserve %zu bytes in /dev/shm for its shared-memory segment %s: %s "
           "(%llu bytes free in /dev/shm; make it larger, e.g. docker --shm-size, or free it)",
           rank, s.bytes_, name, strerror(rc), freeBytes);
    }
    void* p =
        mmap(nullptr, s.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | prefault(s.bytes_), fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(name);
      fail(chorusSystemError, "mmap %s: %s", name, strerror(e));
    }
    s.base_ = static_cast<char*>(p);
    s.name_ = name;
    s.linked_ = true;
  } else {
    void* p = mmap(nullptr, s.bytes_, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | prefault(s.bytes_), -1, 0);
    if (p == MAP_FAILED) fail(chorusSystemError, "mmap %zu bytes: %s", s.bytes_, strerror(errno));
    s.base_ = static_cast<char*>(p);
    s.name_ = nameFor(int(getpid()), rank, commNonce);  // the in-process key; never in /dev/shm
  }
  s.inProcess_ = true;
  auto* h = new (s.base_) SegmentHeader();
  h->magic = kSegmentMagic;
  h->failed.store(0);
  h->refs.store(1);
  h->pid = int32_t(getpid());
  h->cpu.store(-1);
  h->rank = rank;
  h->nranks = layout.nranks;
  h->nchannels = layout.nchannels;
  h->slotBytes[0] = layout.slotBytes[0];
  h->slotBytes[1] = layout.slotBytes[1];
  h->totalBytes = s.bytes_;
  // The FIFOs are not written here: their words start at 0, and the pages of a new segment (a
  // fresh tmpfs file, or anonymous memory) already read as zero. Writing those zeros faulted in
  // a page for the control word and each slot header of every (protocol, channel, peer): about
  // 144 KiB a peer, so a node's /dev/shm grew as N^2 (19.3 MiB a rank at 128 ranks) for FIFOs
  // that most pairs of ranks never use. Only the pages of FIFOs in use are now touched.
  s.end_ = s.base_ + s.bytes_;
  // The eager rings' words likewise (a cell's sequence word on each of its pages: 16 pages of
  // the small ring, 16 of the medium one); the one-shot slots' headers are written.
  s.placeTail(layout.nranks);
  for (int parity = 0; parity < 2; ++parity) new (s.oneShotSlot(parity)) OneShotSlot{};
  try {
    std::lock_guard<std::mutex> g(gInProcessLock);
    inProcessSegments()[s.name_] = s.base_;
  } catch (...) {  // no memory for the entry
    s.unlinkName();
    munmap(s.base_, s.bytes_);
    throw;
  }
  return s;
}

Segment Segment::attach(const std::string& name, void* addrInOwner, pid_t ownerPid, int sender) {
  Segment s;
  if (ownerPid == getpid()) {
    std::lock_guard<std::mutex> g(gInProcessLock);
    const auto& held = inProcessSegments();
    const auto it = held.find(name);
    if (it == held.end() || it->second != static_cast<char*>(addrInOwner))
      fail(chorusRemoteError, "segment %s of this process is gone: its owner released it",
           name.c_str());
    s.base_ = it->second;
    s.name_ = name;
    s.inProcess_ = true;
    s.bytes_ = s.header()->totalBytes;
    s.end_ = s.base_ + s.bytes_;
    s.placeTail(s.header()->nranks);
    s.header()->refs.fetch_add(1);
    return s;
  }
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0)  // gone (ENOENT): its owner removed it or died, a failure of the peer's
    fail(errno == ENOENT ? chorusRemoteError : chorusSystemError, "shm_open %s (peer pid %d): %s",
         name.c_str(), int(ownerPid), strerror(errno));
  // Of a peer's segment only the parts rank `sender` touches, each mapped on its own; every part
  // starts on a page: the header is one page, every FIFO's stride a whole number of pages, and
  // the tail follows the FIFOs.
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < off_t(kSegmentHeaderBytes)) {
    close(fd);
    fail(chorusSystemError, "shm segment %s is truncated", name.c_str());
  }
  const size_t bytes = size_t(st.st_size);
  s.bytes_ = bytes;
  s.sender_ = sender;
  s.name_ = name;
  auto mapPart = [&](size_t offset, size_t len) {
    void* p =
        mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | prefault(bytes), fd, off_t(offset));
    if (p == MAP_FAILED)
      fail(chorusSystemError, "mmap %zu bytes at %zu of %s: %s", len, offset, name.c_str(),
           strerror(errno));
    s.windows_.push_back(Window{static_cast<char*>(p), len});
    return static_cast<char*>(p);
  };
  try {
    s.base_ = mapPart(0, kSegmentHeaderBytes);
    const SegmentHeader* h = s.header();
    if (h->magic != kSegmentMagic)
      fail(chorusSystemError, "shm segment %s is not a Chorus segment", name.c_str());
    const SegmentLayout layout{h->nranks, h->nchannels, {h->slotBytes[0], h->slotBytes[1]}};
    if (layout.nchannels < 1 || sender < 0 || sender >= layout.nranks ||
        layout.totalBytes() != bytes)
      fail(chorusSystemError, "shm segment %s is truncated or of another layout", name.c_str());
    for (int proto = 0; proto < 2; ++proto)
      for (int ch = 0; ch < layout.nchannels; ++ch)
        mapPart(layout.fifoOffset(proto, ch, sender), layout.fifoStride(proto));
    const size_t tail = tailBytes(layout.nranks);
    s.end_ = mapPart(bytes - tail, tail) + tail;
    s.placeTail(layout.nranks);
  } catch (...) {
    for (const Window& w : s.windows_) munmap(w.at, w.bytes);
    close(fd);
    throw;
  }
  close(fd);
  return s;
}

void Segment::unlinkName() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

void Segment::release() {
  if (!base_) return;
  unlinkName();
  if (inProcess_) {
    std::lock_guard<std::mutex> g(gInProcessLock);
    if (header()->refs.fetch_sub(1) == 1) {
      inProcessSegments().erase(name_);
      munmap(base_, bytes_);
    }
  } else {  // a peer's segment in another process: its windows
    for (const Window& w : windows_) munmap(w.at, w.bytes);
    windows_.clear();
  }
  base_ = nullptr;
}

FifoCtrl* Segment::fifoCtrl(int proto, int channel, int peer) const {
  const SegmentHeader* h = header();
  if (!windows_.empty()) {  // only the sender's FIFOs are mapped (setup only: the caller keeps it)
    if (peer != sender_ || proto < 0 || proto > 1 || channel < 0 || channel >= h->nchannels)
      fail(chorusInternalError,
           "segment %s is mapped for rank %d's FIFOs, not for protocol %d, channel %d, rank %d",
           name_.c_str(), sender_, proto, channel, peer);
    return reinterpret_cast<FifoCtrl*>(windows_[size_t(1 + proto * h->nchannels + channel)].at);
  }
  SegmentLayout layout{h->nranks, h->nchannels, {h->slotBytes[0], h->slotBytes[1]}};
  return reinterpret_cast<FifoCtrl*>(base_ + layout.fifoOffset(proto, channel, peer));
}

char* Segment::fifoData(int proto, int channel, int peer) const {
  return reinterpret_cast<char*>(fifoCtrl(proto, channel, peer)) + kCtrlBytes;
}

}  // namespace chorus
