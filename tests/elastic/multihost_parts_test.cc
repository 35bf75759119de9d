// The pieces of a multi-host run that need no network (docs/multihost.md): address parsing, the
// Slurm defaults, DeepSpeed hostfiles, and the run token's HMAC against another implementation's.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "elastic/launch.h"
#include "elastic/net.h"
#include "elastic/slurm.h"
#include "elastic/token.h"

namespace bw::elastic {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(HostPort, ParsesNamesNumbersAndBracketedIpv6) {
  EXPECT_EQ(parse_host_port("10.0.0.1:29500", "x").host, "10.0.0.1");
  EXPECT_EQ(parse_host_port("10.0.0.1:29500", "x").port, 29500);
  EXPECT_EQ(parse_host_port("node7:0", "x").host, "node7");
  EXPECT_EQ(parse_host_port("[fd00::1]:80", "x").host, "fd00::1");
  EXPECT_EQ(parse_host_port("[fd00::1]:80", "x").port, 80);
  EXPECT_NE(error_of([] { parse_host_port("fd00::1:80", "--listen"); }).find("[fd00::1]:29500"),
            std::string::npos);
  for (const char* bad : {"host", ":1", "host:", "host:65536", "host:-1", "host:1x", "[::1]1"}) {
    EXPECT_NE(error_of([&] { parse_host_port(bad, "--listen"); }).find("--listen"),
              std::string::npos)
        << bad;
  }
}

TEST(Slurm, FirstHostOfAHostList) {
  EXPECT_EQ(first_host("gpu[07-09,12],login1"), "gpu07");
  EXPECT_EQ(first_host("login1,gpu[1-4]"), "login1");
  EXPECT_EQ(first_host("n[3]"), "n3");
  EXPECT_EQ(first_host("rack[2-3]-n1"), "rack2-n1");
  for (const char* bad : {"", "[1-2]", "gpu[x-2]", "gpu[1-2"}) {
    EXPECT_FALSE(error_of([&] { first_host(bad); }).empty()) << bad;
  }
}

TEST(Slurm, DefaultsComeFromTheJobsVariables) {
  setenv("SLURMD_NODENAME", "gpu08", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[07-09]", 1);
  unsetenv("BW_COORDINATOR_PORT");
  auto d = slurm_defaults();
  EXPECT_EQ(d.node_name, "gpu08");
  EXPECT_EQ(d.coordinator, "gpu07:29500");
  setenv("BW_COORDINATOR_PORT", "4000", 1);
  EXPECT_EQ(slurm_defaults().coordinator, "gpu07:4000");
  unsetenv("SLURMD_NODENAME");
  unsetenv("SLURM_JOB_NODELIST");
  unsetenv("BW_COORDINATOR_PORT");
  d = slurm_defaults();
  EXPECT_TRUE(d.node_name.empty() && d.coordinator.empty());
}

TEST(Hostfile, DeepSpeedFormat) {
  const auto hosts = parse_hostfile("# cluster\nworker-1 slots=8\n\nworker-2 slots=8  # b\n", "h");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "worker-1");
  EXPECT_EQ(hosts[1].host, "worker-2");
  EXPECT_EQ(hosts[1].slots, 8);
  EXPECT_EQ(parse_hostfile("solo\n", "h").front().slots, 1);
  EXPECT_NE(error_of([] { parse_hostfile("a slots=2\nb slots=4\n", "h"); }).find("same number"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("a\na\n", "h"); }).find("listed twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("a slots=0\n", "h"); }).find("h:1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("a gpus=2\n", "h"); }).find("host slots=g"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("a slots=2 x\n", "h"); }).find("host slots=g"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("# none\n", "h"); }).find("no hosts"), std::string::npos);
}

// The proof is HMAC-SHA256(token, nonce "/" k); the reference digest comes from the openssl
// command line: `printf 'n/1' | openssl dgst -sha256 -hmac t`.
TEST(Token, ProofIsHmacSha256OfTheNonceAndRegistration) {
  EXPECT_EQ(token_proof("t", "n", 1),
            "aec989cd985bc2afd09933e8dd135540a2a948229c673e80c4b72378cd1264f2");
  EXPECT_NE(token_proof("t", "n", 1), token_proof("t", "n", 2));
  EXPECT_NE(token_proof("t", "n", 1), token_proof("u", "n", 1));
}

TEST(Token, SameSecretComparesWholeStrings) {
  EXPECT_TRUE(same_secret("abc", "abc"));
  EXPECT_FALSE(same_secret("abc", "abd"));
  EXPECT_FALSE(same_secret("abc", "ab"));
  EXPECT_EQ(random_hex(16).size(), 32u);
  EXPECT_NE(random_hex(16), random_hex(16));
}

}  // namespace
}  // namespace bw::elastic
