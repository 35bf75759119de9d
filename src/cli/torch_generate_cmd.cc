// `breakwater generate --checkpoint C [--tokenizer T] --prompt "..." [--max-tokens N]
// [--temperature X] [--top-k K] [--seed S]`: continues a prompt with a trained model in this
// process, with a KV cache (model/generate.h), for every model family. C is a breakwater
// checkpoint (its directory or checkpoint.json) or a Hugging Face model folder (config.json and
// model.safetensors, as model.init_from reads it). The text streams to stdout as it is generated
// (one flush per token): decoded when a tokenizer is known (--tokenizer, else a tokenizer.json
// in the checkpoint's or the Hugging Face folder, else the run's data tokenizer), token ids
// otherwise (bytes for a byte-level model). The run ends with tokens/s on stderr (docs/cli.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "cli/registry.h"
#include "core/error.h"
#include "data/dataset.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "model/hf_config.h"
#include "model/init.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"
#include "runtime/hf.h"
#include "runtime/run_data.h"
#include "tokenizer/tokenizer.h"

namespace bw::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxTokens = 1 << 20;

struct GenerateArgs {
  std::string checkpoint;
  std::string tokenizer;
  bool tokenizer_given = false;  // --tokenizer '' means none, not the default
  std::string prompt;
  int max_tokens = 100;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 0;
};

// A model ready to run: its config (seq_len still the trained one), the weights by (layer,
// name), and where a tokenizer may be found.
struct Source {
  model::GptConfig config;
  runtime::HfWeights weights;                       // a checkpoint's, or
  std::shared_ptr<const runtime::HfFolder> folder;  // a Hugging Face folder, mapped
  std::string tokenizer;  // "" = none found
  std::string kind;       // "Hugging Face folder" or "checkpoint step N"
};

bool is_hf_folder(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec) &&
         !fs::exists(p / "checkpoint.json", ec);
}

std::string existing(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

Source load_hf(const std::string& dir) {
  Source s;
  s.config = model::hf_config_from_dir(dir);
  s.folder = std::make_shared<const runtime::HfFolder>(s.config);
  s.tokenizer = existing(fs::path(dir) / "tokenizer.json");
  s.kind = "Hugging Face folder";
  return s;
}

Source load_breakwater(const std::string& path) {
  const auto ckpt = runtime::load_checkpoint(path);
  const auto run = runtime::parse_run_config(ckpt.info.config_toml, path + " (config)", {});
  auto wte = ckpt.weights.find(runtime::checkpoint_tensor_name(0, "wte.weight"));
  if (wte == ckpt.weights.end()) {
    throw ConfigError(fmt::format(
        "{}: the weights have no layers.0.wte.weight; not a breakwater model checkpoint", path));
  }
  Source s;
  s.config = model::resolve_config(run.model.family, run.model.name, run.model.seq_len,
                                   run.model.init_from, static_cast<int>(wte->second.size(0)));
  if (run.model.tie_embeddings) s.config.tie_embeddings = true;
  for (int l = 0; l < model::num_layers(s.config); ++l) {
    model::SkipInit skip;                                   // only the names are read
    const auto layer = model::build_layer(s.config, l, 0);  // alive while its list is read
    for (const auto& [name, p] : layer->parameter_list()) {
      const auto key = runtime::checkpoint_tensor_name(l, name);
      auto it = ckpt.weights.find(key);
      if (it == ckpt.weights.end())
        throw ConfigError(fmt::format("{}: missing tensor '{}'", path, key));
      if (it->second.sizes() != p.sizes()) {
        throw ConfigError(fmt::format("{}: tensor '{}' has shape [{}], the model's is [{}]", path,
                                      key, fmt::join(it->second.sizes(), ", "),
                                      fmt::join(p.sizes(), ", ")));
      }
      s.weights[{l, name}] = it->second.to(torch::kFloat32);
    }
  }
  // A tokenizer.json in the checkpoint's folder, else the run's data tokenizer, else the
  // init_from folder's.
  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  s.tokenizer = existing(dir / "tokenizer.json");
  if (s.tokenizer.empty() && !run.data.tokenizer.empty())
    s.tokenizer = existing(run.data.tokenizer);
  if (s.tokenizer.empty()) s.tokenizer = runtime::tokenizer_beside(run.data.path);
  if (s.tokenizer.empty() && !run.model.init_from.empty()) {
    s.tokenizer = existing(fs::path(run.model.init_from) / "tokenizer.json");
  }
  s.kind = fmt::format("checkpoint step {}", ckpt.info.step);
  return s;
}

// The positions a model can attend over: learned rows (gpt, gpt2) or max_position_embeddings.
int context_of(const model::GptConfig& c) {
  if (c.family == model::Family::kLlama) return c.max_positions > 0 ? c.max_positions : c.seq_len;
  return model::position_rows(c);
}

// Without a tokenizer: a byte-level model reads the prompt's bytes, any other the token ids
// it lists ("464 3290 318").
std::vector<int64_t> prompt_ids(const std::string& prompt, int vocab) {
  std::vector<int64_t> ids;
  if (vocab == data::kTextVocab) {
    for (unsigned char ch : prompt) ids.push_back(ch);
    return ids;
  }
  std::istringstream in(prompt);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v >= vocab) {
      throw ConfigError(fmt::format(
          "--prompt: '{}' is not a token id of this {}-id vocabulary; without a tokenizer the "
          "prompt is token ids separated by spaces (pass --tokenizer tokenizer.json for text)",
          word, vocab));
    }
    ids.push_back(v);
  }
  return ids;
}

