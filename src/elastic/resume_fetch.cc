#include "elastic/resume_fetch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"

namespace bw::elastic {
namespace fs = std::filesystem;

std::vector<ShardFetch> plan_shard_fetches(const runtime::CheckpointInfo& info,
                                           const std::vector<std::set<int>>& have,
                                           const std::vector<std::set<int>>& needed,
                                           const std::vector<std::string>& hosts,
                                           const std::string& where) {
  const int ranks = static_cast<int>(have.size());
  BW_CHECK(static_cast<int>(needed.size()) == ranks && static_cast<int>(hosts.size()) == ranks,
           "plan_shard_fetches: {} have, {} needed, {} hosts", have.size(), needed.size(),
           hosts.size());
  std::vector<ShardFetch> out;
  for (int r = 0; r < ranks; ++r) {
    std::set<int> fetched;
    for (int l : needed[r]) {
      std::vector<int> copies;  // positions of the shards holding l, in manifest order
      for (int s = 0; s < static_cast<int>(info.shards.size()); ++s) {
        const auto& layers = info.shards[s].layers;
        if (std::find(layers.begin(), layers.end(), l) != layers.end()) copies.push_back(s);
      }
      const bool here = std::any_of(copies.begin(), copies.end(), [&](int s) {
        return have[r].count(s) > 0 || fetched.count(s) > 0;
      });
      if (here) continue;
      bool found = false;
      for (int s : copies) {
        for (int q = 0; q < ranks && !found; ++q) {
          if (have[q].count(s)) {
            out.push_back({s, q, r});
            fetched.insert(s);
            found = true;
          }
        }
        if (found) break;
      }
      if (!found) {
        std::vector<std::string> listed;
        for (int s : copies) {
          listed.push_back(
              fmt::format("shard {} on host {}", info.shards[s].shard, info.shards[s].host));
        }
        std::set<std::string> alive(hosts.begin(), hosts.end());
        throw ConfigError(fmt::format(
            "checkpoint '{}': no host of this run holds a whole copy of layer {} (the manifest "
            "lists {}; the run's hosts are {}); start the run on hosts that hold the shards, or "
            "resume from another checkpoint",
            where, l, copies.empty() ? std::string("none") : fmt::format("{}", fmt::join(listed, ", ")),
            fmt::join(alive, ", ")));
      }
    }
  }
  return out;
}

std::string find_shard_file(const runtime::CheckpointInfo& info, const std::string& dir,
                            const std::string& file) {
  const auto it = info.files.find(file);
  if (it == info.files.end()) return "";
  std::error_code ec;
  for (const auto& d : {dir, runtime::staging_dir(dir)}) {
    const auto p = fs::path(d) / file;
    const auto size = fs::file_size(p, ec);
    if (!ec && static_cast<int64_t>(size) == it->second.bytes) return p.string();
  }
  return "";
}

int64_t fetch_shards(const runtime::CheckpointInfo& info, const std::vector<ShardFetch>& plan,
                     int rank, runtime::Transport& world, const runtime::ShardFileLocator& local,
                     const std::string& into_dir) {
  // Tags far above those of the state transfer and the pipeline (which is not running yet).
  constexpr int kTagBase = 1 << 20;
  struct Incoming {
    std::string name;
    torch::Tensor bytes;
    std::unique_ptr<runtime::Request> request;
  };
  std::vector<Incoming> incoming;
  std::vector<std::unique_ptr<runtime::Request>> sends;
  std::vector<torch::Tensor> keep;  // alive until their sends complete
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& f = plan[i];
    const auto& sh = info.shards.at(f.shard);
    const std::string names[2] = {sh.model, sh.optimizer};
    for (int k = 0; k < 2; ++k) {
      const int tag = kTagBase + static_cast<int>(2 * i) + k;
      const int64_t size = info.files.at(names[k]).bytes;
      if (f.from == rank) {
        const auto path = local(sh, names[k]);
        BW_CHECK(!path.empty(), "rank {} serves {} of shard {} but does not hold it", rank,
                 names[k], sh.shard);
        const auto text = io::read_file(path, size, "a checkpoint shard file");
        auto t = torch::empty({size}, torch::kUInt8);
        std::memcpy(t.data_ptr(), text.data(), text.size());
        keep.push_back(t);
        sends.push_back(world.isend(t, f.to, tag));
      } else if (f.to == rank) {
        Incoming in{names[k], torch::empty({size}, torch::kUInt8), nullptr};
        in.request = world.irecv(in.bytes, f.from, tag);
        incoming.push_back(std::move(in));
      }
    }
  }
  int64_t received = 0;
  if (!incoming.empty()) {
    std::error_code ec;
    fs::create_directories(into_dir, ec);
    if (ec) {
      throw ConfigError(fmt::format("cannot create '{}' for the fetched checkpoint shards: {}",
                                    into_dir, ec.message()));
    }
  }
  for (auto& in : incoming) {
    in.request->wait();
    const auto* data = static_cast<const char*>(in.bytes.data_ptr());
    const auto n = static_cast<size_t>(in.bytes.numel());
    const auto want = info.files.at(in.name);
    if (crc32c(data, n) != want.crc32c) {
      throw ConfigError(fmt::format(
          "the copy of checkpoint file {} received from a peer has CRC-32C {}, not the "
          "manifest's {}; its file on that host is damaged",
          in.name, crc32c_hex(crc32c(data, n)), crc32c_hex(want.crc32c)));
    }
    io::write_file((fs::path(into_dir) / in.name).string(), std::string_view(data, n),
                   "a fetched checkpoint shard file");
    received += static_cast<int64_t>(n);
  }
  for (auto& s : sends) s->wait();
  return received;
}

}  // namespace bw::elastic
