// The subcommands that need LibTorch, as the pure `breakwater` executable knows them.
//
// Two executables (docs/cli.md): `breakwater` links only the pure layers and starts in a few
// milliseconds; `breakwater-torch`, built beside it with BW_WITH_TORCH, holds every subcommand
// (the pure ones too, so a process started from it, such as a worker the coordinator execs from
// /proc/self/exe, can run any of them). When `breakwater` is asked for a command of this table it
// replaces itself (execv) with `breakwater-torch` and the same arguments, so `breakwater train
// --help` and `breakwater train ...` are what they always were. The table only has to say which
// commands exist and what `breakwater --help` shows for them; their options live in their own
// `torch_<name>_cmd.cc` file, compiled into `breakwater-torch` only.
//
// Adding a LibTorch subcommand: write `torch_<name>_cmd.cc` with its Registrar (registry.h) and
// add one row here with the same path, order and description (an empty description hides it from
// --help, like `worker`). The test `Cli.BothExecutablesKnowTheSameCommands` fails when the two
// disagree.
#pragma once

#include <span>
#include <string_view>

namespace bw::cli {

struct TorchCommand {
  std::string_view path;         // "train", or "profile measure" for a nested one
  int order;                     // as its Registrar's
  std::string_view description;  // as its add_subcommand's; empty: hidden
};

std::span<const TorchCommand> torch_commands();

// The row whose path is the leading words of argv[1..argc), or nullptr.
const TorchCommand* find_torch_command(int argc, char** argv);

// The description of a group that only LibTorch commands live in ("checkpoint"), the same in
// both executables' --help; "" for others.
inline const char* torch_group_description(std::string_view group) {
  return group == "checkpoint" ? "Checkpoint tools (merge)" : "";
}

}  // namespace bw::cli
