// breakwater: the command-line entry point. Subcommands register themselves (registry.h);
// this file parses, dispatches and turns exceptions into messages and exit codes.
#include <algorithm>
#include <cstdio>

#include <fmt/core.h>

#include "cli/registry.h"
#include "core/error.h"

namespace bw::cli {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace bw::cli

int main(int argc, char** argv) {
  CLI::App app{
      "breakwater: fast and resilient pipeline-parallel training (wave schedules + pipeline "
      "templates)",
      "breakwater"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "breakwater 0.1.0");
  auto commands = bw::cli::registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& c : commands) c.add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const bw::cli::ExitCode& e) {
    return e.code;
  } catch (const bw::ConfigError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const bw::CommError& e) {
    fmt::print(stderr, "communication error: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}
