// Subcommand registry: each `*_cmd.cc` file adds its subcommand with a static Registrar, so the
// commands live in separate files and main.cc needs no list of them. Commands run from CLI11
// callbacks; they print with fmt and signal failure by throwing (ConfigError for bad input) or by
// throwing ExitCode for a specific status.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace bw::cli {

using RegisterFn = void (*)(CLI::App& app);

struct Command {
  std::string name;
  int order;  // registration order; lower first (a command may extend an earlier one)
  RegisterFn add;
};

std::vector<Command>& registry();

struct Registrar {
  Registrar(std::string name, int order, RegisterFn add) {
    registry().push_back({std::move(name), order, add});
  }
};

// Thrown by a command to end the process with `code` after printing nothing more.
struct ExitCode {
  int code;
};

}  // namespace bw::cli
