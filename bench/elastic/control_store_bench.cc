// bw_control_store_bench [--calls N]: what one fenced decision write costs on etcd against a put
// on the embedded store, on loopback, side by side in one run (docs/elastic.md "Control store").
//
//   embedded put        EmbeddedControlStore::put over a TCPStore this process hosts (today's
//                       decision write: one set on the store)
//   embedded fenced     the same decision as a fenced transaction (the leader key compared first)
//   etcd put            a plain put on a 3-member etcd on loopback (elastic/local_etcd.h)
//   etcd fenced         the decision write of a leader: a transaction comparing the leader key's
//                       create revision with the leader's epoch around the put (what every durable
//                       write of a coordinator would cost)
// Each row: N calls one after another on one client, each to a new key g0/decision/{k}, after 20
// warm-up calls; median, p95 and max in milliseconds, and the median's ratio to the embedded put.
// etcd is fsync-bound: its data folders are on tmpfs (/dev/shm) when there is one, so the figures
// are the protocol's cost (HTTP, JSON, raft round trip), not a disk's.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "elastic/local_etcd.h"
#include "elastic/control_store_embedded.h"
#include "elastic/control_store_etcd.h"
#include "elastic/store_host.h"

namespace {

using namespace std::chrono_literals;
using bw::elastic::ControlStore;
using bw::elastic::deadline_in;

struct Row {
  std::string name;
  std::vector<double> ms;
};

Row measure(const std::string& name, int calls,
            const std::function<void(const std::string& key)>& write) {
  for (int i = 0; i < 20; ++i) write(fmt::format("warm/{}/{}", name.size(), i));
  Row row{name, {}};
  for (int k = 0; k < calls; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    write(fmt::format("g0/decision/{}", k));
    row.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(row.ms.begin(), row.ms.end());
  return row;
}

double pct(const std::vector<double>& sorted, double p) {
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 200;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::max(1, std::atoi(argv[i + 1]));
  }
  std::vector<Row> rows;

  auto tcp = bw::elastic::host_store("127.0.0.1", 0, std::chrono::milliseconds(10000));
  auto embedded = std::make_shared<bw::elastic::EmbeddedControlStore>(tcp);
  {
    const auto lease = embedded->grant_lease(5, deadline_in(5s));
    const int64_t epoch = embedded->campaign("leader", "bench", lease.id, deadline_in(5s));
    rows.push_back(measure("embedded put", calls, [&](const std::string& key) {
      embedded->put("e/" + key, "commit", deadline_in(5s));
    }));
    rows.push_back(measure("embedded fenced", calls, [&](const std::string& key) {
      embedded->fenced_put({"leader", epoch}, "f/" + key, "commit", deadline_in(5s));
    }));
  }

  if (!bw::elastic::find_etcd()) {
    fmt::print("etcd is not installed (apt-get install etcd-server): etcd rows left out\n");
  } else {
    const auto tmp = std::filesystem::temp_directory_path().string();
    bw::elastic::LocalEtcd cluster(3, tmp);
    auto etcd = bw::elastic::EtcdControlStore::connect(
        bw::elastic::parse_control_url(cluster.url()), "bench", deadline_in(10s));
    const auto lease = etcd->grant_lease(10, deadline_in(5s));
    const int64_t epoch = etcd->campaign("leader", "bench", lease.id, deadline_in(5s));
    rows.push_back(measure("etcd put", calls, [&](const std::string& key) {
      etcd->put("p/" + key, "commit", deadline_in(5s));
    }));
    rows.push_back(measure("etcd fenced", calls, [&](const std::string& key) {
      etcd->fenced_put({"leader", epoch}, "f/" + key, "commit", deadline_in(5s));
    }));
  }

  const double base = pct(rows[0].ms, 0.5);
  fmt::print("{} calls each, loopback\n", calls);
  fmt::print("{:<18} {:>10} {:>10} {:>10} {:>12}\n", "write", "median_ms", "p95_ms", "max_ms",
             "x emb. put");
  for (const auto& r : rows) {
    fmt::print("{:<18} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.1f}\n", r.name, pct(r.ms, 0.5),
               pct(r.ms, 0.95), r.ms.back(), pct(r.ms, 0.5) / base);
  }
  return 0;
}
