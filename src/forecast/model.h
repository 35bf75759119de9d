// What the replay needs to know about training on a given number of nodes.
//
// The replay engine (replay.h) and the policies (policies.h) see the cluster only through this
// interface, so unit tests use hand-computable models (a constant step time, a table by node
// count) and the command line plugs in the analytic GPT-3 model below or, later, the planner.
//
// Two arrangements of nodes into pipelines:
// - kTemplates: breakwater's pipeline templates (Oobleck SOSP'23 section 4): pipelines of
//   different sizes cover every live node, so no node idles.
// - kUniform: identical pipelines, as a checkpoint-restart system re-plans after a restart
//   (Varuna, EuroSys'22) or as Bamboo (NSDI'23) keeps them; nodes left over idle.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shape/shape.h"

namespace bw::forecast {

enum class Arrangement { kTemplates, kUniform };

class ThroughputModel {
 public:
  virtual ~ThroughputModel() = default;
  // Time of one step (one global batch) on `nodes` live nodes, or nullopt when the model does
  // not fit on that many nodes.
  virtual std::optional<double> step_ms(int nodes, Arrangement arrangement) = 0;
  // Samples per global batch (constant for the whole run).
  virtual double samples_per_step() const = 0;
  // Bytes of model state (parameters and optimizer state) one node holds on `nodes` nodes:
  // what a node that takes over a lost node's layers must receive.
  virtual double state_bytes_per_node(int nodes) const = 0;
};

// Same step time whatever the node count, as long as at least `min_nodes` are live.
class ConstantModel final : public ThroughputModel {
 public:
  ConstantModel(double step_ms, double samples_per_step, int min_nodes = 1,
                double state_bytes_per_node = 0);
  std::optional<double> step_ms(int nodes, Arrangement arrangement) override;
  double samples_per_step() const override { return samples_; }
  double state_bytes_per_node(int) const override { return state_bytes_; }

 private:
  double step_ms_;
  double samples_;
  int min_nodes_;
  double state_bytes_;
};

// Step time listed per node count; counts between entries take the next lower entry, counts
// below the smallest entry do not fit, unless `min_nodes` is below it: counts in
// [min_nodes, smallest) then take the smallest entry (Oobleck's artifact trains 12-15 nodes at
// its 15-node figure). An entry of +infinity means the model does not fit on that many nodes.
// The same table serves both arrangements.
class TableModel final : public ThroughputModel {
 public:
  TableModel(std::map<int, double> step_ms_by_nodes, double samples_per_step,
             double state_bytes_per_node = 0, int min_nodes = 0);
  std::optional<double> step_ms(int nodes, Arrangement arrangement) override;
  double samples_per_step() const override { return samples_; }
  double state_bytes_per_node(int) const override { return state_bytes_; }

 private:
  std::map<int, double> table_;
  double samples_;
  double state_bytes_;
  int min_nodes_;
};

// GPT-3 family (Brown et al. 2020, table 2.1) on a cluster, from first principles: model FLOPs
// per sample (shape/shape.h: PaLM's 6 N + 12 L H Q T per token), a sustained per-device FLOP
// rate, 1F1B pipelines whose step is (B_i + P_i - 1) microbatch-stage times, and pipelines that
// need enough nodes to hold the state of every parameter a pipeline holds (16 bytes: fp32
// weights, gradients and Adam moments, in bf16 mixed precision too) in device memory.
// Communication is ignored: a stand-in for the planner (plan/) until it is linked.
using GptSpec = shape::TransformerShape;
// "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b",
// "gpt3-175b" (also the planner's names gpt3-small, -medium, -large, -xl): the planner's shapes
// (plan/synth.h); ConfigError listing them otherwise.
GptSpec gpt3_preset(const std::string& name);

struct AnalyticCluster {
  int devices_per_node = 8;
  double device_tflops = 140;    // sustained: A100 312 TFLOP/s bf16 peak at 45% utilisation
  double device_memory_gb = 80;  // A100 80 GB
  int microbatches = 512;        // per global batch
  int microbatch_size = 1;       // samples per microbatch
  int fault_tolerance = 0;       // kTemplates keeps at least f+1 pipelines when it can
};

class AnalyticGptModel final : public ThroughputModel {
 public:
  AnalyticGptModel(GptSpec spec, AnalyticCluster cluster);
  std::optional<double> step_ms(int nodes, Arrangement arrangement) override;
  double samples_per_step() const override;
  double state_bytes_per_node(int nodes) const override;

  // Parameters one pipeline holds (the head's copy of the tied embedding included).
  double params() const { return params_; }
  int min_nodes_per_pipeline() const { return n0_; }
  // Time of one step of `microbatches` on one pipeline of `nodes` nodes.
  double pipeline_step_ms(int nodes, int microbatches) const;

 private:
  double step_for(int nodes, Arrangement arrangement) const;

  GptSpec spec_;
  AnalyticCluster cluster_;
  double params_ = 0;
  double microbatch_ms_ = 0;  // one microbatch forward+backward on one device
  int n0_ = 1;
  std::map<std::pair<int, int>, std::optional<double>> memo_;
};

}  // namespace bw::forecast
