// The communicator: identity, bootstrap, transport connections and error state.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "bootstrap/bootstrap.h"
#include "chorus/chorus.h"
#include "comm/control.h"
#include "comm/op.h"
#include "comm/plan.h"
#include "comm/status.h"
#include "comm/transport.h"
#include "transport/fifo.h"
#include "transport/segment.h"

namespace chorus {

struct CudaComm;        // src/cuda/device_state.h
class ChannelWorkers;   // src/algo/channel_workers.h
struct ChannelScratch;  // src/prims/prims.h
struct RegState;        // src/comm/register.h

enum class CommState : int { kInitializing, kReady, kFailed, kFinalized, kAborted };

struct PeerInfo {
  int32_t rank;
  int32_t pid;
  uint64_t hostHash;
  int32_t nchannels;  // proposal; rank 0's wins
  // The tuner's least channels (config, else CHORUS_MIN_NCHANNELS); rank 0's wins.
  int32_t minChannels;
  uint64_t slotBytes;    // proposal (0: the default); rank 0's wins
  uint64_t llSlotBytes;  // proposal (0: the default); rank 0's wins
  uint64_t segAddr;      // address of the segment in its owner's process
  char hostname[64];
  char segName[96];
  uint64_t commNonce;  // rank 0's wins: names this communicator's shm segments
  // Each transport's address (comm/transport.h), by row of the transport table
  // (core/transports.cc); opaque to all but that transport.
  uint8_t addr[kMaxTransports][kTransportAddrBytes];
  uint64_t cpuSetDigest;  // the CPU set of the thread that created the rank (topo/cpu_share.h)
  int32_t cpuCount;       // the CPUs in that set (the online CPUs where it cannot be read)
  uint64_t shmFreeBytes;  // free in /dev/shm before this communicator's segments (~0: unknown)
  // The machine: its kernel's boot id, hashed (nodes of one machine share it: emulated nodes,
  // containers on one host; CHORUS_HOSTID does not change it), and its online CPUs.
  uint64_t machineHash;
  int32_t onlineCpus;
};

}  // namespace chorus

struct chorusComm {
  int rank = -1;
  int nranks = 0;
  std::atomic<chorus::CommState> state{chorus::CommState::kInitializing};
  std::atomic<bool> abortFlag{false};
  std::atomic<int> asyncError{chorusSuccess};
  std::atomic<int> failedRank{-1};  // the cause of the first failure (markFailed), -1: none
  std::mutex errMutex;
  std::string lastError;

  std::unique_ptr<chorus::Bootstrap> bootstrap;
  std::vector<chorus::PeerInfo> peers;
  int nchannels = 1;
  size_t slotBytes[2] = {0, 0};  // per protocol (Simple, LL)
  // Topology: node of every rank (index of its first rank's host), the ring order (ranks of a
  // node contiguous) and each rank's position on it.
  std::vector<int> nodeOf;
  int nnodes = 1;
  std::vector<int> ring, ringPos;
  chorus::ShapeCell shape{chorus::Shape{1, 1, true, 0}};  // the tuner's view (versioned)
  chorus::TunerEnv tunerEnv{};  // CHORUS_ALGO, CHORUS_PROTO, channel limits, read at init
  chorus::PlanCache plans;      // the tuner's choices per collective and size class
  chorus::Segment mySegment;
  // Same-node ranks' segments by rank ([rank] unused), attached and released by init only;
  // read through segmentOf.
  std::vector<chorus::Segment> peerSegments;
  // [proto][channel][peer]
  std::vector<std::vector<chorus::SendConn>> sendConns[2];
  std::vector<std::vector<chorus::RecvConn>> recvConns[2];
  // The transports (comm/transport.h) by row of the table (core/transports.cc; null: a row not
  // in use), and the control channel to the ranks of other nodes (comm/control.h) that one of
  // them runs (TCP's), null when every rank is on this node.
  std::vector<std::unique_ptr<chorus::Transport>> transports;
  chorus::PeerControl* control = nullptr;
  // What the algorithms keep, opaque here: each table row's state (comm/plan.h AlgoState,
  // reached through algoState<T> below), and the primitives' per-channel scratch (prims/prims.h).
  // Made by createAlgoStates when the transport is up, freed by destroyAlgoStates (algo/algo.h).
  std::unique_ptr<chorus::AlgoState> algoState[chorus::kMaxAlgos];
  chorus::ChannelScratch* scratch = nullptr;
  chorus::SendConn& sendConn(int proto, int channel, int peer) {
    return sendConns[proto][size_t(channel)][size_t(peer)];
  }
  chorus::RecvConn& recvConn(int proto, int channel, int peer) {
    return recvConns[proto][size_t(channel)][size_t(peer)];
  }

