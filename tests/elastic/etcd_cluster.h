// A real etcd cluster on loopback for the control store tests and bench: elastic/local_etcd.h
// (n members on free ports, data on tmpfs, killed with the test process).
//
// etcd missing: find_etcd() is empty; under CI=true the tests fail on it (BW_REQUIRE_ETCD below),
// elsewhere they skip with one line.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "elastic/local_etcd.h"

// In a GoogleTest body: fails the test under CI=true (where scripts/setup.sh installs etcd),
// skips it elsewhere.
#define BW_REQUIRE_ETCD()                                                                     \
  do {                                                                                        \
    if (!::bw::elastic::find_etcd()) {                                                        \
      const char* ci = std::getenv("CI");                                                     \
      if (ci && std::string(ci) == "true") {                                                  \
        FAIL() << "etcd is not installed (CI=true): scripts/setup.sh installs etcd-server";   \
      }                                                                                       \
      GTEST_SKIP() << "etcd not installed (apt-get install etcd-server): etcd cases skipped"; \
    }                                                                                         \
  } while (0)

namespace bw::elastic::etcd_test {

using bw::elastic::find_etcd;
using EtcdCluster = bw::elastic::LocalEtcd;
inline int free_port() { return free_loopback_port(); }

}  // namespace bw::elastic::etcd_test
