// The command-line application both executables share: builds the CLI11 app from the subcommands
// registered in this executable (registry.h), parses, dispatches and turns exceptions into
// messages and exit codes (0 ok, 1 internal error, 2 bad input, 3 communication error).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace bw::cli {

// Extra subcommands to add besides the registered ones (the pure executable's stand-ins for the
// LibTorch ones, torch_commands.h). All are added in (order, name) order.
struct ExtraCommand {
  int order;
  std::string name;
  std::function<void(CLI::App&)> add;
};

int run_app(int argc, char** argv, const std::vector<ExtraCommand>& extra = {});

// Both executables call this first. glibc then serves blocks up to 256 MB from its heap and gives
// the heap's top back to the kernel only beyond 1 GB free, so memory freed by one table or one
// training step is reused by the next instead of being mapped and faulted in again (docs/cli.md
// "Start-up costs"; docs/models.md "Host memory and the gradient norm"). Allocator settings in the
// environment (GLIBC_TUNABLES' glibc.malloc.*, glibc's MALLOC_*_ variables) are kept instead.
void keep_freed_memory();

// `--list-commands` (not in --help): prints every subcommand path this executable knows, one a
// line ("profile measure"), hidden ones included; tests compare the two executables with it.
void print_command_paths(const CLI::App& app);

}  // namespace bw::cli
