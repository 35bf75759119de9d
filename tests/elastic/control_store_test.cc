// The control store's conformance suite (src/elastic/control_store.h): every case runs unchanged
// against both backends, as Gloo's tests run every algorithm over every transport: the embedded
// store over a real TCPStore, and etcd as a real 3-member cluster on loopback
// (tests/elastic/etcd_cluster.h). The oracle is etcd's documented model (revisions, leases,
// transactions); the one documented difference, leases that never expire in the embedded store,
// is asserted as such. Then etcd's own cases (members killed, bad endpoints, an old version),
// the --control URL parser and the gateway's JSON on replies etcd 3.4 sends.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "elastic/control_store_embedded.h"
#include "elastic/control_store_etcd.h"
#include "elastic/etcd_json.h"
#include "elastic/store_host.h"
#include "etcd_cluster.h"

namespace bw::elastic {
namespace {

using namespace std::chrono_literals;
using etcd_test::EtcdCluster;

enum class Backend { kEmbedded, kEtcd };

double ms_since(ControlClock::time_point t) {
  return std::chrono::duration<double, std::milli>(ControlClock::now() - t).count();
}

class ControlStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kEtcd) {
      BW_REQUIRE_ETCD();
      cluster_ = std::make_unique<EtcdCluster>(3, ::testing::TempDir());
    } else {
      tcp_ = host_store("127.0.0.1", 0, std::chrono::milliseconds(10000));
      embedded_ = std::make_shared<EmbeddedControlStore>(tcp_);
    }
  }
  // A client as another process would have one: its own connections for etcd; the one
  // single-writer object for the embedded store.
  std::shared_ptr<ControlStore> client() {
    if (GetParam() == Backend::kEtcd) {
      return EtcdControlStore::connect(parse_control_url(cluster_->url()), "conformance",
                                       deadline_in(10s));
    }
    return embedded_;
  }
  bool leases_expire() const { return GetParam() == Backend::kEtcd; }

  std::unique_ptr<EtcdCluster> cluster_;
  c10::intrusive_ptr<c10d::TCPStore> tcp_;
  std::shared_ptr<EmbeddedControlStore> embedded_;
};

TEST_P(ControlStoreTest, PutGetEraseKeepRevisions) {
  auto s = client();
  const auto d = deadline_in(5s);
  EXPECT_FALSE(s->get("k", d).has_value());
  const int64_t r1 = s->put("k", "one", d);
  auto kv = s->get("k", d);
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->key, "k");
  EXPECT_EQ(kv->value, "one");
  EXPECT_EQ(kv->create_revision, r1);
  EXPECT_EQ(kv->mod_revision, r1);
  EXPECT_EQ(kv->version, 1);
  const int64_t r2 = s->put("k", std::string("t\0o", 3), d);  // bytes, not text
  EXPECT_GT(r2, r1);
  kv = s->get("k", d);
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->value, std::string("t\0o", 3));
  EXPECT_EQ(kv->create_revision, r1);
  EXPECT_EQ(kv->mod_revision, r2);
  EXPECT_EQ(kv->version, 2);
  EXPECT_TRUE(s->erase("k", d));
  EXPECT_FALSE(s->get("k", d).has_value());
  EXPECT_FALSE(s->erase("k", d));
  EXPECT_GT(s->revision(d), r2);
}

