// Small random profiles and clusters for the planner's tests.
#pragma once

#include <random>
#include <string>

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

}  // namespace bw::plan