  // Thread-safety checks (ApiGuard, comm/comm.cc): the thread the communicator is biased to
  // (0 before the first call; kApiRevoking, kApiLocked once a second thread has called), whether
  // that thread is inside a call (written by it alone), the thread it was first biased to, and
  // in the locked mode the thread inside a call; then whether an operation is executing (from a
  // stream or a caller).
  std::atomic<uint64_t> apiBias{0};
  std::atomic<uint32_t> apiBusy{0};
  std::atomic<uint64_t> apiBiasedTo{0};
  std::atomic<uint64_t> apiOwner{0};
  std::atomic<int> executing{0};
  std::atomic<int> pending{0};  // operations queued on streams, not yet finished
  uint64_t opCount = 0;
  chorus::OpTrace trace;  // the last operations and the current wait (comm/status.h)
  // Registered buffers (chorusCommRegister: comm/register.h, core/mem.cc); null until the first.
  chorus::RegState* reg = nullptr;
  uint32_t shrinkSeq = 0;   // chorusCommShrink calls on this communicator (core/shrink.cc)
  double timeoutSec = 0;    // CHORUS_TIMEOUT
  bool checkCalls = false;  // CHORUS_CHECK: agree on every collective's arguments first
  // Busy-poll iterations before yielding: none when this node has more ranks than cores (the
  // peer we wait for needs our core), a few hundred otherwise (CHORUS_SPIN overrides).
  uint32_t spinIters = 256;
  // FIFO waits (comm/wait.h) poll at least this long after the spin (spinning when pinned to
  // one core and not oversubscribed, yielding otherwise), then sleep on the rank's doorbell.
  // CHORUS_POLL_US sets it and fixes it; unset, a pinned rank's phase adapts (pollNs,
  // comm/wait.cc; core/placement.cc).
  std::chrono::nanoseconds pollPhase{std::chrono::microseconds(50)};
  bool pollAdaptive = true;
  // The poll phase now (ns): pollPhase, or longer while short sleeps show that a sleeping
  // peer's wake-up costs more than polling through it would (comm/wait.cc). Relaxed: the
  // channels' waits share it; read and written only after a wait's spin phase.
  std::atomic<int64_t> pollNs{50'000};
  // Waits that would yield and sleep on the doorbell at once instead, while a yield that took
  // long shows another task taking the core for time slices (comm/wait.cc): how many waits
  // remain so, and how many the next slow yield gives (doubling while yields stay slow).
  std::atomic<int32_t> sleepFirstWaits{0};
  std::atomic<int32_t> sleepFirstSpan{0};
  // This node has more ranks than the CPUs its ranks may run on (the launcher's set, core/
  // placement.cc): waits yield instead of spinning. Not the tuner's Shape::oversubscribed (one
  // node, more ranks than online cores: the same on every rank, for the model).
  bool moreRanksThanCpus = false;
  // This rank was placed on one CPU by its launcher and has peers on other nodes: its TCP proxy
  // thread (net/tcp_proxy.cc), started with the process's CPU set, runs on that CPU too, so its
  // waits yield instead of spinning (comm/wait.cc yieldCore). A rank Chorus binds itself keeps
  // its proxy on the wider set (the proxy starts before placeRank).
  bool proxySharesCpu = false;
  // Every same-node peer arms its doorbell with the heavy barrier and this process is registered
  // for it: a post to all of them needs no fence (algo/peer_post.h ringPeers; transport/fifo.h
  // postFence). Set at the end of init, before any collective.
  bool lightPosts = false;
  // A sleep on the doorbell lasts at most this (an abort is noticed within it; peer health and
  // the timeout are checked every 50 ms as before). Tests lengthen it to catch a missed wake-up.
  long bellSleepNs = 10'000'000;
  // No other rank of the node runs on this rank's cores: its thread may run on one core only
  // (chorusrun --bind-to core), or init bound it to its share of a set the node's ranks had in
  // common (core/init.cc, placement). A wait may then spin: the peer it waits for needs no core
  // of ours.
  bool pinned = false;
  size_t streamThreshold = 0;  // CHORUS_STREAM_THRESHOLD: outputs this large use streaming stores
  // CHORUS_SLOT_STREAM_THRESHOLD: calls this large write their Simple slots with streaming
  // stores (algo/algo.h slotStreaming); unset, none.
  size_t slotStreamThreshold = 0;
  // CHORUS_SLOT_STREAM_BY_LINK: calls this large stream their slots as each link's receiver asks
  // (64 KiB; never where 0, with more ranks than CPUs or without a time-stamp counter every core
  // reads alike: core/placement.cc), and how a receiver judges a hand-off (transport/fifo.h).
  size_t slotStreamByLink = size_t(1) << 62;
  chorus::HandoffJudge handoffJudge;

  std::thread initThread;  // non-blocking init
  // The threads that run multi-channel calls' extra channels, started on the first such call,
  // stopped by freeComm (algo/channel_workers.h); null until then.
  chorus::ChannelWorkers* channelWorkers = nullptr;
  // CUDA backend (src/cuda/backend.h): the device this communicator is bound to (-1: host
  // memory) and its CUDA state (staging memory, copy stream).
  int cudaDevice = -1;
  chorus::CudaComm* cuda = nullptr;

  bool isRemote(int peer) const { return nodeOf[size_t(peer)] != nodeOf[size_t(rank)]; }
  // The segment of a same-node rank (this rank's own for `rank`): the one way code other than
  // init (which attaches and releases them) reaches a peer's cells (its header's posts and
  // doorbell, one-shot slots, shrink box).
  const chorus::Segment& segmentOf(int peer) const {
    return peer == rank ? mySegment : peerSegments[size_t(peer)];
  }
  const chorus::SegmentHeader* peerHeader(int peer) const { return segmentOf(peer).header(); }
  // The doorbell a same-node rank (this one for `rank`) sleeps on while it waits (comm/wait.h):
  // what a transport rings after a post or a release, whichever transport it is.
  chorus::Doorbell* doorbellOf(int peer) const { return &segmentOf(peer).header()->bell; }
};

namespace chorus {

// Algorithm a's state, of its own type T (the one its descriptor's createState makes): one
// pointer load, no lookup.
template <class T>
inline T& algoState(chorusComm* comm, Algo a) {
  return *static_cast<T*>(comm->algoState[int(a)].get());
}

// Records `message` as the calling thread's last error (base/error.h) and the communicator's,
// if any.
void setLastError(chorusComm_t comm, const std::string& message) noexcept;

// Registry of live communicators, so that a destroyed handle is reported, not dereferenced.
void registerComm(chorusComm* comm);
void unregisterComm(chorusComm* comm);
bool isLiveComm(chorusComm* comm);
// The check of the calls that take a communicator without an ApiGuard (the getters, abort,
// status, the tuner's query): true for a live one, else false with "<fn>: comm is NULL or not a
// live communicator" as this thread's last error.
bool liveCommOrRefuse(chorusComm* comm, const char* fn);
// A getter's whole check and answer: a live communicator and a non-NULL output (refused naming
// it and the rank), then *out = get(comm).
template <typename T, typename Get>
chorusResult_t answerQuery(chorusComm* comm, const char* fn, const char* outName, T* out, Get get) {
  if (!liveCommOrRefuse(comm, fn)) return chorusInvalidArgument;
  if (out == nullptr) {
    setLastError(comm, format("%s (rank %d): %s is NULL", fn, comm->rank, outName));
    return chorusInvalidArgument;
  }
  *out = get(comm);
  return chorusSuccess;
}
// Why a live communicator cannot run an operation now (initializing, failed, finalized or
// aborted), or nullptr when it can: the one wording the argument check (core/enqueue.cc) and the
// executor (core/exec.cc) give.
const char* unusableReason(const chorusComm* comm);
// Calls fn with every live communicator, holding the registry's lock (none is freed meanwhile).
void withLiveComms(const std::function<void(std::vector<chorusComm*>&)>& fn);

// Marks the communicator failed with `code` (async error) and tells its peers: same-node ones
// through the segment's failure flag, remote ones through a TCP failure notice.
void markFailed(chorusComm* comm, chorusResult_t code, const std::string& message, int cause = -1);

}  // namespace chorus

namespace chorus {
// Guards an API call on a communicator: it must be live, and no other thread may be inside a
// call on it meanwhile (such a call is refused with chorusInvalidUsage). The communicator is
// biased to the first thread that calls: its calls store and clear a flag of their own (no
// locked instruction, a tenth of a short call). The first call from another thread revokes the
// bias once, with a process-wide memory barrier (membarrier), and every call after takes the
// lock word with a compare-exchange. Without membarrier, calls take the lock word from the first.
class ApiGuard {
 public:
  ApiGuard(chorusComm_t comm, const char* fn);
  ~ApiGuard();
  ApiGuard(const ApiGuard&) = delete;
  ApiGuard& operator=(const ApiGuard&) = delete;

 private:
  bool enterBiased(chorusComm_t comm, uint64_t me);
  void enterLocked(chorusComm_t comm, uint64_t me, const char* fn);
  chorusComm_t comm_;
  bool owned_ = false;   // this guard entered (not nested in another guard of this thread)
  bool biased_ = false;  // entered through the bias (apiBusy), else the lock word (apiOwner)
};
// Ends the bias of ApiGuard (waiting for a revocation under way), so that whether a call is
// inside shows in apiOwner and apiBusy alone, from any thread. For chorusCommAbort.
void lockApi(chorusComm_t comm);
}  // namespace chorus
