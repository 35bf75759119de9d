#include "runtime/checkpointing.h"

#include <fcntl.h>  // AT_FDCWD
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "runtime/checkpoint_sink.h"  // host_name
#include "runtime/fault_points.h"
#include "runtime/log.h"
#include "runtime/resume_check.h"

namespace bw::runtime {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSidecar = "checkpoint.json";

std::string shard_name(int rank, const char* kind) {
  return fmt::format("shard-{}.{}.safetensors", rank, kind);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The step of "checkpoint-000040", "checkpoint-000040.tmp" or ".old"; -1 for other names.
int64_t step_of(const std::string& name) {
  const std::string prefix = "checkpoint-";
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j - i > 12) return -1;
  return std::stoll(name.substr(i, j - i));
}

bool is_partial(const std::string& name) {
  return step_of(name) >= 0 && (ends_with(name, ".tmp") || ends_with(name, ".old"));
}

void remove_dir(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot remove '{}': {}", p.string(), ec.message()));
  }
}

void make_dir(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create checkpoint directory '{}' on host {}: {}; check "
                                  "checkpoint.dir (or train.out_dir)",
                                  p.string(), host_name(), ec.message()));
  }
}

// Makes `staging` appear as `dir` in one step (see checkpointing.h).
void publish(const fs::path& staging, const fs::path& dir) {
  const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::rename(staging, dir, ec);
    if (ec) {
      throw ConfigError(fmt::format("cannot rename '{}' to '{}': {}", staging.string(),
                                    dir.string(), ec.message()));
    }
    fault_point("publish:renamed");
  } else if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fault_point("publish:exchanged");  // staging now holds the old checkpoint
    io::sync_directory(parent.string());
    remove_dir(staging);
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    const fs::path old = dir.string() + ".old";
    remove_dir(old);
    fs::rename(dir, old, ec);
    if (!ec) fault_point("publish:old-moved");
    if (!ec) fs::rename(staging, dir, ec);
    if (ec) {
      throw ConfigError(fmt::format("cannot replace '{}' with '{}': {}", dir.string(),
                                    staging.string(), ec.message()));
    }
    fault_point("publish:renamed");
    io::sync_directory(parent.string());
    remove_dir(old);
  } else {
    throw ConfigError(fmt::format("cannot replace '{}' with '{}': {}", dir.string(),
                                  staging.string(), std::strerror(errno)));
  }
  io::sync_directory(parent.string());
  fault_point("publish:done");
}

// Leftovers of interrupted writes of earlier steps (never of this one or later: those may be in
// progress); returns how many were removed.
int remove_earlier_partials(const fs::path& parent, int64_t step) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (is_partial(name) && step_of(name) < step) {
      remove_dir(e.path());
      ++removed;
    }
  }
  return removed;
}

