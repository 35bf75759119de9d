// Where a run's numbers go (docs/observability.md): every committed step and every event is
// handed to each sink in turn. metrics.jsonl (always), TensorBoard event files
// (train.tensorboard) and, in the CLI, the progress line are sinks.
//
// Thread-safety: sinks are called from the coordinator's thread only.
#pragma once

#include <memory>
#include <string>

namespace bw::tb {
class EventFile;
}

namespace bw::elastic {

struct StepSummary;
struct Event;

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void step(const StepSummary& s) = 0;
  virtual void event(const Event& e) = 0;
};

// TensorBoard scalars per step (tags below) and events as text, in `dir` (out_dir/tb):
//   loss, lr, grad_norm, tokens_per_s, mfu, step_s, world, compute_fraction/rank<r>
//   (a rank's compute_ms / step_ms), val/loss (where a validation loss was measured after the
//   step), and, as text under "events", one line per event.
// A skipped (non-finite) step writes no loss. An unwritable `dir` is a ConfigError.
class TensorBoardSink : public MetricsSink {
 public:
  explicit TensorBoardSink(const std::string& dir);
  ~TensorBoardSink() override;
  void step(const StepSummary& s) override;
  void event(const Event& e) override;
  const std::string& path() const;

 private:
  std::unique_ptr<tb::EventFile> file_;
};

}  // namespace bw::elastic
