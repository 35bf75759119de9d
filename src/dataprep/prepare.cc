#include "dataprep/prepare.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "dataprep/inputs.h"
#include "dataprep/shard_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace bw::dataprep {
namespace {
namespace fs = std::filesystem;
using tokenizer::Session;
using tokenizer::TokenId;
using tokenizer::Tokenizer;

// One batch of documents and what the workers made of them.
struct Batch {
  std::vector<RawDocument> docs;
  std::vector<std::vector<TokenId>> ids;
  std::vector<std::string> errors;  // "" or the message for that document
  std::vector<uint8_t> repaired;    // a text document with invalid UTF-8
};

void check_options(const PrepareOptions& o) {
  if (o.val_docs && o.val_fraction)
    throw ConfigError("give --val-docs or --val-fraction, not both");
  if (o.val_docs && *o.val_docs < 1)
    throw ConfigError(fmt::format("--val-docs must be >= 1, got {}", *o.val_docs));
  if (o.val_fraction &&
      !(std::isfinite(*o.val_fraction) && *o.val_fraction > 0 && *o.val_fraction < 1))
    throw ConfigError(fmt::format("--val-fraction must be in (0, 1), got {}", *o.val_fraction));
  if (o.shard_tokens < 1 || o.shard_tokens > INT32_MAX)
    throw ConfigError(
        fmt::format("--shard-tokens must be in [1, {}] (an llm.c header counts "
                    "tokens in an int32), got {}",
                    INT32_MAX, o.shard_tokens));
  if (o.threads < 0 || o.threads > 1024)
    throw ConfigError(fmt::format("--threads must be in [1, 1024], got {}", o.threads));
  if (o.tokenizer.empty()) throw ConfigError("--tokenizer is required");
  if (o.out_dir.empty()) throw ConfigError("--out is required");
}

std::string default_name(const std::string& out_dir) {
  fs::path p = fs::absolute(out_dir).lexically_normal();
  std::string n = p.filename().string();
  if (n.empty()) n = p.parent_path().filename().string();
  return n.empty() || n == "." || n == ".." ? "data" : n;
}

void check_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 200 &&
                  name.find_first_not_of(
                      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789._-") == std::string::npos &&
                  name[0] != '.';
  if (!ok)
    throw ConfigError(
        fmt::format("--name '{}' must be letters, digits, '.', '_' or '-' (not "
                    "starting with '.'); it names the shard files",
                    name));
}

// Whether `file` is NAME_train_dddddd.bin or NAME_val_dddddd.bin, with `suffix` after it.
bool is_shard_file(const std::string& name, const std::string& file, const std::string& suffix) {
  for (const char* split : {"_train_", "_val_"}) {
    const std::string head = name + split;
    if (file.size() != head.size() + 6 + 4 + suffix.size() || file.rfind(head, 0) != 0) continue;
    const std::string digits = file.substr(head.size(), 6);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (file.compare(head.size() + 6, std::string::npos, ".bin" + suffix) == 0) return true;
  }
  return false;
}

// The output folder, made if needed; its earlier shards of `name` (refused without overwrite);
// stale temporary shards of a crashed run removed.
std::vector<std::string> prepare_out_dir(const PrepareOptions& o, const std::string& name) {
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec))
    throw ConfigError(fmt::format("output folder '{}' exists and is not a folder", o.out_dir));
  fs::create_directories(o.out_dir, ec);
  if (ec)
    throw ConfigError(fmt::format("cannot create output folder '{}': {}", o.out_dir, ec.message()));
  std::vector<std::string> old;
  for (fs::directory_iterator it(o.out_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (is_shard_file(name, f, "")) old.push_back(it->path().string());
    if (is_shard_file(name, f, ".tmp")) fs::remove(it->path(), ec);
  }
  std::sort(old.begin(), old.end());
  if (!old.empty() && !o.overwrite)
    throw ConfigError(fmt::format(
        "output folder '{}' already holds {} shards of '{}' ({}...); pass --overwrite to replace "
        "them, or another --out or --name",
        o.out_dir, old.size(), name, fs::path(old.front()).filename().string()));
  // Can it be written? Find out now rather than after the first shard's worth of encoding.
  const std::string probe = (fs::path(o.out_dir) / ("." + name + ".probe")).string();
  io::write_file(probe, "", "file in the output folder");
  fs::remove(probe, ec);
  return old;
}

