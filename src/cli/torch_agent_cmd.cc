// `breakwater agent --coordinator ADDR:PORT [--node-name NAME] [--devices g]`: the agent of one
// node of a multi-host run (elastic/agent.h, docs/multihost.md). It registers with the
// coordinator (proving BW_RUN_TOKEN), starts and watches the node's workers, and re-joins after
// its node was taken out. Under Slurm (`srun breakwater agent`) the node name and the coordinator
// default to SLURMD_NODENAME and the first host of SLURM_JOB_NODELIST (port 29500).
// Local runs start agents themselves with the hidden --store-port/--node form.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/registry.h"
#include "core/error.h"
#include "elastic/agent.h"
#include "elastic/control_store.h"
#include "elastic/net.h"
#include "elastic/slurm.h"
#include "elastic/token.h"
#include "runtime/log.h"

namespace bw::cli {
namespace {

struct AgentCli {
  elastic::AgentArgs args;
  std::string coordinator;
  std::string log_level;
  int devices = 0;
};

void add_agent(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "agent", "Join a multi-host run: the agent of this node (docs/multihost.md)");
  auto cli = std::make_shared<AgentCli>();
  cmd->add_option("--coordinator", cli->coordinator,
                  "ADDR:PORT the coordinator listens on (default under Slurm: the first host of "
                  "SLURM_JOB_NODELIST, port 29500)");
  cmd->add_option("--node-name", cli->args.node_name,
                  "name of this node in the run (default: SLURMD_NODENAME, else the host name)");
  cmd->add_option("--devices", cli->devices,
                  "workers on this node; must match cluster.devices_per_node (default: the run's)");
  cmd->add_option("--wait-s", cli->args.wait_s,
                  "longest wait for the coordinator to answer, accept or come back (default 600)");
  cmd->add_option("--control", cli->args.control,
                  "etcd://HOST:PORT[,...]: the run's control store; the coordinator is whoever "
                  "leads --run-id there, and the agent follows a takeover (docs/elastic.md)");
  cmd->add_option("--run-id", cli->args.run_id, "the run's id in the control store (--control)");
  cmd->add_option("--leaderless-timeout-s", cli->args.leaderless_timeout_s,
                  "with --control: longest wait for a coordinator to take the run over before "
                  "exit 3 (default 30)");
  cmd->add_option("--log-level", cli->log_level, "error | warn | info | debug");
  cmd->add_flag("--token-stdin", cli->args.token_stdin,
                "read the run token from the first line of standard input and stop when it "
                "closes (how `breakwater launch` starts agents)");
  // Local runs: the coordinator starts each agent with its node id (not for people).
  cmd->add_option("--store-host", cli->args.store_host)->group("");
  cmd->add_option("--store-port", cli->args.store_port)->group("");
  cmd->add_option("--node", cli->args.node)->group("");
  cmd->add_option("--incarnation", cli->args.incarnation)->group("");
  cmd->footer(
      "\nThe run token comes from BW_RUN_TOKEN, which must equal the coordinator's; a refused\n"
      "agent exits with status 2. GLOO_SOCKET_IFNAME names the interface Gloo uses (default: the\n"
      "one that reaches the coordinator). This host needs the run's corpus at data.path, and\n"
      "a run with model.init_from needs that Hugging Face folder at the same path (the same\n"
      "content as the coordinator's, else the agent is refused); nothing is written here.\n"
      "Exit status: 0 when the run finished, 3 when the coordinator could not be reached or the\n"
      "run stopped.");
  cmd->callback([cmd, cli] {
    if (!cli->log_level.empty()) runtime::set_log_level(runtime::parse_log_level(cli->log_level));
    auto& args = cli->args;
    int status = 0;
    if (cmd->count("--store-port") > 0) {
      if (cmd->count("--coordinator") > 0) {
        throw ConfigError(
            "--coordinator and --store-port are two ways to start an agent; give one");
      }
      args.devices = cli->devices > 0 ? cli->devices : 1;
      status = elastic::run_agent(args);
    } else {
      const auto slurm = elastic::slurm_defaults();
      std::string where = cli->coordinator;
      if (!args.control.empty()) {
        // The coordinator's address is read from the control store.
        const auto url = elastic::parse_control_url(args.control);
        if (url.kind != elastic::ControlUrl::Kind::kEtcd) {
          throw ConfigError(fmt::format(
              "agent --control '{}': only an etcd control store (etcd://HOST:PORT) has a "
              "coordinator to follow; leave --control out for the embedded store",
              args.control));
        }
        if (args.run_id.empty()) throw ConfigError("agent --control needs --run-id");
        if (!where.empty()) {
          throw ConfigError(
              "--coordinator and --control are two ways to find the coordinator; give one");
        }
        if (args.leaderless_timeout_s <= 0) {
          throw ConfigError("--leaderless-timeout-s must be > 0");
        }
        elastic::check_run_id(args.run_id);
      } else {
        if (where.empty()) where = slurm.coordinator;
        if (where.empty()) {
          throw ConfigError(
              "agent: give --coordinator ADDR:PORT (the address the coordinator's --listen "
              "printed), or --control and --run-id");
        }
        const auto hp = elastic::parse_host_port(where, "--coordinator");
        if (hp.port == 0) throw ConfigError("--coordinator needs the coordinator's port, not 0");
        args.store_host = hp.host;
        args.store_port = hp.port;
      }
      if (args.node_name.empty()) args.node_name = slurm.node_name;
      args.devices = cli->devices;
      if (args.devices < 0 || (cmd->count("--devices") > 0 && args.devices < 1)) {
        throw ConfigError(fmt::format(
            "--devices must be >= 1, got {}; omit it to use the run's cluster.devices_per_node",
            args.devices));
      }
      if (args.wait_s <= 0) throw ConfigError("--wait-s must be > 0");
      if (!args.token_stdin) args.token = elastic::agent_token();
      status = elastic::run_remote_agent(args);
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(status);
  });
}

const Registrar kRegister("agent", 101, add_agent);

}  // namespace
}  // namespace bw::cli
