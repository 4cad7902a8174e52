// Communicator lifecycle: unique id, init (blocking and not), InitAll, Split, Finalize, Destroy,
// Abort, and the queries.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "algo/algo.h"
#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "base/siphash.h"
#include "base/test_hook.h"
#include "base/thread_name.h"
#include "bootstrap/socket.h"
#include "comm/comm.h"
#include "comm/register.h"
#include "comm/wait.h"
#include "core/net_probe.h"
#include "core/placement.h"
#include "core/transports.h"
#include "cuda/backend.h"
#include "topo/cpu_share.h"
#include "topo/topology.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

// The running kernel's boot id: the same in every process, container and network namespace of
// one machine.
std::string bootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  return boot;
}

// The node: hostname and boot id (CHORUS_HOSTID instead where set).
uint64_t hostHash(std::string* hostnameOut) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  *hostnameOut = host;
  std::string id = envStr("CHORUS_HOSTID");
  if (id.empty()) id = std::string(host) + "|" + bootId();
  static const uint8_t key[16] = {'c', 'h', 'o', 'r', 'u', 's', '-', 'h',
                                  'o', 's', 't', '-', 'h', 'a', 's', 'h'};
  return sipHash24(key, id.data(), id.size());
}

// The machine: its boot id alone (emulated nodes and containers of one host share it).
uint64_t machineHash() {
  const std::string boot = bootId();
  static const uint8_t key[16] = {'c', 'h', 'o', 'r', 'u', 's', '-', 'b',
                                  'o', 'o', 't', '-', 'h', 'a', 's', 'h'};
  return sipHash24(key, boot.data(), boot.size());
}

// The least slot: CHORUS_BUFFSIZE's and CHORUS_LL_BUFFSIZE's floor, and what a FIFO shrinks to
// for a small /dev/shm (fitFifosToShm).
constexpr size_t kMinSlotBytes = 4096;

// Default LL FIFO: 256 KiB.
constexpr size_t kDefaultLlSlotBytes = size_t(256 << 10) / kNSteps;

// CHORUS_BUFFSIZE as a slot size, or 0 when it is not set (the default then depends on the
// topology, known only after the exchange).
size_t slotBytesFromEnv() {
  if (envStr("CHORUS_BUFFSIZE").empty()) return 0;
  int64_t buff = envSize("CHORUS_BUFFSIZE", 1 << 20);
  int64_t slot = buff / kNSteps;
  slot = std::max<int64_t>(kMinSlotBytes, slot & ~int64_t(4095));
  return size_t(slot);
}

// CHORUS_LL_BUFFSIZE as a slot size (whole lines), or 0 when it is not set (the default).
size_t llSlotBytesFromEnv() {
  if (envStr("CHORUS_LL_BUFFSIZE").empty()) return 0;
  const int64_t slot = envSize("CHORUS_LL_BUFFSIZE", 0) / kNSteps;
  return size_t(std::max<int64_t>(kMinSlotBytes, slot) & ~int64_t(63));
}

// Default FIFO size: 1 MiB inside a node (8 slots of 128 KiB stay in the caches), 4 MiB when the
// communicator spans nodes (NCCL's default: each 512 KiB slot costs the proxy one wake-up and one
// send, and across nodes fewer, larger hand-offs win: docs/performance.md).
size_t defaultSlotBytes(int nnodes) {
  return size_t(nnodes > 1 ? 4 << 20 : 1 << 20) / kNSteps;
}

