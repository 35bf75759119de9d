#include "runtime/checkpoint_sink.h"

#include <fmt/format.h>
#include <unistd.h>  // gethostname

#include <cstdlib>
#include <filesystem>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/json.h"
#include "runtime/checkpointing.h"

namespace bw::runtime {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// One shard handed over: its snapshot and where it goes.
struct Job {
  std::string dir;
  int64_t steps_done = 0;
  ShardFiles files;
  NamedTensors parameters, optimizer_state;
};

class DirectorySink final : public CheckpointSink {
 public:
  explicit DirectorySink(DirectorySinkOptions options) : opt_(std::move(options)) {
    if (opt_.async) thread_ = std::thread([this] { loop(); });
  }
  ~DirectorySink() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  double save(const std::string& dir, int64_t steps_done, int shard,
              const std::vector<int>& layers, const NamedTensors& parameters,
              const NamedTensors& optimizer_state) override {
    const auto t0 = Clock::now();
    {
      // At most one in flight: its buffers are reused below.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return idle_locked() || error_; });
      rethrow_locked();
    }
    const double waited = ms_since(t0);
    const auto t1 = Clock::now();
    Job job;
    job.dir = dir;
    job.steps_done = steps_done;
    job.files.shard = shard;
    job.files.layers = layers;
    job.files.host = opt_.host;
    job.files.model = shard_file(shard, "model");
    job.files.optimizer = shard_file(shard, "optimizer");
    job.parameters = snapshot(parameters, params_buf_);
    job.optimizer_state = snapshot(optimizer_state, optim_buf_);
    const double snap = ms_since(t1);
    if (!opt_.async) write(job);
    const double blocked = ms_since(t0);
    {
      // stats_ is shared with the background thread (write) and stats(): updated under mu_.
      std::lock_guard<std::mutex> lock(mu_);
      stats_.saves += 1;
      stats_.waited_ms += waited;
      stats_.snapshot_ms += snap;
      stats_.blocked_ms += blocked;
      if (opt_.async) job_ = std::move(job);
    }
    cv_.notify_all();
    return blocked;
  }

