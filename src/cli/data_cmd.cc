// `breakwater data prepare`: text (files, JSONL, folders) to llm.c token shards with a Hugging
// Face tokenizer.json (dataprep/prepare.h, docs/data.md "Preparing data"). Prints a progress line
// on stderr while it runs (redrawn on a terminal, else one line every 30 s) and a summary table,
// or JSON with --json.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/checks.h"
#include "cli/registry.h"
#include "core/file_io.h"
#include "core/json.h"
#include "dataprep/prepare.h"

namespace bw::cli {
namespace {

struct PrepareArgs {
  dataprep::PrepareOptions o;
  long long val_docs = 0;
  double val_fraction = 0;
  long long shard_tokens = dataprep::kDefaultShardTokens;
  long long threads = 0;
  bool json = false;
};

// "12,345,678"
std::string grouped(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

std::string plural(int64_t n, const char* what) {
  return fmt::format("{} {}{}", grouped(n), what, n == 1 ? "" : "s");
}

std::string millions(double v) { return fmt::format("{:.2f} M", v / 1e6); }

class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}
  ~ProgressLine() { clear(); }

  void update(const dataprep::Progress& p) {
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (since < (tty_ ? 0.2 : 30.0)) return;
    last_ = now;
    const double rate = p.seconds > 0 ? static_cast<double>(p.tokens) / p.seconds : 0;
    const std::string line = fmt::format(
        "data prepare: {} documents, {} tokens ({} tokens/s), read {} of {} ({:.0f}%)",
        grouped(p.documents), millions(static_cast<double>(p.tokens)), millions(rate),
        io::human_bytes(p.bytes_read), io::human_bytes(p.total_bytes),
        p.total_bytes > 0
            ? 100.0 * static_cast<double>(p.bytes_read) / static_cast<double>(p.total_bytes)
            : 100.0);
    if (tty_) {
      fmt::print(stderr, "\r{}\x1b[K", line);
      shown_ = true;
    } else {
      fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
  }

  void clear() {
    if (shown_) fmt::print(stderr, "\r\x1b[K");
    shown_ = false;
  }

 private:
  bool tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

json::Json to_json(const dataprep::PrepareSummary& s) {
  const auto split = [](const dataprep::SplitSummary& p) {
    return json::Json{{"documents", p.documents}, {"tokens", p.tokens}, {"shards", p.shards}};
  };
  return {{"name", s.name},
          {"tokenizer", s.tokenizer},
          {"document_token", s.document_token},
          {"token_bytes", s.token_bytes},
          {"version", s.token_bytes == 2 ? 1 : 2},
          {"val", split(s.val)},
          {"train", split(s.train)},
          {"files", s.files},
          {"skipped_files", s.skipped_files},
          {"bytes", s.bytes_read},
          {"repaired_documents", s.repaired_documents},
          {"threads", s.threads},
          {"seconds", s.seconds}};
}

void print_summary(const dataprep::PrepareSummary& s, const std::string& out_dir) {
  const int64_t tokens = s.val.tokens + s.train.tokens;
  fmt::print("data prepare: {} ({}) -> {} in {:.1f} s ({} tokens/s on {} threads)\n",
             plural(s.files, "file"), io::human_bytes(s.bytes_read), out_dir, s.seconds,
             millions(s.seconds > 0 ? static_cast<double>(tokens) / s.seconds : 0), s.threads);
  fmt::print("tokenizer: {}\n", s.tokenizer);
  fmt::print("each document starts with {}; {} tokens (llm.c .bin version {})\n\n",
             s.document_token, s.token_bytes == 2 ? "uint16" : "uint32",
             s.token_bytes == 2 ? 1 : 2);
  const auto files = [](const dataprep::SplitSummary& p) -> std::string {
    namespace fs = std::filesystem;
    if (p.shards.empty()) return "";
    const std::string first = fs::path(p.shards.front()).filename().string();
    if (p.shards.size() == 1) return first;
    return first + " .. " + fs::path(p.shards.back()).filename().string();
  };
  fmt::print("{:<6} {:>14} {:>16} {:>7}  {}\n", "split", "documents", "tokens", "shards", "files");
  for (const auto& [label, p] : {std::pair{"val", &s.val}, std::pair{"train", &s.train}})
    fmt::print("{:<6} {:>14} {:>16} {:>7}  {}\n", label, grouped(p->documents), grouped(p->tokens),
               p->shards.size(), files(*p));
  fmt::print("{:<6} {:>14} {:>16} {:>7}\n", "total", grouped(s.val.documents + s.train.documents),
             grouped(tokens), s.val.shards.size() + s.train.shards.size());
  if (s.val.documents == 0)
    fmt::print("\nno validation split (give --val-docs N or --val-fraction F for one)\n");
  if (s.repaired_documents > 0)
    fmt::print("{} text documents held invalid UTF-8, replaced by U+FFFD before encoding\n",
               grouped(s.repaired_documents));
  if (s.skipped_files > 0)
    fmt::print("{} files in the input folders were skipped (not .txt or .jsonl)\n",
               grouped(s.skipped_files));
}

void add(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Training data: text to token shards");
  data->require_subcommand(1);
  CLI::App* cmd = data->add_subcommand(
      "prepare",
      "Tokenize text files, JSONL (field \"text\") or folders of them into llm.c .bin shards "
      "(docs/data.md)");
  auto a = std::make_shared<PrepareArgs>();
  cmd->add_option("--tokenizer", a->o.tokenizer, "Hugging Face tokenizer.json (byte-level BPE)")
      ->required();
  cmd->add_option("--out", a->o.out_dir, "output folder for the shards and tokenizer.json")
      ->required();
  auto* val_docs =
      cmd->add_option("--val-docs", a->val_docs, "the first N documents are the validation split");
  auto* val_fraction =
      cmd->add_option("--val-fraction", a->val_fraction,
                      "this fraction of the documents, evenly spread, is the validation split");
  cmd->add_option("--shard-tokens", a->shard_tokens, "tokens per shard (llm.c: 100 M)")
      ->capture_default_str();
  auto* threads = cmd->add_option("--threads", a->threads, "encoding threads (default: all)");
  cmd->add_option("--name", a->o.name, "shard name prefix (default: the output folder's name)");
  cmd->add_flag("--overwrite", a->o.overwrite, "replace the shards of an earlier run in --out");
  cmd->add_flag("--json", a->json, "print the summary as JSON");
  cmd->add_option("inputs", a->o.inputs, "text files, JSONL files or folders of them")->required();
  cmd->callback([cmd, a, val_docs, val_fraction, threads] {
    reject_nan_values(*cmd);
    require_distinct(a->o.inputs, "the input list");
    if (val_docs->count() > 0) {
      require_count(a->val_docs, 1, INT64_MAX, "--val-docs");
      a->o.val_docs = a->val_docs;
    }
    if (val_fraction->count() > 0) a->o.val_fraction = a->val_fraction;
    if (a->o.val_docs && a->o.val_fraction)
      throw ConfigError("give --val-docs or --val-fraction, not both");
    require_count(a->shard_tokens, 1, INT32_MAX, "--shard-tokens");
    a->o.shard_tokens = a->shard_tokens;
    if (threads->count() > 0) {
      require_count(a->threads, 1, 1024, "--threads");
      a->o.threads = static_cast<int>(a->threads);
    }
    ProgressLine line;
    const auto summary =
        dataprep::prepare(a->o, [&line](const dataprep::Progress& p) { line.update(p); });
    line.clear();
    if (a->json) {
      fmt::print("{}\n", to_json(summary).dump(2));
    } else {
      print_summary(summary, a->o.out_dir);
    }
  });
}

Registrar registrar("data", 30, add);

}  // namespace
}  // namespace bw::cli
