// Registered memory: chorusMemAlloc / chorusMemFree (memory other processes of the node can map)
// and chorusCommRegister / chorusCommDeregister (comm/register.h; used by algo/zerocopy.cc).
//
// chorusMemAlloc backs each allocation with an anonymous memory file (memfd_create) mapped
// shared: it has no name anywhere, so nothing is left behind when the process dies, and a peer
// process maps the same pages by opening /proc/<owner pid>/fd/<fd> (the kernel allows it to a
// process that may read the owner's memory, as cross-memory attach needs too).
//
// chorusCommRegister is collective: the ranks exchange their regions over the bootstrap (where
// each lies in its owner's process, whether it is chorusMemAlloc memory and which file), every
// rank maps the memory files of its peers in other processes once, here, and the ranks agree on
// what each could map (a region one of them could not map is treated as plain memory by all, so
// that every rank decides the same way per call). Registration takes a slot, the first free one:
// the same on every rank since the ranks register in the same order.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "algo/algo.h"
#include "base/debug.h"
#include "base/error.h"
#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/register.h"

namespace chorus {

namespace {

// chorusMemAlloc's allocations in this process (taken by the API calls only, never per call).
struct MemAlloc {
  char* base;
  size_t bytes;
  int fd;
};
std::mutex gAllocMu;
std::vector<MemAlloc>& allocs() {
  static std::vector<MemAlloc> list;
  return list;
}

// The allocation holding [p, p + bytes), if any (gAllocMu held).
const MemAlloc* findAlloc(const void* p, size_t bytes) {
  const char* a = static_cast<const char*>(p);
  for (const MemAlloc& m : allocs())
    if (a >= m.base && size_t(a - m.base) <= m.bytes && bytes <= m.bytes - size_t(a - m.base))
      return &m;
  return nullptr;
}

// What a rank tells its peers about its region of a registration.
struct RegRecord {
  uint64_t base, bytes;
  uint64_t fileBase, fileBytes;  // the chorusMemAlloc allocation holding it (kRegMapped)
  uint64_t fileIno, fileDev;     // its memory file's identity: a peer checks what it opened
  int32_t pid, fd, kind, slot;
};

RegState& stateOf(chorusComm* comm) {
  if (comm->reg == nullptr) {
    auto* st = new RegState;
    st->nranks = comm->nranks;
    st->oneProcess = true;
    for (const PeerInfo& p : comm->peers)
      st->oneProcess = st->oneProcess && p.pid == comm->peers[0].pid;
    st->in.assign(size_t(comm->nranks), nullptr);
    st->out.assign(size_t(comm->nranks), nullptr);
    // The fallback of a zero-copy call whose buffers are not registered on every rank: what the
    // tuner picks without it, on one channel (the call runs on the caller's thread).
    st->fallbackEnv = comm->tunerEnv;
    for (int k = 0; k < kNumOpKinds; ++k)
      st->fallbackEnv.algoAllowed[k] &= uint16_t(~(1u << int(Algo::kZeroCopy)));
    st->fallbackEnv.minChannels = 1;
    st->fallbackEnv.maxChannelsSet = true;
    st->fallbackEnv.maxChannels = 1;
    comm->reg = st;
  }
  return *comm->reg;
}

void checkIdle(chorusComm* comm, const char* fn) {
  if (comm->state.load() != CommState::kReady)
    fail(chorusInvalidUsage,
         "%s (rank %d): the communicator is not ready (failed, or init not done)", fn, comm->rank);
  if (comm->pending.load() != 0 || comm->executing.load() != 0)
    fail(chorusInvalidUsage,
         "%s (rank %d): operations of the communicator are queued on a stream (synchronize first)",
         fn, comm->rank);
}

void planChanged(chorusComm* comm, RegState& st) {
  // The zero-copy algorithm became a candidate, or stopped being one.
  comm->shape.change([&](Shape& s) { s.registered = st.live > 0; });
}

chorusResult_t report(chorusComm* comm, const Failure& e) {
  setLastError(comm, e.message);
  return e.code;
}

}  // namespace

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) {
    setThreadLastError("chorusMemAlloc: ptr is NULL");
    return chorusInvalidArgument;
  }
  *ptr = nullptr;
  if (size == 0) {
    setThreadLastError("chorusMemAlloc: size is 0");
    return chorusInvalidArgument;
  }
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t bytes = (size + page - 1) / page * page;
  const int fd = memfd_create("chorus-mem", MFD_CLOEXEC);
  if (fd < 0) {
    setThreadLastError(format("chorusMemAlloc: memfd_create failed: %s", strerror(errno)));
    return chorusSystemError;
  }
  if (ftruncate(fd, off_t(bytes)) != 0) {
    const int err = errno;
    close(fd);
    setThreadLastError(
        format("chorusMemAlloc: %zu bytes: ftruncate failed: %s", bytes, strerror(err)));
    return chorusSystemError;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    setThreadLastError(format("chorusMemAlloc: %zu bytes: mmap failed: %s", bytes, strerror(err)));
    return chorusSystemError;
  }
  try {
    std::lock_guard<std::mutex> l(gAllocMu);
    allocs().push_back({static_cast<char*>(p), bytes, fd});
  } catch (...) {
    munmap(p, bytes);
    close(fd);
    return report(nullptr, caughtFailure(-1, "chorusMemAlloc"));
  }
  *ptr = p;
  return chorusSuccess;
}

