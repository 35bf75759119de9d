// bw_checkpoint_bench [--trials N] [--dir D] [--models small,gpt2-124m]: what the crash-safe
// checkpoint path costs, as a ratio to the path it replaced, measured side by side on the same
// tensors and the same disk.
//
//   old  shards and merged files written with std::ofstream to `path.tmp` and renamed; no
//        checksum, no fsync; a plain rename of the directory's files (as before issue 9)
//   new  runtime::write_shard_tensors + merge_shards: CRC-32C of every file, shards verified on
//        merge, merged files and sidecar fsynced, staging directory fsynced and published whole
//   load the new load_checkpoint (CRC of every file, checked) vs the old loader's reads of the
//        same tensors with no checksum
//   4 writers  the sink's path: 4 workers' shards written in parallel (one DirectorySink each, its
//        background thread encoding, CRC-ing, writing and fsyncing), then the manifest committed
//        (runtime::commit_checkpoint); against the coordinator merge of the store path (multi-host
//        runs without checkpoint.dir): the 4 shards' bytes written into the staging directory one
//        after the other, as the coordinator receives them, then merge_shards. The store transfer
//        and the workers' encoding, which the merge path also pays, are left out of it.
// One model's checkpoint is its parameters (model::build_layer for every layer) and AdamW state
// (exp_avg, exp_avg_sq, step), split over 2 ranks as the runtime writes it. Medians of N trials;
// the page cache is flushed (sync) but not dropped before each measurement, so writes start clean
// and load figures are warm reads.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
#include <torch/torch.h>

#include "bench_util.h"
#include "model/gpt.h"
#include "runtime/checkpoint_sink.h"
#include "runtime/checkpointing.h"
#include "runtime/config.h"

namespace fs = std::filesystem;
using bw::runtime::NamedTensors;