// Phase 3: a /dev/shm too small for the node's segments at the default FIFO sizes. Docker gives
// a container 64 MiB, and 8 ranks of one node take 8 x 20.5 MiB at the defaults (2 channels x
// 8 peers x (1 MiB Simple + 256 KiB LL)): init would fail there, where gloo (TCP) runs. Instead,
// the FIFO sizes that were not set (rank 0's CHORUS_BUFFSIZE, CHORUS_LL_BUFFSIZE) are halved,
// the larger first, down to 4 KiB slots, until the node's segments take at most half the space
// its ranks found free (the other half for the process groups created after this one: each has
// segments of its own), on every node whose ranks are in more than one process. Every rank
// computes it from the same exchanged records, so all agree. The sizes stay as they were where
// the defaults fit; told once per process on the node's first rank. Large messages then take
// more, smaller hand-offs (a 64 KiB FIFO: 8 KiB steps).
void fitFifosToShm(chorusComm* c) {
  const bool simpleSet = c->peers[0].slotBytes != 0, llSet = c->peers[0].llSlotBytes != 0;
  if (simpleSet && llSet) return;
  struct NodeUse {
    int ranks = 0, first = -1;
    int32_t pid = 0;
    bool shared = false;
    uint64_t free = ~uint64_t(0);
  };
  std::vector<NodeUse> nodes(size_t(c->nnodes));
  for (const PeerInfo& p : c->peers) {
    NodeUse& u = nodes[size_t(c->nodeOf[size_t(p.rank)])];
    if (u.ranks++ == 0) u.pid = p.pid, u.first = p.rank;
    u.shared = u.shared || p.pid != u.pid;
    u.free = std::min(u.free, p.shmFreeBytes);
  }
  auto need = [&](const NodeUse& u) {
    const SegmentLayout layout{c->nranks, c->nchannels, {c->slotBytes[0], c->slotBytes[1]}};
    return Segment::shmBytesNeeded(layout, u.ranks);
  };
  // The largest share of its free space that a node's segments take (> 1: they do not fit).
  auto load = [&] {
    double most = 0;
    for (const NodeUse& u : nodes)
      if (u.shared) most = std::max(most, double(need(u)) / std::max(1.0, double(u.free)));
    return most;
  };
  if (load() <= 1.0) return;
  const NodeUse* worst = nullptr;
  for (const NodeUse& u : nodes)
    if (u.shared && need(u) > u.free && (worst == nullptr || u.free < worst->free)) worst = &u;
  const size_t wanted = worst ? need(*worst) : 0;
  // Halved until the load is at most 1/2; the sizes of the least load seen are kept (a segment
  // that shrinks under 64 MiB is reserved whole, which may take more than a larger one).
  const size_t initial[2] = {c->slotBytes[0], c->slotBytes[1]};
  size_t best[2] = {initial[0], initial[1]};
  double bestLoad = load();
  while (bestLoad > 0.5) {
    int p = -1;  // the larger FIFO of those not set (LL of two alike), while above the floor
    for (int q = 0; q < 2; ++q)
      if (!(q == 0 ? simpleSet : llSet) && c->slotBytes[q] > kMinSlotBytes &&
          (p < 0 || c->slotBytes[q] >= c->slotBytes[p]))
        p = q;
    if (p < 0) break;  // at the floor: segment creation says what is missing
    c->slotBytes[p] = std::max(kMinSlotBytes, c->slotBytes[p] / 2);
    if (const double l = load(); l < bestLoad)
      bestLoad = l, best[0] = c->slotBytes[0], best[1] = c->slotBytes[1];
  }
  const bool shrunk = best[0] != initial[0] || best[1] != initial[1];
  c->slotBytes[0] = best[0], c->slotBytes[1] = best[1];
  static std::atomic<bool> told{false};
  if (shrunk && worst != nullptr && worst->first == c->rank && !told.exchange(true))
    fprintf(stderr,
            "chorus: rank %d: /dev/shm has %.1f MiB free, and the %d ranks of this node need "
            "%.1f MiB of it at the default FIFO sizes; using %zu KiB Simple and %zu KiB LL FIFOs "
            "per peer and channel instead (large messages run slower; give /dev/shm more room, "
            "e.g. docker --shm-size: docs/pytorch.md)\n",
            c->rank, double(worst->free) / 1048576.0, worst->ranks, double(wanted) / 1048576.0,
            c->slotBytes[0] * kNSteps >> 10, c->slotBytes[1] * kNSteps >> 10);
}

constexpr int64_t kDefaultTimeoutSec = 1800;

// Phase 0: the settings read from the configuration and the environment, once.
void readSettings(chorusComm* c, const chorusConfig_t* cfg) {
  cudaCommSetup(c, cfg ? cfg->cudaDevice : -1);  // a device communicator: CUDA state first
  statusSignalSetup();                           // once per process: CHORUS_STATUS_SIGNAL
  // No silent hang by default: 30 minutes without progress fail the call, the default of
  // PyTorch's process groups (its Gloo backend included; Gloo's own default is 30 s), long
  // enough for any step of real work between two collectives; CHORUS_TIMEOUT=0 waits without
  // bound. The rank then prints its status report (comm/status.h).
  c->timeoutSec = cfg && cfg->timeoutMs >= 0 ? double(cfg->timeoutMs) / 1000.0
                                             : double(envInt("CHORUS_TIMEOUT", kDefaultTimeoutSec));
  c->checkCalls = envInt("CHORUS_CHECK", 0) != 0;
  c->streamThreshold = size_t(envSize("CHORUS_STREAM_THRESHOLD", 16 << 20));
  // Unset: no call streams every link (algo/algo.h slotStreaming says when links choose).
  c->slotStreamThreshold = size_t(envSize("CHORUS_SLOT_STREAM_THRESHOLD", int64_t(1) << 62));
}

// Phase 0, transports: one of every row of the table (core/transports.cc) that may serve a peer,
// created before the bootstrap (TCP's data listener authenticates connections from then on).
// CHORUS_TRANSPORT=<name> keeps that row alone; a row marked onlyWhenNamed is used only then.
void openTransports(chorusComm* c, const uint8_t secret[16]) {
  const std::string only = envStr("CHORUS_TRANSPORT");
  const auto table = transportTable();
  c->transports.resize(table.size());
  bool named = only.empty();
  std::string names;
  for (size_t i = 0; i < table.size(); ++i) {
    names += (i ? ", " : "") + std::string(table[i].name);
    const bool isNamed = only == table[i].name;
    named = named || isNamed;
    if (only.empty() ? !table[i].onlyWhenNamed : isNamed)
      c->transports[i] = table[i].create(c, int(i), secret);
  }
  if (!named)
    fail(chorusInvalidArgument, "rank %d: CHORUS_TRANSPORT=%s names no transport (%s)", c->rank,
         only.c_str(), names.c_str());
}