TEST_P(ControlStoreTest, CompareAndSetAppliesOnlyWhenTheComparisonHolds) {
  auto s = client();
  const auto d = deadline_in(5s);
  EXPECT_FALSE(s->compare_and_set("c", "", "x", d)) << "a value compare on an absent key is false";
  EXPECT_FALSE(s->get("c", d));
  s->put("c", "a", d);
  EXPECT_FALSE(s->compare_and_set("c", "b", "x", d));
  EXPECT_EQ(s->get("c", d)->value, "a");
  EXPECT_TRUE(s->compare_and_set("c", "a", "x", d));
  EXPECT_EQ(s->get("c", d)->value, "x");

  // On the mod revision: the stale one runs the other branch, which reads the current value.
  const int64_t rev = s->get("c", d)->mod_revision;
  Txn stale;
  stale.when = {Compare::mod_revision_is("c", rev - 1)};
  stale.then = {TxnOp::put("c", "never")};
  stale.otherwise = {TxnOp::get("c"), TxnOp::get("absent")};
  const TxnResult r = s->txn(stale, d);
  EXPECT_FALSE(r.succeeded);
  ASSERT_EQ(r.reads.size(), 2u);
  ASSERT_TRUE(r.reads[0]);
  EXPECT_EQ(r.reads[0]->value, "x");
  EXPECT_FALSE(r.reads[1]);
  // Several writes at once: one revision for all.
  Txn both;
  both.when = {Compare::mod_revision_is("c", rev), Compare::absent("d")};
  both.then = {TxnOp::put("c", "y"), TxnOp::put("d", "z"), TxnOp::get("d")};
  const TxnResult w = s->txn(both, d);
  EXPECT_TRUE(w.succeeded);
  ASSERT_EQ(w.reads.size(), 1u);
  ASSERT_TRUE(w.reads[0]);
  EXPECT_EQ(w.reads[0]->value, "z") << "a read after a write of the same transaction sees it";
  EXPECT_EQ(s->get("c", d)->mod_revision, w.revision);
  EXPECT_EQ(s->get("d", d)->mod_revision, w.revision);
  // Not every compare holds: nothing of the first branch is applied.
  Txn half;
  half.when = {Compare::value_is("c", "y"), Compare::exists("nothing-here")};
  half.then = {TxnOp::erase("c")};
  EXPECT_FALSE(s->txn(half, d).succeeded);
  EXPECT_EQ(s->get("c", d)->value, "y");
}

TEST_P(ControlStoreTest, CreateIfAbsent) {
  auto s = client();
  const auto d = deadline_in(5s);
  EXPECT_TRUE(s->create("once", "first", d));
  EXPECT_FALSE(s->create("once", "second", d));
  const auto kv = s->get("once", d);
  EXPECT_EQ(kv->value, "first");
  s->erase("once", d);
  EXPECT_TRUE(s->create("once", "third", d));
  EXPECT_GT(s->get("once", d)->create_revision, kv->create_revision);
}

TEST_P(ControlStoreTest, AddIsAtomicAcrossConcurrentClients) {
  constexpr int kThreads = 4, kEach = 15;
  std::vector<std::shared_ptr<ControlStore>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(client());
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) seen[t].push_back(clients[t]->add("n", 1, deadline_in(10s)));
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  // Every add returned its own value: exactly 1..total, no value twice.
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kEach);
  EXPECT_EQ(clients[0]->get("n", deadline_in(5s))->value, std::to_string(kThreads * kEach));
  EXPECT_EQ(clients[0]->add("n", -5, deadline_in(5s)), kThreads * kEach - 5);
}

TEST_P(ControlStoreTest, WaitReturnsOnThePutAndTimesOutTyped) {
  auto s = client();
  auto writer = client();
  auto start = ControlClock::now();
  EXPECT_THROW(s->wait({"never"}, deadline_in(300ms)), ControlTimedOut);
  const double waited = ms_since(start);
  EXPECT_GE(waited, 290);
  EXPECT_LT(waited, 300 + 1500) << "the wait overran its deadline";

  s->put("a", "1", deadline_in(5s));
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(150ms);
    writer->put("b", "2", deadline_in(5s));
  });
  start = ControlClock::now();
  s->wait({"a", "b"}, deadline_in(10s));
  EXPECT_GE(ms_since(start), 100);
  later.get();
}

