// The launcher form reads rank, size and root address from the variables of each launcher:
// here the processes are started by a shell with exactly the variables Open MPI, MPICH/Hydra,
// Slurm and torchrun set (plus the root address), and must form one communicator and pass a
// small collective matrix. A real mpirun runs too when Open MPI is installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest_helpers.h"
#include "util.h"

namespace {

using namespace ctest;

struct LauncherVars {
  const char* name;
  const char* rankVar;
  const char* sizeVar;
  bool torchStyle;  // MASTER_ADDR/MASTER_PORT instead of CHORUS_COMM_ID
};

const LauncherVars kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", false},
    {"mpich", "PMI_RANK", "PMI_SIZE", false},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", false},
    {"torchrun", "RANK", "WORLD_SIZE", true},
};

class Launchers : public ShmCheckedTestP<int> {};

TEST_P(Launchers, FormOneCommunicator) {
  const LauncherVars& l = kLaunchers[GetParam()];
  const int np = 3;
  const int port = 20000 + (getpid() * 7 + GetParam() * 101) % 20000;
  std::string script;
  for (int r = 0; r < np; ++r) {
    script += std::string("env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_COMM_ID ") + l.rankVar +
              "=" + std::to_string(r) + " " + l.sizeVar + "=" + std::to_string(np) + " ";
    script += l.torchStyle ? "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port - 1)
                           : "CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port);
    script += std::string(" CHORUS_SECRET=00112233445566778899aabbccddeeff ") + MP_WORKER_PATH +
              " --counts 1,1000 --big none --timeout 100 & ";
  }
  script += "fail=0; for j in $(jobs -p); do wait $j || fail=1; done; exit $fail";
  const CommandResult r = runCommand({"/bin/sh", "-c", script}, 150);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << l.name << ":\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(Env, Launchers, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(kLaunchers[info.param].name);
                         });

TEST(Launchers, RealMpirunWhenInstalled) {
  if (access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "Open MPI's mpirun is not installed";
  const int port = 20000 + (getpid() * 13) % 20000;
  const CommandResult r =
      runCommand({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", "-x",
                  "CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port), MP_WORKER_PATH, "--counts",
                  "1,1000", "--big", "none", "--timeout", "100"},
                 150);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

}  // namespace
