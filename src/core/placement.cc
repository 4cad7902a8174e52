// Placement: how a rank waits, and where it runs when nothing placed it (core/placement.h).
#include "core/placement.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "base/debug.h"
#include "base/param.h"
#include "base/tsc.h"
#include "comm/comm.h"
#include "topo/cpu_share.h"
#include "transport/doorbell.h"

namespace chorus {

std::vector<int> threadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  return cpus;
}

namespace {
// Whether a communicator already bound this thread (a later one, a subgroup of torch or a
// split, keeps that placement: its ranks' positions differ from the first one's).
thread_local bool tBoundByChorus = false;
// Set on the thread of a non-blocking init: it must not bind itself (the caller's thread runs the
// collectives), and the caller's placement is unknown there.
thread_local bool tInitThread = false;
}  // namespace

void markInitThread() {
  tInitThread = true;
}

int channelCpusOf(const std::vector<PeerInfo>& peers) {
  int least = 0;
  for (const PeerInfo& p : peers) {
    int sharers = 0;
    for (const PeerInfo& q : peers)
      sharers += q.hostHash == p.hostHash && q.cpuSetDigest == p.cpuSetDigest ? 1 : 0;
    const int cpus = std::max(1, int(p.cpuCount) / std::max(1, sharers));
    least = least == 0 ? cpus : std::min(least, cpus);
  }
  return least;
}

