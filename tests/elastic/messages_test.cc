// The store messages (elastic/messages.h), both directions: the text each encoder writes is
// the protocol older and newer workers read, so it is compared with literal JSON written by hand
// from docs/elastic.md, each decoded back to the same value; and every malformed message is one
// ConfigError naming the key.
#include "elastic/messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace bw::elastic {
namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CoordinatorMessages, DecisionsAreTheirWords) {
  const std::pair<Decision, const char*> words[] = {{Decision::kCommit, "commit"},
                                                    {Decision::kSkip, "skip"},
                                                    {Decision::kLast, "last"},
                                                    {Decision::kAbort, "abort"}};
  for (const auto& [d, word] : words) {
    EXPECT_EQ(encode_decision(d), word);
    EXPECT_EQ(decode_decision(word, "g0/decision/3"), d);
  }
  for (const char* bad : {"", "Commit", "commit ", "{}", "abort+checkpoint", "+checkpoint",
                          "commit+checkpoint+checkpoint", "commit+Checkpoint"}) {
    const auto e = error_of([&] { decode_decision(bad, "g0/decision/3"); });
    EXPECT_NE(e.find("g0/decision/3"), std::string::npos) << bad;
  }
  // A step to checkpoint: the word and "+checkpoint"; without it, no checkpoint.
  for (const auto& [d, word] : words) {
    bool checkpoint = true;
    EXPECT_EQ(decode_decision(word, "k", &checkpoint), d);
    EXPECT_FALSE(checkpoint) << word;
    if (d == Decision::kAbort) continue;
    EXPECT_EQ(encode_decision(d, true), std::string(word) + "+checkpoint");
    EXPECT_EQ(decode_decision(encode_decision(d, true), "k", &checkpoint), d);
    EXPECT_TRUE(checkpoint) << word;
  }
}

// A registration reads back as written, with and without the optional parts; each part is left
// out of the document when the run does not name it.
TEST(AgentMessages, RegistrationsRoundTrip) {
  Registration r;
  r.name = "gpu07";
  r.host = "10.0.0.7";
  r.proof = "abc";
  r.devices = 2;
  r.launch_ms = 812.5;
  r.data_path = "/data/corpus.bin";
  r.data_digest = "tokens=10 crc=1";
  EXPECT_EQ(decode_registration(encode_registration(r), "reg/0"), r);
  EXPECT_FALSE(json::parse(encode_registration(r)).contains("weights"));
  EXPECT_FALSE(json::parse(encode_registration(r)).contains("checkpoint"));
  r.weights_path = "/models/llama";
  r.weights_error = "no config.json";
  r.checkpoint_path = "/ckpt";
  r.checkpoint_shared = true;
  EXPECT_EQ(decode_registration(encode_registration(r), "reg/0"), r);
  r.checkpoint_shared = false;
  r.checkpoint_error = "read-only file system";
  EXPECT_EQ(decode_registration(encode_registration(r), "reg/0"), r);
  const auto e = error_of([] { decode_registration(R"({"checkpoint": {"shared": 1}})", "reg/4"); });
  EXPECT_NE(e.find("reg/4"), std::string::npos) << e;
}

TEST(CoordinatorMessages, StartCarriesCopiesWholeOrRanged) {
  Start s;
  s.first_step = 12;
  s.skipped_steps = 1;
  s.resume = "/ckpt/checkpoint-000010";
  s.copies = {{3, 0, 2, std::nullopt}, {4, 1, 2, std::make_pair(int64_t{5}, int64_t{9})}};
  const auto text = encode_start(s);
  EXPECT_EQ(json::parse(text), json::parse(R"({"first_step": 12, "skipped_steps": 1,
      "resume": "/ckpt/checkpoint-000010", "copies": [[3, 0, 2], [4, 1, 2, 5, 9]]})"));
  EXPECT_EQ(decode_start(text, "g1/start"), s);
  // An older coordinator's start without skipped_steps or resume.
  const auto old = decode_start(R"({"first_step": 4, "copies": []})", "g1/start");
  EXPECT_EQ(old.skipped_steps, 0);
  EXPECT_EQ(old.resume, "");
  for (const char* bad : {R"({"copies": []})", R"({"first_step": 1, "copies": [[1, 2]]})",
                          R"({"first_step": 1, "copies": [[1, 0, 2, 9, 5]]})",
                          R"({"first_step": -1, "copies": []})",
                          R"({"first_step": 1, "copies": {}})", "[]"}) {
    const auto e = error_of([&] { decode_start(bad, "g1/start"); });
    EXPECT_NE(e.find("g1/start"), std::string::npos) << bad;
  }
}

