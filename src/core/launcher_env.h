// The launchers whose variables the launcher form reads (src/core/launcher_env.cc), in the order
// they are tried: the first whose rank and size variables are both set wins. The one list of
// them: the Python package reads it too (chorus._chorus.LAUNCHER_VARIABLES, used by
// chorus.torch.env_from_launcher), so the C library and the torch backend agree.
#pragma once

namespace chorus {

struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* localRank;
};

inline constexpr LauncherVariables kLauncherVariables[] = {
    {"chorusrun", "CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

}  // namespace chorus