TEST_P(ControlStoreTest, WatchFromARevisionSeesEveryEventInOrder) {
  auto s = client();
  const auto d = deadline_in(10s);
  const int64_t from = s->revision(d) + 1;
  std::vector<WatchEvent> want;
  const auto put = [&](const std::string& k, const std::string& v) {
    const int64_t r = s->put(k, v, d);
    if (k.rfind("w/", 0) == 0) want.push_back({WatchEvent::Type::kPut, k, v, r});
  };
  put("w/a", "1");
  put("x", "outside the prefix");
  put("w/b", "2");
  put("w/a", "3");
  s->erase("w/b", d);
  want.push_back({WatchEvent::Type::kDelete, "w/b", "", s->revision(d)});
  put("wx", "prefix w/ only");
  put("w/c", "4");
  // Collected in calls from the last event's revision + 1, as a follower does.
  std::vector<WatchEvent> got;
  int64_t next = from;
  while (got.size() < want.size()) {
    const auto events = s->watch("w/", next, d);
    ASSERT_FALSE(events.empty()) << "the watch saw " << got.size() << " of " << want.size();
    for (const auto& e : events) {
      got.push_back(e);
      next = e.revision + 1;
    }
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].type, want[i].type) << i;
    EXPECT_EQ(got[i].key, want[i].key) << i;
    EXPECT_EQ(got[i].value, want[i].value) << i;
    EXPECT_EQ(got[i].revision, want[i].revision) << i;
  }
  // Nothing more: an empty list at the deadline.
  const auto start = ControlClock::now();
  EXPECT_TRUE(s->watch("w/", next, deadline_in(200ms)).empty());
  EXPECT_LT(ms_since(start), 200 + 1500);
  // A watch waiting when the write comes returns it.
  auto w = std::async(std::launch::async, [&] { return s->watch("w/", next, deadline_in(10s)); });
  std::this_thread::sleep_for(100ms);
  const int64_t r = client()->put("w/late", "5", deadline_in(5s));
  const auto late = w.get();
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].key, "w/late");
  EXPECT_EQ(late[0].revision, r);
}

TEST_P(ControlStoreTest, LeasesKeepTheirKeysWhileAliveAndRevokeDeletesThem) {
  auto s = client();
  const auto d = deadline_in(20s);
  const Lease idle = s->grant_lease(1, d);
  const Lease kept = s->grant_lease(1, d);
  EXPECT_GE(idle.ttl_s, 1);
  s->put("l/idle", "1", d, idle.id);
  s->put("l/kept", "2", d, kept.id);
  std::atomic<bool> stop{false};
  std::thread keeper([&] {
    while (!stop) {
      s->keep_alive(kept.id, deadline_in(2s));
      std::this_thread::sleep_for(200ms);
    }
  });
  const auto start = ControlClock::now();
  if (leases_expire()) {
    // etcd: the lease without keep-alives expires (TTL, plus the leader's expiry check).
    while (s->get("l/idle", d)) {
      ASSERT_LT(ms_since(start), 8000) << "the key of an expired lease is still there";
      std::this_thread::sleep_for(100ms);
    }
    EXPECT_GE(ms_since(start), 800) << "the key went before its lease's TTL";
    EXPECT_THROW(s->keep_alive(idle.id, d), LeaseGone);
    EXPECT_THROW(s->put("l/late", "x", d, idle.id), LeaseGone);
  } else {
    // embedded: leases live as long as the process.
    std::this_thread::sleep_for(1500ms);
    EXPECT_TRUE(s->get("l/idle", d));
    EXPECT_EQ(s->keep_alive(idle.id, d), 1);
  }
  EXPECT_TRUE(s->get("l/kept", d)) << "a kept-alive lease lost its key";
  stop = true;
  keeper.join();
  // Revoking deletes every key of the lease at once, and the lease is gone.
  s->put("l/kept2", "3", d, kept.id);
  s->revoke(kept.id, d);
  EXPECT_FALSE(s->get("l/kept", d));
  EXPECT_FALSE(s->get("l/kept2", d));
  EXPECT_THROW(s->keep_alive(kept.id, d), LeaseGone);
  EXPECT_THROW(s->put("l/after", "x", d, kept.id), LeaseGone);
  EXPECT_FALSE(s->get("l/after", d));
  s->revoke(kept.id, d);  // again: no error
}

