// Cluster description for planning: identical nodes of `devices_per_node` devices, the memory of
// one device, and link speeds inside a node and between nodes.
//
// Invariants after validation: num_nodes >= 1, devices_per_node >= 1, memory and bandwidths > 0,
// latency >= 0. Bandwidths are in gigabits per second, latency in microseconds.
#pragma once

#include <string>

#include "core/json.h"

namespace bw::plan {

// Limits checked by validate (docs/planning.md): larger clusters are refused before planning.
inline constexpr int kMaxNodes = 4096;
inline constexpr int kMaxDevicesPerNode = 64;

struct Cluster {
  int num_nodes = 1;
  int devices_per_node = 1;
  double device_memory_gb = 80;   // per device, in GB (1e9 bytes)
  double intra_node_gbps = 2400;  // NVLink-class link between devices of one node
  double inter_node_gbps = 200;   // per node network bandwidth
  double latency_us = 5;          // per point-to-point message

  double device_memory_bytes() const { return device_memory_gb * 1e9; }
  // Milliseconds to move `bytes` over one link (latency included).
  double transfer_ms(double bytes, bool same_node) const;
};

// Throws ConfigError naming the field and the fix: counts within the limits above, memory and
// bandwidths finite and > 0, latency finite and >= 0.
void validate(const Cluster& cluster);
Cluster parse_cluster(const json::Json& doc, const std::string& where = "cluster");
Cluster load_cluster(const std::string& path);
json::Json to_json(const Cluster& cluster);

}  // namespace bw::plan