TEST(CoordinatorMessages, NextIsAGenerationOrAShutdownWithItsSave) {
  const Next gen{.generation = 3};
  EXPECT_EQ(json::parse(encode_next(gen)), json::parse(R"({"kind": "generation", "generation": 3})"));
  EXPECT_EQ(decode_next(encode_next(gen), "g2/next"), gen);
  const Next bare{.shutdown = true};
  EXPECT_EQ(json::parse(encode_next(bare)), json::parse(R"({"kind": "shutdown"})"));
  EXPECT_EQ(decode_next(encode_next(bare), "g2/next"), bare);
  Next save{.shutdown = true};
  save.save = StopSave{"/out/checkpoint-000007", {{0, {0, {0, 1}}}, {5, {1, {2, 3}}}}};
  EXPECT_EQ(json::parse(encode_next(save)), json::parse(R"({"kind": "shutdown", "save": {
      "dir": "/out/checkpoint-000007",
      "shards": {"0": {"shard": 0, "layers": [0, 1]}, "5": {"shard": 1, "layers": [2, 3]}}}})"));
  EXPECT_EQ(decode_next(encode_next(save), "g2/next"), save);
  for (const char* bad :
       {R"({"kind": "pause"})", R"({"kind": "generation"})", R"({"kind": "shutdown", "save": 1})",
        R"({"kind": "shutdown", "save": {"dir": "d", "shards": {"x": {"shard": 0, "layers": []}}}})",
        R"({"kind": "shutdown", "save": {"dir": "d", "shards": {"1": {"shard": 0}}}})"}) {
    const auto e = error_of([&] { decode_next(bad, "g2/next"); });
    EXPECT_NE(e.find("g2/next"), std::string::npos) << bad;
  }
}

// The workers' and agents' messages: each encoder writes the fields the decoders (and older
// coordinators) read, by name.
TEST(PeerMessages, EncodersWriteWhatTheDecodersRead) {
  EXPECT_EQ(json::parse(encode_exit_report({7, 137, 2})),
            json::parse(R"({"worker": 7, "status": 137, "incarnation": 2})"));
  EXPECT_EQ(json::parse(encode_worker_error({true, "bad \"x\""})),
            json::parse(R"({"kind": "config", "message": "bad \"x\""})"));
  EXPECT_EQ(decode_worker_error(encode_worker_error({false, "boom"}), "w/0/error").config_error,
            false);
  EXPECT_EQ(json::parse(encode_joined({1.5, 2.25, 4096})),
            json::parse(R"({"regroup_ms": 1.5, "transfer_ms": 2.25, "transfer_bytes": 4096})"));
  Stopped st;
  st.steps_done = 9;
  st.ranges = {{2, {0, 100}}, {5, {50, 80}}};
  EXPECT_EQ(json::parse(encode_stopped(st)),
            json::parse(R"({"steps_done": 9, "layers": [2, 5],
                            "ranges": [[2, 0, 100], [5, 50, 80]]})"));
  EXPECT_EQ(decode_stopped(encode_stopped(st), "g1/stopped/3"), st);
  const RegistrationReply yes{true, "", 3, 1, 2};
  EXPECT_EQ(json::parse(encode_registration_reply(yes)),
            json::parse(R"({"ok": true, "node": 3, "incarnation": 1, "devices": 2})"));
  EXPECT_EQ(decode_registration_reply(encode_registration_reply(yes), "reg/0/reply"), yes);
  const RegistrationReply no{false, "wrong token"};
  EXPECT_EQ(decode_registration_reply(encode_registration_reply(no), "reg/0/reply"), no);
  const LeaderRecord leader{"10.0.0.1:29500", "h1", 4242, "ab12"};
  EXPECT_EQ(json::parse(encode_leader(leader)),
            json::parse(R"({"address": "10.0.0.1:29500", "host": "h1", "pid": 4242,
                            "config": "ab12"})"));
  EXPECT_EQ(decode_leader(encode_leader(leader), "leader"), leader);
  for (const char* bad : {R"({"address": "a", "host": "h", "config": "c"})",
                          R"({"address": "a", "host": "h", "pid": -1, "config": "c"})",
                          R"({"address": 1, "host": "h", "pid": 1, "config": "c"})", "[]"}) {
    const auto e = error_of([&] { decode_leader(bad, "leader"); });
    EXPECT_NE(e.find("'leader'"), std::string::npos) << bad << ": " << e;
  }
  for (const char* bad : {R"({"node": 1})", R"({"ok": "yes"})", R"({"ok": false})",
                          R"({"ok": true, "node": 1, "incarnation": 0, "devices": 0})"}) {
    const auto e = error_of([&] { decode_registration_reply(bad, "reg/0/reply"); });
    EXPECT_NE(e.find("reg/0/reply"), std::string::npos) << bad;
  }
}

