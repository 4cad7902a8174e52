// Why a wait does not end (comm/hang_report.cc), for the error paths of the waits
// (comm/wait.cc): the rank a timed-out wait is really behind, the network to the other nodes,
// and the failures that name them.
#pragma once

#include <cstdint>
#include <string>

#include "comm/control.h"

struct chorusComm;

namespace chorus {

// Same-node rank p's state as its segment header shows it (p may be this rank): what it waits
// for, the age of its sign of life at nowNs (steady-clock ns), its wait's operation and its
// failure flag. A rank that times out reads it; the TCP proxy answers status queries with it.
PeerStatus segmentStatus(const chorusComm* c, int p, int64_t nowNs);

// A failure whose cause is a rank on another node, not known dead: when this rank cannot reach
// that node either, the network failed, not the rank; throws that (`first`: who reported it).
void throwIfUnreachable(chorusComm* c, const char* what, int cause, const std::string& first);

// A wait for `peer` (`what`) made no progress for CHORUS_TIMEOUT: prints the status report (once
// per operation), then throws the failure naming the rank that is behind (following the ranks'
// waits from `peer`), or the nodes this rank cannot reach. Returns instead, with *flap saying
// why, when nothing is unreachable but what the wait needs may be in TCP's retransmission
// backoff (a link that stalled and answers again, or live ranks waiting for each other across
// nodes, or inside one call of a job across nodes) and `mayExtend`: the wait then waits again.
// Without `mayExtend` that case throws a timeout that blames the network's speed, no rank.
void diagnoseHang(chorusComm* c, int peer, const char* what, bool mayExtend, std::string* flap);

// How long a rank on another node waits for a status answer in all (answerWindow, and over 8 s
// the late window): what a failed rank that tears its communicator down gives its failure notice
// to be received by the ranks of the nodes it can reach (net/tcp_links.cc).
double answerWindowInAll(const chorusComm* c);

}  // namespace chorus
