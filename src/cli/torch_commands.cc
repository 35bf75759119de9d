#include "cli/torch_commands.h"

#include <array>
#include <string>

namespace bw::cli {

namespace {

constexpr std::array<TorchCommand, 9> kTorchCommands = {{
    {"profile measure", 20,
     "Time each layer's forward/backward and measure its memory on this machine"},
    {"train", 50, "Train a GPT with pipeline parallelism (config TOML + --section.key=value)"},
    {"coordinator", 51,
     "Run a multi-host training run: host the store, wait for agents, supervise"},
    {"launch", 52,
     "Run a multi-host training run: the coordinator here, an agent per host over ssh"},
    {"export", 60, "Write a checkpoint as a Hugging Face model folder (--format hf)"},
    {"checkpoint merge", 62,
     "Write a sharded checkpoint as one model and one optimizer safetensors file"},
    {"generate", 61, "Continue a prompt with a trained model (KV cache, streamed to stdout)"},
    {"worker", 100, ""},
    {"agent", 101, "Join a multi-host run: the agent of this node (docs/multihost.md)"},
}};

}  // namespace

std::span<const TorchCommand> torch_commands() { return kTorchCommands; }

const TorchCommand* find_torch_command(int argc, char** argv) {
  for (const TorchCommand& c : kTorchCommands) {
    std::string_view rest = c.path;
    int i = 1;
    bool match = true;
    while (match && !rest.empty()) {
      const auto space = rest.find(' ');
      const std::string_view word = rest.substr(0, space);
      match = i < argc && word == argv[i];
      ++i;
      rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
    }
    if (match) return &c;
  }
  return nullptr;
}

}  // namespace bw::cli