// The staging directories of steps after `step` (being written, or left by an interrupted run);
// returns their steps.
std::vector<int64_t> remove_later_staging(const fs::path& parent, int64_t step) {
  std::vector<int64_t> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (step_of(name) > step && ends_with(name, ".tmp")) {
      remove_dir(e.path());
      removed.push_back(step_of(name));
    }
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

// Writes checkpoint `info`'s manifest into `staging`. Its shards were durable before, but each
// worker has one write in flight, which may be the next checkpoint's: on a disk with room for one
// checkpoint, the next one's shards can take the room this manifest needs. A checkpoint whose
// every shard is durable is worth more than part of a later one, so with `make_room`, on a full
// disk, the staging directories of later steps are removed (with a warning: they will not be
// committed) and the manifest is written again, twice at most. Only where the later commit checks
// its shard files itself (commit_checkpoint with the files here): where it trusts the workers'
// acknowledgements (each host's own disk), a removed shard could be committed as missing.
void write_manifest(const fs::path& staging, const CheckpointInfo& info, bool make_room) {
  const fs::path parent = staging.parent_path().empty() ? fs::path(".") : staging.parent_path();
  for (int attempt = 0;; ++attempt) {
    try {
      write_sidecar((staging / kSidecar).string(), info);
      return;
    } catch (const io::DiskFull&) {
      if (!make_room) throw;
      const auto removed = remove_later_staging(parent, info.step);
      if ((removed.empty() && attempt == 0) || attempt == 2) throw;
      if (!removed.empty()) {
        log(LogLevel::kWarn,
            "{} is full: removed the partial checkpoint(s) of step(s) {} to commit the one of "
            "step {}; they will not be committed",
            parent.string(), fmt::join(removed, ", "), info.step);
      }
      // A writer may still hold a removed file open (its space is freed when it closes it).
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

// The published checkpoints under `root` (exactly "checkpoint-" + digits, with a sidecar), oldest
// first.
std::vector<std::pair<int64_t, fs::path>> published_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (step_of(name) < 0 || name.find('.') != std::string::npos) continue;
    if (fs::exists(e.path() / kSidecar, ec)) out.emplace_back(step_of(name), e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_dir(const std::string& out_dir, int steps_done) {
  return (fs::path(out_dir) / fmt::format("checkpoint-{:06d}", steps_done)).string();
}

std::string staging_dir(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d + ".tmp";
}

void write_shard(const std::string& dir, int shard, const NamedTensors& parameters,
                 const NamedTensors& optimizer_state) {
  const fs::path staging = staging_dir(dir);
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) {
    throw ConfigError(
        fmt::format("cannot create checkpoint directory '{}': {}; check "
                    "train.out_dir",
                    staging.string(), ec.message()));
  }
  // Shards are not fsynced: they are verified by their CRC when merged, and only the merged,
  // fsynced files are ever published.
  save_safetensors((staging / shard_name(shard, "model")).string(), parameters, {}, false);
  save_safetensors((staging / shard_name(shard, "optimizer")).string(), optimizer_state, {}, false);
}

void write_shard(Worker& worker, const std::string& dir) {
  // In this order on every rank: both gather over sharded stages.
  const auto parameters = worker.owned_parameters();
  const auto optimizer_state = worker.owned_optimizer_state();
  write_shard(dir, worker.rank(), parameters, optimizer_state);
}

namespace {

std::string merge_and_publish(const fs::path& staging, int world_size, CheckpointInfo info);

}  // namespace

std::string merge_shards(const std::string& dir, int world_size, CheckpointInfo info) {
  const fs::path staging = staging_dir(dir);
  try {
    return merge_and_publish(staging, world_size, std::move(info));
  } catch (const ConfigError&) {
    // A failed merge (a missing or damaged shard, a full disk) leaves no partial directory; the
    // previous checkpoint, if any, is untouched.
    std::error_code ec;
    fs::remove_all(staging, ec);
    throw;
  }
}

namespace {

std::string merge_and_publish(const fs::path& staging, int world_size, CheckpointInfo info) {
  const std::string dir = staging.string().substr(0, staging.string().size() - 4);
  std::set<std::string> keep = {kSidecar};
  info.files.clear();
  for (const char* kind : {"model", "optimizer"}) {
    NamedTensors merged;
    std::map<std::string, int> seen;
    for (int r = 0; r < world_size; ++r) {
      const auto path = (staging / shard_name(r, kind)).string();
      if (!fs::exists(path)) {
        throw ConfigError(fmt::format("checkpoint shard {} is missing", path));
      }
      auto file = load_safetensors(path);
      for (auto& [name, t] : file.tensors) {
        if (auto [it, fresh] = seen.emplace(name, r); !fresh) {
          throw ConfigError(fmt::format("tensor '{}' written by ranks {} and {} in {}", name,
                                        it->second, r, dir));
        }
        merged.emplace_back(name, t);
      }
    }
    const std::string file = fmt::format("{}.safetensors", kind);
    // Synced below, after the shards are gone: on ext4 (data=ordered) an fsync commits the
    // journal and with it the dirty pages of every file it touches, so syncing while the shards
    // exist would write them to disk too, only to delete them (twice the disk traffic).
    info.files[file] =
        save_safetensors((staging / file).string(), merged,
                         {{"format", "breakwater"}, {"step", std::to_string(info.step)}},
                         /*sync=*/false);
    keep.insert(file);
    fault_point(std::string(kind) == "model" ? "merge:model" : "merge:optimizer");
    if (std::string(kind) == "model") {
      info.weights = file;
    } else {
      info.optimizer = file;
    }
  }
  // Shards, and anything an interrupted earlier attempt left here.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(staging, ec)) {
    if (keep.count(e.path().filename().string()) == 0) remove_dir(e.path());
  }
  fault_point("merge:shards-removed");
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    io::sync_file((staging / file).string());
  }
  fault_point("merge:files-synced");
  write_sidecar((staging / kSidecar).string(), info);
  fault_point("merge:sidecar");
  const fs::path final_dir = staging.string().substr(0, staging.string().size() - 4);
  publish(staging, final_dir);
  const fs::path parent = final_dir.parent_path().empty() ? fs::path(".") : final_dir.parent_path();
  remove_earlier_partials(parent, info.step);
  return (final_dir / kSidecar).string();
}

}  // namespace

std::string latest_checkpoint(const std::string& out_dir, int* steps_done) {
  const auto published = published_checkpoints(out_dir);
  if (steps_done) *steps_done = published.empty() ? -1 : static_cast<int>(published.back().first);
  return published.empty() ? std::string() : (published.back().second / kSidecar).string();
}

int remove_partial_checkpoints(const std::string& out_dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    if (is_partial(e.path().filename().string())) {
      remove_dir(e.path());
      ++removed;
    }
  }
  return removed;
}

namespace {

// The sidecar path a checkpoint argument names (see load_checkpoint).
std::string resolve_sidecar(const std::string& sidecar_or_dir) {
  std::string sidecar = sidecar_or_dir;
  std::error_code ec;
  if (fs::is_directory(sidecar, ec)) sidecar = (fs::path(sidecar) / kSidecar).string();
  const fs::path dir = fs::path(sidecar).parent_path();
  const std::string dir_name = dir.filename().string();
  std::string arg = sidecar_or_dir;
  while (arg.size() > 1 && arg.back() == '/') arg.pop_back();
  const std::string arg_name = fs::path(arg).filename().string();
  if (is_partial(dir_name) || ends_with(dir_name, ".tmp") || is_partial(arg_name) ||
      ends_with(arg_name, ".tmp")) {
    throw ConfigError(fmt::format(
        "'{}' is a partial checkpoint left by an interrupted write, never loaded; resume from a "
        "complete checkpoint-NNNNNN directory",
        sidecar_or_dir));
  }
  if (fs::exists(sidecar, ec)) return sidecar;
  // Between the two renames of the fallback replacement the old checkpoint is `{dir}.old`.
  const fs::path old = fs::path(dir.string() + ".old") / kSidecar;
  if (step_of(dir_name) >= 0 && !fs::exists(dir, ec) && fs::exists(old, ec)) return old.string();
  throw ConfigError(fmt::format(
      "no checkpoint at '{}' (train.resume takes a checkpoint directory or its checkpoint.json)",
      sidecar_or_dir));
}

// extra["tied"] (tied_record): each copy gets its primary's tensor and optimizer state.
void fill_tied_copies(LoadedCheckpoint& ckpt, const std::string& sidecar) {
  const auto& extra = ckpt.info.extra;
  if (!extra.is_object() || !extra.contains("tied")) return;
  const auto& tied = extra.at("tied");
  auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format(
        "checkpoint '{}': extra.tied {}; the sidecar was edited or damaged, resume from another "
        "checkpoint",
        sidecar, why));
  };
  if (!tied.is_array()) throw bad("must be a list of lists of tensor names");
  for (const auto& group : tied) {
    if (!group.is_array() || group.size() < 2) throw bad("must list at least two names per group");
    for (const auto& n : group) {
      if (!n.is_string()) throw bad("must hold tensor names (strings)");
    }
    const std::string primary = group[0].get<std::string>();
    auto it = ckpt.weights.find(primary);
    if (it == ckpt.weights.end()) throw bad(fmt::format("names '{}', which is not stored", primary));
    for (size_t i = 1; i < group.size(); ++i) {
      const std::string copy = group[i].get<std::string>();
      if (copy.rfind("layers.", 0) != 0 || ckpt.weights.count(copy) > 0) {
        throw bad(fmt::format("names the copy '{}', which is stored or not a layer tensor", copy));
      }
      ckpt.weights[copy] = it->second;
      const std::string prefix = primary + ".";
      std::vector<std::pair<std::string, torch::Tensor>> state;
      for (auto o = ckpt.optimizer.lower_bound(prefix);
           o != ckpt.optimizer.end() && o->first.rfind(prefix, 0) == 0; ++o) {
        state.emplace_back(copy + o->first.substr(primary.size()), o->second);
      }
      for (auto& [name, t] : state) ckpt.optimizer[name] = t;
    }
  }
}

