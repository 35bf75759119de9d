// What a run resolved when it started, and train.out_dir/config.toml, which records it beside the
// config as given (docs/config.md, "What ran"). The keys a user writes leave much to the run:
// model.seq_len = 0 is the model's, model.init_from's config.json sets the family and the shape,
// train.precision = "auto" becomes fp32 or bf16, the planner chooses the pipelines and their
// stages. The saved file says each as it was used, in [resolved.*] tables, so that a person or a
// program reading the folder knows what ran without redoing the resolution; loading the file as a
// config skips those tables (config_schema.h, kResolvedSection), so it loads back as the config given.
//
// Thread-safety: plain values; the functions are pure.
#pragma once

#include <string>

#include "model/config.h"
#include "runtime/config.h"
#include "runtime/layout.h"

namespace bw::runtime {

struct ResolvedRun {
  model::GptConfig model;      // as built: family, shape, vocabulary, seq_len
  int data_vocab = 0;          // the training data's vocabulary (run_data.h)
  std::string data_tokenizer;  // the tokenizer.json it was read with; "" = none
  std::string precision;       // "fp32" | "bf16"
  RunLayout layout;            // generation 0's plan
};

// The [resolved.model], [resolved.data], [resolved.train] and [resolved.pipeline] tables, each key
// with a comment, after a comment that says what they are.
std::string resolved_toml(const ResolvedRun& run);

// train.out_dir/config.toml: resolved_toml(run), then to_toml(given): every key as given (the
// file and the overrides), a section per struct of RunConfig.
std::string saved_config_toml(const RunConfig& given, const ResolvedRun& run);

}  // namespace bw::runtime