  std::vector<DurableShard> take_durable() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_.empty()) rethrow_locked();  // what was durable before a failure goes out first
    std::vector<DurableShard> out;
    out.swap(done_);
    return out;
  }

  std::vector<DurableShard> drain(std::chrono::milliseconds deadline) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, deadline, [&] { return idle_locked() || error_; })) {
        throw CommError(fmt::format(
            "a checkpoint shard was not durable within {} ms (the disk is stalled or far too "
            "slow)",
            deadline.count()));
      }
    }
    return take_durable();
  }

  SinkStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  // Copies every tensor into the buffer of the same name kept from the last save when its shape
  // and dtype still match, else into a new host tensor.
  static NamedTensors snapshot(const NamedTensors& from, std::map<std::string, torch::Tensor>& buf) {
    torch::NoGradGuard no_grad;
    NamedTensors out;
    out.reserve(from.size());
    std::map<std::string, torch::Tensor> next;
    for (const auto& [name, t] : from) {
      torch::Tensor b;
      auto it = buf.find(name);
      if (it != buf.end() && it->second.sizes() == t.sizes() &&
          it->second.scalar_type() == t.scalar_type()) {
        b = it->second;
        b.copy_(t);
      } else {
        b = t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
      }
      next.emplace(name, b);
      out.emplace_back(name, b);
    }
    buf.swap(next);
    return out;
  }

  void write(const Job& job) {
    if (opt_.write_delay.count() > 0) std::this_thread::sleep_for(opt_.write_delay);
    const auto t0 = Clock::now();
    const fs::path staging = staging_dir(job.dir);
    std::error_code ec;
    fs::create_directories(staging, ec);
    if (ec) {
      throw ConfigError(fmt::format(
          "cannot create checkpoint directory '{}' on host {}: {}; check checkpoint.dir (or "
          "train.out_dir)",
          staging.string(), opt_.host, ec.message()));
    }
    DurableShard d;
    d.steps_done = job.steps_done;
    d.files = job.files;
    const std::map<std::string, std::string> meta = {
        {"format", "breakwater"},
        {"step", std::to_string(job.steps_done)},
        {"shard", std::to_string(job.files.shard)}};
    try {
      d.digests[job.files.model] =
          save_safetensors((staging / job.files.model).string(), job.parameters, meta, true);
      d.digests[job.files.optimizer] = save_safetensors((staging / job.files.optimizer).string(),
                                                        job.optimizer_state, meta, true);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format(
          "{} (on host {}); the checkpoints committed before it are whole: free space there or "
          "choose another checkpoint.dir, then resume from the newest",
          e.what(), opt_.host));
    }
    for (const auto& [name, digest] : d.digests) d.bytes += digest.bytes;
    d.write_ms = ms_since(t0);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.write_ms += d.write_ms;
    stats_.bytes += d.bytes;
    done_.push_back(std::move(d));
  }

  void loop() {
    while (true) {
      std::optional<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (job_ && !running_); });
        if (stop_) return;
        running_ = true;
        job = std::move(job_);
        job_.reset();
      }
      std::exception_ptr error;
      try {
        write(*job);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_ = false;
        if (error) error_ = error;
      }
      cv_.notify_all();
    }
  }

  bool idle_locked() const { return !job_ && !running_; }

  void rethrow_locked() {
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  DirectorySinkOptions opt_;
  std::map<std::string, torch::Tensor> params_buf_, optim_buf_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;  // handed over, not yet taken by the background thread
  bool running_ = false;    // the background thread is writing one
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<DurableShard> done_;
  SinkStats stats_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<CheckpointSink> make_directory_sink(DirectorySinkOptions options) {
  return std::make_unique<DirectorySink>(std::move(options));
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::chrono::milliseconds write_delay_from_env() {
  const char* v = std::getenv("BW_CHECKPOINT_WRITE_DELAY_MS");
  if (v == nullptr || *v == '\0') return std::chrono::milliseconds(0);
  char* end = nullptr;
  const long long ms = std::strtoll(v, &end, 10);
  if (*end != '\0' || ms < 0 || ms > 3600000) {
    throw ConfigError(fmt::format(
        "BW_CHECKPOINT_WRITE_DELAY_MS='{}' is not a delay in ms (0 to 3600000); unset it", v));
  }
  return std::chrono::milliseconds(ms);
}

nlohmann::json to_json(const DurableShard& s) {
  nlohmann::json digests = nlohmann::json::object();
  for (const auto& [name, d] : s.digests) {
    digests[name] = {{"bytes", d.bytes}, {"crc32c", crc32c_hex(d.crc32c)}};
  }
  return {{"steps_done", s.steps_done}, {"shard", s.files.shard},   {"layers", s.files.layers},
          {"host", s.files.host},       {"model", s.files.model},   {"optimizer", s.files.optimizer},
          {"digests", digests},         {"bytes", s.bytes},         {"write_ms", s.write_ms}};
}

DurableShard durable_shard_from_json(const nlohmann::json& doc, const std::string& where) {
  // The record is a manifest entry plus its digests: parse_sidecar's checks apply to it.
  nlohmann::json manifest = {{"format", "breakwater-checkpoint"},
                             {"version", 3},
                             {"step", 0},
                             {"next_sample", 0},
                             {"config", ""}};
  if (!doc.is_object()) throw ConfigError(fmt::format("{} is not a shard record", where));
  manifest["shards"] = nlohmann::json::array({doc});
  manifest["files"] = doc.contains("digests") ? doc["digests"] : nlohmann::json();
  const CheckpointInfo info = parse_sidecar(manifest, where);
  DurableShard s;
  s.files = info.shards.at(0);
  s.steps_done = json::get_int_in(doc, "steps_done", where, 0, int64_t{1} << 40);
  for (const auto& f : {s.files.model, s.files.optimizer}) s.digests[f] = info.files.at(f);
  for (const auto& [name, d] : s.digests) s.bytes += d.bytes;
  if (doc.contains("write_ms") && doc["write_ms"].is_number()) s.write_ms = doc["write_ms"];
  return s;
}

}  // namespace bw::runtime