// Phase 1, exchange: every rank's record (identity, host, proposals) to every rank through the
// bootstrap. Returns this rank's record.
PeerInfo exchangePeers(chorusComm* c, const chorusConfig_t* cfg, Deadline deadline) {
  PeerInfo mine{};
  std::string host;
  mine.rank = c->rank;
  mine.pid = int32_t(getpid());
  mine.hostHash = hostHash(&host);
  snprintf(mine.hostname, sizeof(mine.hostname), "%s", host.c_str());
  int maxCh =
      cfg && cfg->maxChannels > 0 ? cfg->maxChannels : int(envInt("CHORUS_MAX_NCHANNELS", 2));
  mine.nchannels = std::clamp(maxCh, 1, 64);
  const int64_t minCh =
      cfg && cfg->minChannels > 0 ? cfg->minChannels : envInt("CHORUS_MIN_NCHANNELS", 1);
  mine.minChannels = int32_t(std::clamp<int64_t>(minCh, 1, 64));
  mine.slotBytes = slotBytesFromEnv();
  mine.llSlotBytes = llSlotBytesFromEnv();
  struct statvfs vfs {};
  mine.shmFreeBytes = statvfs("/dev/shm", &vfs) == 0
                          ? uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize)
                          : ~uint64_t(0);
  fillRandom(&mine.commNonce, sizeof(mine.commNonce));
  const std::vector<int> myCpus = threadCpus();
  mine.cpuSetDigest = cpuSetDigest(myCpus);
  mine.cpuCount = myCpus.empty() ? int32_t(sysconf(_SC_NPROCESSORS_ONLN)) : int32_t(myCpus.size());
  mine.machineHash = machineHash();
  mine.onlineCpus = int32_t(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  c->peers.resize(size_t(c->nranks));
  c->bootstrap->allGather(&mine, sizeof(mine), c->peers.data(), deadline);
  return mine;
}

// Phase 2, topology: nodes and ring from the host identities (topo/topology.h), and the sizes
// every rank agrees on. Returns whether a rank of this node is in another process.
bool applyTopology(chorusComm* c, const PeerInfo& mine) {
  // Rank 0's proposal wins so that every rank slices data identically.
  c->nchannels = std::max(2, c->peers[0].nchannels);  // the double binary tree needs two
  std::vector<uint64_t> hosts(size_t(c->nranks));
  for (int r = 0; r < c->nranks; ++r) hosts[size_t(r)] = c->peers[size_t(r)].hostHash;
  Topology topo = buildTopology(hosts);
  c->nodeOf = std::move(topo.nodeOf);
  c->nnodes = topo.nnodes;
  c->ring = std::move(topo.ring);
  c->ringPos = std::move(topo.ringPos);
  c->slotBytes[0] = c->peers[0].slotBytes ? c->peers[0].slotBytes : defaultSlotBytes(c->nnodes);
  c->slotBytes[1] = c->peers[0].llSlotBytes ? c->peers[0].llSlotBytes : kDefaultLlSlotBytes;
  std::vector<int> nodeAtPos(size_t(c->nranks));
  for (int i = 0; i < c->nranks; ++i) nodeAtPos[size_t(i)] = c->nodeOf[size_t(c->ring[size_t(i)])];
  const DoublingLoads doubling = doublingLinkLoads(nodeAtPos, c->nnodes);
  c->shape.change([&](Shape& s) {  // a new version: no older plan serves
    s = shapeOf(c);
    s.hdNetBytes = doubling.hd;
    s.rdNetBytes = doubling.rd;
  });
  c->tunerEnv = readTunerEnv();
  // Rank 0's least channel count (its config's, else its CHORUS_MIN_NCHANNELS), so that every
  // rank splits a call over the same channels.
  c->tunerEnv.minChannels = c->peers[0].minChannels;
  bool otherProcess = false;
  for (const auto& p : c->peers)
    if (!c->isRemote(p.rank)) otherProcess = otherProcess || p.pid != mine.pid;
  if (otherProcess && envInt("CHORUS_SHM_DISABLE", 0) != 0)
    fail(chorusInvalidUsage,
         "rank %d: CHORUS_SHM_DISABLE=1 but ranks of this node are in other "
         "processes and no other transport is available",
         c->rank);
  return otherProcess;
}