// Parses (JSONL) and encodes document i of the batch on a worker's session.
void encode_one(Batch& b, size_t i, Session& s, const InputList& inputs) {
  RawDocument& d = b.docs[i];
  std::vector<TokenId>& out = b.ids[i];
  out.clear();
  b.repaired[i] = 0;
  if (!d.jsonl) {
    b.repaired[i] = tokenizer::valid_utf8_prefix(d.bytes) != d.bytes.size();
    s.encode(d.bytes, out);
    return;
  }
  const std::string& path = inputs.files[d.file].path;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(d.bytes);
  } catch (const nlohmann::json::exception& e) {
    b.errors[i] = fmt::format("{}:{}: not valid JSON: {}", path, d.line, e.what());
    return;
  }
  auto it = j.is_object() ? j.find("text") : j.end();
  if (!j.is_object() || it == j.end() || !it->is_string()) {
    b.errors[i] = fmt::format(
        "{}:{}: no string field \"text\" (each JSONL line must be an object with the document in "
        "\"text\", as FineWeb's are)",
        path, d.line);
    return;
  }
  s.encode(it->get_ref<const std::string&>(), out);
}

// Encodes a batch on the workers, in the background until join().
class Encoder {
 public:
  Encoder(const Tokenizer& tok, int threads, const InputList& inputs) : inputs_(inputs) {
    for (int t = 0; t < threads; ++t) sessions_.emplace_back(tok);
  }
  ~Encoder() { join_quietly(); }

  void start(Batch& b) {
    const size_t n = b.docs.size();
    // Fresh vectors: reused ones would keep the capacity of the largest document each slot
    // ever held, and memory would creep up over a long run.
    b.ids.clear();
    b.ids.resize(n);
    b.errors.assign(n, "");
    b.repaired.assign(n, 0);
    next_ = 0;
    error_ = nullptr;
    for (size_t t = 0; t < sessions_.size(); ++t) {
      workers_.emplace_back([this, &b, t, n] {
        try {
          for (size_t i = next_++; i < n; i = next_++) encode_one(b, i, sessions_[t], inputs_);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu_);
          if (!error_) error_ = std::current_exception();
          next_ = n;
        }
      });
    }
  }

  void join() {
    join_quietly();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void join_quietly() {
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  const InputList& inputs_;
  std::vector<Session> sessions_;
  std::vector<std::thread> workers_;
  std::atomic<size_t> next_{0};
  std::mutex mu_;
  std::exception_ptr error_;
};

}  // namespace

bool is_val_by_fraction(int64_t index, double f) {
  return std::ceil(static_cast<double>(index + 1) * f) > std::ceil(static_cast<double>(index) * f);
}

