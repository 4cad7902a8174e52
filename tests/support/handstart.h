// Ranks started by hand, as a user's job script or a launcher that is not chorusrun does: one
// process per rank with the launcher variables (CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID on
// loopback, CHORUS_SECRET) and CHORUS_HOSTID to emulate nodes. Used by the tests that watch each
// rank on its own (tests/test_shrink.cc, tests/test_departure.cc).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ctest {

// A free TCP port on 127.0.0.1 (bound, read, closed; -1 on error).
int freeLoopbackPort();

struct HandRank {
  pid_t pid = -1;
  std::string outPath;  // its stdout and stderr
  int status = -1;      // waitProcess's answer once waited for
  std::string output() const;
};

// Starts n ranks of `program args...`; rank r on emulated node r * nodes / n (interleaved: node
// r % nodes, so that no node's ranks are consecutive). Each one's output goes to
// /tmp/chorus-<tag>-<test pid>-<r>.log.
std::vector<HandRank> startRanksByHand(const std::string& program, int n, int nodes,
                                       const std::vector<std::string>& args, const std::string& tag,
                                       const std::vector<std::string>& extraEnv = {},
                                       bool interleaved = false);

// The logs startRanksByHand made since the last call (and forgets them): the suite removes a
// passed test's logs (tests/test_hand_logs.cc) and keeps a failed one's for its report.
std::vector<std::string> takeHandLogs();

// Waits for all of them, seconds x timeoutScale() in all (then SIGKILL: status -2).
void waitRanksByHand(std::vector<HandRank>& ranks, double seconds);

// The key=value fields of the last output line that starts with `tag` ("_found" when one does).
std::map<std::string, std::string> fieldsOfLine(const std::string& out, const std::string& tag);

}  // namespace ctest