// Placement: how this rank waits, from the cores it may use and the ranks of its node.
// Ranks that nothing placed (torchrun, mpirun --bind-to none, srun without --cpu-bind, started
// by hand, threads of one process) all have the same CPU set; the scheduler then moves them
// freely, two of them may share a core while a busy process holds the other, and a wait can
// neither spin (the peer it waits for may need this core) nor yield cheaply (the busy process
// runs a whole time slice). So, unless CHORUS_BIND=none, the rank binds its thread (and the
// threads it starts later) to its share of that set: one core each when the node has as many
// ranks as cores, a block of cores each when it has more cores (a rank's compute threads stay
// inside its block). Ranks that a launcher placed (their sets differ, or a single core each)
// are left as they are, and so are ranks that are threads of one process (the thread that
// creates them may create several, chorusCommInitAll does, and the threads it starts later would
// inherit one rank's share).
void placeRank(chorusComm* c) {
  const std::vector<int> myCpus = threadCpus();
  const PeerInfo& me = c->peers[size_t(c->rank)];
  int local = 0, localIndex = 0, sharers = 0;  // sharers: the node's ranks with this CPU set
  bool aloneInProcess = true;
  for (int p = 0; p < c->nranks; ++p) {
    if (c->isRemote(p)) continue;
    const PeerInfo& pi = c->peers[size_t(p)];
    localIndex += p < c->rank ? 1 : 0;
    ++local;
    sharers += pi.cpuSetDigest == me.cpuSetDigest ? 1 : 0;
    aloneInProcess = aloneInProcess && (p == c->rank || pi.pid != me.pid);
  }
  const bool sameSet = sharers == local;
  const int online = int(sysconf(_SC_NPROCESSORS_ONLN));
  const int mine = me.cpuCount;  // myCpus.size(), or the online CPUs where it is unknown
  // A rank pinned to one core (chorusrun --bind-to core) is taken to have its own, so the
  // node's ranks share the online cores; otherwise the node has the cores of the common set.
  const int cores = mine == 1 ? std::max(1, online) : mine;
  bool bound = false;
  const std::string bind = envStr("CHORUS_BIND");
  const bool bindAllowed = !(bind == "none" || bind == "0" || bind == "no");
  if (bindAllowed && aloneInProcess && !tInitThread && !tBoundByChorus && local > 1 && sameSet &&
      mine >= local) {
    const std::vector<int> share = cpuShare(myCpus, localIndex, local);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : share) CPU_SET(cpu, &set);
    if (!share.empty() && sched_setaffinity(0, sizeof(set), &set) == 0) {
      bound = tBoundByChorus = true;
      CHORUS_INFO(c->rank,
                  "bound to CPUs %d-%d: share %d of %d of the node's common set of %d CPUs "
                  "(CHORUS_BIND=none keeps the launcher's placement)",
                  share.front(), share.back(), localIndex, local, mine);
    } else {
      CHORUS_WARN(c->rank, "could not bind to share %d of %d of its CPUs: %s", localIndex, local,
                  strerror(errno));
    }
  }
  // More ranks than CPUs: more than the node's cores, or more ranks placed on one set of CPUs
  // than it has (a launcher that put two ranks on one core: each must yield it, not spin on it).
  // Ranks that bound themselves had one set with at least a CPU each.
  c->moreRanksThanCpus = local > cores || sharers > mine;
  // Publications to this rank need no fence where its waits arm with the heavy barrier
  // (transport/fifo.h postFence): not where they sleep often (more ranks than CPUs). Set before
  // any wait of this rank can arm on the doorbell (its channel workers start later).
  if (registerHeavyBarrier() && !c->moreRanksThanCpus && c->mySegment.base() != nullptr)
    c->mySegment.header()->bell.heavyArm.store(1, std::memory_order_relaxed);
  c->spinIters =
      uint32_t(std::max<int64_t>(1, envInt("CHORUS_SPIN", c->moreRanksThanCpus ? 1 : 256)));
  // Slots streamed as each link asks (algo/algo.h slotStreaming): not with more ranks than CPUs.
  const int64_t byLink = envSize("CHORUS_SLOT_STREAM_BY_LINK", 64 << 10);
  if (byLink > 0 && !c->moreRanksThanCpus && tscUsable()) {
    c->slotStreamByLink = size_t(byLink);
    c->handoffJudge = HandoffJudge::forCounter(tscPerNs());
  }
  // The tuner's view must be the same on every rank: one node, compared with its online cores.
  const int channelCpus = channelCpusOf(c->peers);
  bool sharedMachine = false;  // from every rank's record: the same on every rank
  for (int p = 0; p < c->nranks && c->nnodes > 1 && !sharedMachine; ++p) {
    const PeerInfo& pi = c->peers[size_t(p)];
    int onMachine = 0;
    bool otherNode = false;
    for (int q = 0; q < c->nranks; ++q)
      if (c->peers[size_t(q)].machineHash == pi.machineHash) {
        ++onMachine;
        otherNode = otherNode || c->nodeOf[size_t(q)] != c->nodeOf[size_t(p)];
      }
    sharedMachine = otherNode && onMachine > pi.onlineCpus;
  }
  if (sharedMachine)
    CHORUS_INFO(c->rank, "nodes share one machine's cores: more of their ranks than its CPUs");
  c->shape.change([&](Shape& s) {
    s.sharedMachine = sharedMachine;
    s.oversubscribed = c->nnodes == 1 && local > online;
    s.onlineCores = online;
    s.channelCpus = c->nnodes == 1 ? channelCpus : 0;
  });
  c->pinned = mine == 1 || bound || tBoundByChorus;
  c->proxySharesCpu = mine == 1 && c->nnodes > 1;
  const int64_t pollUs = envInt("CHORUS_POLL_US", -1);
  // Adaptive only where the poll phase spins (a rank bound to its own cores), where the
  // sleep-on-every-hand-off cycle was seen; the phase grows only while wake-ups are quick, which
  // they are not when other work shares the core. Yielding ranks (unpinned, or more ranks than
  // cores) keep 50 us: the peer may need this core, and sleeping gives it.
  c->pollAdaptive = pollUs < 0 && c->pinned && !c->moreRanksThanCpus && !c->proxySharesCpu;
  c->pollPhase = std::chrono::microseconds(pollUs < 0 ? 50 : pollUs);
  c->pollNs.store(c->pollPhase.count(), std::memory_order_relaxed);
}

}  // namespace chorus
