// Jobs of ranks that a test starts itself (not through chorusrun, which ends a job at its first
// death): one process per rank of a worker program with the launcher variables on loopback,
// emulated nodes on request; the test reads each rank's output as it comes, kills ranks at
// chosen moments, and looks at what they print and leave. The failure tests use it
// (tests/test_reliability.cc).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "process.h"
#include "timing.h"

namespace ctest {

// key=value fields of the first line of `out` that contains `tag ` (msg= takes the rest).
std::map<std::string, std::string> fieldsOf(const std::string& out, const std::string& tag);

// A job of ranks started by the test. The destructor kills and reaps whatever is left.
class RankJob {
 public:
  // `program workerArgs...` per rank, with the launcher variables (CHORUS_RANK, CHORUS_NRANKS,
  // CHORUS_COMM_ID on a free loopback port, a random CHORUS_SECRET) and extraEnv.
  // nodes > 1: the ranks form that many emulated nodes of contiguous blocks (as chorusrun
  // --nodes does: CHORUS_HOSTID=<hostPrefix><node> per block), so ranks of different blocks
  // talk TCP. rankEnv(r), when given, adds variables for rank r only.
  RankJob(const std::string& program, const std::string& hostPrefix, int nranks,
          const std::vector<std::string>& workerArgs, const std::vector<std::string>& extraEnv,
          std::mt19937_64& rng, int nodes = 1,
          const std::function<std::vector<std::string>(int)>& rankEnv = {});
  // Blocks of ceil(nranks / nodes) ranks, as chorusrun --nodes.
  static int nodeOf(int rank, int nranks, int nodes) {
    const int per = (nranks + nodes - 1) / nodes;
    return rank / per;
  }
  ~RankJob();
  RankJob(const RankJob&) = delete;
  RankJob& operator=(const RankJob&) = delete;

  int port() const { return port_; }
  // The job's CHORUS_SECRET: every rank's environment holds it (what tells the job's processes
  // from others).
  const std::string& secret() const { return secret_; }
  int size() const { return int(procs_.size()); }
  Proc& operator[](int r) { return procs_[size_t(r)]; }
  std::vector<pid_t> pids() const;
  bool started() const;

  // Reads output and reaps for up to `seconds`.
  void pump(double seconds);

  // Pumps until pred() or the deadline; returns pred().
  template <class Pred>
  bool pumpUntil(double deadline, Pred pred) {
    while (!pred()) {
      if (nowSeconds() >= deadline) return false;
      pump(0.02);
    }
    return true;
  }

  bool has(int r, const std::string& tag) const {
    return fieldsOf(procs_[size_t(r)].out, tag).count("_found") != 0;
  }
  std::map<std::string, std::string> fields(int r, const std::string& tag) const {
    return fieldsOf(procs_[size_t(r)].out, tag);
  }

  // SIGKILLs rank r and (reap) reaps it at once. Returns the CLOCK_MONOTONIC time of the kill.
  double killRank(int r, bool reap = true);

  // Closes every rank's stdin: releases the workers that linger until then.
  void releaseLingering();

  bool allExited() const;

  // "rank r: running | exit N | signal N" per rank (an exit 127 without output: the worker
  // could not be executed, e.g. while a concurrent build relinks it).
  std::string statuses() const;

  // Every rank's output, each line prefixed with "  [r] ".
  std::string output() const;

 private:
  static void readFrom(Proc& p);

  int port_;
  std::string secret_;
  std::vector<Proc> procs_;
};

}  // namespace ctest
