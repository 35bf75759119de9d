// breakwater: the command-line entry point. Subcommands register themselves (registry.h);
// this file parses, dispatches and turns exceptions into messages and exit codes:
//   0 success, 1 a bug (internal error), 2 bad input (a ConfigError, an unusable path, a write
//   that failed, standard output included), 3 a lost peer (CommError).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

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
    // --help and --version exit 0; every malformed command line is bad input (2), whatever
    // CLI11's own code for it.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const bw::cli::ExitCode& e) {
    return e.code;
  } catch (const bw::ConfigError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const bw::CommError& e) {
    fmt::print(stderr, "communication error: {}\n", e.what());
    return 3;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user named cannot be created, listed or removed: bad input, not a bug.
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::system_error& e) {
    // fmt::print throws this when standard output cannot take the bytes (a full disk, a pipe).
    const int code = e.code().value();
    const bool output = code == ENOSPC || code == EPIPE || code == EIO || code == EDQUOT ||
                        code == EBADF || code == EFBIG;
    fmt::print(stderr, "{}: {}\n", output ? "error: cannot write output" : "internal error",
               e.what());
    return output ? 2 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return 1;
  }
  // Output to a full disk or a closed pipe must not end in a silent success.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "error: cannot write to standard output: {}\n",
               errno != 0 ? std::strerror(errno) : "write error");
    return 2;
  }
  return 0;
}
