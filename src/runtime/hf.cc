#include "runtime/hf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/json.h"
#include "model/hf_config.h"
#include "model/init.h"

namespace bw::runtime {
namespace {

namespace fs = std::filesystem;

// The shape config.json implies for breakwater parameter `param` of layer `layer`.
std::vector<int64_t> expected_shape(const model::GptConfig& c, int layer, const std::string& p) {
  const int64_t d = c.d_model, v = c.vocab_size, f = model::ffn_width(c);
  const int64_t kv = int64_t{model::kv_heads(c)} * (d / c.n_heads);
  const bool llama = c.family == model::Family::kLlama;
  if (p == "wte.weight" || p == "lm_head.weight") return {v, d};
  if (p == "wpe.weight") return {model::position_rows(c), d};
  if (p == "attn.qkv.weight") return {3 * d, d};
  if (p == "attn.qkv.bias") return {3 * d};
  if (p == "attn.proj.weight" || p == "attn.q.weight") return {d, d};
  if (p == "attn.k.weight" || p == "attn.v.weight") return {kv, d};
  if (p == "mlp.fc.weight") return {4 * d, d};
  if (p == "mlp.fc.bias") return {4 * d};
  if (p == "mlp.proj.weight") return {d, llama ? f : 4 * d};
  if (p == "mlp.gate.weight" || p == "mlp.up.weight") return {f, d};
  BW_CHECK(layer >= 0, "layer {}", layer);
  return {d};  // norms and the remaining biases
}

struct Source {
  torch::Tensor tensor;
  std::string file;
};

// Every tensor of the folder by its stored name, with the file it came from.
std::map<std::string, Source> read_folder(const std::string& dir) {
  std::map<std::string, Source> out;
  const std::string index = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> indexed;  // tensor -> file, from the index
  if (fs::exists(index)) {
    const auto doc = json::read_file(index);
    if (!doc.is_object() || !doc.contains("weight_map") || !doc.at("weight_map").is_object()) {
      throw ConfigError(fmt::format("{}: missing field 'weight_map' (an object)", index));
    }
    std::set<std::string> seen;
    for (auto it = doc.at("weight_map").begin(); it != doc.at("weight_map").end(); ++it) {
      if (!it.value().is_string()) {
        throw ConfigError(fmt::format("{}: weight_map['{}'] must be a file name", index, it.key()));
      }
      const std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "..") {
        throw ConfigError(fmt::format(
            "{}: weight_map['{}'] = '{}' is not a file name in the folder", index, it.key(), file));
      }
      if (!fs::exists(dir + "/" + file)) {
        throw ConfigError(fmt::format(
            "{}: weight_map['{}'] names '{}', which does not exist in {}; copy the missing shard",
            index, it.key(), file, dir));
      }
      indexed[it.key()] = file;
      if (seen.insert(file).second) files.push_back(file);
    }
  } else {
    if (!fs::exists(dir + "/model.safetensors")) {
      throw ConfigError(fmt::format(
          "{}: neither model.safetensors nor model.safetensors.index.json; model.init_from "
          "takes a Hugging Face model folder",
          dir));
    }
    files.push_back("model.safetensors");
  }
  for (const auto& file : files) {
    const std::string path = dir + "/" + file;
    auto st = load_safetensors(path);
    for (auto& [name, t] : st.tensors) {
      if (out.count(name)) {
        throw ConfigError(
            fmt::format("{}: tensor '{}' is also in {}", path, name, out.at(name).file));
      }
      if (!indexed.empty() && (!indexed.count(name) || indexed.at(name) != file)) {
        throw ConfigError(
            fmt::format("{}: tensor '{}' is not where {} says it is", path, name, index));
      }
      out[name] = {std::move(t), path};
    }
  }
  for (const auto& [name, file] : indexed) {
    if (!out.count(name)) {
      throw ConfigError(
          fmt::format("{}/{}: missing tensor '{}' (named in {})", dir, file, name, index));
    }
  }
  return out;
}

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace

HfWeights read_hf_weights(const model::GptConfig& config) {
  const std::string& dir = config.init_from;
  BW_CHECK(!dir.empty(), "read_hf_weights without init_from");
  auto stored = read_folder(dir);
  const bool gpt2 = config.family == model::Family::kGpt2;
  // GPT-2 checkpoints of older transformers store names without "transformer." and the
  // non-persistent causal masks; take both as transformers does.
  if (gpt2) {
    std::map<std::string, Source> renamed;
    for (auto& [name, src] : stored) {
      const bool mask = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
      if (mask) continue;
      std::string n = name;
      if (!n.starts_with("transformer.") && n != "lm_head.weight") n = "transformer." + n;
      if (renamed.count(n)) {
        throw ConfigError(fmt::format("{}: tensor '{}' is stored twice ('{}')", src.file, n, name));
      }
      renamed[n] = std::move(src);
    }
    stored = std::move(renamed);
  }
  const std::string where = dir + "/config.json";
  HfWeights out;
  for (const auto& t : model::hf_tensors(config)) {
    auto it = stored.find(t.name);
    if (it == stored.end()) {
      throw ConfigError(fmt::format(
          "{}: missing tensor '{}', which {} implies; the folder does not hold this model", dir,
          t.name, where));
    }
    const Source& src = it->second;
    const auto type = src.tensor.scalar_type();
    if (type != torch::kFloat32 && type != torch::kBFloat16 && type != torch::kFloat16) {
      throw ConfigError(
          fmt::format("{}: tensor '{}' has dtype {}; breakwater reads F32, BF16 "
                      "and F16",
                      src.file, t.name, safetensors_dtype(type)));
    }
    auto want = expected_shape(config, t.targets.front().layer, t.targets.front().name);
    auto stored_shape = want;
    if (t.transposed) std::swap(stored_shape[0], stored_shape[1]);
    if (src.tensor.sizes().vec() != stored_shape) {
      throw ConfigError(fmt::format("{}: tensor '{}' has shape {} but {} implies {}", src.file,
                                    t.name, shape_str(src.tensor.sizes().vec()), where,
                                    shape_str(stored_shape)));
    }
    auto value = (t.transposed ? src.tensor.t() : src.tensor).to(torch::kFloat32).contiguous();
    for (const auto& target : t.targets) out[{target.layer, target.name}] = value;
    stored.erase(it);
  }
  if (config.tie_embeddings) {
    if (auto it = stored.find("lm_head.weight"); it != stored.end()) {
      const auto& wte = out.at({0, "wte.weight"});
      if (it->second.tensor.sizes() != wte.sizes() ||
          !torch::equal(it->second.tensor.to(torch::kFloat32), wte)) {
        throw ConfigError(
            fmt::format("{}: tensor 'lm_head.weight' differs from the embedding, but {} ties them "
                        "(tie_word_embeddings); set tie_word_embeddings to false",
                        it->second.file, where));
      }
      stored.erase(it);
    }
  }
  if (!stored.empty()) {
    const auto& [name, src] = *stored.begin();
    throw ConfigError(
        fmt::format("{}: unexpected tensor '{}' ({} in all), not part of the {} "
                    "model {} describes",
                    src.file, name, stored.size(), model::family_name(config.family), where));
  }
  return out;
}

std::shared_ptr<const HfWeights> hf_weights(const model::GptConfig& config) {
  static std::mutex mu;
  static std::string cached_dir;
  static std::shared_ptr<const HfWeights> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached || cached_dir != config.init_from) {
    cached = std::make_shared<const HfWeights>(read_hf_weights(config));
    cached_dir = config.init_from;
  }
  return cached;
}

