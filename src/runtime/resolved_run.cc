#include "runtime/resolved_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/config_schema.h"

namespace bw::runtime {
namespace {

using detail::kResolvedSection;
using detail::toml_text;
using detail::Value;

// One table: `key = value  # comment` lines, the comments aligned.
class Table {
 public:
  explicit Table(std::string name) : name_(std::move(name)) {}
  void add(const std::string& key, Value v, const std::string& comment) {
    lines_.push_back({key + " = " + toml_text(v), comment});
  }
  void add_strings(const std::string& key, const std::vector<std::string>& v,
                   const std::string& comment) {
    std::vector<std::string> quoted;
    for (const auto& s : v) quoted.push_back(toml_text(s));
    lines_.push_back({fmt::format("{} = [{}]", key, fmt::join(quoted, ", ")), comment});
  }
  std::string text() const {
    size_t width = 0;
    for (const auto& [line, comment] : lines_) width = std::max(width, line.size());
    std::string out = fmt::format("[{}.{}]\n", kResolvedSection, name_);
    for (const auto& [line, comment] : lines_) {
      out += fmt::format("{:<{}}  # {}\n", line, width, comment);
    }
    return out;
  }

 private:
  std::string name_;
  std::vector<std::pair<std::string, std::string>> lines_;
};

std::vector<int64_t> ints(const std::vector<int>& v) { return {v.begin(), v.end()}; }

}  // namespace

std::string resolved_toml(const ResolvedRun& run) {
  const auto& m = run.model;
  const bool llama = m.family == model::Family::kLlama;
  Table model("model");
  model.add("family", std::string(model::family_name(m.family)), "gpt, gpt2 or llama");
  model.add("name", m.name, "the size, or the init_from folder");
  model.add("init_from", m.init_from, "the Hugging Face folder of the initial weights");
  model.add("vocab_size", int64_t{m.vocab_size}, "rows of the embedding and the head");
  model.add("seq_len", int64_t{m.seq_len}, "tokens per sample");
  model.add("blocks", int64_t{m.n_blocks}, "transformer blocks (n_layer, num_hidden_layers)");
  model.add("layers", int64_t{model::num_layers(m)},
            "layers the pipelines cut: the embedding, the blocks, the head");
  model.add("d_model", int64_t{m.d_model}, "width (n_embd, hidden_size)");
  model.add("heads", int64_t{m.n_heads}, "attention heads");
  model.add("kv_heads", int64_t{model::kv_heads(m)}, "key/value heads");
  model.add("ffn_hidden", int64_t{model::ffn_width(m)}, "MLP width (n_inner, intermediate_size)");
  model.add("positions", int64_t{llama ? (m.max_positions > 0 ? m.max_positions : m.seq_len)
                                       : model::position_rows(m)},
            llama ? "max_position_embeddings" : "learned position rows (n_positions)");
  model.add("tie_embeddings", m.tie_embeddings, "the head uses the embedding matrix");
  model.add("norm_eps", m.norm_eps, llama ? "RMSNorm epsilon" : "LayerNorm epsilon");
  if (llama) model.add("rope_theta", m.rope_theta, "RoPE base");
  model.add("bos_token_id", m.bos_token_id, "-1 = none known");
  model.add("eos_token_id", m.eos_token_id, "-1 = none known");

  Table data("data");
  data.add("vocab_size", int64_t{run.data_vocab}, "ids of the training data");
  data.add("tokenizer", run.data_tokenizer, "the tokenizer.json the data was read with");

  Table train("train");
  train.add("precision", run.precision, "of the activations (train.precision)");

  std::vector<int> devices, widths, chunks, microbatches;
  std::vector<std::string> schedules;
  for (const auto& p : run.layout.pipelines) {
    devices.push_back(p.num_ranks());
    widths.insert(widths.end(), p.widths.begin(), p.widths.end());
    schedules.push_back(p.schedule.kind);
    chunks.push_back(p.schedule.num_chunks);
    microbatches.push_back(p.num_microbatches);
  }
  Table pipeline("pipeline");
  pipeline.add("pipelines", ints(devices), "devices of each pipeline");
  pipeline.add("stage_devices", ints(widths), "devices of each stage, pipeline after pipeline");
  pipeline.add_strings("schedules", schedules, "each pipeline's schedule");
  pipeline.add("chunks", ints(chunks), "model chunks of each pipeline");
  pipeline.add("microbatches", ints(microbatches), "each pipeline's share of a step");
  pipeline.add("microbatch_size", int64_t{run.layout.microbatch_size}, "samples per microbatch");

  return fmt::format(
      "# What ran, resolved at the start from the config below, model.init_from's config.json,\n"
      "# the data's tokenizer and the plan of generation 0 (a reconfiguration's plan is the\n"
      "# new_plan of its event in metrics.jsonl). A record: loading this file as a config skips\n"
      "# the [{}.*] tables.\n"
      "{}\n{}\n{}\n{}",
      kResolvedSection, model.text(), data.text(), train.text(), pipeline.text());
}

std::string saved_config_toml(const RunConfig& given, const ResolvedRun& run) {
  return resolved_toml(run) +
         "\n# The config as given: the file and the overrides, every key of every section.\n" +
         to_toml(given, /*with_comments=*/false);
}

}  // namespace bw::runtime