TEST_P(ControlStoreTest, ElectionOneLeaderAtATimeAndTheEpochGrows) {
  auto a = client();
  auto b = client();
  auto c = client();
  const auto d = deadline_in(20s);
  const Lease la = a->grant_lease(5, d), lb = b->grant_lease(5, d), lc = c->grant_lease(5, d);
  const int64_t ea = a->campaign("leader", "a", la.id, d);
  auto leader = b->leader("leader", d);
  ASSERT_TRUE(leader);
  EXPECT_EQ(leader->value, "a");
  EXPECT_EQ(leader->epoch, ea);
  // Held: another campaign waits and gives up at its deadline.
  const auto start = ControlClock::now();
  EXPECT_THROW(b->campaign("leader", "b", lb.id, deadline_in(300ms)), ControlTimedOut);
  EXPECT_LT(ms_since(start), 300 + 1500);
  // b waits; it wins only once a resigns.
  std::atomic<bool> b_won{false};
  auto bf = std::async(std::launch::async, [&] {
    const int64_t e = b->campaign("leader", "b", lb.id, deadline_in(15s));
    b_won = true;
    return e;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(b_won) << "b won while a led";
  EXPECT_EQ(c->leader("leader", d)->value, "a");
  EXPECT_FALSE(a->resign("leader", ea + 1000, d)) << "a resign with another epoch removed the key";
  EXPECT_TRUE(a->resign("leader", ea, d));
  const int64_t eb = bf.get();
  EXPECT_GT(eb, ea);
  EXPECT_EQ(c->leader("leader", d)->value, "b");
  EXPECT_EQ(c->leader("leader", d)->epoch, eb);
  // c wins when b's lease ends (revoked here; its expiry is etcd's own case below).
  auto cf = std::async(std::launch::async,
                       [&] { return c->campaign("leader", "c", lc.id, deadline_in(15s)); });
  std::this_thread::sleep_for(100ms);
  b->revoke(lb.id, d);
  const int64_t ec = cf.get();
  EXPECT_GT(ec, eb);
  EXPECT_EQ(a->leader("leader", d)->value, "c");
  // A campaign with a lease that is gone fails typed.
  EXPECT_THROW(b->campaign("other", "b", lb.id, deadline_in(5s)), LeaseGone);
}

TEST_P(ControlStoreTest, AnOldLeadersFencedWritesFailOnceAnotherWon) {
  auto a = client();
  auto b = client();
  const auto d = deadline_in(20s);
  const Lease la = a->grant_lease(5, d), lb = b->grant_lease(5, d);
  const int64_t ea = a->campaign("leader", "a", la.id, d);
  const Fence fa{"leader", ea};
  a->fenced_put(fa, "decision/0", "commit", d);
  // A fenced transaction whose own compare fails is not fenced out: the other branch runs.
  Txn t;
  t.fence = fa;
  t.when = {Compare::absent("decision/0")};
  t.then = {TxnOp::put("decision/0", "abort")};
  t.otherwise = {TxnOp::get("decision/0")};
  const TxnResult r = a->txn(t, d);
  EXPECT_FALSE(r.succeeded);
  ASSERT_EQ(r.reads.size(), 1u);
  EXPECT_EQ(r.reads[0]->value, "commit");

  // a loses its lease (as when it is paused past its TTL); b takes over.
  a->revoke(la.id, d);
  const int64_t eb = b->campaign("leader", "b", lb.id, d);
  EXPECT_GT(eb, ea);
  const int64_t before = b->revision(d);
  EXPECT_THROW(a->fenced_put(fa, "decision/1", "commit", d), FencedOut);
  Txn late;
  late.fence = fa;
  late.then = {TxnOp::put("decision/0", "abort"), TxnOp::erase("decision/1")};
  late.otherwise = {TxnOp::put("decision/0", "abort")};
  EXPECT_THROW(a->txn(late, d), FencedOut);
  // Nothing of either was written.
  EXPECT_FALSE(b->get("decision/1", d));
  EXPECT_EQ(b->get("decision/0", d)->value, "commit");
  EXPECT_EQ(b->revision(d), before);
  // The new leader's fence holds.
  b->fenced_put(Fence{"leader", eb}, "decision/1", "commit", d);
  EXPECT_EQ(a->get("decision/1", d)->value, "commit");
}

TEST_P(ControlStoreTest, ValuesUpTo64KiBAndBugsAreInternalErrors) {
  auto s = client();
  const auto d = deadline_in(5s);
  std::string big(kMaxValueBytes, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  s->put("big", big, d);
  EXPECT_EQ(s->get("big", d)->value, big);
  EXPECT_THROW(s->put("big", big + "x", d), InternalError);
  Txn t;
  t.then = {TxnOp::put("big2", big + "x")};
  EXPECT_THROW(s->txn(t, d), InternalError);
  EXPECT_FALSE(s->get("big2", d));
  EXPECT_THROW(s->put("", "v", d), InternalError);
  Txn twice;  // etcd refuses a branch that writes one key twice; so does the embedded store
  twice.then = {TxnOp::put("k", "1"), TxnOp::erase("k")};
  EXPECT_THROW(s->txn(twice, d), InternalError);
  EXPECT_FALSE(s->get("k", d));
}

INSTANTIATE_TEST_SUITE_P(Backends, ControlStoreTest,
                         ::testing::Values(Backend::kEmbedded, Backend::kEtcd),
                         [](const auto& info) {
                           return info.param == Backend::kEtcd ? "etcd" : "embedded";
                         });

// --- etcd's own cases

TEST(EtcdControlStore, LeaderKeyGoesWithAnExpiredLeaseAndTheWaitingCampaignerWins) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, ::testing::TempDir());
  const auto url = parse_control_url(cluster.url());
  auto a = EtcdControlStore::connect(url, "expiry", deadline_in(10s));
  auto b = EtcdControlStore::connect(url, "expiry", deadline_in(10s));
  const auto d = deadline_in(20s);
  const Lease la = a->grant_lease(1, d), lb = b->grant_lease(5, d);
  const int64_t ea = a->campaign("leader", "a", la.id, d);
  // a never keeps its lease alive; b's campaign wins when it expires.
  const auto start = ControlClock::now();
  const int64_t eb = b->campaign("leader", "b", lb.id, deadline_in(10s));
  EXPECT_GT(eb, ea);
  EXPECT_GE(ms_since(start), 900);
  EXPECT_THROW(a->fenced_put(Fence{"leader", ea}, "x", "1", d), FencedOut);
}

TEST(EtcdControlStore, OneOfThreeMembersKilledStillServes) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, ::testing::TempDir());
  auto s =
      EtcdControlStore::connect(parse_control_url(cluster.url()), "one-down", deadline_in(10s));
  s->put("k", "before", deadline_in(5s));
  cluster.kill(0);  // the first endpoint, the one the client used
  const auto d = deadline_in(10s);
  EXPECT_EQ(s->get("k", d)->value, "before");
  s->put("k", "after", d);
  EXPECT_EQ(s->add("n", 2, d), 2);
  const Lease l = s->grant_lease(5, d);
  EXPECT_GT(s->campaign("leader", "me", l.id, d), 0);
  EXPECT_EQ(s->get("k", d)->value, "after");
}