// CHORUS_TEST_ATTACH_STALL=rank:ms (tests only): that rank waits ms milliseconds after the
// exchange of segment addresses, before it attaches to its peers' segments, so that a test can
// make a peer in the same process fail and release its segment first (tests/test_faults.cc).
void testAttachStall(int rank) {
  const int ms = testHookFor("CHORUS_TEST_ATTACH_STALL", rank);
  if (ms <= 0) return;
  fprintf(stderr, "CHORUS_TEST_ATTACH_STALL: rank %d waits %d ms before attaching\n", rank, ms);
  fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Phase 3, segments: this rank's segment (its receive FIFOs and its state), its address and
// every transport's to every rank (a second exchange), and the node's segments attached.
void setupSegments(chorusComm* c, PeerInfo& mine, bool otherProcess, Deadline deadline) {
  // FIFO sets only for a transport that keeps its FIFOs there (shm); the header always.
  bool fifos = false;
  const auto table = transportTable();
  for (size_t i = 0; i < c->transports.size(); ++i)
    fifos = fifos || (c->transports[i] && table[i].fifosInSegments);
  if (fifos) fitFifosToShm(c);  // on every rank alike: the sizes are the communicator's
  SegmentLayout layout{c->nranks, fifos ? c->nchannels : 0, {c->slotBytes[0], c->slotBytes[1]}};
  const uint64_t nonce = c->peers[0].commNonce;
  c->mySegment = Segment::create(layout, c->rank, otherProcess, nonce);
  c->trace.alive = &c->mySegment.header()->aliveNs;  // a sign of life at every call's start
  c->trace.alive->store(-coarseNowNs(), std::memory_order_relaxed);  // not in a call yet
  mine.segAddr = reinterpret_cast<uint64_t>(c->mySegment.base());
  snprintf(mine.segName, sizeof(mine.segName), "%s", c->mySegment.name().c_str());
  // Removes the segment name of every rank, not only this rank's (shm_unlink of a name that is
  // gone or was never made here is harmless: the name holds the pid, the rank and the 64-bit
  // nonce): a peer that dies between creating its segment and its own unlink (before the
  // barrier, or right after it) then leaves nothing in /dev/shm. Other nodes' names too: nodes
  // that share one /dev/shm (emulated nodes, CHORUS_HOSTID) lost a whole process's names when
  // every rank of their node was killed (the soak, 2026-11-28). After the barrier every rank has
  // mapped the segments it needs; on the failure path the call fails on every rank anyway.
  auto unlinkAllNames = [&] {
    c->mySegment.unlinkName();
    for (const auto& p : c->peers)
      if (p.rank != c->rank) Segment::unlinkPeerName(p.pid, p.rank, nonce);
  };
  try {
    for (size_t i = 0; i < c->transports.size(); ++i)
      if (c->transports[i]) c->transports[i]->address(mine.addr[i]);
    c->bootstrap->allGather(&mine, sizeof(mine), c->peers.data(), deadline);
    testAttachStall(c->rank);
    c->peerSegments.resize(size_t(c->nranks));
    std::unique_ptr<Failure> gone;  // a peer's segment missing: reported after the barrier
    for (int p = 0; p < c->nranks && !gone; ++p) {
      if (p == c->rank || c->isRemote(p)) continue;
      const PeerInfo& pi = c->peers[size_t(p)];
      try {
        c->peerSegments[size_t(p)] = Segment::attach(
            pi.segName, reinterpret_cast<void*>(pi.segAddr), pid_t(pi.pid), c->rank);
      } catch (const Failure& e) {
        // Gone from /dev/shm: the peer removed it as its own init failed, or it died.
        if (e.code != chorusRemoteError) throw;
        gone = std::make_unique<Failure>(
            chorusRemoteError,
            format("rank %d: rank %d's shared-memory segment is gone (%s): rank %d left during "
                   "the communicator's setup (its init failed or it died)",
                   c->rank, p, e.message.c_str(), p),
            p);
      }
    }
    // A peer whose init failed removes every segment name of the node, and may have failed
    // because of another rank: the barrier (the root names the rank that was lost first)
    // reports the first cause; the missing segment only if the barrier passes.
    if (gone) {
      c->bootstrap->barrier(deadline);
      throw *gone;
    }
    // Every peer has mapped every segment: the names can go, so a crash leaves no trace.
    c->bootstrap->barrier(deadline);
  } catch (...) {
    unlinkAllNames();
    throw;
  }
  unlinkAllNames();
}

// Phase 4, links: every peer gets the first transport (in table order) that reaches it; every
// transport connects to the peers it got (each rank calls each, so a collective step inside one
// is met); the control channel is the one a transport offers. Returns the row of every peer.
std::vector<int> connectLinks(chorusComm* c) {
  const size_t rows = c->transports.size();
  std::vector<int> rowOf(size_t(c->nranks), -1);
  std::vector<std::vector<int>> served(rows);
  for (int p = 0; p < c->nranks; ++p) {
    for (size_t i = 0; i < rows && rowOf[size_t(p)] < 0; ++i)
      if (c->transports[i] && c->transports[i]->reaches(p)) rowOf[size_t(p)] = int(i);
    if (rowOf[size_t(p)] < 0)
      fail(chorusInvalidUsage, "rank %d: no transport reaches rank %d (CHORUS_TRANSPORT=%s)",
           c->rank, p, envStr("CHORUS_TRANSPORT").c_str());
    served[size_t(rowOf[size_t(p)])].push_back(p);
  }
  for (size_t i = 0; i < rows; ++i)
    if (c->transports[i]) {
      c->transports[i]->connect(served[i]);
      if (c->control == nullptr) c->control = c->transports[i]->control();
    }
  return rowOf;
}

// The FIFO pair of every (protocol, channel, peer): the receive side in this rank's segment,
// then the peer's transport binds both.
void bindConns(chorusComm* c, const std::vector<int>& rowOf) {
  for (int pr = 0; pr < 2; ++pr) {
    c->sendConns[pr].assign(size_t(c->nchannels), std::vector<SendConn>(size_t(c->nranks)));
    c->recvConns[pr].assign(size_t(c->nchannels), std::vector<RecvConn>(size_t(c->nranks)));
    for (int ch = 0; ch < c->nchannels; ++ch)
      for (int p = 0; p < c->nranks; ++p) {
        SendConn& s = c->sendConn(pr, ch, p);
        RecvConn& r = c->recvConn(pr, ch, p);
        r.ctrl = c->mySegment.fifoCtrl(pr, ch, p);
        r.slots = c->mySegment.fifoData(pr, ch, p);
        r.slotBytes = c->slotBytes[pr];
        r.peer = p;
        s.peer = p;
        Transport& t = *c->transports[size_t(rowOf[size_t(p)])];
        if ((t.protocols() >> pr) & 1) t.bind(pr, ch, p, &s, &r);
      }
  }
  // What the tuner may pick: the protocols every peer's transport carries (the same on every
  // rank: a rank of a communicator across nodes reaches some peer through TCP, as every rank
  // does when CHORUS_TRANSPORT=tcp).
  uint8_t protos = 0xff;
  for (int p = 0; p < c->nranks; ++p)
    if (p != c->rank) protos &= c->transports[size_t(rowOf[size_t(p)])]->protocols();
  c->shape.change([&](Shape& s) { s.protos = protos; });
}

// Init in named phases: settings, exchange, topology, segments, links, placement, the network
// probe, formed (the bootstrap's last round of the setup).
void initPhases(chorusComm* c, const chorusUniqueId& id, const chorusConfig_t* cfg) {
  readSettings(c, cfg);
  const IdData idData = decodeId(id);
  std::vector<int> rowOf;
  bool otherProcess = false;
  Deadline deadline{};
  try {
    openTransports(c, idData.secret);
    c->bootstrap = std::make_unique<Bootstrap>(id, c->rank, c->nranks, &c->abortFlag);
    deadline = deadlineIn(bootstrapTimeout());
    PeerInfo mine = exchangePeers(c, cfg, deadline);
    otherProcess = applyTopology(c, mine);
    setupSegments(c, mine, otherProcess, deadline);
    rowOf = connectLinks(c);
  } catch (...) {
    // As the links' setup unwinds: listeners closed now, not when the communicator is freed.
    c->control = nullptr;
    c->transports.clear();
    // Failed before it joined the bootstrap (no thread, descriptor or memory for its transports):
    // join now and leave at once with its reason (best effort, 2 s at most), so that the root
    // tells the other ranks why this rank failed as soon as they have joined, instead of naming
    // it only at CHORUS_BOOTSTRAP_TIMEOUT.
    if (!c->bootstrap) try {
        Bootstrap late(id, c->rank, c->nranks, &c->abortFlag, 2.0);
        late.abandon(
            -1,
            namingRank(caughtFailure(c->rank, "initializing the communicator"), c->rank).message);
      } catch (...) {
      }
    throw;
  }

  bindConns(c, rowOf);
  createAlgoStates(c);
  placeRank(c);
  probeNetwork(c);  // after placement: measured as the calls will run
  // Until every rank is here the root reports a rank whose connection closes (to the ranks still
  // setting up their links); from here a close is a departure.
  c->bootstrap->formed(deadline);
  // Every rank has set its doorbell's heavy arm (placeRank): a post to all the node's ranks
  // (ringPeers) needs no fence where they all have it.
  bool light = heavyBarrierRegistered();
  for (int p = 0; p < c->nranks && light; ++p)
    if (p != c->rank && !c->isRemote(p))
      light = c->doorbellOf(p)->heavyArm.load(std::memory_order_relaxed) != 0;
  c->lightPosts = light;
  CHORUS_INFO(
      c->rank, "init done: nranks %d on %d node(s), %s, %d channel(s), slot %zu bytes x %d steps",
      c->nranks, c->nnodes, otherProcess ? "shared memory between processes" : "in-process memory",
      c->nchannels, c->slotBytes[0], kNSteps);
  c->state.store(CommState::kReady);
}

// How long a rank whose setup failed because of another rank asks the root for the first cause.
constexpr double kVerdictSec = 0.5;

void initComm(chorusComm* c, const chorusUniqueId& id, const chorusConfig_t* cfg) {
  try {
    initPhases(c, id, cfg);
  } catch (...) {
    Failure f = namingRank(caughtFailure(c->rank, "initializing the communicator"), c->rank);
    if (c->bootstrap) {
      // Blaming another rank, which may have failed because of a third: the root saw which rank
      // went first (a notice), or its own process went (its end). Then the root hears this
      // rank's reason before its connection closes, for the ranks that wait for this one.
      if (f.code == chorusRemoteError || f.code == chorusTimeout) try {
          c->bootstrap->awaitVerdict(kVerdictSec);
        } catch (const Failure& v) {
          f = v;
        } catch (...) {  // no memory for the root's word: this rank's own stands
        }
      c->bootstrap->abandon(f.cause, f.message);
    }
    throw f;
  }
}

// An init that failed because of another rank (it died during the setup) leaves that rank in its
// segment's failure flag before it goes: a same-node peer that finished its init and waits for
// this rank names the dead rank, not this one. An init that failed on its own (out of memory,
// no thread, no descriptor) records this rank: its peers read "failed", not "destroyed its
// communicator" (a departure), and its TCP peers get a failure notice as it closes.
static void recordInitCause(chorusComm* c, const Failure& e) {
  c->state.store(CommState::kFailed);
  if (c->mySegment.base() == nullptr) return;
  const int cause = e.cause >= 0 && e.cause < c->nranks ? e.cause : c->rank;
  int32_t none = 0;
  c->mySegment.header()->failed.compare_exchange_strong(none, cause + 1);
}

void freeComm(chorusComm* c) {
  if (c->initThread.joinable()) c->initThread.join();
  destroyAlgoStates(c);  // the channel workers too (parked: no call is in flight here)
  // Same-node peers in chorusCommShrink stop waiting for this rank (core/shrink.cc).
  if (c->mySegment.base()) c->mySegment.shrinkBox()->left.store(1, std::memory_order_release);
  c->control = nullptr;
  c->transports.clear();  // TCP flushes posted slots, stops the proxy (it writes into our segment)
  for (auto& s : c->peerSegments) s.release();
  c->mySegment.release();
  freeRegState(c);  // peers' registered memory this rank mapped (comm/register.h)
  c->bootstrap.reset();
  cudaCommFree(c);
  unregisterComm(c);
  delete c;
}

// Waits until no stream holds queued work for the communicator (watched: abort, peers).
void drainQueued(chorusComm* c) {
  Waiter w(c, -1, "waiting for queued operations");
  while (c->pending.load() != 0 || c->executing.load() != 0) w.pause();
}

chorusResult_t report(chorusComm* comm, const Failure& e) {
  setLastError(comm, e.message);
  CHORUS_WARN(comm ? comm->rank : -1, "%s", e.message.c_str());
  return e.code;
}

}  // namespace

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId) {
  try {
    if (uniqueId == nullptr) fail(chorusInvalidArgument, "chorusGetUniqueId: uniqueId is NULL");
    uint8_t secret[16];
    fillRandom(secret, sizeof(secret));
    *uniqueId = startRoot(pickLocalAddress(), secret);
    return chorusSuccess;
  } catch (...) {
    return report(nullptr, caughtFailure(-1, "chorusGetUniqueId"));
  }
}