std::shared_ptr<model::Layer> initial_layer(const model::GptConfig& config, int layer,
                                            uint64_t seed) {
  if (config.init_from.empty()) return model::build_layer(config, layer, seed);
  std::shared_ptr<model::Layer> built;
  {
    model::SkipInit skip;  // every parameter is copied below
    built = model::build_layer(config, layer, seed);
  }
  const auto weights = hf_weights(config);
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : built->parameter_list()) {
    auto it = weights->find({layer, name});
    BW_CHECK(it != weights->end(), "no Hugging Face weight for layer {} {}", layer, name);
    p.copy_(it->second);
  }
  return built;
}

void write_hf_folder(const std::string& out_dir, const model::GptConfig& config,
                     const HfWeights& weights, const HfExportOptions& options) {
  const auto tensors = model::hf_tensors(config);  // ConfigError for the gpt family
  const std::string dtype = options.dtype == torch::kBFloat16 ? "bfloat16" : "float32";
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw ConfigError(fmt::format("cannot create {}: {}", out_dir, ec.message()));
  // Shards of at most shard_bytes (one tensor larger than that is a shard of its own).
  std::vector<NamedTensors> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const auto& target = t.targets.front();
    auto it = weights.find({target.layer, target.name});
    BW_CHECK(it != weights.end(), "export: no layer {} {}", target.layer, target.name);
    auto value = (t.transposed ? it->second.t() : it->second).to(options.dtype).contiguous();
    const int64_t bytes = static_cast<int64_t>(value.nbytes());
    if (in_shard > 0 && in_shard + bytes > options.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(t.name, value);
    in_shard += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    save_safetensors(out_dir + "/model.safetensors", shards.front(), metadata);
  } else {
    nlohmann::json map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      save_safetensors(out_dir + "/" + file, shards[i], metadata);
      for (const auto& [name, v] : shards[i]) map[name] = file;
    }
    json::write_file(out_dir + "/model.safetensors.index.json",
                     {{"metadata", {{"total_size", total}}}, {"weight_map", map}});
  }
  json::write_file(out_dir + "/config.json", model::hf_config_json(config, dtype));
  json::write_file(out_dir + "/generation_config.json", model::hf_generation_config_json(config));
  if (!options.tokenizer_json.empty()) {
    fs::copy_file(options.tokenizer_json, out_dir + "/tokenizer.json",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      throw ConfigError(
          fmt::format("cannot copy {} to {}: {}", options.tokenizer_json, out_dir, ec.message()));
    }
  }
}

}  // namespace bw::runtime
