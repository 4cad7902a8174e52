// Why a wait does not end, on the error paths of comm/wait.cc: the rank a timed-out wait is
// really behind (following the ranks' published waits, across nodes by status queries), the
// network to the other nodes (PeerControl::probeNetwork), and the messages that name them.
#include "comm/hang_report.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/debug.h"
#include "base/error.h"
#include "comm/comm.h"
#include "comm/control.h"
#include "comm/op.h"
#include "comm/status.h"

namespace chorus {

PeerStatus segmentStatus(const chorusComm* c, int p, int64_t nowNs) {
  const SegmentHeader* h = c->peerHeader(p);
  PeerStatus st;
  const int32_t f = h->failed.load(std::memory_order_acquire);
  st.failed = f > 0 && f <= c->nranks ? f : 0;
  const int32_t w = h->waitingFor.load(std::memory_order_relaxed);
  st.waitingFor = w > 0 && w <= c->nranks ? w : 0;
  const int64_t alive = h->aliveNs.load(std::memory_order_relaxed);
  st.aliveAgeMs = alive > 0 ? std::max<int64_t>(0, (nowNs - alive) / 1'000'000) : -1;
  st.seq = h->waitSeq.load(std::memory_order_relaxed);
  const uint32_t op = h->waitOp.load(std::memory_order_relaxed);
  st.op = op <= 255 ? op : 0;
  return st;
}

// The rank a timed-out wait is really behind: from the peer this rank waits for, follow the
// ranks' published waits to the first rank that is not waiting inside Chorus (it hangs
// elsewhere, or has not called), that stopped making progress while it waits (its sign of life,
// SegmentHeader::aliveNs, is stale: stopped by a signal or a debugger, swapping, frozen), that
// failed already, or around a cycle of live ranks, back to this rank or among the ranks it waits
// for (they wait for each other: calls in a different order, or, across nodes, data in TCP's
// retransmission backoff). Same-node ranks are read in their segments; a rank on another node is
// asked over its control connection (a process that does not answer is stopped).
// `chain` gets the path, e.g. "0 -> 1 -> 2".
namespace {
enum class Behind { kNotWaiting, kRemote, kCycle, kStopped, kFailed };
struct BehindInfo {
  Behind why = Behind::kNotWaiting;
  int culprit = -1;
  std::string chain;
  // kCycle: two consecutive ranks of the cycle on different nodes (-1: all on one node);
  // whether every rank of it waits in the same operation (same sequence number and kind); and
  // whether two of them wait in different kinds of operation under one sequence number (calls
  // in a different order, for certain).
  int acrossFrom = -1, acrossTo = -1;
  bool sameCall = false, misordered = false;
  double stoppedFor = -1;  // kStopped: seconds since its last sign of life (-1: no answer)
  uint64_t seq = 0;        // kStopped: the operation it stopped in
  uint32_t op = 0;
  int reporter = -1;  // kFailed: the rank on the chain that failed (culprit: its cause)
};

// A live waiting rank refreshes its sign of life at every pause (at least every 10 ms);
// one silent for this long has stopped.
double staleAfter(const chorusComm* c) {
  return c->timeoutSec > 0 ? std::clamp(c->timeoutSec / 2, 0.5, 2.0) : 2.0;
}

// How long a status query or a connection attempt to another node's host may take to answer,
// on the error path of a timeout: a quarter of CHORUS_TIMEOUT, 0.3-1 s, and up to an eighth of it
// (at most 3 s) when it is longer than 8 s, so that a lossy link, whose every lost segment
// doubles TCP's retransmission timeout (0.2, 0.6, 1.4, 3.0 s), does not make a live process look
// stopped or its host unreachable.
double answerWindow(const chorusComm* c) {
  return std::clamp(c->timeoutSec / 4, 0.3, std::clamp(c->timeoutSec / 8, 1.0, 3.0));
}

// With a bound over 8 s, how much longer a rank on another node that did not answer a status
// query within answerWindow, while its host does, is given before it is named stopped: up to half
// the bound in all, at most 8 s. A reply held in its kernel's retransmission backoff (0.2, 0.6,
// 1.4, 3.0 s: heavy loss, a link mute for a moment) past the window named a live rank stopped
// (scripts/netfault_table.sh hangmute). Shorter bounds keep their window.
double lateAnswerWindow(const chorusComm* c) {
  if (c->timeoutSec <= 8) return 0;
  return std::max(0.0, std::min(c->timeoutSec / 2, 8.0) - answerWindow(c));
}

}  // namespace

double answerWindowInAll(const chorusComm* c) {
  return answerWindow(c) + lateAnswerWindow(c);
}

namespace {

std::string opWords(uint32_t op, uint64_t seq) {
  if (op == 0) return "a call";
  const uint32_t kind = op - 1;
  const char* name = kind == kTraceP2PGroup         ? "a Send/Recv group"
                     : kind < uint32_t(kNumOpKinds) ? opKindName(OpKind(kind))
                                                    : "an operation";
  return format("%s seq %llu", name, (unsigned long long)seq);
}

// The ranks of `node`, as "2-3" (contiguous) or "0, 2, 5".
std::string nodeRanks(const chorusComm* c, int node) {
  std::vector<int> r;
  for (int p = 0; p < c->nranks; ++p)
    if (c->nodeOf[size_t(p)] == node) r.push_back(p);
  if (r.empty()) return "none";
  if (r.size() == 1) return std::to_string(r[0]);
  if (r.back() - r.front() + 1 == int(r.size()))
    return std::to_string(r.front()) + "-" + std::to_string(r.back());
  std::string s;
  for (int p : r) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

// A network failure as this rank sees it (an error path, once a wait stalled or a peer reported
// a failure): "network failure: node N (ranks a-b, host H) unreachable from rank r: <evidence>"
// naming every node this rank cannot reach (PeerControl::probeNetwork), *culprit the first rank
// of the first one; empty when the network to the other nodes looks fine. `suspect`: a rank on
// another node that the wait found silent or failed (-1: none); `asked`: it was just sent a
// status query that went unanswered (its connection shows whether that query got through).
std::string networkFailure(chorusComm* c, int suspect, bool asked, int* culprit,
                           std::string* recovered = nullptr) {
  if (c->control == nullptr || c->nnodes < 2) return "";
  const bool remoteSuspect = suspect >= 0 && suspect < c->nranks && c->isRemote(suspect);
  const int node = remoteSuspect ? c->nodeOf[size_t(suspect)] : -1;
  const NetVerdict v = c->control->probeNetwork(answerWindow(c), node, remoteSuspect && !asked);
  if (!v.unreachable()) {
    for (size_t i = 0; recovered != nullptr && i < v.recovered.size(); ++i)
      *recovered += (i == 0 ? "" : ", ") + std::to_string(v.recovered[i]);
    return "";
  }
  std::string nodes, evidence;
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    const int n = v.nodes[i];
    const std::string rs = nodeRanks(c, n);
    nodes += format("%s%d (rank%s %s%s%s)",
                    i == 0                    ? ""
                    : i + 1 == v.nodes.size() ? " and "
                                              : ", ",
                    n, rs.find_first_of("-,") != std::string::npos ? "s" : "", rs.c_str(),
                    v.hosts[i].empty() ? "" : ", host ", v.hosts[i].c_str());
    evidence += (i == 0 ? "" : "; ") +
                (v.nodes.size() > 1 ? format("node %d: ", n) : std::string()) + v.evidence[i];
  }
  for (int p = 0; p < c->nranks && culprit != nullptr; ++p)
    if (c->nodeOf[size_t(p)] == v.nodes[0]) {
      *culprit = p;
      break;
    }
  return format("network failure: node%s %s unreachable from rank %d: %s",
                v.nodes.size() > 1 ? "s" : "", nodes.c_str(), c->rank, evidence.c_str());
}

}  // namespace

// A failure whose cause is a rank on another node, not known dead: when this rank cannot reach
// that node either, the network failed, not the rank; throws that (`first`: who reported it).
void throwIfUnreachable(chorusComm* c, const char* what, int cause, const std::string& first) {
  if (cause < 0 || cause >= c->nranks || !c->isRemote(cause) || c->control == nullptr ||
      c->control->seenDead(cause))
    return;
  int culprit = cause;
  const std::string net = networkFailure(c, cause, false, &culprit);
  if (!net.empty())
    throw Failure{chorusRemoteError,
                  format("rank %d: %s: %s (%s)", c->rank, what, net.c_str(), first.c_str()),
                  culprit};
}

namespace {

// One rank's state: read in its segment (same node), or asked over its control connection
// (another node; false: no answer, the process is stopped or its link failed). aliveAgeMs is
// -1 between calls (the sign of life is negated there).
bool readStatus(chorusComm* c, int p, int64_t nowNs, PeerStatus* st) {
  if (c->isRemote(p))
    return c->control != nullptr && c->control->queryStatus(p, answerWindow(c), st);
  *st = segmentStatus(c, p, nowNs);
  return true;
}

// The verdict on rank p's state: it failed (the culprit is its cause), or it stopped inside a
// call (its sign of life is older than `stale`, waiting or not; the operation is known if it
// waits). False: neither.
bool judge(const PeerStatus& st, int p, double stale, BehindInfo* b) {
  if (st.failed > 0) {
    b->why = Behind::kFailed, b->culprit = st.failed - 1, b->reporter = p;
    return true;
  }
  if (st.aliveAgeMs >= 0 && double(st.aliveAgeMs) / 1e3 > stale) {
    b->why = Behind::kStopped, b->culprit = p, b->stoppedFor = double(st.aliveAgeMs) / 1e3;
    if (st.waitingFor > 0) b->seq = st.seq, b->op = st.op;
    return true;
  }
  return false;
}

// A remote rank that did not answer: stopped, unless its link failed meanwhile.
void noAnswer(chorusComm* c, int p, BehindInfo* b) {
  b->why = c->control != nullptr && c->control->peerFailed(p) ? Behind::kRemote : Behind::kStopped;
  b->culprit = p;
}

// Every other rank, same-node ones first: the first that failed (its cause), stopped inside a
// call (a stale sign of life) or, on another node, does not answer. kNotWaiting: none.
BehindInfo findStopped(chorusComm* c, double stale, int64_t nowNs) {
  BehindInfo b;
  for (int remote = 0; remote < 2; ++remote)
    for (int p = 0; p < c->nranks; ++p) {
      if (p == c->rank || c->isRemote(p) != (remote == 1)) continue;
      if (remote && c->control == nullptr) return b;
      if (remote && c->control->peerFailed(p)) {
        b.why = Behind::kFailed, b.culprit = c->control->failureCause(p), b.reporter = p;
        return b;
      }
      PeerStatus st;
      if (!readStatus(c, p, nowNs, &st)) {
        noAnswer(c, p, &b);
        return b;
      }
      if (judge(st, p, stale, &b)) return b;
    }
  return b;
}

BehindInfo findBehind(chorusComm* c, int peer) {
  BehindInfo b;
  b.chain = std::to_string(c->rank) + " -> " + std::to_string(peer);
  const double stale = staleAfter(c);
  const int64_t nowNs = steadyNs(Clock::now());
  int p = peer;
  bool inCall = false;                   // p is inside a call (not between two)
  std::vector<int> path{c->rank, peer};  // the ranks of the chain, in order
  std::vector<PeerStatus> seen{segmentStatus(c, c->rank, nowNs)};  // theirs, as read
  for (int steps = 0; steps < c->nranks; ++steps) {
    if (c->isRemote(p) && (c->control == nullptr || c->control->peerFailed(p))) {
      b.why = Behind::kRemote;  // its own failure notice names the cause (Waiter::check)
      b.culprit = p;
      return b;
    }
    PeerStatus st;
    if (!readStatus(c, p, nowNs, &st)) {
      noAnswer(c, p, &b);
      return b;
    }
    if (judge(st, p, stale, &b)) return b;
    seen.push_back(st);
    const int w = st.waitingFor;
    inCall = st.aliveAgeMs >= 0;
    const int next = w - 1;
    if (w <= 0 || next >= c->nranks || next == p) break;
    b.chain += " -> " + std::to_string(next);
    const size_t first = size_t(std::find(path.begin(), path.end(), next) - path.begin());
    if (first < path.size()) {
      // A cycle of live ranks, as far as the chain shows: back to this rank, or among ranks it
      // waits for (2 -> 3 -> 1 -> 3: ranks 1 and 3 wait for each other). A wait on several
      // peers (a tree's) publishes one of them at a time, so the chain may go round while the
      // real culprit is off it: look at every rank before blaming the order of calls.
      b.sameCall = seen[first].op != 0;
      for (size_t i = first; i < path.size(); ++i) {
        const int to = i + 1 < path.size() ? path[i + 1] : next;
        if (b.acrossFrom < 0 && c->nodeOf[size_t(path[i])] != c->nodeOf[size_t(to)])
          b.acrossFrom = path[i], b.acrossTo = to;
        b.sameCall = b.sameCall && seen[i].op == seen[first].op && seen[i].seq == seen[first].seq;
        for (size_t j = first; j < i; ++j)
          b.misordered = b.misordered || (seen[i].op != 0 && seen[j].op != 0 &&
                                          seen[i].seq == seen[j].seq && seen[i].op != seen[j].op);
      }
      BehindInfo any = findStopped(c, stale, nowNs);
      if (any.why != Behind::kNotWaiting) {
        any.chain = b.chain;
        return any;
      }
      b.why = Behind::kCycle;
      b.culprit = p;
      return b;
    }
    path.push_back(next);
    p = next;
  }
  // p does not wait. Between calls, it has not made this one (it hangs elsewhere). Inside one
  // and alive, it is busy, or between two waits of the call (a wait on several peers, or
  // several channels, publishes one at a time): a rank that stopped may be off the chain.
  if (inCall) {
    BehindInfo any = findStopped(c, stale, nowNs);
    if (any.why != Behind::kNotWaiting) {
      any.chain = b.chain;
      return any;
    }
  }
  b.why = Behind::kNotWaiting;
  b.culprit = p;
  return b;
}

std::string hangBase(const chorusComm* c, int peer) {
  return format("no progress for %.1f s waiting for peer rank %d", c->timeoutSec, peer);
}
}  // namespace

void diagnoseHang(chorusComm* c, int peer, const char* what, bool mayExtend, std::string* flap) {
  // One status report per operation (several channels may time out together) on stderr.
  if (c->trace.timeoutReported.exchange(c->opCount) != c->opCount) {
    const std::string reason = format("no progress for %.1f s (CHORUS_TIMEOUT)", c->timeoutSec);
    printStatus(c, reason.c_str(), peer, what);
  }
  // Name the rank that is behind, not only the peer: in a ring every rank waits for its
  // neighbour and all of them time out together.
  BehindInfo b;
  b.culprit = peer;
  if (peer >= 0 && peer != c->rank) b = findBehind(c, peer);
  int culprit = b.culprit;
  const std::string& chain = b.chain;
  {
    // The network to another node, before any rank is blamed: a rank there that does not
    // answer (or failed) may only be out of reach.
    const bool asked = b.why == Behind::kStopped && b.stoppedFor < 0;
    int netCulprit = culprit;
    std::string back;
    const std::string net =
        networkFailure(c, b.why == Behind::kCycle || b.why == Behind::kNotWaiting ? -1 : culprit,
                       asked, &netCulprit, &back);
    // A rank there that did not answer while its host does: its reply may be in its kernel's
    // retransmission backoff (heavy loss). Given longer, a late answer that shows it stopped or
    // failed still names it, one between calls is behind; one waiting in a call says nothing of
    // where the chain goes on, so the wait waits again.
    // (`asked` holds only for a rank on another node, asked over its control connection.)
    std::string late;
    const double more = asked && net.empty() ? lateAnswerWindow(c) : 0;
    if (PeerStatus st; more > 0 && c->control->queryStatus(culprit, more, &st)) {
      if (judge(st, culprit, staleAfter(c), &b)) {
        culprit = b.culprit;
      } else if (st.waitingFor <= 0 && st.aliveAgeMs < 0) {
        b.why = Behind::kNotWaiting;
      } else {
        late = format(
            "rank %d of node %d answered a status query only after more than %.1f s (its reply "
            "in TCP's retransmission backoff: heavy loss?; waits %s)",
            culprit, c->nodeOf[size_t(culprit)], answerWindow(c), chain.c_str());
      }
    }
    // Live ranks waiting for each other across nodes, or inside one call of a job that spans
    // nodes (a rank's other wait, unpublished, may cross them): what they wait for may be in
    // TCP's retransmission backoff on a link this rank does not use (a flap, heavy loss).
    std::string why;
    if (!back.empty())
      why = format("the network to node(s) %s stalled and answers again (a link flap?)",
                   back.c_str());
    else if (!late.empty())
      why = late;
    else if (b.why == Behind::kCycle && b.acrossFrom >= 0 && !b.misordered)
      why = format(
          "live ranks wait for each other across nodes (%s; rank %d of node %d waits for rank %d "
          "of node %d): data may be in TCP's retransmission backoff after a flap or heavy loss",
          chain.c_str(), b.acrossFrom, c->nodeOf[size_t(b.acrossFrom)], b.acrossTo,
          c->nodeOf[size_t(b.acrossTo)]);
    else if (b.why == Behind::kCycle && b.sameCall && c->nnodes > 1)
      why = format(
          "live ranks wait for each other inside one call (%s) of a job across nodes: another "
          "of their waits may be on data in TCP's retransmission backoff after a flap or heavy "
          "loss",
          chain.c_str());
    if (net.empty() && !why.empty()) {
      if (mayExtend) {
        *flap = why;  // the wait waits again (Waiter::check)
        return;
      }
      // It waited again and again: no rank is to blame (each answers, live), the network
      // delivers too slowly for the timeout.
      throw Failure{chorusTimeout,
                    format("rank %d: %s: %s, also after waiting again: %s; the network is too "
                           "slow for CHORUS_TIMEOUT (heavy loss or flaps?)",
                           c->rank, what, hangBase(c, peer).c_str(), why.c_str()),
                    -1};
    }
    if (!net.empty())
      throw Failure{chorusRemoteError,
                    format("rank %d: %s: %s (no progress for %.1f s waiting for peer rank %d)",
                           c->rank, what, net.c_str(), c->timeoutSec, peer),
                    netCulprit};
  }
  const std::string base = hangBase(c, peer);
  std::string msg;
  if (b.why == Behind::kStopped) {
    const std::string where =
        c->isRemote(culprit) ? format(" (node %d)", c->nodeOf[size_t(culprit)]) : "";
    if (b.stoppedFor < 0)
      msg = format(
          "rank %d: %s: rank %d%s stopped making progress: its process does not answer a "
          "status query (stopped or frozen?; waits %s): %s",
          c->rank, what, culprit, where.c_str(), chain.c_str(), base.c_str());
    else
      msg = format(
          "rank %d: %s: rank %d%s stopped making progress %.1f s ago inside %s "
          "(waits %s): %s",
          c->rank, what, culprit, where.c_str(), b.stoppedFor, opWords(b.op, b.seq).c_str(),
          chain.c_str(), base.c_str());
  } else if (b.why == Behind::kFailed) {
    msg = format("rank %d: %s: rank %d is behind (reported by rank %d, which failed; waits %s): %s",
                 c->rank, what, culprit, b.reporter, chain.c_str(), base.c_str());
  } else if (b.why == Behind::kRemote && c->control) {
    // The ranks there timed out too, at about the same moment, and followed their own node's
    // waits: give their notice a moment to arrive (an error path; the bound is long passed).
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    while (!c->control->peerFailed(culprit) && Clock::now() < until) usleep(2000);
    const int remoteCause =
        c->control->peerFailed(culprit) ? c->control->failureCause(culprit) : -1;
    if (remoteCause >= 0 && remoteCause != c->rank) {
      msg = format("rank %d: %s: rank %d is behind (reported by rank %d of node %d): %s", c->rank,
                   what, remoteCause, culprit, c->nodeOf[size_t(culprit)], base.c_str());
      culprit = remoteCause;
    } else {
      msg = format("rank %d: %s: rank %d of node %d is behind (waits %s): %s", c->rank, what,
                   culprit, c->nodeOf[size_t(culprit)], chain.c_str(), base.c_str());
    }
  } else if (b.why == Behind::kCycle) {
    msg = format(
        "rank %d: %s: %s; ranks wait for each other in a cycle (%s): calls in a "
        "different order?",
        c->rank, what, base.c_str(), chain.c_str());
  } else if (culprit != peer) {
    msg = format("rank %d: %s: rank %d is behind (it is not waiting in Chorus; waits %s): %s",
                 c->rank, what, culprit, chain.c_str(), base.c_str());
  } else {
    msg = format("rank %d: %s: %s", c->rank, what, base.c_str());
  }
  throw Failure{chorusTimeout, msg, b.why == Behind::kCycle || peer < 0 ? -1 : culprit};
}

}  // namespace chorus