chorusResult_t chorusCommInitRankConfig(chorusComm_t* comm, int nranks, chorusUniqueId commId,
                                        int rank, chorusConfig_t* config) {
  try {
    if (comm == nullptr)
      fail(chorusInvalidArgument, "chorusCommInitRank (rank %d): comm is NULL", rank);
    *comm = nullptr;
    if (nranks < 1)
      fail(chorusInvalidArgument, "chorusCommInitRank (rank %d): nranks %d must be >= 1", rank,
           nranks);
    if (rank < 0 || rank >= nranks)
      fail(chorusInvalidArgument, "chorusCommInitRank: rank %d out of range [0, %d)", rank, nranks);
    if (config && (config->magic != CHORUS_CONFIG_MAGIC || config->size != sizeof(chorusConfig_t)))
      fail(chorusInvalidArgument,
           "chorusCommInitRankConfig (rank %d): config not initialised with "
           "CHORUS_CONFIG_INITIALIZER",
           rank);
    if (config) cudaCheckDevice("chorusCommInitRankConfig", rank, config->cudaDevice);
    decodeId(commId);
  } catch (...) {
    return report(nullptr, caughtFailure(rank, "chorusCommInitRank"));
  }
  chorusComm* c = nullptr;
  try {
    c = new chorusComm();
    c->rank = rank;
    c->nranks = nranks;
    registerComm(c);
  } catch (...) {
    if (c) unregisterComm(c);
    delete c;
    return report(nullptr, caughtFailure(rank, "chorusCommInitRank"));
  }
  chorusConfig_t cfg = config ? *config : chorusConfig_t CHORUS_CONFIG_INITIALIZER;
  if (cfg.blocking == 0) {
    c->asyncError.store(chorusInProgress);
    try {
      c->initThread = std::thread([c, commId, cfg] {
        nameThisThread("init");
        markInitThread();
        try {
          initComm(c, commId, &cfg);
          c->asyncError.store(chorusSuccess);
        } catch (...) {  // the thread's top: nothing may reach std::terminate
          const Failure e =
              namingRank(caughtFailure(c->rank, "initializing the communicator"), c->rank);
          setLastError(c, e.message);
          CHORUS_WARN(c->rank, "%s", e.message.c_str());
          recordInitCause(c, e);
          c->asyncError.store(e.code);
          c->state.store(CommState::kFailed);
        }
      });
    } catch (...) {  // the init thread could not start
      const Failure e = caughtFailure(rank, "chorusCommInitRankConfig: starting the init thread");
      chorusResult_t r = report(nullptr, e);
      freeComm(c);
      return r;
    }
    *comm = c;
    return chorusInProgress;
  }
  try {
    initComm(c, commId, &cfg);
    *comm = c;
    return chorusSuccess;
  } catch (...) {
    const Failure e = namingRank(caughtFailure(rank, "initializing the communicator"), rank);
    chorusResult_t r = report(nullptr, e);
    recordInitCause(c, e);
    freeComm(c);
    return r;
  }
}

chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank) {
  return chorusCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

chorusResult_t chorusCommInitAll(chorusComm_t* comms, int ndev, const int* devlist) {
  // devlist (as NCCL's): rank i is bound to CUDA device devlist[i]; NULL: host memory.
  try {
    if (comms == nullptr) fail(chorusInvalidArgument, "chorusCommInitAll: comms is NULL");
    if (ndev < 1) fail(chorusInvalidArgument, "chorusCommInitAll: ndev %d must be >= 1", ndev);
    uint8_t secret[16];
    fillRandom(secret, sizeof(secret));
    SockAddr lo = parseHostPort("127.0.0.1:0");
    chorusUniqueId id = startRoot(lo, secret);
    std::vector<chorusResult_t> rs(static_cast<size_t>(ndev));
    for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
    std::vector<std::thread> ts;
    ts.reserve(size_t(ndev));
    for (int i = 0; i < ndev; ++i) {
      try {
        ts.emplace_back([&, i] {
          chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
          if (devlist != nullptr) cfg.cudaDevice = devlist[i];
          rs[size_t(i)] = chorusCommInitRankConfig(&comms[i], ndev, id, i, &cfg);
        });
      } catch (...) {
        // The ranks already started wait for this one until the bootstrap timeout, then fail;
        // they are joined (never left to std::terminate) and the thread's error is returned.
        const Failure e = caughtFailure(i, "chorusCommInitAll: starting the thread of the rank");
        for (auto& t : ts) t.join();
        for (int j = 0; j < ndev; ++j)
          if (comms[j]) chorusCommDestroy(comms[j]), comms[j] = nullptr;
        return report(nullptr, e);
      }
    }
    for (auto& t : ts) t.join();
    for (int i = 0; i < ndev; ++i)
      if (rs[size_t(i)] != chorusSuccess) {
        for (int j = 0; j < ndev; ++j)
          if (comms[j]) chorusCommDestroy(comms[j]), comms[j] = nullptr;
        return rs[size_t(i)];
      }
    return chorusSuccess;
  } catch (...) {
    return report(nullptr, caughtFailure(-1, "chorusCommInitAll"));
  }
}

chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm,
                               chorusConfig_t* config) {
  chorusUniqueId id;
  int newRank = -1, newSize = 0;
  try {
    ApiGuard g(comm, "chorusCommSplit");
    if (newcomm == nullptr)
      fail(chorusInvalidArgument, "chorusCommSplit (rank %d): newcomm is NULL", comm->rank);
    *newcomm = nullptr;
    if (color < 0 && color != CHORUS_SPLIT_NOCOLOR)
      fail(chorusInvalidArgument,
           "chorusCommSplit (rank %d): color %d must be >= 0 or CHORUS_SPLIT_NOCOLOR", comm->rank,
           color);
    if (comm->state.load() != CommState::kReady)
      fail(chorusInvalidUsage, "chorusCommSplit (rank %d): communicator not ready", comm->rank);
    drainQueued(comm);
    struct Entry {
      int32_t color, key, rank;
    } mine{color, key, comm->rank};
    std::vector<Entry> all(static_cast<size_t>(comm->nranks));
    comm->bootstrap->allGather(&mine, sizeof(mine), all.data());
    std::vector<Entry> members;
    for (auto& e : all)
      if (e.color == color && color != CHORUS_SPLIT_NOCOLOR) members.push_back(e);
    std::stable_sort(members.begin(), members.end(), [](const Entry& a, const Entry& b) {
      return a.key != b.key ? a.key < b.key : a.rank < b.rank;
    });
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].rank == comm->rank) newRank = int(i);
    newSize = int(members.size());
    // The first member of each color hosts its root and shares the id through the parent.
    chorusUniqueId myId;
    memset(&myId, 0, sizeof(myId));
    if (newRank == 0) {
      uint8_t secret[16];
      fillRandom(secret, sizeof(secret));
      myId = startRoot(pickLocalAddress(), secret, 0);  // the new communicator's rank 0
    }
    std::vector<chorusUniqueId> ids(static_cast<size_t>(comm->nranks));
    comm->bootstrap->allGather(&myId, sizeof(myId), ids.data());
    if (newRank >= 0) id = ids[size_t(members[0].rank)];
  } catch (...) {
    const bool live = comm && isLiveComm(comm);
    return report(live ? comm : nullptr, caughtFailure(live ? comm->rank : -1, "chorusCommSplit"));
  }
  if (newRank < 0) return chorusSuccess;  // CHORUS_SPLIT_NOCOLOR
  chorusConfig_t inherited = CHORUS_CONFIG_INITIALIZER;
  if (config == nullptr) {  // as NCCL: the parent's device (and here its timeout) by default
    inherited.cudaDevice = comm->cudaDevice;
    inherited.timeoutMs = int(std::min(comm->timeoutSec * 1000.0, 2e9));
    config = &inherited;
  }
  return chorusCommInitRankConfig(newcomm, newSize, id, newRank, config);
}