TEST(EtcdControlStore, TwoOfThreeMembersKilledFailTypedWithinTheDeadline) {
  BW_REQUIRE_ETCD();
  EtcdCluster cluster(3, ::testing::TempDir());
  auto s =
      EtcdControlStore::connect(parse_control_url(cluster.url()), "two-down", deadline_in(10s));
  s->put("k", "v", deadline_in(5s));
  cluster.kill(0);
  cluster.kill(1);
  for (const char* op : {"get", "put", "txn", "add"}) {
    const auto start = ControlClock::now();
    const auto d = deadline_in(800ms);
    try {
      if (std::string(op) == "get") s->get("k", d);
      if (std::string(op) == "put") s->put("k", "w", d);
      if (std::string(op) == "txn") s->create("k2", "w", d);
      if (std::string(op) == "add") s->add("n", 1, d);
      ADD_FAILURE() << op << " succeeded without a quorum";
    } catch (const ControlUnavailable& e) {
      SUCCEED() << e.what();
    } catch (const ControlTimedOut& e) {
      SUCCEED() << e.what();
    }
    EXPECT_LT(ms_since(start), 800 + 500) << op << " overran its deadline";
  }
}

TEST(EtcdControlStore, UnreachableEndpointsAreOneConfigErrorNamingThem) {
  const int p1 = etcd_test::free_port(), p2 = etcd_test::free_port();
  const std::string url = fmt::format("etcd://127.0.0.1:{},127.0.0.1:{}", p1, p2);
  const auto start = ControlClock::now();
  try {
    EtcdControlStore::connect(parse_control_url(url), "r", deadline_in(700ms));
    FAIL() << "connected to nothing";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(fmt::format("127.0.0.1:{}", p1)), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("127.0.0.1:{}", p2)), std::string::npos) << m;
    EXPECT_NE(m.find("unreachable"), std::string::npos) << m;
  }
  EXPECT_LT(ms_since(start), 700 + 1000);
}