namespace {

using bw::bench::median;

// Each measurement starts with no dirty pages of the previous one (::sync), so one path's
// deferred writeback is not billed to the other.
template <class Fn>
double seconds(Fn&& fn) {
  ::sync();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The writer before issue 9 (runtime/checkpoint.cc at the branch point), kept here as the
// baseline: same header and layout, ofstream, rename, nothing else.
void save_old(const std::string& path, const NamedTensors& tensors) {
  std::vector<std::pair<std::string, torch::Tensor>> entries;
  for (const auto& [n, t] : tensors) entries.emplace_back(n, t.detach().contiguous());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() != b.second.element_size()
               ? a.second.element_size() > b.second.element_size()
               : a.first < b.first;
  });
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [n, t] : entries) {
    const int64_t bytes = t.numel() * t.element_size();
    header[n] = {{"dtype", bw::runtime::safetensors_dtype(t.scalar_type())},
                 {"shape", t.sizes().vec()},
                 {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t len = text.size();
  std::ofstream out(path + ".tmp", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [n, t] : entries)
    out.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  out.close();
  fs::rename(path + ".tmp", path);
}

// The loader before issue 9, minus its validation (an upper bound of its speed): the header,
// then every tensor read into a fresh CPU tensor, no checksum.
int64_t load_old(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  const auto header = nlohmann::json::parse(text);
  int64_t total = 0;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const int64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    auto t = torch::empty({std::max<int64_t>(1, (end - begin) / 4)}, torch::kFloat32);
    in.seekg(static_cast<std::streamoff>(8 + n + begin));
    in.read(static_cast<char*>(t.data_ptr()), end - begin);
    total += end - begin;
  }
  return total;
}

struct Shards {
  std::vector<NamedTensors> params, optim;
  std::vector<std::vector<int>> layers;
  int64_t bytes = 0;
};

Shards make_shards(const std::string& model_name, int ranks = 2) {
  // As trained: byte-level text for the small models, GPT-2 tokens for gpt2-124m.
  const auto cfg = bw::model::named_config(model_name, model_name == "gpt2-124m" ? 50257 : 256);
  Shards s;
  s.params.resize(ranks);
  s.optim.resize(ranks);
  s.layers.resize(ranks);
  const int layers = bw::model::num_layers(cfg);
  for (int l = 0; l < layers; ++l) {
    const int r = l * ranks / layers;
    s.layers[r].push_back(l);
    auto layer = bw::model::build_layer(cfg, l, 1);
    for (const auto& [name, p] : layer->parameter_list()) {
      const auto key = bw::runtime::checkpoint_tensor_name(l, name);
      s.params[r].emplace_back(key, p.detach());
      s.optim[r].emplace_back(key + ".exp_avg", torch::randn_like(p));
      s.optim[r].emplace_back(key + ".exp_avg_sq", torch::rand_like(p));
      s.optim[r].emplace_back(key + ".step", torch::tensor(int64_t{7}));
      s.bytes += 3 * p.numel() * 4 + 8;
    }
  }
  return s;
}

void write_old(const std::string& dir, const Shards& s) {
  fs::create_directories(dir);
  for (int r = 0; r < 2; ++r) {
    save_old(fmt::format("{}/shard-{}.model.safetensors", dir, r), s.params[r]);
    save_old(fmt::format("{}/shard-{}.optimizer.safetensors", dir, r), s.optim[r]);
  }
  // The merge: read the shards back, write the two files, remove the shards, write the sidecar.
  for (const char* kind : {"model", "optimizer"}) {
    NamedTensors merged;
    for (int r = 0; r < 2; ++r) {
      auto f =
          bw::runtime::load_safetensors(fmt::format("{}/shard-{}.{}.safetensors", dir, r, kind));
      for (auto& [n, t] : f.tensors) merged.emplace_back(n, t);
    }
    save_old(fmt::format("{}/{}.safetensors", dir, kind), merged);
    for (int r = 0; r < 2; ++r) fs::remove(fmt::format("{}/shard-{}.{}.safetensors", dir, r, kind));
  }
  std::ofstream(dir + "/checkpoint.json") << "{}";
}

bw::runtime::CheckpointInfo info() {
  bw::runtime::CheckpointInfo i;
  i.step = 1;
  i.next_sample = 32;
  i.config_toml = bw::runtime::to_toml(bw::runtime::RunConfig{});
  return i;
}

// The sink's path: every shard written in parallel by its own sink, then the manifest.
void write_parallel(const std::string& dir, const Shards& s) {
  const int ranks = static_cast<int>(s.params.size());
  std::vector<std::unique_ptr<bw::runtime::CheckpointSink>> sinks;
  for (int r = 0; r < ranks; ++r) {
    bw::runtime::DirectorySinkOptions o;
    o.host = "bench";
    sinks.push_back(bw::runtime::make_directory_sink(o));
  }
  for (int r = 0; r < ranks; ++r) sinks[r]->save(dir, 1, r, s.layers[r], s.params[r], s.optim[r]);
  auto i = info();
  for (auto& sink : sinks) {
    bw::runtime::drain_all(*sink, std::chrono::minutes(10), [&](auto durable) {
      for (auto& d : durable) {
        i.shards.push_back(d.files);
        for (auto& [name, digest] : d.digests) i.files[name] = digest;
      }
    });
  }
  bw::runtime::commit_checkpoint(dir, i);
}

// The store path's coordinator: each shard's bytes (as uploaded) written into the staging
// directory in turn, then merged.
void write_merged(const std::string& dir, const std::vector<std::string>& model_bytes,
                  const std::vector<std::string>& optim_bytes) {
  const auto staging = bw::runtime::staging_dir(dir);
  fs::create_directories(staging);
  for (size_t r = 0; r < model_bytes.size(); ++r) {
    for (const auto& [kind, bytes] : {std::pair{"model", &model_bytes[r]},
                                      std::pair{"optimizer", &optim_bytes[r]}}) {
      std::ofstream out(fs::path(staging) / bw::runtime::shard_file(static_cast<int>(r), kind),
                        std::ios::binary);
      out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    }
  }
  bw::runtime::merge_shards(dir, static_cast<int>(model_bytes.size()), info());
}

void parallel_vs_merge(const std::string& base, const std::vector<std::string>& models,
                       int trials) {
  constexpr int kWriters = 4;
  fmt::print("\n{} writers in parallel (the sink, then the manifest) vs the coordinator's merge of "
             "the same shards, median of {} trials\n",
             kWriters, trials);
  fmt::print("{:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}\n", "model", "state MiB",
             "merge s", "merge MB/s", "4 sinks s", "sinks MB/s", "speedup");
  for (const auto& m : models) {
    const Shards s = make_shards(m, kWriters);
    std::vector<std::string> model_bytes, optim_bytes;
    for (int r = 0; r < kWriters; ++r) {
      const std::map<std::string, std::string> meta = {{"format", "breakwater"}, {"step", "1"}};
      model_bytes.push_back(bw::runtime::encode_safetensors(s.params[r], meta));
      optim_bytes.push_back(bw::runtime::encode_safetensors(s.optim[r], meta));
    }
    std::vector<double> merge, parallel;
    for (int t = 0; t < trials; ++t) {
      const std::string d_merge = fmt::format("{}/{}-merge/checkpoint-{:06d}", base, m, t + 1);
      const std::string d_par = fmt::format("{}/{}-par/checkpoint-{:06d}", base, m, t + 1);
      auto a = [&] { merge.push_back(seconds([&] { write_merged(d_merge, model_bytes, optim_bytes); })); };
      auto b = [&] { parallel.push_back(seconds([&] { write_parallel(d_par, s); })); };
      if (t % 2 == 0) {
        a();
        b();
      } else {
        b();
        a();
      }
      fs::remove_all(fs::path(d_merge).parent_path());
      fs::remove_all(fs::path(d_par).parent_path());
    }
    const double mb = s.bytes / 1e6, ms = median(merge), ps = median(parallel);
    fmt::print("{:<10} {:>10.1f} {:>10.3f} {:>10.0f} {:>10.3f} {:>10.0f} {:>7.2f}\n", m,
               s.bytes / 1048576.0, ms, mb / ms, ps, mb / ps, ms / ps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 3;
  std::string base = fs::temp_directory_path() / fmt::format("bw_checkpoint_bench_{}", getpid());
  std::vector<std::string> models = {"small", "gpt2-124m"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--trials") trials = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--dir") base = argv[i + 1];
    if (a == "--models") {
      models.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string m; std::getline(ss, m, ',');) models.push_back(m);
    }
  }
  torch::set_num_threads(1);
  fs::create_directories(base);
  fmt::print("checkpoint write and load, old path vs crash-safe path (CRC-32C + fsync), median of "
             "{} trials, in {}\n",
             trials, base);
  fmt::print("{:<10} {:>10} {:>9} {:>9} {:>7} {:>10} {:>10} {:>7}\n", "model", "state MiB",
             "old w s", "new w s", "ratio", "plain r s", "verify r s", "ratio");
  for (const auto& m : models) {
    const Shards s = make_shards(m);
    std::vector<double> old_w, new_w, old_r, new_r;
    for (int t = 0; t < trials; ++t) {
      const std::string d_old = fmt::format("{}/{}-old-{}", base, m, t);
      const std::string d_new = fmt::format("{}/{}/checkpoint-{:06d}", base, m, t + 1);
      // Alternate which path goes first, so neither is always the one on a warm page cache.
      auto write_old_path = [&] { old_w.push_back(seconds([&] { write_old(d_old, s); })); };
      auto write_new_path = [&] {
        new_w.push_back(seconds([&] {
          for (int r = 0; r < 2; ++r)
            bw::runtime::write_shard(d_new, r, s.params[r], s.optim[r]);
          bw::runtime::merge_shards(d_new, 2, info());
        }));
      };
      if (t % 2 == 0) {
        write_old_path();
        write_new_path();
      } else {
        write_new_path();
        write_old_path();
      }
      old_r.push_back(seconds([&] {
        for (const char* k : {"model", "optimizer"})
          load_old(fmt::format("{}/{}.safetensors", d_old, k));
      }));
      new_r.push_back(seconds([&] { bw::runtime::load_checkpoint(d_new); }));
      fs::remove_all(d_old);
      fs::remove_all(d_new);
    }
    fs::remove_all(fmt::format("{}/{}", base, m));
    const double ow = median(old_w), nw = median(new_w), orr = median(old_r), nr = median(new_r);
    fmt::print("{:<10} {:>10.1f} {:>9.3f} {:>9.3f} {:>7.2f} {:>10.3f} {:>10.3f} {:>7.2f}\n", m,
               s.bytes / 1048576.0, ow, nw, nw / ow, orr, nr, nr / orr);
  }
  parallel_vs_merge(base, models, trials);
  fs::remove_all(base);
  return 0;
}
