#include "runtime/hf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <torch/torch.h>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "model/hf_config.h"
#include "model/init.h"
#include "runtime/safetensors_map.h"

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

// A stored tensor: its file and its entry there.
struct Stored {
  const MappedSafetensors* file;
  const SafetensorsSpan* span;
};

// The folder's weight files, mapped, in the order of the index (or model.safetensors alone).
std::vector<std::unique_ptr<MappedSafetensors>> map_folder(
    const std::string& dir, std::map<std::string, std::string>& indexed) {
  const std::string index = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
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
  std::vector<std::unique_ptr<MappedSafetensors>> out;
  for (const auto& file : files) {
    out.push_back(std::make_unique<MappedSafetensors>(dir + "/" + file));
  }
  return out;
}

// Every tensor of the mapped files by its stored name.
std::map<std::string, Stored> stored_tensors(
    const std::string& dir, const std::vector<std::unique_ptr<MappedSafetensors>>& files,
    const std::map<std::string, std::string>& indexed) {
  const std::string index = dir + "/model.safetensors.index.json";
  std::map<std::string, Stored> out;
  for (const auto& f : files) {
    const std::string file = fs::path(f->path()).filename().string();
    for (const auto& span : f->layout().spans) {
      const std::string& name = span.name;
      if (out.count(name)) {
        throw ConfigError(
            fmt::format("{}: tensor '{}' is also in {}", f->path(), name, out.at(name).file->path()));
      }
      if (!indexed.empty() && (!indexed.count(name) || indexed.at(name) != file)) {
        throw ConfigError(
            fmt::format("{}: tensor '{}' is not where {} says it is", f->path(), name, index));
      }
      out[name] = {f.get(), &span};
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

HfFolder::HfFolder(const model::GptConfig& config) : dir_(config.init_from) {
  const std::string& dir = dir_;
  BW_CHECK(!dir.empty(), "HfFolder without init_from");
  std::map<std::string, std::string> indexed;  // tensor -> file, from the index
  files_ = map_folder(dir, indexed);
  auto stored = stored_tensors(dir, files_, indexed);
  // A file that records its data's CRC-32C is checked before any layer reads it.
  for (const auto& f : files_) {
    if (f->layout().metadata.count(kDataCrcKey)) f->verify();
  }
  const bool gpt2 = config.family == model::Family::kGpt2;
  // GPT-2 checkpoints of older transformers store names without "transformer." and the
  // non-persistent causal masks; take both as transformers does.
  if (gpt2) {
    std::map<std::string, Stored> renamed;
    for (auto& [name, src] : stored) {
      const bool mask = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
      if (mask) continue;
      std::string n = name;
      if (!n.starts_with("transformer.") && n != "lm_head.weight") n = "transformer." + n;
      if (renamed.count(n)) {
        throw ConfigError(
            fmt::format("{}: tensor '{}' is stored twice ('{}')", src.file->path(), n, name));
      }
      renamed[n] = src;
    }
    stored = std::move(renamed);
  }
  const std::string where = dir + "/config.json";
  for (const auto& t : model::hf_tensors(config)) {
    auto it = stored.find(t.name);
    if (it == stored.end()) {
      throw ConfigError(fmt::format(
          "{}: missing tensor '{}', which {} implies; the folder does not hold this model", dir,
          t.name, where));
    }
    const Stored& src = it->second;
    const std::string& dtype = src.span->dtype;
    if (dtype != "F32" && dtype != "BF16" && dtype != "F16") {
      throw ConfigError(
          fmt::format("{}: tensor '{}' has dtype {}; breakwater reads F32, BF16 "
                      "and F16",
                      src.file->path(), t.name, dtype));
    }
    auto want = expected_shape(config, t.targets.front().layer, t.targets.front().name);
    auto stored_shape = want;
    if (t.transposed) std::swap(stored_shape[0], stored_shape[1]);
    if (src.span->shape != stored_shape) {
      throw ConfigError(fmt::format("{}: tensor '{}' has shape {} but {} implies {}",
                                    src.file->path(), t.name, shape_str(src.span->shape), where,
                                    shape_str(stored_shape)));
    }
    for (const auto& target : t.targets) {
      entries_[{target.layer, target.name}] = {src.file, src.span, t.transposed};
    }
    stored.erase(it);
  }
  if (config.tie_embeddings) {
    if (auto it = stored.find("lm_head.weight"); it != stored.end()) {
      const Entry& wte = entries_.at({0, "wte.weight"});
      const Stored& head = it->second;
      bool same = head.span->shape == wte.span->shape;
      if (same) {
        torch::NoGradGuard no_grad;
        same = torch::equal(head.file->view(*head.span).to(torch::kFloat32),
                            wte.file->view(*wte.span).to(torch::kFloat32));
        head.file->release(*head.span);
        wte.file->release(*wte.span);
      }
      if (!same) {
        throw ConfigError(
            fmt::format("{}: tensor 'lm_head.weight' differs from the embedding, but {} ties them "
                        "(tie_word_embeddings); set tie_word_embeddings to false",
                        head.file->path(), where));
      }
      stored.erase(it);
    }
  }
  if (!stored.empty()) {
    const auto& [name, src] = *stored.begin();
    throw ConfigError(
        fmt::format("{}: unexpected tensor '{}' ({} in all), not part of the {} "
                    "model {} describes",
                    src.file->path(), name, stored.size(), model::family_name(config.family),
                    where));
  }
}

HfFolder::~HfFolder() = default;

void HfFolder::copy_into(int layer, const std::string& name, torch::Tensor dst) const {
  auto it = entries_.find({layer, name});
  BW_CHECK(it != entries_.end(), "no Hugging Face weight for layer {} {}", layer, name);
  const Entry& e = it->second;
  torch::NoGradGuard no_grad;
  auto src = e.file->view(*e.span);
  if (e.transposed) src = src.t();
  BW_CHECK(dst.sizes() == src.sizes(), "layer {} {}: shape {} for a weight of {}", layer, name,
           shape_str(dst.sizes().vec()), shape_str(src.sizes().vec()));
  dst.copy_(src);
  e.file->release(*e.span);
}

std::string HfFolder::content_digest() const {
  const std::string config_json = dir_ + "/config.json";
  const std::string text = io::read_file(config_json, int64_t{64} << 20, "config file");
  std::string out = fmt::format("config.json CRC-32C {}", crc32c_hex(crc32c(text.data(),
                                                                              text.size())));
  for (const auto& f : files_) {
    const auto d = f->verify();
    out += fmt::format(", {} {} bytes CRC-32C {}", fs::path(f->path()).filename().string(),
                       d.bytes, crc32c_hex(d.crc32c));
  }
  return out;
}

std::shared_ptr<const HfFolder> hf_folder(const model::GptConfig& config) {
  static std::mutex mu;
  static std::string cached_dir;
  static std::shared_ptr<const HfFolder> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached || cached_dir != config.init_from) {
    cached.reset();  // unmapped before the next is mapped
    cached = std::make_shared<const HfFolder>(config);
    cached_dir = config.init_from;
  }
  return cached;
}

HfWeights read_hf_weights(const model::GptConfig& config) {
  const HfFolder folder(config);
  HfWeights out;
  for (const auto& t : model::hf_tensors(config)) {
    const auto& first = t.targets.front();
    auto value = torch::empty(expected_shape(config, first.layer, first.name), torch::kFloat32);
    folder.copy_into(first.layer, first.name, value);
    for (const auto& target : t.targets) out[{target.layer, target.name}] = value;
  }
  return out;
}

std::shared_ptr<model::Layer> initial_layer(const model::GptConfig& config, int layer,
                                            uint64_t seed) {
  if (config.init_from.empty()) return model::build_layer(config, layer, seed);
  std::shared_ptr<model::Layer> built;
  {
    model::SkipInit skip;  // every parameter is copied below
    built = model::build_layer(config, layer, seed);
  }
  const auto folder = hf_folder(config);
  for (const auto& [name, p] : built->parameter_list()) folder->copy_into(layer, name, p);
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