// A one-request HTTP server on loopback answering `body` (an etcd that is too old, or not etcd).
class OneReplyServer {
 public:
  explicit OneReplyServer(std::string body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 4);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, body = std::move(body)] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)::read(c, buf, sizeof(buf));
      const std::string reply = fmt::format(
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
          "Connection: close\r\n\r\n{}",
          body.size(), body);
      (void)::write(c, reply.data(), reply.size());
      ::close(c);
    });
  }
  ~OneReplyServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

TEST(EtcdControlStore, AnEtcdOlderThan34IsAConfigError) {
  OneReplyServer old(R"({"etcdserver":"3.3.27","etcdcluster":"3.3.0"})");
  try {
    EtcdControlStore::connect(parse_control_url(fmt::format("etcd://127.0.0.1:{}", old.port())),
                              "r", deadline_in(5s));
    FAIL() << "accepted etcd 3.3";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("3.3.27"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3.4 or newer"), std::string::npos) << e.what();
  }
}

// --- the --control URL

TEST(ControlUrl, Parses) {
  EXPECT_EQ(parse_control_url("").kind, ControlUrl::Kind::kEmbedded);
  EXPECT_EQ(parse_control_url("embedded").kind, ControlUrl::Kind::kEmbedded);
  const auto u = parse_control_url("etcd://h1:2379,10.0.0.2:2380,[::1]:2381");
  ASSERT_EQ(u.kind, ControlUrl::Kind::kEtcd);
  ASSERT_EQ(u.endpoints.size(), 3u);
  EXPECT_EQ(u.endpoints[0].host, "h1");
  EXPECT_EQ(u.endpoints[0].port, 2379);
  EXPECT_EQ(u.endpoints[1].url(), "http://10.0.0.2:2380");
  EXPECT_EQ(u.endpoints[2].host, "::1");
  EXPECT_EQ(u.endpoints[2].url(), "http://[::1]:2381");
  EXPECT_EQ(u.endpoints[2].str(), "[::1]:2381");
}

TEST(ControlUrl, RefusesWhatDoesNotParseWithOneMessage) {
  const std::pair<const char*, const char*> bad[] = {
      {"etcd://", "names no endpoint"},
      {"etcd://h1", "has no port"},
      {"etcd://h1:0", "not a number from 1 to 65535"},
      {"etcd://h1:65536", "not a number from 1 to 65535"},
      {"etcd://h1:23x", "not a number from 1 to 65535"},
      {"etcd://h1:2379,", "empty endpoint"},
      {"etcd://h1:2379,,h2:2379", "empty endpoint"},
      {"etcd://:2379", "empty host"},
      {"etcd://h 1:2379", "character ' '"},
      {"etcd://h1:2379/v3", "has a path"},
      {"etcd://[::1:2379", "without ']'"},
      {"etcd://[zz]:2379", "not an IPv6 address"},
      {"etcd://h1:2379,h1:2379", "twice"},
      {"http://h1:2379", "neither 'embedded' nor an etcd:// URL"},
      {"zookeeper", "neither 'embedded' nor an etcd:// URL"},
  };
  for (const auto& [url, why] : bad) {
    try {
      parse_control_url(url);
      ADD_FAILURE() << url << " parsed";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(why), std::string::npos) << url << ": " << m;
      EXPECT_NE(m.find("--control=etcd://HOST:PORT"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST(ControlStoreRunId, RefusesWhatCannotBeAPrefix) {
  check_run_id("run-1.a_b");
  for (const char* bad : {"", "a/b", "a b", "ü"})
    EXPECT_THROW(check_run_id(bad), ConfigError) << bad;
  EXPECT_THROW(check_run_id(std::string(65, 'a')), ConfigError);
}

// --- the gateway's JSON (replies as etcd 3.4.23 sends them)

TEST(EtcdJson, DefaultFieldsLeftOutReadAsZero) {
  const EtcdCodec codec("bw/r/");
  // A range of a key with an empty value and no lease: "value" and "lease" are left out.
  const auto r = codec.decode_range(
      R"({"header":{"cluster_id":"1","member_id":"2","revision":"7","raft_term":"2"},)"
      R"("kvs":[{"key":"Yncvci9r","create_revision":"4","mod_revision":"6","version":"2"}],"count":"1"})",
      "test");
  EXPECT_EQ(r.revision, 7);
  ASSERT_EQ(r.kvs.size(), 1u);
  EXPECT_EQ(r.kvs[0], (KeyValue{"k", "", 4, 6, 2, 0}));
  EXPECT_TRUE(codec.decode_range(R"({"header":{"revision":"2"}})", "test").kvs.empty());
  // A failed transaction has no "succeeded".
  Txn t;
  t.when = {Compare::absent("k")};
  t.otherwise = {TxnOp::get("k")};
  const auto x = codec.decode_txn(
      R"({"header":{"revision":"9"},"responses":[{"response_range":{"header":{"revision":"9"},)"
      R"("kvs":[{"key":"Yncvci9r","create_revision":"4","mod_revision":"6","version":"2","value":"dg=="}],"count":"1"}}]})",
      t, "test");
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->succeeded);
  EXPECT_EQ(x->revision, 9);
  ASSERT_EQ(x->reads.size(), 1u);
  EXPECT_EQ(x->reads[0]->value, "v");
  // A fenced one whose fence failed: nullopt.
  t.fence = Fence{"leader", 3};
  EXPECT_FALSE(codec.decode_txn(R"({"header":{"revision":"9"}})", t, "test"));
  // A put event has no "type"; a delete has no value.
  const auto w = codec.decode_watch(
      R"({"result":{"header":{"revision":"5"},"events":[{"type":"DELETE","kv":{"key":"Yncvci9r","mod_revision":"3"}},)"
      R"({"kv":{"key":"Yncvci9r","create_revision":"4","mod_revision":"4","version":"1","lease":"2324035817217807120"}}]}})",
      "test");
  ASSERT_EQ(w.events.size(), 2u);
  EXPECT_EQ(w.events[0], (WatchEvent{WatchEvent::Type::kDelete, "k", "", 3}));
  EXPECT_EQ(w.events[1], (WatchEvent{WatchEvent::Type::kPut, "k", "", 4}));
  // A lease past its TTL: keepalive answers without a TTL.
  EXPECT_EQ(
      EtcdCodec::decode_keepalive(R"({"result":{"header":{"revision":"2"},"ID":"123"}})", "t"), 0);
  EXPECT_EQ(
      EtcdCodec::decode_lease_grant(R"({"header":{},"ID":"2324035817217807113","TTL":"2"})", "t")
          .id,
      2324035817217807113LL);
  EXPECT_EQ(EtcdCodec::decode_version(R"({"etcdserver":"3.4.23","etcdcluster":"3.4.0"})", "t"),
            (std::vector<int>{3, 4, 23}));
  const auto e = EtcdCodec::error(
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, 5);
  EXPECT_FALSE(EtcdCodec::error(R"({"header":{"revision":"2"}})"));
}

TEST(EtcdJson, WhatIsNotAReplyIsAConfigError) {
  const EtcdCodec codec("bw/r/");
  for (const char* bad : {"", "<html>502</html>", "[]", R"({"header":{"revision":true}})",
                          R"({"kvs":[{"key":"!!"}]})", R"({"kvs":[{"key":"b3RoZXI="}]})",
                          R"({"kvs":{}})", R"({"header":{"revision":"12a"}})"}) {
    EXPECT_THROW(codec.decode_range(bad, "test"), ConfigError) << bad;
  }
  EXPECT_THROW(EtcdCodec::decode_version(R"({"etcdserver":"banana"})", "t"), ConfigError);
}

TEST(EtcdJson, PrefixRangeEnd) {
  EXPECT_EQ(prefix_range_end("bw/r/w/"), "bw/r/w0");
  EXPECT_EQ(prefix_range_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_range_end(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

}  // namespace
}  // namespace bw::elastic