// What a takeover reads and sends (leadership.h, Supervisor::adopt): the run's instance, the run
// state, and an agent's registration as the node it was.
TEST(StoreMessages, TakeoverMessagesReadBackAndNameTheirKeyWhenBad) {
  const InstanceRecord inst{42, true};
  EXPECT_EQ(json::parse(encode_instance(inst)), json::parse(R"({"epoch": 42, "over": true})"));
  EXPECT_EQ(decode_instance(encode_instance(inst), "instance"), inst);
  RunState st;
  st.generation = 2;
  st.first_step = 17;
  st.skipped = 3;
  st.consecutive_skips = 1;
  st.start = encode_start({.first_step = 17, .skipped_steps = 3});
  st.plan = R"({"generation": 2})";
  st.checkpoint_io = "hosts";
  st.nodes = {{0, "h0", 0, true, true}, {1, "h1", 2, false, true}, {2, "h2", 1, true, false}};
  const auto text = encode_run_state(st);
  EXPECT_EQ(json::parse(text)["nodes"][1],
            json::parse(R"({"node": 1, "name": "h1", "incarnation": 2, "live": false,
                            "in_plan": true})"));
  EXPECT_EQ(decode_run_state(text, "state"), st);
  Registration reg;
  reg.name = "h1";
  reg.node = 1;
  reg.incarnation = 2;
  EXPECT_EQ(json::parse(encode_registration(reg))["rejoin"],
            json::parse(R"({"node": 1, "incarnation": 2})"));
  EXPECT_EQ(decode_registration(encode_registration(reg), "reg/0"), reg);
  reg.node = -1;  // a new registration has no "rejoin"
  reg.incarnation = 0;
  EXPECT_FALSE(json::parse(encode_registration(reg)).contains("rejoin"));
  EXPECT_EQ(decode_registration(encode_registration(reg), "reg/0"), reg);
  for (const char* bad : {R"({"epoch": 0, "over": false})", R"({"epoch": 3})",
                          R"({"epoch": 3, "over": 1})", "[]"}) {
    const auto e = error_of([&] { decode_instance(bad, "instance"); });
    EXPECT_NE(e.find("'instance'"), std::string::npos) << bad << ": " << e;
  }
  auto doc = json::parse(text);
  doc["nodes"][0]["live"] = "yes";
  for (const std::string bad : {doc.dump(), std::string(R"({"generation": 1})"),
                                std::string("null")}) {
    const auto e = error_of([&] { decode_run_state(bad, "state"); });
    EXPECT_NE(e.find("'state'"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(error_of([&] { decode_registration(R"({"rejoin": 3})", "reg/0"); }).find("rejoin"),
            std::string::npos);
}

}  // namespace
}  // namespace bw::elastic