// The layer of a checkpoint tensor, "layers.{i}.{param}[...]"; ConfigError for another name.
int layer_of_tensor(const std::string& name) {
  int layer = -1;
  size_t used = 0;
  if (name.rfind("layers.", 0) == 0) {
    try {
      layer = std::stoi(name.substr(7), &used);
    } catch (const std::exception&) {
      layer = -1;
    }
  }
  if (layer < 0 || name.size() <= 7 + used || name[7 + used] != '.') {
    throw ConfigError(fmt::format(
        "checkpoint tensor '{}' is not named layers.{{i}}.{{parameter}}; the file was not "
        "written by breakwater",
        name));
  }
  return layer;
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& sidecar_or_dir) {
  const std::string sidecar = resolve_sidecar(sidecar_or_dir);
  CheckpointInfo info = read_sidecar(sidecar);
  check_sidecar_fits(info, sidecar);
  return info;
}

namespace {

// A tensor file of checkpoint `where`, checked against the sidecar's record of it and its step.
std::map<std::string, torch::Tensor> load_checked(const CheckpointInfo& info,
                                                  const std::string& where,
                                                  const std::string& path,
                                                  const std::string& name) {
  auto file = load_safetensors(path);
  if (!info.files.empty()) {
    const auto it = info.files.find(name);
    if (it == info.files.end()) {
      throw ConfigError(fmt::format(
          "checkpoint '{}' records no digest for {}; the sidecar was edited or damaged, resume "
          "from another checkpoint",
          where, name));
    }
    const FileDigest want = it->second;
    if (file.digest != want) {
      throw ConfigError(fmt::format(
          "checkpoint '{}': {} has {} bytes with CRC-32C {} but the sidecar records {} bytes "
          "with {}; the file does not belong to this checkpoint (damaged, or from another "
          "write); resume from another checkpoint",
          where, name, file.digest.bytes, crc32c_hex(file.digest.crc32c), want.bytes,
          crc32c_hex(want.crc32c)));
    }
  }
  if (auto it = file.metadata.find("step");
      it != file.metadata.end() && it->second != std::to_string(info.step)) {
    throw ConfigError(fmt::format(
        "checkpoint '{}' says step {} but {} was written at step {}; the sidecar was edited or "
        "belongs to another checkpoint",
        where, info.step, name, it->second));
  }
  return std::move(file.tensors);
}

// The layers of a sharded checkpoint (version 3) into `out`: `wanted`, or every layer when
// nullopt. A layer may be in several shards (checkpoint.replicas): each is read from the first
// shard, in the manifest's order, whose files `locate` finds and that are whole and hold it. A
// missing or damaged shard is passed over while each of its wanted layers is in another, and said
// so; a wanted layer no whole shard holds is an error naming every copy tried.
void load_shards(LoadedCheckpoint& out, const std::string& where, const ShardFileLocator& locate,
                 const std::optional<std::set<int>>& wanted_layers) {
  std::set<int> loaded;
  std::map<int, std::vector<std::string>> tried;  // layer -> why each copy of it failed
  std::vector<std::string> passed_over;           // the damaged shards, for the warning
  for (const auto& sh : out.info.shards) {
    std::set<int> wanted;
    for (int l : sh.layers) {
      if (!loaded.count(l) && (!wanted_layers || wanted_layers->count(l))) wanted.insert(l);
    }
    if (wanted.empty()) continue;  // a replica of layers already read, or none wanted
    std::map<std::string, torch::Tensor> weights, optimizer;
    try {
      const auto model_path = locate(sh, sh.model), optimizer_path = locate(sh, sh.optimizer);
      if (model_path.empty() || optimizer_path.empty()) {
        throw ConfigError("its files are not on this host");
      }
      weights = load_checked(out.info, where, model_path, sh.model);
      optimizer = load_checked(out.info, where, optimizer_path, sh.optimizer);
    } catch (const ConfigError& e) {
      const auto why =
          fmt::format("shard {} (written on host {}): {}", sh.shard, sh.host, e.what());
      for (int l : wanted) tried[l].push_back(why);
      passed_over.push_back(why);
      continue;
    }
    for (auto* part : {&weights, &optimizer}) {
      auto& into = part == &weights ? out.weights : out.optimizer;
      for (auto& [name, t] : *part) {
        const int l = layer_of_tensor(name);
        if (std::find(sh.layers.begin(), sh.layers.end(), l) == sh.layers.end()) {
          throw ConfigError(fmt::format(
              "checkpoint '{}': shard {} holds tensor '{}', of a layer its manifest entry does "
              "not list; the manifest was edited or damaged, resume from another checkpoint",
              where, sh.shard, name));
        }
        if (wanted.count(l)) into.emplace(name, std::move(t));
      }
    }
    loaded.insert(wanted.begin(), wanted.end());
  }
  for (const auto& [l, why] : tried) {
    if (!loaded.count(l)) {
      throw ConfigError(fmt::format(
          "checkpoint '{}': no whole copy of layer {} ({} tried: {}); resume from another "
          "checkpoint",
          where, l, why.size(), fmt::join(why, "; ")));
    }
  }
  if (wanted_layers) {
    for (int l : *wanted_layers) {
      if (!loaded.count(l)) {
        throw ConfigError(fmt::format(
            "checkpoint '{}' has no shard holding layer {}; resume with the model it was written "
            "for",
            where, l));
      }
    }
  }
  for (const auto& why : passed_over) {
    log(LogLevel::kWarn, "checkpoint '{}': {}; its layers were read from their replicas", where,
        why);
  }
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& sidecar_or_dir) {
  const std::string sidecar = resolve_sidecar(sidecar_or_dir);
  LoadedCheckpoint out;
  out.info = read_sidecar(sidecar);
  check_sidecar_fits(out.info, sidecar);
  if (out.info.shards.empty()) {
    out.weights = load_checked(out.info, sidecar, beside(sidecar, out.info.weights),
                               out.info.weights);
    out.optimizer = load_checked(out.info, sidecar, beside(sidecar, out.info.optimizer),
                                 out.info.optimizer);
  } else {
    load_shards(out, sidecar,
                [&](const ShardFiles&, const std::string& name) { return beside(sidecar, name); },
                std::nullopt);
  }
  fill_tied_copies(out, sidecar);
  return out;
}

std::set<int> layers_to_load(const CheckpointInfo& info, const std::vector<int>& layers) {
  std::set<int> out(layers.begin(), layers.end());
  const auto& extra = info.extra;
  if (!extra.is_object() || !extra.contains("tied") || !extra.at("tied").is_array()) return out;
  for (const auto& group : extra.at("tied")) {
    if (!group.is_array() || group.size() < 2 || !group[0].is_string()) continue;
    bool needed = false;
    for (size_t i = 1; i < group.size(); ++i) {
      needed = needed || (group[i].is_string() &&
                          out.count(layer_of_tensor(group[i].get<std::string>())) > 0);
    }
    if (needed) out.insert(layer_of_tensor(group[0].get<std::string>()));
  }
  return out;
}

LoadedCheckpoint load_checkpoint_layers(CheckpointInfo info, const std::string& where,
                                        const ShardFileLocator& locate,
                                        const std::vector<int>& layers) {
  BW_CHECK(!info.shards.empty(), "load_checkpoint_layers of {}, which is not sharded", where);
  check_sidecar_fits(info, where);
  LoadedCheckpoint out;
  out.info = std::move(info);
  load_shards(out, where, locate, layers_to_load(out.info, layers));
  fill_tied_copies(out, where);
  return out;
}

std::string shard_file(int shard, const char* kind) { return shard_name(shard, kind); }

namespace {

// Test hook (tests/runtime/checkpoint_commit_fault_test.cc): BW_KILL_AT_COMMIT=<phase>:<steps>
// makes the process SIGKILL itself while it commits the checkpoint of <steps> steps: `before`
// anything is written, `during` the manifest's write (its temporary file written and fsynced,
// not yet renamed), or `after` the publication (before anything else, retention included).
enum class KillPhase { kBefore, kDuring, kAfter };
struct KillAtCommit {
  KillPhase phase;
  int64_t steps;
};

std::optional<KillAtCommit> kill_at_commit_from_env() {
  const char* v = std::getenv("BW_KILL_AT_COMMIT");
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::string s = v;
  const auto colon = s.find(':');
  const std::string phase = s.substr(0, colon);
  const char* steps = colon == s.npos ? "" : v + colon + 1;
  char* end = nullptr;
  const long long n = std::strtoll(steps, &end, 10);
  const std::map<std::string, KillPhase> phases = {
      {"before", KillPhase::kBefore}, {"during", KillPhase::kDuring}, {"after", KillPhase::kAfter}};
  if (phases.count(phase) == 0 || !std::isdigit(static_cast<unsigned char>(*steps)) ||
      *end != '\0') {
    throw ConfigError(fmt::format(
        "BW_KILL_AT_COMMIT='{}' is not <phase>:<steps> with phase before, during or after and "
        "steps a step count (e.g. during:2); it is a test hook, unset it",
        s));
  }
  return KillAtCommit{phases.at(phase), n};
}

// Set while this thread writes a manifest that BW_KILL_AT_COMMIT=during:<steps> names.
thread_local bool t_kill_in_manifest = false;

// `during` ends the process at the manifest's "file:synced" fault point. The hook is installed
// here, before main, because set_fault_hook must not race a checkpoint write (fault_points.h):
// a single-process run's sink may be writing a shard while the coordinator commits. A
// malformed value installs nothing; commit_checkpoint reports it.
const bool kKillHookInstalled = [] {
  try {
    const auto kill = kill_at_commit_from_env();
    if (!kill || kill->phase != KillPhase::kDuring) return false;
  } catch (const ConfigError&) {
    return false;
  }
  auto previous = std::make_shared<FaultHook>();
  *previous = set_fault_hook([previous](const char* point) {
    if (*previous) (*previous)(point);
    if (t_kill_in_manifest && std::strcmp(point, "file:synced") == 0) std::raise(SIGKILL);
  });
  return true;
}();

}  // namespace

std::string commit_checkpoint(const std::string& dir, CheckpointInfo info, bool files_here) {
  const fs::path staging = staging_dir(dir);
  BW_CHECK(!info.shards.empty(), "commit_checkpoint of {} without shards", dir);
  const auto kill = kill_at_commit_from_env();
  auto kill_here = [&](KillPhase phase) {
    return kill && kill->phase == phase && kill->steps == info.step;
  };
  if (kill_here(KillPhase::kBefore)) std::raise(SIGKILL);
  if (!files_here) make_dir(staging);
  for (const auto& sh : files_here ? info.shards : std::vector<ShardFiles>{}) {
    for (const auto& f : {sh.model, sh.optimizer}) {
      auto it = info.files.find(f);
      BW_CHECK(it != info.files.end(), "shard file {} has no digest", f);
      std::error_code ec;
      const auto size = fs::file_size(staging / f, ec);
      if (ec || static_cast<int64_t>(size) != it->second.bytes) {
        throw ConfigError(fmt::format(
            "checkpoint shard {} (shard {}, written on host {}) is {} but was reported durable "
            "with {} bytes; the checkpoint is not committed",
            (staging / f).string(), sh.shard, sh.host,
            ec ? "missing" : fmt::format("{} bytes", size), it->second.bytes));
      }
    }
  }
  fault_point("commit:checked");
  if (kill_here(KillPhase::kDuring) && !kKillHookInstalled) {
    throw ConfigError("BW_KILL_AT_COMMIT=during:<steps> works only when set at process start");
  }
  t_kill_in_manifest = kill_here(KillPhase::kDuring);  // only ever true under the test hook
  write_manifest(staging, info, /*make_room=*/files_here);
  t_kill_in_manifest = false;
  fault_point("commit:manifest");
  publish(staging, dir);
  if (kill_here(KillPhase::kAfter)) std::raise(SIGKILL);
  const fs::path parent = fs::path(dir).parent_path().empty() ? fs::path(".")
                                                              : fs::path(dir).parent_path();
  remove_earlier_partials(parent, info.step);
  return (fs::path(dir) / kSidecar).string();
}

void publish_on_host(const std::string& root, const CheckpointInfo& info, const std::string& host) {
  const fs::path dir = checkpoint_dir(root, static_cast<int>(info.step));
  std::error_code ec;
  if (fs::exists(dir / kSidecar, ec)) {
    const auto there = read_sidecar((dir / kSidecar).string());
    if (there == info) return;  // published already
  }
  const fs::path staging = staging_dir(dir.string());
  std::set<std::string> mine;
  for (const auto& sh : info.shards) {
    if (sh.host == host) mine.insert({sh.model, sh.optimizer});
  }
  make_dir(staging);
  for (const auto& e : fs::directory_iterator(staging, ec)) {
    if (!mine.count(e.path().filename().string())) remove_dir(e.path());
  }
  write_sidecar((staging / kSidecar).string(), info);  // nothing removed here (write_manifest)
  publish(staging, dir);
}

int remove_partials_before_oldest(const std::string& root) {
  const auto published = published_checkpoints(root);
  return published.empty() ? 0 : remove_earlier_partials(root, published.front().first);
}

int retain_checkpoints(const std::string& root, int keep) {
  if (keep <= 0) return 0;
  const auto published = published_checkpoints(root);
  std::error_code ec;
  int removed = 0;
  for (size_t i = 0; i + static_cast<size_t>(keep) < published.size(); ++i) {
    // The sidecar first: a checkpoint whose removal is interrupted is never taken for complete.
    fs::remove(published[i].second / kSidecar, ec);
    io::sync_directory(published[i].second.string());
    remove_dir(published[i].second);
    ++removed;
  }
  return removed;
}

std::string merge_checkpoint(const std::string& source, const std::string& out_dir) {
  const std::string sidecar = resolve_sidecar(source);
  CheckpointInfo info = read_sidecar(sidecar);
  check_sidecar_fits(info, sidecar);
  LoadedCheckpoint ckpt = load_checkpoint(sidecar);
  // Tied copies are stored once, as their primary (fill_tied_copies adds them back on load).
  std::set<std::string> copies;
  if (info.extra.is_object() && info.extra.contains("tied")) {
    for (const auto& group : info.extra.at("tied")) {
      for (size_t i = 1; i < group.size(); ++i) copies.insert(group[i].get<std::string>());
    }
  }
  auto keep = [&](const std::map<std::string, torch::Tensor>& m) {
    NamedTensors out;
    for (const auto& [name, t] : m) {
      bool copy = copies.count(name) > 0;
      for (const auto& c : copies) copy = copy || name.rfind(c + ".", 0) == 0;
      if (!copy) out.emplace_back(name, t);
    }
    return out;
  };
  const fs::path staging = staging_dir(out_dir);
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create '{}': {}; choose another output directory",
                                  staging.string(), ec.message()));
  }
  try {
    info.shards.clear();
    info.files.clear();
    const std::map<std::string, std::string> meta = {{"format", "breakwater"},
                                                      {"step", std::to_string(info.step)}};
    info.weights = "model.safetensors";
    info.optimizer = "optimizer.safetensors";
    info.files[info.weights] =
        save_safetensors((staging / info.weights).string(), keep(ckpt.weights), meta);
    info.files[info.optimizer] =
        save_safetensors((staging / info.optimizer).string(), keep(ckpt.optimizer), meta);
    write_sidecar((staging / kSidecar).string(), info);
    publish(staging, out_dir);
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  return (fs::path(out_dir) / kSidecar).string();
}

nlohmann::json tied_record(const model::GptConfig& model) {
  const auto ties = model::tied_groups(model);
  if (ties.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& tie : ties) {
    nlohmann::json names = nlohmann::json::array();
    for (const auto& m : tie.members) names.push_back(checkpoint_tensor_name(m.layer, m.name));
    out.push_back(names);
  }
  return out;
}

}  // namespace bw::runtime
