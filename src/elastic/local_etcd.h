// A real etcd cluster on loopback: the control store of `breakwater train --elastic.control=etcd`
// (docs/elastic.md "A takeover on one machine"), of the control store tests and of the benches.
// n members (etcd from PATH, Debian's etcd-server package), each on two free loopback ports, data
// folders in a fresh folder on tmpfs (/dev/shm) when there is one, else under `temp_dir`. Each
// member runs in its own process group and dies with this process (PR_SET_PDEATHSIG); the
// destructor kills the groups and removes the folder. Heartbeat 50 ms and election timeout 250
// ms, so a lost etcd leader is replaced in well under a second and a 1 s lease is honoured
// (etcd's minimum TTL is 1.5 election timeouts).
//
// Thread-safety: one thread uses a LocalEtcd.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "elastic/control_store.h"
#include "elastic/process.h"

namespace bw::elastic {

// The etcd executable on PATH, if any.
std::optional<std::string> find_etcd();

// A loopback TCP port free when asked (InternalError when none can be bound).
int free_loopback_port();

// The command line of one member `name` of a cluster of members on one machine or network:
// `client` and `peer` are its URLs (http://ADDR:PORT), `initial` the cluster's
// "name=peer-url,..." list, `token` the cluster's own. Heartbeat 50 ms, election timeout 250 ms.
std::vector<std::string> etcd_member_args(const std::string& exe, const std::string& name,
                                          const std::string& data_dir, const std::string& client,
                                          const std::string& peer, const std::string& initial,
                                          const std::string& token);

class LocalEtcd {
 public:
  // Starts `members` members and waits until each serves a linearizable read, before
  // `start_deadline`. Free ports are free when chosen, not when etcd binds them (tests run in
  // parallel): a member that exits at once is started again on other ports, up to 3 tries.
  // ConfigError when etcd is not installed; CommError naming the member's log when it does not
  // come up.
  LocalEtcd(int members, const std::string& temp_dir,
            std::chrono::milliseconds start_deadline = std::chrono::seconds(30));
  ~LocalEtcd();
  LocalEtcd(const LocalEtcd&) = delete;
  LocalEtcd& operator=(const LocalEtcd&) = delete;

  int size() const { return static_cast<int>(pids_.size()); }
  // "etcd://127.0.0.1:P1,127.0.0.1:P2,..." (parse_control_url's form).
  std::string url() const;
  std::string member_url(int i) const;
  // SIGKILL of member i's process group, and reaped.
  void kill(int i);
  std::string log_of(int i) const;
  // Starts a killed member again, on its ports and with its data (it rejoins the cluster).
  void restart(int i);
  // The member that leads the cluster now, as its own status says (etcdctl endpoint status);
  // -1 when no live member says it leads.
  int leader();
  // The folder of the members' data and logs.
  const std::string& dir() const { return dir_; }

 private:
  void start(int members, int attempt);
  std::vector<std::string> member_args(int i) const;
  void wait_healthy(Deadline deadline);

  std::string dir_;
  std::vector<int> client_, peer_;
  std::string exe_, initial_;
  int attempt_ = 0;
  std::vector<ChildProcess> pids_;
};

}  // namespace bw::elastic
