// Status reports (comm/status.h): formatting, the on-demand signal and its watcher thread, and
// chorusCommPrintStatus.
#include "comm/status.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "base/thread_name.h"
#include "comm/comm.h"
#include "proto/proto.h"

namespace chorus {

namespace {

// One entry as plain values, read from the atomics.
struct EntryView {
  uint64_t seq, count, desc;
  int64_t root, startNs, endNs;
};
EntryView view(const TraceEntry& e) {
  return {e.seq.load(std::memory_order_relaxed),     e.count.load(std::memory_order_relaxed),
          e.desc.load(std::memory_order_relaxed),    e.root.load(std::memory_order_relaxed),
          e.startNs.load(std::memory_order_relaxed), e.endNs.load(std::memory_order_relaxed)};
}

// "AllReduce seq 7: 8 x float32 sum, ring/ll x1"
std::string describeEntry(const EntryView& v) {
  const int kind = int(v.desc & 0xff), type = int(v.desc >> 8 & 0xff),
            op = int(v.desc >> 16 & 0xff);
  const uint64_t algo = v.desc >> 24 & 0xff, proto = v.desc >> 32 & 0xff, nch = v.desc >> 40 & 0xff;
  std::string s;
  if (uint64_t(kind) == kTraceP2PGroup) {
    s = format("Send/Recv group seq %llu: %llu transfers", (unsigned long long)v.seq,
               (unsigned long long)v.count);
    return s;
  }
  const OpKind k = OpKind(kind);
  s = format("%s seq %llu: %llu x %s", opKindName(k), (unsigned long long)v.seq,
             (unsigned long long)v.count, dataTypeName(type));
  if (k == OpKind::kAllReduce || k == OpKind::kReduce || k == OpKind::kReduceScatter)
    s += format(" %s", redOpName(op));
  if (isP2P(k))
    s += format(", peer %lld", (long long)v.root);
  else if (k == OpKind::kBroadcast || k == OpKind::kReduce || k == OpKind::kGather ||
           k == OpKind::kScatter)
    s += format(", root %lld", (long long)v.root);
  if (algo != kTraceNoChoice) {
    s += format(", %s", algoName(Algo(int(algo))));
    if (proto != kTraceNoChoice) s += format("/%s", protoName(Proto(int(proto))));
    if (nch != kTraceNoChoice) s += format(" x%d", int(nch));
  }
  return s;
}

double secondsSince(int64_t thenNs, int64_t nowNs) {
  return double(nowNs - thenNs) * 1e-9;
}

const char* stateName(CommState s) {
  switch (s) {
    case CommState::kInitializing:
      return "initializing";
    case CommState::kReady:
      return "ready";
    case CommState::kFailed:
      return "failed";
    case CommState::kFinalized:
      return "finalized";
    case CommState::kAborted:
      return "aborted";
  }
  return "?";
}

}  // namespace

std::string formatStatus(chorusComm* c, const char* reason, int peer, const char* what) {
  const std::string p = format("chorus rank %d: ", c->rank);
  const int64_t now = coarseNowNs();
  const CommState state = c->state.load();
  std::string out;
  std::string id;
  if (state != CommState::kInitializing && !c->peers.empty())
    id = format(" %016llx", (unsigned long long)c->peers[0].commNonce);
  out += p + format("status of communicator%s (rank %d of %d, pid %d, %s): %s\n", id.c_str(),
                    c->rank, c->nranks, int(getpid()), stateName(state), reason);
  const OpTrace& t = c->trace;
  const uint64_t completed = t.completed.load(std::memory_order_acquire);
  const bool inFlight = t.inFlight.load(std::memory_order_acquire);
  if (inFlight) {
    const EntryView v = view(t.ring[completed % kTraceEntries]);
    out += p + format("  in flight: %s, started %.3f s ago\n", describeEntry(v).c_str(),
                      secondsSince(v.startNs, now));
  } else {
    out += p + format(
                   "  in flight: nothing (not in a call on this communicator; %llu operations "
                   "completed)\n",
                   (unsigned long long)completed);
  }
  if (peer == -2) {  // the published wait, if any
    if (t.waiter.load(std::memory_order_acquire) != nullptr) {
      peer = t.waitPeer.load(std::memory_order_relaxed);
      what = t.waitWhat.load(std::memory_order_relaxed);
      const int64_t since = t.waitSinceNs.load(std::memory_order_relaxed);
      const int64_t steadyNow =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
              .count();
      out += p + format("  waiting%s: %s, for %.3f s\n",
                        peer >= 0 ? format(" for peer rank %d", peer).c_str() : "",
                        what ? what : "?", double(steadyNow - since) * 1e-9);
    } else if (inFlight) {
      out += p + "  waiting: not blocked (moving data)\n";
    }
  } else {
    out +=
        p + format("  waiting%s: %s\n", peer >= 0 ? format(" for peer rank %d", peer).c_str() : "",
                   what ? what : "?");
  }
  // The completed operations still in the ring, newest first. The writer may reuse a slot while
  // it is read: once it has begun operation c, entry c - kTraceEntries is gone.
  std::vector<std::pair<uint64_t, EntryView>> done;
  for (uint64_t i = 0; i < std::min(completed, kTraceEntries); ++i) {
    const uint64_t index = completed - 1 - i;
    done.emplace_back(index, view(t.ring[index % kTraceEntries]));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const bool inFlightAfter = t.inFlight.load(std::memory_order_relaxed);
  const uint64_t after = t.completed.load(std::memory_order_relaxed);
  std::erase_if(done, [&](const auto& d) {
    return d.first + kTraceEntries < after + (inFlightAfter ? 1 : 0);
  });
  out += p + format("  last %zu completed operation(s), newest first:\n", done.size());
  // Durations come from the coarse clock: below its tick they are only "less than a tick".
  timespec res{0, 4'000'000};
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  const double tick = double(res.tv_sec) + double(res.tv_nsec) * 1e-9;
  for (const auto& [index, v] : done) {
    const double took = secondsSince(v.startNs, v.endNs);
    const std::string tookStr =
        took <= tick ? format("took < %.0f ms", tick * 1e3 + 0.5) : format("took %.3f s", took);
    out += p + format("    %s, %s, ended %.3f s ago\n", describeEntry(v).c_str(), tookStr.c_str(),
                      secondsSince(v.endNs, now));
  }
  if (state == CommState::kFailed)
    out += p + format("  failed: %s\n", chorusGetErrorString(chorusResult_t(c->asyncError.load())));
  return out;
}

namespace {
void writeAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += size_t(n);
  }
}
}  // namespace

