// `breakwater worker` (hidden): one worker process, started by the coordinator with the address
// of its store, its rank and the generation. Not meant to be run by hand.
#include "cli/registry.h"
#include "elastic/worker_main.h"

namespace bw::cli {
namespace {

void add_worker(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "");  // empty description: hidden from --help
  cmd->group("");
  auto args = std::make_shared<elastic::WorkerArgs>();
  cmd->add_option("--store-host", args->store_host);
  cmd->add_option("--store-port", args->store_port)->required();
  cmd->add_option("--rank", args->rank)->required();
  cmd->add_option("--generation", args->generation);
  cmd->callback([args] { elastic::run_worker_process(*args); });
}

const Registrar kRegister("worker", 100, add_worker);

}  // namespace
}  // namespace bw::cli