// Bytes of `s` up to the last complete UTF-8 sequence (a token may end inside a character).
size_t complete_utf8(const std::string& s) {
  size_t i = s.size();
  for (int back = 0; back < 4 && i > 0; ++back) {
    const auto c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) {  // the last lead byte (or ASCII)
      const size_t need = c < 0x80         ? 1
                          : (c >> 5) == 6  ? 2
                          : (c >> 4) == 14 ? 3
                          : (c >> 3) == 30 ? 4
                                           : 1;
      return s.size() - (i - 1) >= need ? s.size() : i - 1;
    }
    --i;
  }
  return s.size();
}

void run_generate(const GenerateArgs& a) {
  if (a.max_tokens < 1 || a.max_tokens > kMaxTokens) {
    throw ConfigError(
        fmt::format("generate --max-tokens {} must be in [1, {}]", a.max_tokens, kMaxTokens));
  }
  if (!std::isfinite(a.temperature) || a.temperature < 0 || a.temperature > 100) {
    throw ConfigError(
        fmt::format("generate --temperature {} must be in [0, 100] (0 = greedy)", a.temperature));
  }
  if (a.top_k < 0) {
    throw ConfigError(fmt::format("generate --top-k {} must be >= 0 (0 = every token)", a.top_k));
  }
  std::error_code ec;
  if (!fs::exists(a.checkpoint, ec)) {
    throw ConfigError(fmt::format(
        "generate --checkpoint '{}': no such file or directory; pass a checkpoint directory "
        "(out/checkpoint-NNNNNN), its checkpoint.json, or a Hugging Face model folder",
        a.checkpoint));
  }
  Source src = is_hf_folder(a.checkpoint) ? load_hf(a.checkpoint) : load_breakwater(a.checkpoint);
  auto& config = src.config;

  std::optional<tokenizer::Tokenizer> tok;
  const std::string tok_path = a.tokenizer_given ? a.tokenizer : src.tokenizer;
  if (!tok_path.empty()) {
    if (!fs::is_regular_file(tok_path, ec)) {
      throw ConfigError(fmt::format("generate --tokenizer '{}' is not a file", tok_path));
    }
    tok = tokenizer::Tokenizer::from_file(tok_path);
    if (static_cast<int64_t>(tok->vocab_size()) > config.vocab_size) {
      throw ConfigError(fmt::format(
          "the tokenizer {} has {} ids but the model's vocabulary is {}; pass the tokenizer the "
          "model was trained with (--tokenizer)",
          tok_path, tok->vocab_size(), config.vocab_size));
    }
  }
  std::vector<int64_t> prompt;
  if (tok) {
    tokenizer::EncodeOptions eo;
    eo.add_special_tokens = true;  // Llama 3's <|begin_of_text|>, as transformers' pipelines
    for (auto id : tok->encode(a.prompt, eo)) prompt.push_back(id);
    if (prompt.empty() && tok->document_token()) prompt.push_back(*tok->document_token());
  } else {
    prompt = prompt_ids(a.prompt, config.vocab_size);
  }
  if (prompt.empty()) {
    throw ConfigError("generate --prompt is empty; give the text (or token ids) to continue");
  }

  // The window: the model's whole context, or less when prompt and output fit in less (the
  // KV cache holds the window, so a 128 K-position model does not allocate 128 K positions).
  const int context = context_of(config);
  if (config.family != model::Family::kLlama && config.max_positions == 0) {
    config.max_positions = config.seq_len;  // the learned rows stay as trained
  }
  config.seq_len = static_cast<int>(
      std::min<int64_t>(context, static_cast<int64_t>(prompt.size()) + a.max_tokens));
  std::vector<std::shared_ptr<model::Layer>> layers;
  {
    torch::NoGradGuard no_grad;
    model::SkipInit skip;  // every parameter is copied from the source
    const int last = model::num_layers(config) - 1;
    for (int l = 0; l <= last; ++l) {
      auto layer = model::build_layer(config, l, 0);
      for (const auto& [name, p] : layer->parameter_list()) {
        if (src.folder && config.tie_embeddings && l == last && l > 0 && name == "lm_head.weight") {
          // The folder stores one matrix for both; nothing trains here, so the head shares the
          // embedding's memory instead of holding a second copy of it.
          for (const auto& [first_name, w] : layers.front()->parameter_list()) {
            if (first_name == "wte.weight") p.set_(w);
          }
        } else if (src.folder) {
          src.folder->copy_into(l, name, p);  // straight from the mapped file
        } else {
          p.copy_(src.weights.at({l, name}));
        }
      }
      layers.push_back(std::move(layer));
    }
  }
  src.weights.clear();
  src.folder.reset();
  model::KvCacheModel kv(config, std::move(layers));

  model::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.temperature = a.temperature;
  o.top_k = a.top_k;
  o.seed = a.seed;
  o.stop_token = config.eos_token_id;

  std::string pending;  // decoded bytes not yet printed (an unfinished UTF-8 character)
  bool first = true;
  auto emit = [&](int64_t id) {
    if (tok) {
      const uint32_t u = static_cast<uint32_t>(id);
      pending += tok->decode_bytes({&u, 1});
      const size_t n = complete_utf8(pending);
      std::fwrite(pending.data(), 1, n, stdout);
      pending.erase(0, n);
    } else if (config.vocab_size == data::kTextVocab) {
      std::fputc(static_cast<int>(id), stdout);
    } else {
      fmt::print("{}{}", first ? "" : " ", id);
    }
    first = false;
    std::fflush(stdout);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = model::generate(kv, prompt, o, emit);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fwrite(pending.data(), 1, pending.size(), stdout);
  fmt::print("\n");
  std::fflush(stdout);
  fmt::print(stderr,
             "generate: {} tokens in {:.2f} s, {:.1f} tokens/s ({} model of {} layers from {}; "
             "prompt {} tokens, context {}, KV cache{})\n",
             out.size(), s, static_cast<double>(out.size()) / std::max(s, 1e-9),
             model::family_name(config.family), model::num_layers(config), src.kind, prompt.size(),
             context, tok ? fmt::format("; tokenizer {}", tok_path) : "");
}

void add_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Continue a prompt with a trained model (KV cache, streamed to stdout)");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "checkpoint directory or checkpoint.json, or a Hugging Face model folder")
      ->required();
  CLI::Option* tok = cmd->add_option(
      "--tokenizer", args->tokenizer,
      "tokenizer.json (default: the checkpoint's or folder's, else the run's data tokenizer; "
      "'' = none); without one the prompt and output are token ids (bytes for a byte-level "
      "model)");
  cmd->add_option("--prompt", args->prompt, "text to continue (token ids without a tokenizer)");
  cmd->add_option("--max-tokens", args->max_tokens,
                  "tokens to generate (fewer when the model's end-of-sequence token comes)")
      ->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "sample from the k likeliest tokens; 0 = all")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->callback([args, tok] {
    args->tokenizer_given = tok->count() > 0;
    run_generate(*args);
  });
}

const Registrar kRegistrar("generate", 61, add_generate);

}  // namespace
}  // namespace bw::cli
