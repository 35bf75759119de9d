#include "runtime/resume_check.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <limits>

#include "core/error.h"

namespace bw::runtime {

CheckpointRunFacts run_facts(const CheckpointInfo& info) {
  CheckpointRunFacts f;
  toml::table root;
  try {
    root = toml::parse(info.config_toml);
  } catch (const toml::parse_error&) {
    return f;  // nothing known; the sidecar's own fields are checked elsewhere
  }
  f.microbatches = root["pipeline"]["microbatches"].value<int64_t>();
  f.microbatch_size = root["pipeline"]["microbatch_size"].value<int64_t>();
  f.data_seed = root["data"]["seed"].value<int64_t>();
  f.model_name = root["model"]["name"].value<std::string>();
  f.tie_embeddings = root["model"]["tie_embeddings"].value_or(false);
  return f;
}

void check_sidecar_fits(const CheckpointInfo& info, const std::string& where) {
  const auto facts = run_facts(info);
  const auto g = facts.global_batch();
  if (!g) return;
  if (*g <= 0 || info.step > std::numeric_limits<int64_t>::max() / *g ||
      info.next_sample != info.step * *g) {
    throw ConfigError(fmt::format(
        "checkpoint '{}' is inconsistent: step {} with a global batch of {} puts the next sample "
        "at {}, but the sidecar says next_sample {}; the sidecar was edited or damaged, resume "
        "from another checkpoint",
        where, info.step, *g, *g > 0 ? info.step * *g : 0, info.next_sample));
  }
}

void check_resume(const RunConfig& config, const CheckpointInfo& info, const std::string& where) {
  check_sidecar_fits(info, where);
  const auto facts = run_facts(info);
  const auto& p = config.pipeline;
  if (facts.microbatches && facts.microbatch_size &&
      *facts.global_batch() != global_batch(p)) {
    throw ConfigError(fmt::format(
        "checkpoint '{}' was written with a global batch of {} samples (pipeline.microbatches {} "
        "x pipeline.microbatch_size {}) but this run has {} ({} x {}); a different batch would "
        "change which samples each step sees. Resume with --pipeline.microbatches={} "
        "--pipeline.microbatch_size={}, or start a fresh run without train.resume",
        where, *facts.global_batch(), *facts.microbatches, *facts.microbatch_size,
        global_batch(p), p.microbatches, p.microbatch_size, *facts.microbatches,
        *facts.microbatch_size));
  }
  if (facts.data_seed && *facts.data_seed != config.data.seed) {
    throw ConfigError(fmt::format(
        "checkpoint '{}' was written with data.seed {} but this run has {}; the sample order "
        "would change. Resume with --data.seed={}, or start a fresh run without train.resume",
        where, *facts.data_seed, config.data.seed, *facts.data_seed));
  }
  if (facts.model_name && *facts.model_name != config.model.name) {
    throw ConfigError(fmt::format(
        "checkpoint '{}' was written for model.name \"{}\" but this run has \"{}\"; resume with "
        "--model.name={}",
        where, *facts.model_name, config.model.name, *facts.model_name));
  }
  if (facts.tie_embeddings != config.model.tie_embeddings) {
    throw ConfigError(fmt::format(
        "checkpoint '{}' was written with model.tie_embeddings = {} but this run has {}; resume "
        "with --model.tie_embeddings={}",
        where, facts.tie_embeddings, config.model.tie_embeddings, facts.tie_embeddings));
  }
  if (info.step >= config.train.steps) {
    throw ConfigError(fmt::format(
        "the checkpoint {} is at step {} but train.steps is {}; raise train.steps to continue",
        where, info.step, config.train.steps));
  }
}

}  // namespace bw::runtime