PrepareSummary prepare(const PrepareOptions& o,
                       const std::function<void(const Progress&)>& progress) {
  check_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::from_file(o.tokenizer);
  const std::optional<TokenId> doc_token = tok.document_token();
  if (!doc_token)
    throw ConfigError(fmt::format(
        "tokenizer '{}' has no document token: data prepare starts each document with the "
        "template's leading special token (Llama 3's <|begin_of_text|>), <|endoftext|> (GPT-2) "
        "or <|begin_of_text|>, and it has none of them",
        o.tokenizer));
  const InputList inputs = list_inputs(o.inputs);
  const std::string name = o.name.empty() ? default_name(o.out_dir) : o.name;
  check_name(name);
  const std::vector<std::string> old = prepare_out_dir(o, name);

  PrepareSummary sum;
  sum.name = name;
  sum.tokenizer = tok.describe();
  sum.document_token =
      fmt::format("{} ({})", tok.id_to_token(*doc_token).value_or("?"), *doc_token);
  sum.token_bytes = tok.vocab_size() <= 65536 ? 2 : 4;
  sum.files = static_cast<int64_t>(inputs.files.size());
  sum.skipped_files = inputs.skipped_files;
  sum.threads = o.threads > 0 ? o.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  ShardWriter val(o.out_dir, name, "val", o.shard_tokens, sum.token_bytes);
  ShardWriter train(o.out_dir, name, "train", o.shard_tokens, sum.token_bytes);
  const std::string tokenizer_copy = (fs::path(o.out_dir) / "tokenizer.json").string();
  try {
    Encoder encoder(tok, sum.threads, inputs);
    DocumentReader reader(inputs);
    Batch batches[2];
    int64_t index = 0;
    const auto write = [&](Batch& b) {
      for (size_t i = 0; i < b.docs.size(); ++i, ++index) {
        if (!b.errors[i].empty()) throw ConfigError(b.errors[i]);
        const bool is_val = o.val_docs       ? index < *o.val_docs
                            : o.val_fraction ? is_val_by_fraction(index, *o.val_fraction)
                                             : false;
        ShardWriter& w = is_val ? val : train;
        SplitSummary& s = is_val ? sum.val : sum.train;
        w.append(std::span<const TokenId>(&*doc_token, 1));
        w.append(b.ids[i]);
        ++s.documents;
        s.tokens += 1 + static_cast<int64_t>(b.ids[i].size());
        sum.repaired_documents += b.repaired[i];
      }
      if (progress) {
        progress({sum.val.documents + sum.train.documents, sum.val.tokens + sum.train.tokens,
                  reader.bytes_read(), inputs.total_bytes,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
      }
    };
    // Pipelined: while the workers encode batch k, this thread writes batch k-1 and reads k+1.
    int cur = 0;
    bool have = reader.next_batch(batches[cur].docs, kBatchBytes, kBatchDocs);
    bool pending = false;
    while (have) {
      encoder.start(batches[cur]);
      if (pending) write(batches[1 - cur]);
      const bool more = reader.next_batch(batches[1 - cur].docs, kBatchBytes, kBatchDocs);
      encoder.join();
      pending = true;
      if (!more) break;
      cur = 1 - cur;
    }
    if (pending) write(batches[cur]);
    if (index == 0)
      throw ConfigError(fmt::format("the inputs hold no document ({} files, all empty or blank)",
                                    inputs.files.size()));
    if (sum.train.documents == 0)
      throw ConfigError(fmt::format(
          "the validation split takes all {} documents, leaving none to train on; lower "
          "--val-docs or --val-fraction",
          index));
    sum.val.shards = val.finish();
    sum.train.shards = train.finish();
    std::error_code ec;
    if (!fs::equivalent(o.tokenizer, tokenizer_copy, ec))
      io::write_file_durably(tokenizer_copy,
                             io::read_file(o.tokenizer, io::kMaxJsonBytes, "tokenizer.json"),
                             "tokenizer.json");
    // Shards of an earlier run (--overwrite) that this run did not replace.
    for (const std::string& p : old) {
      const bool rewritten =
          std::find(sum.val.shards.begin(), sum.val.shards.end(), p) != sum.val.shards.end() ||
          std::find(sum.train.shards.begin(), sum.train.shards.end(), p) != sum.train.shards.end();
      if (!rewritten) fs::remove(p, ec);
    }
    io::sync_directory(o.out_dir);
  } catch (...) {
    val.abort();
    train.abort();
    throw;
  }
  sum.bytes_read = 0;
  for (const auto& f : inputs.files) sum.bytes_read += f.bytes;
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace bw::dataprep
