// `breakwater export --format hf CHECKPOINT OUT_DIR [--dtype fp32|bf16] [--shard-gb G]`: writes a
// checkpoint's weights as a Hugging Face model folder (config.json, generation_config.json,
// model.safetensors or shards with an index, tokenizer.json when the run's data folder has one)
// that transformers.AutoModelForCausalLM.from_pretrained loads (runtime/hf.h, docs/models.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <string>

#include "cli/registry.h"
#include "core/error.h"
#include "model/gpt.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/hf.h"

namespace bw::cli {
namespace {

namespace fs = std::filesystem;

struct ExportArgs {
  std::string format = "hf";
  std::string checkpoint;
  std::string out;
  std::string dtype = "fp32";
  double shard_gb = 5.0;
};

void run_export(const ExportArgs& a) {
  if (a.format != "hf") {
    throw ConfigError(fmt::format("export --format '{}' is not supported; use --format hf", a.format));
  }
  if (a.dtype != "fp32" && a.dtype != "bf16") {
    throw ConfigError(fmt::format("export --dtype '{}': choose fp32 or bf16", a.dtype));
  }
  if (!(a.shard_gb > 0) || a.shard_gb > 1024) {
    throw ConfigError(fmt::format("export --shard-gb {} must be in (0, 1024]", a.shard_gb));
  }
  const auto ckpt = runtime::load_checkpoint(a.checkpoint);
  const auto run = runtime::parse_run_config(ckpt.info.config_toml, a.checkpoint + " (config)", {});
  auto wte = ckpt.weights.find(runtime::checkpoint_tensor_name(0, "wte.weight"));
  if (wte == ckpt.weights.end()) {
    throw ConfigError(fmt::format("{}: the weights have no layers.0.wte.weight; not a "
                                  "breakwater model checkpoint",
                                  a.checkpoint));
  }
  const auto model = [&] {
    auto m = model::resolve_config(run.model.family, run.model.name, run.model.seq_len,
                                   run.model.init_from, static_cast<int>(wte->second.size(0)));
    if (run.model.tie_embeddings) m.tie_embeddings = true;
    return m;
  }();
  runtime::HfWeights weights;
  for (int l = 0; l < model::num_layers(model); ++l) {
    const auto layer = model::build_layer(model, l, 0);  // alive while its list is read
    for (const auto& [name, p] : layer->parameter_list()) {
      const auto key = runtime::checkpoint_tensor_name(l, name);
      auto it = ckpt.weights.find(key);
      if (it == ckpt.weights.end()) {
        // A tied copy may be stored once (as the embedding).
        bool tied_copy = false;
        for (const auto& g : model::tied_groups(model)) {
          for (const auto& m : g.members) tied_copy |= m.layer == l && m.name == name;
        }
        if (tied_copy) continue;
        throw ConfigError(fmt::format("{}: missing tensor '{}'", a.checkpoint, key));
      }
      if (it->second.sizes() != p.sizes()) {
        throw ConfigError(fmt::format("{}: tensor '{}' has shape [{}], the model's is [{}]",
                                      a.checkpoint, key, fmt::join(it->second.sizes(), ", "),
                                      fmt::join(p.sizes(), ", ")));
      }
      weights[{l, name}] = it->second.to(torch::kFloat32);
    }
  }
  runtime::HfExportOptions options;
  options.dtype = a.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  options.shard_bytes = static_cast<int64_t>(a.shard_gb * 1e9);
  if (!run.data.path.empty() && fs::is_directory(run.data.path) &&
      fs::exists(fs::path(run.data.path) / "tokenizer.json")) {
    options.tokenizer_json = (fs::path(run.data.path) / "tokenizer.json").string();
  } else if (!run.model.init_from.empty() &&
             fs::exists(fs::path(run.model.init_from) / "tokenizer.json")) {
    options.tokenizer_json = (fs::path(run.model.init_from) / "tokenizer.json").string();
  }
  runtime::write_hf_folder(a.out, model, weights, options);
  fmt::print("exported step {} of {} ({} model, {} layers, {}) to {}{}\n", ckpt.info.step,
             a.checkpoint, model::family_name(model.family), model::num_layers(model), a.dtype,
             a.out, options.tokenizer_json.empty() ? "" : " with tokenizer.json");
}

void add_export(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model folder (--format hf)");
  cmd->add_option("--format", args->format, "hf (the only format)")->capture_default_str();
  cmd->add_option("checkpoint", args->checkpoint, "checkpoint sidecar JSON or directory")
      ->required();
  cmd->add_option("out_dir", args->out, "folder to write")->required();
  cmd->add_option("--dtype", args->dtype, "fp32 or bf16")->capture_default_str();
  cmd->add_option("--shard-gb", args->shard_gb, "largest safetensors file before sharding (GB)")
      ->capture_default_str();
  cmd->callback([args] { run_export(*args); });
}

const Registrar kRegistrar("export", 60, add_export);

}  // namespace
}  // namespace bw::cli
