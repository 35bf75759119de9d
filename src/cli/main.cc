// `breakwater`: the command-line entry point users run. It links only the pure layers (core,
// schedule, sim, plan, forecast), so `plan`, `schedule`, `simulate` and `profile synth` start in
// milliseconds. A LibTorch subcommand (torch_commands.h) is run by replacing this process with
// `breakwater-torch` from the same folder and the same arguments: same pid, same environment
// (plus OMP_WAIT_POLICY, below), same output, same exit status.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/app.h"
#include "cli/registry.h"
#include "cli/torch_commands.h"

namespace bw::cli {
namespace {

#ifdef BW_HAVE_TORCH
[[noreturn]] void exec_torch(const TorchCommand& c, char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto exe = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "breakwater-torch";
  // Idle OpenMP threads must sleep, not spin (docs/cli.md): LibTorch's libgomp reads this once,
  // when it is loaded, so it has to be in the environment before `breakwater-torch` starts.
  // A value the user set wins.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  execv(exe.c_str(), argv);
  fmt::print(stderr,
             "error: `{}` needs LibTorch, which lives in {} beside this executable, but it "
             "cannot be started ({}); build it with `cmake --build <build dir> --target "
             "breakwater-torch`\n",
             c.path, exe.string(), std::strerror(errno));
  std::exit(2);
}

// Stand-in for a LibTorch subcommand in --help; running it goes through exec_torch() before
// parsing, so its callback is only a fallback.
void add_stand_in(CLI::App& app, const TorchCommand& c) {
  CLI::App* parent = &app;
  std::string_view path = c.path;
  while (true) {
    const auto space = path.find(' ');
    if (space == std::string_view::npos) break;
    const std::string word(path.substr(0, space));
    CLI::App* found = nullptr;
    for (CLI::App* sub : parent->get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == word) found = sub;
    if (found == nullptr) {
      found = parent->add_subcommand(word, torch_group_description(word));
      found->require_subcommand(1);
    }
    parent = found;
    path.remove_prefix(space + 1);
  }
  CLI::App* cmd = parent->add_subcommand(std::string(path), std::string(c.description));
  if (c.description.empty()) cmd->group("");
  cmd->allow_extras();
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([] { throw ExitCode{2}; });  // unreachable: main() execs first
}
#endif

}  // namespace
}  // namespace bw::cli

int main(int argc, char** argv) {
  std::vector<bw::cli::ExtraCommand> extra;
#ifdef BW_HAVE_TORCH
  if (const auto* c = bw::cli::find_torch_command(argc, argv)) bw::cli::exec_torch(*c, argv);
#endif
  // The pure commands allocate and free tables of tens of MB one after the other (lowering,
  // validation, simulation): keep freed memory for the next one.
  bw::cli::keep_freed_memory();
#ifdef BW_HAVE_TORCH
  for (const auto& c : bw::cli::torch_commands())
    extra.push_back(
        {c.order, std::string(c.path), [&c](CLI::App& app) { bw::cli::add_stand_in(app, c); }});
#endif
  return bw::cli::run_app(argc, argv, extra);
}
