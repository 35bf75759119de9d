// The worker process: connects to the coordinator's store, reads the generation's config, layout
// and start position, builds its Worker and runs the steps, reporting each step's metrics and
// writing checkpoint shards when due. Errors are published under the generation's error key (the
// coordinator shows them) and rethrown, so the process exits non-zero.
#pragma once

#include <string>

namespace bw::elastic {

struct WorkerArgs {
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int rank = 0;
  int generation = 0;
  double connect_timeout_s = 60.0;
};

void run_worker_process(const WorkerArgs& args);

}  // namespace bw::elastic