void printStatus(chorusComm* comm, const char* reason, int peer, const char* what) {
  writeAll(STDERR_FILENO, formatStatus(comm, reason, peer, what));
}

// --- On demand: a signal --------------------------------------------------------------------
// The handler only writes a byte to a pipe (async-signal-safe) and chains the handler it
// replaced; a watcher thread, started with the handler, reads the pipe and prints every live
// communicator's report.
namespace {
int gStatusPipe[2] = {-1, -1};
int gStatusSignal = 0;
pid_t gStatusPid = 0;  // a forked child inherits the handler, not the watcher: it only chains
struct sigaction gPrevAction {};
std::atomic<uint64_t> gReportsPrinted{0};

void onStatusSignal(int sig, siginfo_t* info, void* ctx) {
  const int saved = errno;
  if (getpid() == gStatusPid) {
    const char b = 1;
    const ssize_t n = write(gStatusPipe[1], &b, 1);  // non-blocking: a full pipe has a wake-up
    (void)n;
  }
  if (gPrevAction.sa_flags & SA_SIGINFO) {
    if (gPrevAction.sa_sigaction != nullptr) gPrevAction.sa_sigaction(sig, info, ctx);
  } else if (gPrevAction.sa_handler != SIG_DFL && gPrevAction.sa_handler != SIG_IGN &&
             gPrevAction.sa_handler != nullptr) {
    gPrevAction.sa_handler(sig);
  }
  errno = saved;
}

std::string signalName(int sig) {
  if (sig == SIGUSR1) return "SIGUSR1";
  if (sig == SIGUSR2) return "SIGUSR2";
  return format("signal %d", sig);
}

void printAllStatus() {
  const std::string reason = "status requested (" + signalName(gStatusSignal) + ")";
  std::string out;
  size_t n = 0;
  withLiveComms([&](std::vector<chorusComm*>& comms) {
    // Formatted under the registry's lock (no communicator is freed meanwhile), written after
    // it is released (a slow stderr must not hold up the registry).
    std::sort(comms.begin(), comms.end(),
              [](chorusComm* a, chorusComm* b) { return a->rank < b->rank; });
    for (chorusComm* c : comms) out += formatStatus(c, reason.c_str());
    n = comms.size();
  });
  if (n == 0)
    out = format("chorus pid %d: status requested: no live communicator\n", int(getpid()));
  writeAll(STDERR_FILENO, out);
  gReportsPrinted.fetch_add(n);
}

void watch() {
  // Named, so that tools (and the leak checks of the tests) can tell this one thread of the
  // process apart from a communicator's threads.
  nameThisThread("status");
  for (;;) {
    char buf[64];
    const ssize_t n = read(gStatusPipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    try {  // the watcher's top: a report that fails (out of memory) is skipped, not fatal
      printAllStatus();
    } catch (...) {
      const Failure f = caughtFailure(-1, "printing a status report");
      CHORUS_WARN(-1, "status report skipped: %s", f.message.c_str());
    }
  }
}

// CHORUS_STATUS_SIGNAL: USR1 (default), USR2, a signal number, or 0/none/off.
int statusSignalFromEnv() {
  std::string v = envStr("CHORUS_STATUS_SIGNAL", "USR1");
  for (char& ch : v) ch = char(toupper(static_cast<unsigned char>(ch)));
  if (v.rfind("SIG", 0) == 0) v = v.substr(3);
  if (v.empty() || v == "USR1") return SIGUSR1;
  if (v == "USR2") return SIGUSR2;
  if (v == "0" || v == "NONE" || v == "OFF") return 0;
  char* end = nullptr;
  const long n = strtol(v.c_str(), &end, 10);
  if (end != v.c_str() && *end == 0 && n > 0 && n < NSIG && n != SIGKILL && n != SIGSTOP)
    return int(n);
  CHORUS_WARN(-1,
              "ignoring CHORUS_STATUS_SIGNAL=%s: not USR1, USR2, a signal number or 0; no "
              "status signal",
              v.c_str());
  return 0;
}
}  // namespace

void statusSignalSetup() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int sig = statusSignalFromEnv();
    if (sig == 0) return;
    if (pipe2(gStatusPipe, O_CLOEXEC) != 0) return;
    fcntl(gStatusPipe[1], F_SETFL, fcntl(gStatusPipe[1], F_GETFL) | O_NONBLOCK);
    gStatusPid = getpid();
    // The watcher takes no signal: the program's handlers keep running on its own threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
      std::thread(watch).detach();
    } catch (...) {  // no thread: no status reports, the communicator works without them
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      const Failure f = caughtFailure(-1, "starting the status watcher thread");
      CHORUS_WARN(-1, "status reports off (CHORUS_STATUS_SIGNAL): %s", f.message.c_str());
      close(gStatusPipe[0]);
      close(gStatusPipe[1]);
      gStatusPipe[0] = gStatusPipe[1] = -1;
      return;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = onStatusSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    gStatusSignal = sig;
    sigaction(sig, &sa, &gPrevAction);
    CHORUS_INFO(-1, "status reports on %s (CHORUS_STATUS_SIGNAL)", signalName(sig).c_str());
  });
}

uint64_t statusReportsPrinted() {
  return gReportsPrinted.load();
}

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusCommPrintStatus(chorusComm_t comm) {
  if (!liveCommOrRefuse(comm, "chorusCommPrintStatus")) return chorusInvalidArgument;
  return guarded(
      comm->rank, "chorusCommPrintStatus",
      [&] {
        printStatus(comm, "status requested (chorusCommPrintStatus)");
        return chorusSuccess;
      },
      [&](const Failure& f) {
        setLastError(comm, f.message);
        return f.code;
      });
}
