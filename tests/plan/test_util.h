// Small random profiles and clusters for the planner's tests.
#pragma once

#include <fmt/format.h>

#include <array>
#include <random>
#include <string>

#include "core/error.h"
#include "plan/cluster.h"
#include "plan/profile.h"

namespace bw::plan {

// Layers with forward 1..5 ms, backward 1.5..3x forward, 0.1..0.5 GB activations and params,
// 1..50 MB outputs: varied enough that stage boundaries matter.
// With `heavy_comm`, outputs range up to 1 GB so that where a stage ends matters as much as how
// much it computes. The microbatch size b bounds how many devices a stage may shard over (d <= b).
inline Profile random_profile(int layers, unsigned seed, bool heavy_comm = false,
                              int microbatch_size = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> f(1, 5), r(1.5, 3), gb(0.1, 0.5),
      mb(1, heavy_comm ? 1000 : 50);
  Profile p;
  p.model = "random";
  p.microbatch_size = microbatch_size;
  for (int i = 0; i < layers; ++i) {
    LayerProfile l;
    l.name = "layer" + std::to_string(i);
    l.forward_ms = f(rng);
    l.backward_ms = l.forward_ms * r(rng);
    l.activation_bytes = gb(rng) * 1e9;
    l.param_bytes = gb(rng) * 1e9 / 4;
    l.output_bytes = mb(rng) * 1e6;
    p.layers.push_back(l);
  }
  return p;
}

inline Cluster small_cluster(int nodes, int g, double memory_gb) {
  Cluster c;
  c.num_nodes = nodes;
  c.devices_per_node = g;
  c.device_memory_gb = memory_gb;
  c.intra_node_gbps = 800;
  c.inter_node_gbps = 100;
  c.latency_us = 10;
  return c;
}

// Ring collectives of the runtime's sharded stage, written out (ms): one step moves a 1/d piece
// of `bytes` over the intra-node link; an all-gather takes d - 1 steps, an all-reduce twice that.
inline double ring_step_ms(double bytes, int d, const Cluster& c) {
  return c.latency_us * 1e-3 + (bytes / d) / (c.intra_node_gbps / 8 * 1e6);
}
inline double all_gather_ms(double bytes, int d, const Cluster& c) {
  return (d - 1) * ring_step_ms(bytes, d, c);
}
inline double all_reduce_ms(double bytes, int d, const Cluster& c) {
  return 2 * (d - 1) * ring_step_ms(bytes, d, c);
}

// Four layers with round numbers for hand-computed costs (sharded_cost_test, recompute_cost_test):
// forward 2..5 ms, backward twice that; on hand_cluster()'s link (1e8 bytes per ms) a 3e8-byte
// layer sharded 3 ways moves 1e8 bytes per ring step, 1 ms.
inline Profile hand_profile(int microbatch_size, const std::array<double, 4>& activation_bytes) {
  Profile p;
  p.model = "hand";
  p.microbatch_size = microbatch_size;
  const double fwd[] = {2, 3, 4, 5}, bwd[] = {4, 6, 8, 10};
  const double params[] = {3e8, 6e8, 1.5e8, 9e8};
  const double outs[] = {5e6, 1e7, 2e7, 0};
  for (int l = 0; l < 4; ++l) {
    LayerProfile x;
    x.name = fmt::format("l{}", l);
    x.forward_ms = fwd[l];
    x.backward_ms = bwd[l];
    x.param_bytes = params[l];
    x.activation_bytes = activation_bytes[l];
    x.output_bytes = outs[l];
    p.layers.push_back(x);
  }
  return p;
}

// One node of 4 devices and 80 GB on an 800 Gbit/s link (1e8 bytes per ms), 10 us latency.
inline Cluster hand_cluster() { return small_cluster(1, 4, 80); }

// The message of the ConfigError `fn` throws, or "" when it throws none.
inline std::string error_of(auto fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace bw::plan
