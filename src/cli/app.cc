#include "cli/app.h"

#include <fmt/core.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "cli/registry.h"
#include "core/error.h"

namespace bw::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

namespace {

void list_paths(const CLI::App& app, const std::string& prefix) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string path = prefix.empty() ? sub->get_name() : prefix + " " + sub->get_name();
    fmt::print("{}\n", path);
    list_paths(*sub, path);
  }
}

// The command line as CLI11's parse takes it (reversed, without the program name), with each
// "--name=" that has nothing after '=' and names a value-taking option of the subcommand it
// follows split into "--name" and "": CLI11 reads an empty "=value" as no value and takes the
// next argument in its place, so `generate --tokenizer= --prompt hi` would read the tokenizer
// "--prompt". Given this way it is the empty value, as `--tokenizer ''` is. Arguments after
// "--", and options the command does not declare (train's --section.key overrides), pass as
// they are.
std::vector<std::string> reversed_args(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> out;
  CLI::App* command = &app;
  bool options_end = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") options_end = true;
    if (!options_end) {
      CLI::App* sub = nullptr;
      for (CLI::App* s : command->get_subcommands([](CLI::App*) { return true; }))
        if (s->check_name(arg)) sub = s;
      if (sub != nullptr) command = sub;
      const auto eq = arg.find('=');
      if (sub == nullptr && arg.size() > 3 && arg.rfind("--", 0) == 0 && eq == arg.size() - 1) {
        const std::string name = arg.substr(0, eq);
        const CLI::Option* opt = command->get_option_no_throw(name);
        if (opt != nullptr && opt->get_items_expected_max() >= 1) {
          out.push_back(name);
          out.emplace_back();
          continue;
        }
      }
    }
    out.push_back(arg);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

void print_command_paths(const CLI::App& app) { list_paths(app, ""); }

void keep_freed_memory() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX"}) {
    if (std::getenv(name) != nullptr) return;
  }
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int run_app(int argc, char** argv, const std::vector<ExtraCommand>& extra) {
  CLI::App app{
      "breakwater: fast and resilient pipeline-parallel training (wave schedules + pipeline "
      "templates)",
      "breakwater"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "breakwater 0.1.0");
  // Sorted by (order, name), not by static-initialisation order, which depends on link order.
  std::vector<ExtraCommand> commands = extra;
  for (const auto& c : registry()) commands.push_back({c.order, c.name, c.add});
  std::stable_sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) {
    return std::tie(a.order, a.name) < std::tie(b.order, b.name);
  });
  for (const auto& c : commands) c.add(app);
  if (argc == 2 && std::strcmp(argv[1], "--list-commands") == 0) {
    print_command_paths(app);
    return 0;
  }
  try {
    app.parse(reversed_args(app, argc, argv));
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every malformed command line is bad input (2), whatever
    // CLI11's own code for it.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const ExitCode& e) {
    return e.code;
  } catch (const ConfigError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const CommError& e) {
    fmt::print(stderr, "communication error: {}\n", e.what());
    return 3;
  } catch (const Interrupted& e) {
    fmt::print(stderr, "stopped: {}\n", e.what());
    return 130;
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

}  // namespace bw::cli
