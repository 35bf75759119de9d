// `breakwater agent` (hidden): the agent of one node, started by the coordinator with the address
// of its store; it starts and watches the node's workers (elastic/agent.h). Not meant to be run
// by hand.
#include <unistd.h>

#include <cstdio>

#include "cli/registry.h"
#include "elastic/agent.h"

namespace bw::cli {
namespace {

void add_agent(CLI::App& app) {
  auto* cmd = app.add_subcommand("agent", "");  // empty description: hidden from --help
  cmd->group("");
  auto args = std::make_shared<elastic::AgentArgs>();
  cmd->add_option("--store-host", args->store_host);
  cmd->add_option("--store-port", args->store_port)->required();
  cmd->add_option("--node", args->node)->required();
  cmd->add_option("--devices", args->devices);
  cmd->add_option("--incarnation", args->incarnation);
  cmd->callback([args] {
    const int status = elastic::run_agent(*args);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(status);
  });
}

const Registrar kRegister("agent", 101, add_agent);

}  // namespace
}  // namespace bw::cli
