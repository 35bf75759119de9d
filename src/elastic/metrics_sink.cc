// Metrics sinks (see metrics_sink.h).
#include "elastic/metrics_sink.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/tb_events.h"
#include "elastic/coordinator.h"

namespace bw::elastic {

TensorBoardSink::TensorBoardSink(const std::string& dir)
    : file_(std::make_unique<tb::EventFile>(dir)) {}

TensorBoardSink::~TensorBoardSink() = default;

const std::string& TensorBoardSink::path() const { return file_->path(); }

void TensorBoardSink::step(const StepSummary& s) {
  // TensorBoard's step axis is the number of steps done (1-based), as the progress line shows.
  const int64_t step = s.step + 1;
  if (!s.skipped) file_->scalar(step, "loss", s.loss);
  file_->scalar(step, "lr", s.lr);
  file_->scalar(step, "grad_norm", s.grad_norm);
  file_->scalar(step, "tokens_per_s", s.tokens_per_s);
  file_->scalar(step, "mfu", s.mfu);
  file_->scalar(step, "step_s", s.step_s);
  file_->scalar(step, "world", s.world);
  // The validation loss after this step's update; TensorBoard's step is the same steps done.
  if (s.val_loss && std::isfinite(*s.val_loss)) file_->scalar(step, "val/loss", *s.val_loss);
  for (const auto& r : s.reports) {
    file_->scalar(step, fmt::format("compute_fraction/rank{}", r.rank),
                  r.step_ms > 0 ? r.compute_ms / r.step_ms : 0.0);
  }
}

void TensorBoardSink::event(const Event& e) {
  std::string line = fmt::format("{} at step {}", e.kind, e.step + 1);
  if (!e.nodes.empty()) line += fmt::format(", nodes {}", fmt::join(e.nodes, ","));
  line += fmt::format(", generation {}", e.generation);
  if (!e.cause.empty()) line += ": " + e.cause;
  if (e.kind == "recovered") {
    line += fmt::format(" ({} -> {}, {:.0f} ms)", e.old_plan, e.new_plan, e.recovery_ms);
  }
  file_->text(e.step + 1, "events", line);
}

}  // namespace bw::elastic
