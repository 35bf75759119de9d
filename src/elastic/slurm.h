// Defaults for agents started by Slurm (`srun breakwater agent`): the node's name from
// SLURMD_NODENAME and the coordinator from the first host of SLURM_JOB_NODELIST (or
// SLURM_NODELIST), where the job runs its coordinator, on port 29500 (BW_COORDINATOR_PORT
// overrides it). Empty strings outside Slurm.
//
// Thread-safety: free functions reading the environment.
#pragma once

#include <string>

namespace bw::elastic {

inline constexpr int kDefaultCoordinatorPort = 29500;

struct SlurmDefaults {
  std::string coordinator;  // "host:port", or empty
  std::string node_name;    // or empty
};

SlurmDefaults slurm_defaults();

// The first host of a Slurm host list: "gpu[07-09,12],login1" -> "gpu07". ConfigError when it
// is malformed.
std::string first_host(const std::string& nodelist);

}  // namespace bw::elastic