chorusResult_t chorusCommFinalize(chorusComm_t comm) {
  try {
    ApiGuard g(comm, "chorusCommFinalize");
    if (comm->initThread.joinable()) comm->initThread.join();
    if (comm->state.load() != CommState::kReady)
      fail(chorusInvalidUsage, "chorusCommFinalize (rank %d): communicator not ready", comm->rank);
    drainQueued(comm);
    // No peer may still be writing into our FIFOs when we go.
    comm->bootstrap->barrier();
    comm->state.store(CommState::kFinalized);
    return chorusSuccess;
  } catch (...) {
    const bool live = comm && isLiveComm(comm);
    return report(live ? comm : nullptr,
                  caughtFailure(live ? comm->rank : -1, "chorusCommFinalize"));
  }
}

chorusResult_t chorusCommDestroy(chorusComm_t comm) {
  if (comm == nullptr) return chorusSuccess;  // as ncclCommDestroy
  try {
    ApiGuard g(comm, "chorusCommDestroy");
    if (comm->initThread.joinable()) comm->initThread.join();
    try {
      drainQueued(comm);
    } catch (...) {
      // Peers failed while work was queued: the queued operations fail on their own.
      comm->abortFlag.store(true);
      while (comm->pending.load() != 0 || comm->executing.load() != 0) usleep(1000);
    }
  } catch (...) {
    return report(nullptr, caughtFailure(-1, "chorusCommDestroy"));
  }
  const CommState st = comm->state.load();
  if (st == CommState::kReady || st == CommState::kFinalized)
    CHORUS_INFO(comm->rank, "destroy: poll phase %.0f us (%s)",
                double(comm->pollNs.load(std::memory_order_relaxed)) / 1e3,
                comm->pollAdaptive ? "adaptive: a core of its own" : "fixed");
  unregisterComm(comm);  // later calls with this handle get a clear error
  comm->apiOwner.store(0);
  freeComm(comm);
  return chorusSuccess;
}

