// chorusrun: the local launcher for Chorus jobs (a tiny mpirun).
//
//   chorusrun [options] -np N PROGRAM [ARGS...]
//
// Starts N copies of PROGRAM on this machine, gives every rank the environment the Chorus bootstrap
// reads (CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK, CHORUS_LOCAL_NRANKS, CHORUS_COMM_ID,
// CHORUS_SECRET), relays the ranks' stdout/stderr line by line with a "[rank] " prefix, and tears
// the whole job down as soon as one rank fails.
//
// Process model:
//  * every rank is forked into one process group (the first rank leads it), so a single kill(-pgid)
//    reaches the ranks and whatever they started;
//  * every rank has PR_SET_PDEATHSIG=SIGKILL, so it dies if chorusrun dies;
//  * chorusrun is a child subreaper, so grandchildren orphaned by a rank are reaped here too;
//  * signals are turned into poll() wake-ups through a self-pipe; every wait has a deadline.
//
// Only libc, POSIX/Linux system calls and the C++ standard library are used.
#include <optional>
#include <string>
#include <utility>

#include "job.h"
#include "launcher.h"
#include "netns.h"
#include "options.h"
#include "run_common.h"

using namespace chorusrun;

int main(int argc, char** argv) {
  Options opts = ParseOptions(argc, argv);
  EnsureStdFds();
  JobInfo job;
  std::string err;
  std::optional<int> port = PickFreePort(&err);
  if (!port) {
    Message("cannot pick a free TCP port: " + err);
    return 1;
  }
  job.comm_id = "127.0.0.1:" + std::to_string(*port);
  std::optional<std::string> secret = RandomSecret(&err);
  if (!secret) {
    Message(err);
    return 1;
  }
  job.secret = *secret;
  EmulatedNet net;
  if (opts.netns) {
    EmulatedNet::CleanupStale();
    if (!net.Setup(opts.nnodes, opts.linkRate, opts.linkMtu, opts.linkBurst, &err)) {
      Message("--netns: " + err);
      return 1;
    }
    // Rank 0 (node 0) listens on its namespace's address; a fresh namespace has every port free.
    job.comm_id = net.nodeAddress(0) + ":" + std::to_string(*port);
  }
  Launcher launcher(std::move(opts), std::move(job), &net);
  int rc = launcher.Run();
  net.Teardown();
  return rc;
}
