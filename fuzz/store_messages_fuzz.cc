// Every store message an agent or a worker sends and the coordinator reads, and those the
// coordinator sends the workers (elastic/messages.h: decision, start, next, each read back after
// encoding): the input's first byte picks the message, the rest is its value.
#include <cstdlib>

#include "elastic/messages.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string value = bw::fuzz::text(data + 1, size - 1);
  using namespace bw::elastic;
  BW_FUZZ_EXPECT_CONFIG_ERRORS({
    switch (data[0] % 15) {
      // What decodes encodes back to itself (what a peer of this build sends reads back).
      case 0: {
        const auto r = decode_exit_report(value, "node/0/exit/0");
        if (decode_exit_report(encode_exit_report(r), "again") != r) std::abort();
        break;
      }
      case 1: {
        const auto e = decode_worker_error(value, "worker/0/error");
        if (decode_worker_error(encode_worker_error(e), "again") != e) std::abort();
        break;
      }
      case 2: {
        const auto j = decode_joined(value, "g1/joined/0");
        if (decode_joined(encode_joined(j), "again") != j) std::abort();
        break;
      }
      case 3: {
        const auto s = decode_stopped(value, "g1/stopped/0");
        for (const auto& [layer, range] : s.ranges) {
          if (layer < 0 || range.first < 0 || range.second < range.first) std::abort();
        }
        // An older worker's message ("layers" only) is read, not written.
        if (!s.layers && decode_stopped(encode_stopped(s), "again") != s) std::abort();
        break;
      }
      case 4:
        for (const auto& e : decode_done(value, "g1/done/0")) {
          if (e.layer && *e.layer < 0) std::abort();
        }
        break;
      case 5: {
        const auto r = decode_step_report(value, "g0/ready/0/0");
        (void)bw::runtime::StepReport::from_json(r.to_json());  // what a worker sends reads back
        break;
      }
      case 6: {
        const auto r = decode_registration(value, "reg/0");
        if (decode_registration(encode_registration(r), "again") != r) std::abort();
        break;
      }
      case 7: {
        const auto t = decode_rank_trace(value, "g0/trace/0/0");
        for (const auto& s : t.spans) {
          if (s.end_us < s.begin_us || s.begin_us < 0) std::abort();
        }
        // What a worker sends reads back.
        if (bw::runtime::rank_trace_from_json(bw::runtime::to_json(t), "again").spans != t.spans) {
          std::abort();
        }
        break;
      }
      // The coordinator's messages: what decodes encodes back to itself.
      case 8: {
        bool checkpoint = false;
        bool again = false;
        const auto d = decode_decision(value, "g0/decision/0", &checkpoint);
        if (decode_decision(encode_decision(d, checkpoint), "again", &again) != d ||
            again != checkpoint) {
          std::abort();
        }
        break;
      }
      case 9: {
        const auto s = decode_start(value, "g0/start");
        for (const auto& c : s.copies) {
          if (c.range && c.range->second < c.range->first) std::abort();
        }
        if (decode_start(encode_start(s), "again") != s) std::abort();
        break;
      }
      case 10: {
        const auto n = decode_next(value, "g0/next");
        if (decode_next(encode_next(n), "again") != n) std::abort();
        break;
      }
      case 11: {
        const auto r = decode_registration_reply(value, "reg/0/reply");
        if (decode_registration_reply(encode_registration_reply(r), "again") != r) std::abort();
        break;
      }
      case 12: {  // the control store's leader key (leadership.h)
        const auto r = decode_leader(value, "leader");
        if (decode_leader(encode_leader(r), "again") != r) std::abort();
        break;
      }
      case 13: {  // the run's instance (leadership.h)
        const auto r = decode_instance(value, "instance");
        if (decode_instance(encode_instance(r), "again") != r) std::abort();
        break;
      }
      case 14: {  // the run state a takeover reads (leadership.h)
        const auto r = decode_run_state(value, "state");
        if (decode_run_state(encode_run_state(r), "again") != r) std::abort();
        break;
      }
    }
  });
  return 0;
}