chorusResult_t chorusCommAbort(chorusComm_t comm) {
  if (comm == nullptr) return chorusSuccess;  // as ncclCommAbort
  if (!liveCommOrRefuse(comm, "chorusCommAbort")) return chorusInvalidArgument;
  // No ApiGuard: abort is meant to be called while another thread is blocked in a call.
  comm->abortFlag.store(true);
  if (comm->mySegment.base()) {
    // An abort after a failure keeps that failure's cause (first cause sticks): the peers of a
    // rank that aborts because another rank died must still read who died.
    int32_t none = 0;
    comm->mySegment.header()->failed.compare_exchange_strong(none, comm->rank + 1);
  }
  if (comm->initThread.joinable()) comm->initThread.join();
  unregisterComm(comm);
  // Every wait polls the abort flag: in-flight and queued operations leave quickly. The API
  // guard's bias ends first, so that a call inside shows in apiOwner or apiBusy.
  lockApi(comm);
  while (comm->pending.load() != 0 || comm->executing.load() != 0 || comm->apiOwner.load() != 0 ||
         comm->apiBusy.load() != 0)
    usleep(1000);
  comm->state.store(CommState::kAborted);
  freeComm(comm);
  return chorusSuccess;
}

chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t* asyncError) {
  return answerQuery(comm, "chorusCommGetAsyncError", "asyncError", asyncError, [](chorusComm* c) {
    const auto e = chorusResult_t(c->asyncError.load());
    if (e != chorusInProgress && c->initThread.joinable()) c->initThread.join();
    return e;
  });
}

chorusResult_t chorusCommGetFailedRank(chorusComm_t comm, int* rank) {
  return answerQuery(comm, "chorusCommGetFailedRank", "rank", rank,
                     [](chorusComm* c) { return c->failedRank.load(); });
}

chorusResult_t chorusCommCount(const chorusComm_t comm, int* count) {
  return answerQuery(comm, "chorusCommCount", "count", count,
                     [](chorusComm* c) { return c->nranks; });
}

chorusResult_t chorusCommSetTimeout(chorusComm_t comm, int timeoutMs) {
  if (!liveCommOrRefuse(comm, "chorusCommSetTimeout")) return chorusInvalidArgument;
  if (timeoutMs < 0) {
    setLastError(comm, format("chorusCommSetTimeout (rank %d): timeoutMs is %d, expected >= 0",
                              comm->rank, timeoutMs));
    return chorusInvalidArgument;
  }
  comm->timeoutSec = double(timeoutMs) / 1000.0;
  return chorusSuccess;
}

chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank) {
  return answerQuery(comm, "chorusCommUserRank", "rank", rank,
                     [](chorusComm* c) { return c->rank; });
}
