// The job's rendezvous (a free port, a secret), where each rank sits (emulated nodes) and the
// environment each rank gets.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "options.h"

namespace chorusrun {

struct JobInfo {
  std::string comm_id;  // "127.0.0.1:PORT": where rank 0 listens
  std::string secret;   // 32 lowercase hex characters
};

// Finds a TCP port P such that P and P + 1 are free right now on every address (both bound
// together on 0.0.0.0, then closed): the bootstrap root listens on P, and under chorusrun
// chorus.torch gives torch's store P + 1 (MASTER_PORT). Rank 0 binds P later; another process
// could take it in between, which the bootstrap reports.
std::optional<int> PickFreePort(std::string* err);
// 128 random bits as 32 lowercase hex characters (getrandom, falling back to /dev/urandom).
std::optional<std::string> RandomSecret(std::string* err);

// Where a rank sits in the job. Today every rank is on the one (real) node. An emulated
// "--nodes Q" option only has to change PlaceRank: split the ranks into Q blocks, set
// local_rank/local_nranks within the block and host_id = "node<k>" (exported as CHORUS_HOSTID).
struct RankPlacement {
  int node = 0;
  int rank = 0;
  int nranks = 1;
  int local_rank = 0;
  int local_nranks = 1;
  std::optional<std::string> host_id;  // CHORUS_HOSTID, when set
};

RankPlacement PlaceRank(const Options& opts, int rank);
void SetEnv(std::vector<std::string>& env, std::string_view name, std::string_view value);
// The complete environment of one rank: chorusrun's environment minus the variables it owns,
// then the rank's Chorus variables, then the -x settings (which win).
std::vector<std::string> BuildRankEnv(const Options& opts, const JobInfo& job,
                                      const RankPlacement& p);

}  // namespace chorusrun
