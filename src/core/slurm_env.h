// The root address of a job step started by Slurm's srun, from Slurm's own variables, so that
// `srun -n 4 prog` needs no CHORUS_COMM_ID or MASTER_ADDR/MASTER_PORT:
//   host: the first host of the step's node list (SLURM_STEP_NODELIST), where srun's block and
//         cyclic distributions place task 0;
//   port: 20000 + (SLURM_JOB_ID * 101 + SLURM_STEP_ID) mod 12000, the same in every task of a
//         step, different for the concurrent steps of one job, below Linux's ephemeral range.
// Only inside a job step (srun sets SLURM_STEP_ID and SLURM_STEP_NODELIST): a batch script's own
// environment also holds SLURM_PROCID=0 and SLURM_NTASKS=N, but no step, and no other rank.
// Inline (header only): the C library's launcher form (launcher_env.cc) and the Python
// package's chorus.torch (through chorus._chorus.slurm_first_host and slurm_root_port) use
// this one definition.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace chorus {

// The first host name of a Slurm host list: "vm" -> "vm", "node[03-07,12],login1" -> "node03",
// "rack[1-2]-n[5,7]" -> "rack1-n5". Empty when the list is empty or malformed.
inline std::string slurmFirstHost(const std::string& list) {
  std::string host;
  size_t i = 0;
  while (i < list.size() && list[i] != ',') {
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    size_t close = list.find(']', i);
    if (close == std::string::npos) return "";
    size_t end = i + 1;  // the first item of the bracket: digits up to '-', ',' or ']'
    while (end < close && list[end] != '-' && list[end] != ',') ++end;
    if (end == i + 1) return "";
    host += list.substr(i + 1, end - i - 1);
    i = close + 1;
  }
  return host;
}

// The derived port for a job id and a step id.
inline int slurmRootPort(uint64_t jobId, uint64_t stepId) {
  return 20000 + int((jobId * 101 + stepId) % 12000);
}

// "host:port" for the current srun step, or "" outside one (no job id, step id or step nodes).
inline std::string slurmRootAddress() {
  const char* job = getenv("SLURM_JOB_ID");
  if (!job || !*job) job = getenv("SLURM_JOBID");
  const char* step = getenv("SLURM_STEP_ID");
  if (!step || !*step) step = getenv("SLURM_STEPID");
  const char* nodes = getenv("SLURM_STEP_NODELIST");
  if (!job || !*job || !step || !*step || !nodes || !*nodes) return "";
  std::string host = slurmFirstHost(nodes);
  if (host.empty()) return "";
  return host + ":" +
         std::to_string(slurmRootPort(strtoull(job, nullptr, 10), strtoull(step, nullptr, 10)));
}

}  // namespace chorus
