// The launcher form: rank, size and root address from the environment of chorusrun, Open MPI,
// MPICH/Hydra, Slurm or torchrun.
//
//   rank / size : the pairs of kLauncherVariables (launcher_env.h), first pair found wins
//   root address: CHORUS_COMM_ID=host:port, else MASTER_ADDR with port MASTER_PORT+1
//                 (torch.distributed's own store already listens on MASTER_PORT), else under
//                 srun the address Slurm's variables give (slurm_env.h: the step's first node)
//   secret      : CHORUS_SECRET (32 hex digits; chorusrun sets one), else derived from the job's
//                 identity (weaker: anyone who knows the job id could join; set CHORUS_SECRET)
#include "core/launcher_env.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/debug.h"
#include "base/error.h"
#include "base/param.h"
#include "base/siphash.h"
#include "bootstrap/bootstrap.h"
#include "core/slurm_env.h"

namespace chorus {

namespace {
bool readPair(const char* rankVar, const char* sizeVar, int* rank, int* size) {
  const char* r = getenv(rankVar);
  const char* s = getenv(sizeVar);
  if (!r || !s || !*r || !*s) return false;
  *rank = atoi(r);
  *size = atoi(s);
  return true;
}

// The launcher whose pair chorusUniqueIdFromEnv takes (the first with both variables set).
const char* launcherFound() {
  int rank = 0, size = 0;
  for (const LauncherVariables& l : kLauncherVariables)
    if (readPair(l.rank, l.size, &rank, &size)) return l.launcher;
  return "";
}

void secretFromEnv(const std::string& addr, uint8_t secret[16]) {
  std::string hex = envStr("CHORUS_SECRET");
  if (!hex.empty()) {
    if (hex.size() != 32) fail(chorusInvalidArgument, "CHORUS_SECRET must be 32 hex digits");
    for (int i = 0; i < 16; ++i) {
      unsigned v = 0;
      if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1)
        fail(chorusInvalidArgument, "CHORUS_SECRET must be 32 hex digits");
      secret[i] = uint8_t(v);
    }
    return;
  }
  std::string job;
  for (const char* v : {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMI_JOBID",
                        "SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE"})
    job += envStr(v) + "|";
  job += addr;
  CHORUS_INFO(-1, "CHORUS_SECRET not set: deriving the communicator secret from the job identity");
  static const uint8_t k0[16] = {'c', 'h', 'o', 'r', 'u', 's', '-', 'j',
                                 'o', 'b', '-', 'k', 'e', 'y', '-', '0'};
  static const uint8_t k1[16] = {'c', 'h', 'o', 'r', 'u', 's', '-', 'j',
                                 'o', 'b', '-', 'k', 'e', 'y', '-', '1'};
  uint64_t a = sipHash24(k0, job.data(), job.size()), b = sipHash24(k1, job.data(), job.size());
  memcpy(secret, &a, 8);
  memcpy(secret + 8, &b, 8);
}
}  // namespace

}  // namespace chorus

using namespace chorus;

chorusResult_t chorusUniqueIdFromEnv(chorusUniqueId* uniqueId, int* procRank, int* nprocs) {
  int rank = 0, size = 1;
  bool found = false;
  try {
    if (!uniqueId || !procRank || !nprocs)
      fail(chorusInvalidArgument, "chorusUniqueIdFromEnv: NULL argument");
    for (const LauncherVariables& l : kLauncherVariables) {
      found = readPair(l.rank, l.size, &rank, &size);
      if (found) break;
    }
    if (found && (size < 1 || rank < 0 || rank >= size))
      fail(chorusInvalidArgument, "launcher environment gives rank %d of %d", rank, size);
    std::string addr = envStr("CHORUS_COMM_ID");
    if (addr.empty() && getenv("MASTER_ADDR") && getenv("MASTER_PORT"))
      addr = envStr("MASTER_ADDR") + ":" + std::to_string(atoi(getenv("MASTER_PORT")) + 1);
    if (addr.empty() && found && size > 1 && strcmp(launcherFound(), "Slurm") == 0) {
      addr = slurmRootAddress();
      if (addr.empty())
        fail(chorusInvalidArgument,
             "rank %d of %d: SLURM_PROCID/SLURM_NTASKS are set but this is no srun step (no "
             "SLURM_STEP_ID, SLURM_STEP_NODELIST): in a batch script, start the ranks with srun "
             "(or set CHORUS_COMM_ID=host:port)",
             rank, size);
    }
    if (!found || (size == 1 && addr.empty())) {
      *procRank = 0;
      *nprocs = 1;
      return chorusGetUniqueId(uniqueId);
    }
    if (addr.empty())
      fail(chorusInvalidArgument,
           "rank %d of %d: no root address: set CHORUS_COMM_ID=host:port (or MASTER_ADDR and "
           "MASTER_PORT) to an address of the rank 0 host (under srun, Slurm's variables give it)",
           rank, size);
    SockAddr root = parseHostPort(addr);
    uint8_t secret[16];
    secretFromEnv(addr, secret);
    if (rank == 0) {
      try {
        *uniqueId = startRoot(root, secret, 0);
      } catch (const Failure&) {
        // The address may name this host by an address we cannot bind: listen on all.
        SockAddr any;
        any.ss.ss_family = root.ss.ss_family;
        any.len = root.len;
        any.setPort(root.port());
        startRoot(any, secret, 0);
        *uniqueId = encodeId(root, secret, 0);
      }
    } else {
      *uniqueId = encodeId(root, secret, 0);  // rank 0 hosts the root
    }
    *procRank = rank;
    *nprocs = size;
    return chorusSuccess;
  } catch (...) {
    const Failure e = caughtFailure(found ? rank : -1, "chorusUniqueIdFromEnv");
    setThreadLastError(e.message);
    return e.code;
  }
}

chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm) {
  chorusUniqueId id;
  int rank = 0, size = 1;
  chorusResult_t r = chorusUniqueIdFromEnv(&id, &rank, &size);
  if (r != chorusSuccess) return r;
  return chorusCommInitRank(comm, size, id, rank);
}
