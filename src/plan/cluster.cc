#include "plan/cluster.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace bw::plan {

double Cluster::transfer_ms(double bytes, bool same_node) const {
  double gbps = same_node ? intra_node_gbps : inter_node_gbps;
  return latency_us * 1e-3 + bytes * 8.0 / (gbps * 1e9) * 1e3;
}

void validate(const Cluster& c) {
  if (c.num_nodes < 1 || c.num_nodes > kMaxNodes)
    throw ConfigError(
        fmt::format("cluster: nodes must be in [1, {}], got {}", kMaxNodes, c.num_nodes));
  if (c.devices_per_node < 1 || c.devices_per_node > kMaxDevicesPerNode)
    throw ConfigError(fmt::format("cluster: devices per node must be in [1, {}], got {}",
                                  kMaxDevicesPerNode, c.devices_per_node));
  if (!(c.device_memory_gb > 0) || !std::isfinite(c.device_memory_gb))
    throw ConfigError(fmt::format("cluster: device memory must be a finite number > 0 GB, got {}",
                                  c.device_memory_gb));
  if (!(c.intra_node_gbps > 0) || !(c.inter_node_gbps > 0) || !std::isfinite(c.intra_node_gbps) ||
      !std::isfinite(c.inter_node_gbps))
    throw ConfigError(
        fmt::format("cluster: bandwidths must be finite numbers > 0 Gbit/s, got intra {} inter {}",
                    c.intra_node_gbps, c.inter_node_gbps));
  if (!(c.latency_us >= 0) || !std::isfinite(c.latency_us))
    throw ConfigError(fmt::format("cluster: latency must be >= 0 us, got {}", c.latency_us));
}

Cluster parse_cluster(const json::Json& doc, const std::string& where) {
  static const std::vector<std::string> known = {"nodes",
                                                 "devices_per_node",
                                                 "device_memory_gb",
                                                 "intra_node_gbps",
                                                 "inter_node_gbps",
                                                 "latency_us",
                                                 "name"};
  if (!doc.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", where));
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == it.key();
    if (!ok)
      throw ConfigError(fmt::format("{}: unknown field '{}' (known: {})", where, it.key(),
                                    fmt::join(known, ", ")));
  }
  Cluster c;
  c.num_nodes = static_cast<int>(json::get_int_in(doc, "nodes", where, 1, kMaxNodes));
  c.devices_per_node =
      static_cast<int>(json::get_int_in(doc, "devices_per_node", where, 1, kMaxDevicesPerNode));
  c.device_memory_gb = json::get_number(doc, "device_memory_gb", where);
  if (doc.contains("intra_node_gbps"))
    c.intra_node_gbps = json::get_number(doc, "intra_node_gbps", where);
  if (doc.contains("inter_node_gbps"))
    c.inter_node_gbps = json::get_number(doc, "inter_node_gbps", where);
  if (doc.contains("latency_us")) c.latency_us = json::get_number(doc, "latency_us", where);
  validate(c);
  return c;
}

Cluster load_cluster(const std::string& path) { return parse_cluster(json::read_file(path), path); }

json::Json to_json(const Cluster& c) {
  return json::Json{{"nodes", c.num_nodes},
                    {"devices_per_node", c.devices_per_node},
                    {"device_memory_gb", c.device_memory_gb},
                    {"intra_node_gbps", c.intra_node_gbps},
                    {"inter_node_gbps", c.inter_node_gbps},
                    {"latency_us", c.latency_us}};
}

}  // namespace bw::plan
