// Status reports: what a rank is doing and what it did last, so that a hang can be read from the
// ranks' own words. Every communicator keeps a small ring of the operations it completed and the
// one in flight (OpTrace, written on the hot path at the cost of a few plain stores and one
// coarse clock read), and the long waits publish what they wait for. The report is printed when
// a wait times out (CHORUS_TIMEOUT), on demand by a signal (CHORUS_STATUS_SIGNAL, default
// SIGUSR1; chorusrun forwards it to every rank), or by chorusCommPrintStatus.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <string>

struct chorusComm;

namespace chorus {

enum class OpKind;

// Operations kept per communicator (a power of two). The report lists the completed ones still
// in the ring (kTraceEntries - 1 while an operation is in flight: its entry is the next slot).
constexpr uint64_t kTraceEntries = 16;

// An operation as the trace keeps it. Every field is a relaxed atomic word (a plain load or
// store on x86-64 and AArch64), so that a report read from another thread (the signal watcher)
// is free of data races; it may be a little stale, and the reader drops entries the writer may
// have reused meanwhile.
struct TraceEntry {
  std::atomic<uint64_t> seq{0};    // the communicator's opCount when it started
  std::atomic<uint64_t> count{0};  // elements (a Send/Recv group: the number of transfers)
  // kind | type << 8 | op << 16 | algo << 24 | proto << 32 | nchannels << 40 (0xff: none)
  std::atomic<uint64_t> desc{0};
  std::atomic<int64_t> root{-1};    // root or peer, -1 when none
  std::atomic<int64_t> startNs{0};  // CLOCK_MONOTONIC_COARSE
  std::atomic<int64_t> endNs{0};
};

// Per communicator: the ring of operations and what the current long wait is for.
struct OpTrace {
  TraceEntry ring[kTraceEntries];
  std::atomic<uint64_t> completed{0};  // operations recorded as complete; the next goes there
  std::atomic<bool> inFlight{false};   // ring[completed % kTraceEntries] is running
  // The wait (comm/wait.h) that outlasted its spin phase most recently and has not ended: which
  // peer, for what, since when (steady clock, ns). waiter == nullptr: none.
  std::atomic<const void*> waiter{nullptr};
  std::atomic<int> waitPeer{-1};
  std::atomic<const char*> waitWhat{nullptr};
  std::atomic<int64_t> waitSinceNs{0};
  std::atomic<uint64_t> timeoutReported{~uint64_t(0)};  // seq whose timeout report was printed
  // The rank's sign of life in its segment (SegmentHeader::aliveNs), stamped at every start
  // and, negated, at every end; null while there is no segment.
  std::atomic<int64_t>* alive = nullptr;
  // Waits that left their spin phase (Waiter::publish: any thread of the communicator, channel
  // workers too), and how many there had been when the operation in flight began (its driving
  // thread only): traceEnd reads the clock again only where the operation may have lasted.
  std::atomic<uint64_t> slowWaits{0};
  uint64_t slowWaitsAtStart = 0;
};

// Elements from which an operation may move enough data to last past a tick of the coarse
// clock (4096 elements of at most 8 bytes: 32 KiB a rank, microseconds) without one wait
// leaving its spin phase.
constexpr uint64_t kTraceShortCount = 4096;

// A clock cheap enough for every operation: CLOCK_MONOTONIC_COARSE is served by the vDSO from
// the kernel's last tick (no counter read, never a system call), ticks of 1 to 4 ms: enough to
// say how long ago an operation ended or since when one runs.
inline int64_t coarseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

constexpr uint64_t kTraceNoChoice = 0xff;  // algo / proto / nchannels not applicable
constexpr uint64_t kTraceP2PGroup = 0x7f;  // desc of a group of sends and receives (kind only)

inline uint64_t traceDesc(OpKind kind, int type, int op, uint64_t algo, uint64_t proto,
                          uint64_t nchannels) {
  return uint64_t(int(kind)) | uint64_t(uint8_t(type)) << 8 | uint64_t(uint8_t(op)) << 16 |
         (algo & 0xff) << 24 | (proto & 0xff) << 32 | (nchannels & 0xff) << 40;
}

// Hot path: an operation starts (its entry is filled, then marked in flight) ...
inline void traceBegin(OpTrace& t, uint64_t seq, uint64_t desc, uint64_t count, int root) {
  TraceEntry& e = t.ring[t.completed.load(std::memory_order_relaxed) % kTraceEntries];
  // In flight before the slot is reused (a seqlock's odd count; formatStatus drops the entry).
  t.inFlight.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.seq.store(seq, std::memory_order_relaxed);
  e.count.store(count, std::memory_order_relaxed);
  e.desc.store(desc, std::memory_order_relaxed);
  e.root.store(root, std::memory_order_relaxed);
  const int64_t now = coarseNowNs();
  e.startNs.store(now, std::memory_order_relaxed);
  e.endNs.store(0, std::memory_order_relaxed);
  if (t.alive != nullptr) t.alive->store(now, std::memory_order_relaxed);
  t.slowWaitsAtStart = t.slowWaits.load(std::memory_order_relaxed);
}
// ... its algorithm is chosen ...
inline void traceChoice(OpTrace& t, uint64_t desc) {
  t.ring[t.completed.load(std::memory_order_relaxed) % kTraceEntries].desc.store(
      desc, std::memory_order_relaxed);
}
// ... and completes. An operation that fails stays in flight (the report shows it).
// A short operation (under kTraceShortCount elements; not a Send/Recv group, whose count is of
// transfers) none of whose waits left its spin phase ended microseconds after it started: within
// the coarse clock's tick (1-4 ms), so its start stands for its end (one clock read per
// operation on the latency-bound path instead of two).
inline void traceEnd(OpTrace& t) {
  const uint64_t c = t.completed.load(std::memory_order_relaxed);
  TraceEntry& e = t.ring[c % kTraceEntries];
  const bool shortOp = e.count.load(std::memory_order_relaxed) < kTraceShortCount &&
                       e.desc.load(std::memory_order_relaxed) != kTraceP2PGroup;
  const int64_t now = shortOp && t.slowWaits.load(std::memory_order_relaxed) == t.slowWaitsAtStart
                          ? e.startNs.load(std::memory_order_relaxed)
                          : coarseNowNs();
  e.endNs.store(now, std::memory_order_relaxed);
  if (t.alive != nullptr) t.alive->store(-now, std::memory_order_relaxed);  // between calls
  t.completed.store(c + 1, std::memory_order_release);
  t.inFlight.store(false, std::memory_order_release);
}

// The report of one communicator: a block of lines, each prefixed "chorus rank R: ". `reason`
// is the first line's cause ("no progress for 1.0 s", "status requested (SIGUSR1)", ...);
// `peer` / `what` the wait that timed out (peer -2: use the published wait, if any).
std::string formatStatus(chorusComm* comm, const char* reason, int peer = -2,
                         const char* what = nullptr);
// Writes it to stderr in one write(2).
void printStatus(chorusComm* comm, const char* reason, int peer = -2, const char* what = nullptr);

// Once per process (at the first communicator's init): reads CHORUS_STATUS_SIGNAL and installs
// the handler and its watcher thread.
void statusSignalSetup();
// Reports printed on demand (signal) so far in this process; for tests.
uint64_t statusReportsPrinted();

}  // namespace chorus