chorusResult_t chorusMemFree(void* ptr) {
  if (ptr == nullptr) return chorusSuccess;  // as free(NULL)
  MemAlloc m{};
  {
    std::lock_guard<std::mutex> l(gAllocMu);
    auto& list = allocs();
    auto it =
        std::find_if(list.begin(), list.end(), [&](const MemAlloc& a) { return a.base == ptr; });
    if (it == list.end()) {
      setThreadLastError(
          "chorusMemFree: ptr was not returned by chorusMemAlloc (or freed already)");
      return chorusInvalidArgument;
    }
    m = *it;
    list.erase(it);
  }
  munmap(m.base, m.bytes);  // peers that mapped it keep their own mapping until they deregister
  close(m.fd);
  return chorusSuccess;
}

chorusResult_t chorusCommRegister(chorusComm_t comm, void* buff, size_t size, void** handle) {
  try {
    ApiGuard guard(comm, "chorusCommRegister");
    if (handle == nullptr)
      fail(chorusInvalidArgument, "chorusCommRegister (rank %d): handle is NULL", comm->rank);
    *handle = nullptr;
    if (buff == nullptr)
      fail(chorusInvalidArgument, "chorusCommRegister (rank %d): buff is NULL", comm->rank);
    if (size == 0)
      fail(chorusInvalidArgument, "chorusCommRegister (rank %d): size is 0", comm->rank);
    if (comm->cudaDevice >= 0)
      fail(chorusInvalidUsage,
           "chorusCommRegister (rank %d): registration is for host communicators", comm->rank);
    checkIdle(comm, "chorusCommRegister");
    RegState& st = stateOf(comm);
    const int n = comm->nranks, me = comm->rank;
    int slot = 0;
    while (slot < st.nslots && st.slotLive[size_t(slot)]) ++slot;
    RegRecord mine{};
    mine.base = reinterpret_cast<uint64_t>(buff);
    mine.bytes = size;
    mine.pid = comm->peers[size_t(me)].pid;
    mine.fd = -1;
    mine.kind = kRegPlain;
    mine.slot = slot;
    {
      std::lock_guard<std::mutex> l(gAllocMu);
      if (const MemAlloc* m = findAlloc(buff, size)) {
        mine.fileBase = reinterpret_cast<uint64_t>(m->base);
        mine.fileBytes = m->bytes;
        mine.fd = m->fd;
        struct stat sb {};
        if (fstat(m->fd, &sb) == 0) {
          mine.fileIno = uint64_t(sb.st_ino);
          mine.fileDev = uint64_t(sb.st_dev);
          mine.kind = kRegMapped;
        }
      }
    }
    std::vector<RegRecord> all(static_cast<size_t>(n));
    comm->bootstrap->allGather(&mine, sizeof(mine), all.data(), deadlineIn(bootstrapTimeout()));
    for (int p = 0; p < n; ++p)
      if (all[size_t(p)].slot != slot)
        fail(chorusInvalidUsage,
             "chorusCommRegister (rank %d): rank %d registers into slot %d, this rank into %d "
             "(every rank must register and deregister in the same order)",
             me, p, all[size_t(p)].slot, slot);
    if (slot == st.nslots) {
      ++st.nslots;
      st.regions.resize(size_t(st.nslots) * size_t(n));
      st.slotLive.push_back(0);
    }
    // Map the peers' memory files; say which this rank could not map.
    std::vector<uint8_t> unmapped(size_t(n), 0), allUnmapped(size_t(n) * size_t(n));
    for (int p = 0; p < n; ++p) {
      const RegRecord& r = all[size_t(p)];
      RegRegion& g = st.at(slot, p);
      g = RegRegion{};
      g.base = r.base;
      g.bytes = r.bytes;
      g.kind = RegKind(r.kind);
      // Ranks of other nodes are never reached this way (the zero-copy collectives run on one
      // node): a pid of theirs names nothing here.
      if (comm->nodeOf[size_t(p)] != comm->nodeOf[size_t(me)]) continue;
      if (p == me || r.pid == mine.pid) {
        g.local = reinterpret_cast<char*>(r.base);
        continue;
      }
      if (g.kind != kRegMapped) continue;
      char path[64];
      snprintf(path, sizeof(path), "/proc/%d/fd/%d", int(r.pid), int(r.fd));
      int fd = open(path, O_RDWR | O_CLOEXEC);
      // The file must be the peer's: a pid from another pid namespace (a container) names some
      // other process here.
      struct stat sb {};
      if (fd >= 0 && (fstat(fd, &sb) != 0 || uint64_t(sb.st_ino) != r.fileIno ||
                      uint64_t(sb.st_dev) != r.fileDev)) {
        close(fd);
        fd = -1;
        errno = ESRCH;
      }
      void* map = fd < 0 ? MAP_FAILED
                         : mmap(nullptr, r.fileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      const int err = errno;
      if (fd >= 0) close(fd);
      if (map == MAP_FAILED) {
        CHORUS_WARN(me,
                    "chorusCommRegister: cannot map rank %d's chorusMemAlloc memory (%s: %s): "
                    "calls on its buffers do not run zero-copy",
                    p, path, strerror(err));
        unmapped[size_t(p)] = 1;
        continue;
      }
      g.map = map;
      g.mapBytes = r.fileBytes;
      g.local = static_cast<char*>(map) + (r.base - r.fileBase);
    }
    comm->bootstrap->allGather(unmapped.data(), size_t(n), allUnmapped.data(),
                               deadlineIn(bootstrapTimeout()));
    for (int p = 0; p < n; ++p) {
      bool refused = false;
      for (int q = 0; q < n; ++q)
        refused = refused || allUnmapped[size_t(q) * size_t(n) + size_t(p)];
      RegRegion& g = st.at(slot, p);
      if (!refused || g.kind != kRegMapped) continue;
      g.kind = kRegPlain;  // some rank cannot map it: no rank treats it as mapped
      if (g.map != nullptr) {
        munmap(g.map, g.mapBytes);
        g.map = nullptr;
        g.local = nullptr;
      }
    }
    st.slotLive[size_t(slot)] = 1;
    ++st.live;
    planChanged(comm, st);
    *handle = reinterpret_cast<void*>(uintptr_t(slot) + 1);
    return chorusSuccess;
  } catch (...) {
    const bool live = comm != nullptr && isLiveComm(comm);
    return report(live ? comm : nullptr,
                  caughtFailure(live ? comm->rank : -1, "chorusCommRegister"));
  }
}

chorusResult_t chorusCommDeregister(chorusComm_t comm, void* handle) {
  try {
    ApiGuard guard(comm, "chorusCommDeregister");
    RegState* st = comm->reg;
    const uintptr_t h = reinterpret_cast<uintptr_t>(handle);
    if (st == nullptr || h == 0 || h > uintptr_t(st->nslots) || !st->slotLive[h - 1])
      fail(chorusInvalidArgument,
           "chorusCommDeregister (rank %d): handle %p is not a live registration of this "
           "communicator",
           comm->rank, handle);
    checkIdle(comm, "chorusCommDeregister");
    const int slot = int(h - 1), n = comm->nranks;
    std::vector<int32_t> all(static_cast<size_t>(n));
    const int32_t mine = slot;
    comm->bootstrap->allGather(&mine, sizeof(mine), all.data(), deadlineIn(bootstrapTimeout()));
    for (int p = 0; p < n; ++p)
      if (all[size_t(p)] != slot)
        fail(chorusInvalidUsage,
             "chorusCommDeregister (rank %d): rank %d deregisters slot %d, this rank slot %d "
             "(every rank must deregister the same registration)",
             comm->rank, p, all[size_t(p)], slot);
    for (int p = 0; p < n; ++p) {
      RegRegion& g = st->at(slot, p);
      if (g.map != nullptr) munmap(g.map, g.mapBytes);
      g = RegRegion{};
    }
    st->slotLive[size_t(slot)] = 0;
    --st->live;
    planChanged(comm, *st);
    return chorusSuccess;
  } catch (...) {
    const bool live = comm != nullptr && isLiveComm(comm);
    return report(live ? comm : nullptr,
                  caughtFailure(live ? comm->rank : -1, "chorusCommDeregister"));
  }
}
