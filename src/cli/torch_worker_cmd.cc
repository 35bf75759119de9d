// `breakwater worker` (hidden): one worker process, started by a node's agent with the address
// of the coordinator's store, its stable worker id, its node and the node's incarnation. Not meant
// to be run by hand.
#include <unistd.h>

#include <cstdio>

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
  cmd->add_option("--worker-id", args->worker)->required();
  cmd->add_option("--node", args->node)->required();
  cmd->add_option("--device", args->device);
  cmd->add_option("--incarnation", args->incarnation);
  cmd->add_option("--gloo-host", args->gloo_host);
  cmd->add_option("--node-name", args->node_name);
  cmd->add_option("--control", args->control);
  cmd->add_option("--run-id", args->run_id);
  cmd->add_option("--leader-epoch", args->leader_epoch);
  cmd->add_option("--leaderless-timeout-s", args->leaderless_timeout_s);
  cmd->callback([args] {
    const int status = elastic::run_worker_process(*args);
    // Old process groups may still be closing on background threads: leave without running
    // static destructors under them.
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(status);
  });
}

const Registrar kRegister("worker", 100, add_worker);

}  // namespace
}  // namespace bw::cli
