// `breakwater checkpoint merge CHECKPOINT OUT_DIR`: writes a checkpoint, sharded as a run writes
// it (a manifest naming each worker's shard files) or already merged, in the single-file form:
// model.safetensors and optimizer.safetensors beside a version-2 sidecar (docs/checkpoints.md).
// Every shard is verified (size, CRC-32C, step) on the way; OUT_DIR is staged and published in
// one step, like a checkpoint.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/registry.h"
#include "cli/torch_commands.h"
#include "runtime/checkpointing.h"

namespace bw::cli {
namespace {

struct MergeArgs {
  std::string checkpoint;
  std::string out;
};

void add_merge(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* cmd = app.add_subcommand("checkpoint", torch_group_description("checkpoint"));
  cmd->require_subcommand(1);
  CLI::App* merge = cmd->add_subcommand(
      "merge", "Write a sharded checkpoint as one model and one optimizer safetensors file");
  merge->add_option("checkpoint", args->checkpoint, "checkpoint directory or its checkpoint.json")
      ->required();
  merge->add_option("out_dir", args->out, "directory to write (replaced atomically)")->required();
  merge->callback([args] {
    const auto sidecar = runtime::merge_checkpoint(args->checkpoint, args->out);
    const auto info = runtime::read_checkpoint_info(sidecar);
    fmt::print("merged step {} of {} into {}\n", info.step, args->checkpoint, sidecar);
  });
}

const Registrar kRegistrar("checkpoint merge", 62, add_merge);

}  // namespace
}  // namespace bw::cli
