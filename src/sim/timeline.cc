#include "sim/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "schedule/validate.h"

namespace bw::sim {

namespace {

using schedule::Action;
using schedule::ActionKind;

constexpr double kUnknown = -1.0;  // every real time is >= 0
constexpr double kWaiting = -2.0;  // -2 - d: device d waits for it

// What a blocked device can wait for: a forward input, an output gradient, an I (for its W).
enum Event { kFwdIn = 0, kGradIn = 1, kIEnd = 2 };

class Simulator {
  struct Pending {
    int consumer;
    int m;
    Event event;
    int send_index;  // position of the SEND in the sender's list, -1 when implicit
    double send_ms;
    double bytes;
  };
  struct Link {
    int src;
    int dst;
    const LinkModel* model;
    std::vector<Pending> queue;
    size_t head = 0;
    double free_ms = 0;
    double bytes = 0;
    int messages = 0;
  };

 public:
  Simulator(const schedule::Schedule& s, const CostModel& cm, const SimOptions& o)
      : s_(s), cm_(cm), opt_(o), P_(s.num_devices), C_(s.num_chunks), M_(s.num_microbatches) {}

  SimResult run() {
    check_inputs();
    lowered_ = s_.is_lowered();
    const size_t n = static_cast<size_t>(C_) * M_;
    slot_.assign(n, SlotTimes{{kUnknown, kUnknown}, {kUnknown, kUnknown}});
    if (lowered_) {
      if (opt_.timeline) {
        recv_at_[0].assign(n, -1);
        recv_at_[1].assign(n, -1);
      }
    }
    pos_.assign(P_, 0);
    prev_.resize(C_);
    next_.resize(C_);
    for (int c = 0; c < C_; ++c) {
      prev_[c] = s_.prev_chunk(c);
      next_[c] = s_.next_chunk(c);
    }
    gate_.assign(C_, 0);
    clock_.assign(P_, 0);
    mem_.assign(P_, 0);
    out_.busy_ms.assign(P_, 0);
    out_.peak_activation_bytes.assign(P_, 0);
    if (opt_.timeline) {
      out_.timing.resize(P_);
      for (int d = 0; d < P_; ++d) out_.timing[d].resize(s_.actions[d].size());
      out_.activation.resize(P_);
      for (int d = 0; d < P_; ++d) out_.activation[d].reserve(2 * s_.actions[d].size() / 3 + 1);
      out_.transfers.reserve(static_cast<size_t>(s_.num_actions() / 3 + 1));
    }
    if (P_ <= 1024) link_index_.assign(static_cast<size_t>(P_) * P_, -1);

    for (int d = P_ - 1; d >= 0; --d) ready_.push_back(d);
    while (!ready_.empty()) {
      const int d = ready_.back();
      ready_.pop_back();
      advance(d);
    }
    for (int d = 0; d < P_; ++d)
      if (pos_[d] < static_cast<int>(s_.actions[d].size())) stalled();
    summarize();
    return std::move(out_);
  }

 private:
  // Chunk-major: a device walks its few chunks over rising microbatches, so its next slots share
  // cache lines (measured faster than microbatch-major at large sizes).
  size_t at(int c, int m) const { return static_cast<size_t>(c) * M_ + m; }
  int dev(int c) const { return s_.chunk_device[c]; }

  void check_inputs() const {
    if (static_cast<int>(cm_.chunks.size()) != C_)
      throw ConfigError(fmt::format("cost model has {} chunks, schedule '{}' has {}",
                                    cm_.chunks.size(), s_.kind, C_));
    if (static_cast<int>(s_.actions.size()) != P_ || static_cast<int>(s_.chunk_device.size()) != C_)
      throw ConfigError(fmt::format("schedule '{}' is malformed; validate() it first", s_.kind));
    const int* const device = s_.chunk_device.data();
    const auto C = static_cast<unsigned>(C_), M = static_cast<unsigned>(M_);
    for (int d = 0; d < P_; ++d)
      for (const Action& a : s_.actions[d]) {
        if (a.kind == ActionKind::OVERLAP_F_B) continue;
        const bool slot = schedule::has_slot(a.kind);
        if (static_cast<unsigned>(a.chunk) >= C ||
            (slot && static_cast<unsigned>(a.microbatch) >= M) || device[a.chunk] != d)
          out_of_place(a, d);
      }
    if (cm_.overlap_f_b < 0 || cm_.overlap_f_b > 1)
      throw ConfigError(
          fmt::format("overlap of an OVERLAP_F_B pair is {}; it is a fraction of "
                      "the shorter action, in [0, 1]",
                      cm_.overlap_f_b));
  }

  [[noreturn, gnu::noinline]] void out_of_place(const Action& a, int d) const {
    throw ConfigError(
        fmt::format("schedule '{}': {} on device {} is out of place; validate() it "
                    "first",
                    s_.kind, schedule::to_string(a), d));
  }

  // Sets an event time and wakes the device waiting for it.
  void fire(Event e, int c, int m, double t) {
    const size_t i = at(c, m);
    double& slot = event(e, i);
    const double before = slot;
    slot = t;
    if (before <= kWaiting) ready_.push_back(static_cast<int>(-before) - 2);
    if (e != kIEnd && opt_.timeline && lowered_) {
      if (int k = recv_at_[e][i]; k >= 0) out_.timing[dev(c)][k].end_ms = t;
    }
  }

  // Index of the link src -> dst, created on first use (so only used links are reported).
  int link_of(int src, int dst) {
    if (!link_index_.empty()) {
      const int l = link_index_[static_cast<size_t>(src) * P_ + dst];
      if (l >= 0) return l;
    }
    return new_link(src, dst);
  }
  [[gnu::noinline]] int new_link(int src, int dst) {
    int* slot = nullptr;
    if (!link_index_.empty()) {
      slot = &link_index_[static_cast<size_t>(src) * P_ + dst];
    } else {
      slot = &link_map_.try_emplace(static_cast<long long>(src) * P_ + dst, -1).first->second;
    }
    if (*slot < 0) {
      *slot = static_cast<int>(links_.size());
      links_.push_back(Link{src, dst, &cm_.link_between(src, dst)});
    }
    return *slot;
  }

  // A tensor leaves `src` at `t` for the chunk `consumer` on `dst` (event kFwdIn or kGradIn).
  void send(int src, int dst, Event e, int consumer, int m, double t, double bytes,
            const Action& what, int send_index) {
    const int l = link_of(src, dst);
    (void)what;
    Link& link = links_[l];
    const Pending p{consumer, m, e, send_index, t, bytes};
    // After every drain the queue is empty or its head's receive is not posted: behind that head
    // the new transfer waits; on an empty queue it starts now if its receive is posted.
    if (link.head == link.queue.size() && posted_at(p) != kUnknown)
      start(link, p);
    else
      link.queue.push_back(p);
  }

  // When the receive of pending transfer p was posted (kUnknown: not yet).
  double posted_at(const Pending& p) const {
    return lowered_ ? slot_[at(p.consumer, p.m)].recv_post[p.event] : 0.0;
  }

  // Transfer p leaves on `link`, whose queue it heads and whose receive is posted.
  void start(Link& link, const Pending& p) {
    const double start = std::max({p.send_ms, posted_at(p), link.free_ms});
    const double busy = link.model->busy_ms(p.bytes);
    link.free_ms = start + busy;
    const double arrive = start + busy + link.model->latency_ms;
    link.bytes += p.bytes;
    link.messages += 1;
    if (opt_.timeline) {
      // The producing chunk: the consumer's previous chunk (activation) or next one (gradient).
      const Action what = p.event == kFwdIn
                              ? Action{ActionKind::SEND_F, s_.prev_chunk(p.consumer), p.m}
                              : Action{ActionKind::SEND_B, s_.next_chunk(p.consumer), p.m};
      out_.transfers.push_back({link.src, link.dst, what, p.bytes, start, arrive});
      if (p.send_index >= 0) out_.timing[link.src][p.send_index].end_ms = arrive;
    }
    fire(p.event, p.consumer, p.m, arrive);
  }

  // Starts the transfers at the head of link l whose receives are posted, in FIFO order.
  void drain(int l) {
    Link& link = links_[l];
    while (link.head < link.queue.size()) {
      const Pending p = link.queue[link.head];
      if (posted_at(p) == kUnknown) return;
      ++link.head;
      start(link, p);
    }
    // Keep only what is still pending (memory stays bounded by the transfers in flight).
    if (link.head == link.queue.size()) {
      link.queue.clear();
      link.head = 0;
    } else if (link.head > 64 && 2 * link.head > link.queue.size()) {
      link.queue.erase(link.queue.begin(), link.queue.begin() + static_cast<long>(link.head));
      link.head = 0;
    }
  }

  void record(int d, int k, double start, double end) {
    if (opt_.timeline) out_.timing[d][k] = {start, end};
  }

  // Activation memory of device d changes by `bytes` at time t.
  void hold(int d, double bytes, double t) {
    mem_[d] += bytes;
    out_.peak_activation_bytes[d] = std::max(out_.peak_activation_bytes[d], mem_[d]);
    if (opt_.timeline) out_.activation[d].push_back({t, mem_[d]});
  }

  // When the input of compute action `a` on device d is there (and its chunk unsharded), or -1
  // after registering d as waiting for it.
  double ready_time(int d, const Action& a) {
    const int c = a.chunk;
    const size_t i = at(c, a.microbatch);
    double ready = gate_[c];
    switch (a.kind) {
      case ActionKind::F:
        if (prev_[c] >= 0) {
          const double t = slot_[i].event[kFwdIn];
          if (t < 0) return wait(kFwdIn, i, d), -1;
          ready = std::max(ready, t);
        }
        break;
      case ActionKind::B:
      case ActionKind::I:
        if (next_[c] >= 0) {
          const double t = slot_[i].event[kGradIn];
          if (t < 0) return wait(kGradIn, i, d), -1;
          ready = std::max(ready, t);
        }
        break;
      default:  // W
        if (i_end(i) < 0) return wait(kIEnd, i, d), -1;
        ready = std::max(ready, i_end(i));
        break;
    }
    return ready;
  }

  double duration(const Action& a) const {
    const ChunkCost& cost = cm_.chunks[a.chunk];
    switch (a.kind) {
      case ActionKind::F:
        return cost.forward_ms;
      case ActionKind::B:
        return cost.backward_ms;
      case ActionKind::I:
        return cost.backward_input_ms;
      default:
        return cost.backward_weight_ms;
    }
  }

  // The effects of compute action `a` on device d that ran [start, end): memory, and its output
  // handed on (locally, or implicitly sent when the schedule is compute-only).
  [[gnu::always_inline]] void finish(int d, const Action& a, double start, double end) {
    const int c = a.chunk, m = a.microbatch;
    const ChunkCost& cost = cm_.chunks[c];
    switch (a.kind) {
      case ActionKind::F: {
        hold(d, cost.activation_bytes, start);
        if (const int nx = next_[c]; nx >= 0) {
          if (dev(nx) == d)
            fire(kFwdIn, nx, m, end);
          else if (!lowered_)
            send(d, dev(nx), kFwdIn, nx, m, end, cost.output_bytes, {ActionKind::SEND_F, c, m}, -1);
        }
        break;
      }
      case ActionKind::B:
      case ActionKind::I: {
        if (a.kind == ActionKind::B)
          hold(d, -cost.activation_bytes, end);
        else
          fire(kIEnd, c, m, end);
        if (const int p = prev_[c]; p >= 0) {
          if (dev(p) == d)
            fire(kGradIn, p, m, end);
          else if (!lowered_)
            send(d, dev(p), kGradIn, p, m, end, cm_.chunks[p].output_bytes,
                 {ActionKind::SEND_B, c, m}, -1);
        }
        break;
      }
      default:  // W
        hold(d, -cost.activation_bytes, end);
        break;
    }
  }

  // Runs device d until it finishes or blocks on an event.
  void advance(int d) {
    const auto& list = s_.actions[d];
    const int n = static_cast<int>(list.size());
    // The device's position and clock live in registers while it runs (nothing it calls reads
    // them) and go back when it blocks or finishes.
    int pos = pos_[d];
    double clock = clock_[d];
    const double overhead = cm_.action_overhead_ms;  // a local: double stores could alias it
    auto save = [&] {
      pos_[d] = pos;
      clock_[d] = clock;
    };
    while (pos < n) {
      const int k = pos;
      const Action& a = list[k];
      switch (a.kind) {
        case ActionKind::F:
        case ActionKind::B:
        case ActionKind::I:
        case ActionKind::W: {
          const double ready = ready_time(d, a);
          if (ready < 0) return save();
          const double start = std::max(clock, ready), time = duration(a);
          const double end = start + time;
          clock = end;
          out_.busy_ms[d] += time;
          record(d, k, start, end);
          finish(d, a, start, end);
          break;
        }
        case ActionKind::OVERLAP_F_B: {
          // One interval for both (docs/schedules.md): it starts when both inputs are there and
          // both outputs leave at its end; `overlap_f_b` of the shorter one is hidden.
          const Action& x = list[k + 1];
          const Action& y = list[k + 2];
          const double rx = ready_time(d, x);
          if (rx < 0) return save();
          const double ry = ready_time(d, y);
          if (ry < 0) return save();
          const double tx = duration(x), ty = duration(y);
          const double time = tx + ty - cm_.overlap_f_b * std::min(tx, ty);
          const double start = std::max({clock, rx, ry}), end = start + time;
          clock = end;
          out_.busy_ms[d] += time;
          record(d, k, start, start);
          record(d, k + 1, start, end);
          record(d, k + 2, start, end);
          finish(d, x, start, end);
          finish(d, y, start, end);
          pos += 2;
          break;
        }
        case ActionKind::UNSHARD: {
          // The all-gather runs in the background; the chunk's next computes wait for it.
          const double t = cm_.chunks[a.chunk].unshard_ms;
          record(d, k, clock, clock + t);
          gate_[a.chunk] = clock + t;
          break;
        }
        case ActionKind::RESHARD:
          record(d, k, clock, clock);
          break;
        case ActionKind::REDUCE_GRAD: {
          // The gradient reduction holds the device (not counted as busy: it is not compute).
          const double t = cm_.chunks[a.chunk].reduce_grad_ms;
          record(d, k, clock, clock + t);
          clock += t;
          break;
        }
        case ActionKind::SEND_F:
        case ActionKind::SEND_B: {
          record(d, k, clock, clock);
          const int c = a.chunk, m = a.microbatch;
          if (a.kind == ActionKind::SEND_F) {
            if (const int nx = next_[c]; nx >= 0)
              send(d, dev(nx), kFwdIn, nx, m, clock, cm_.chunks[c].output_bytes, a, k);
          } else if (const int p = prev_[c]; p >= 0) {
            send(d, dev(p), kGradIn, p, m, clock, cm_.chunks[p].output_bytes, a, k);
          }
          break;
        }
        case ActionKind::RECV_F:
        case ActionKind::RECV_B: {
          const bool grad = a.kind == ActionKind::RECV_B;
          const Event e = grad ? kGradIn : kFwdIn;
          const size_t i = at(a.chunk, a.microbatch);
          // (Read only for the timeline: at large sizes the slot is rarely in cache here.)
          if (opt_.timeline) record(d, k, clock, std::max(clock, slot_[i].event[e]));
          slot_[i].recv_post[e] = clock;
          if (opt_.timeline) recv_at_[e][i] = k;
          const int peer = grad ? next_[a.chunk] : prev_[a.chunk];
          if (peer >= 0) {
            const int l = link_of(dev(peer), d);
            if (links_[l].head < links_[l].queue.size()) drain(l);  // else nothing to start
          }
          break;
        }
      }
      clock += overhead;
      ++pos;
    }
    save();
  }

  // Device d waits for event e of slot i (unknown until then): remember it in the slot itself.
  void wait(Event e, size_t i, int d) { event(e, i) = -2.0 - d; }

  [[noreturn]] void stalled() const {
    std::string why;
    for (int d = 0; d < P_; ++d) {
      if (pos_[d] >= static_cast<int>(s_.actions[d].size())) continue;
      if (!why.empty()) why += "; ";
      why += fmt::format("device {} at {}", d, schedule::to_string(s_.actions[d][pos_[d]]));
      if (why.size() > 400) {
        why += "; ...";
        break;
      }
    }
    throw schedule::ScheduleError(
        fmt::format("simulating schedule '{}' stalled (a deadlock; validate() shows the grid): {}",
                    s_.kind, why),
        "");
  }

  void summarize() {
    double makespan = 0;
    for (int d = 0; d < P_; ++d) makespan = std::max(makespan, clock_[d]);
    out_.makespan_ms = makespan;
    out_.bubble_ratio.assign(P_, 0);
    double busy = 0;
    for (int d = 0; d < P_; ++d) {
      busy += out_.busy_ms[d];
      out_.bubble_ratio[d] = makespan > 0 ? 1 - out_.busy_ms[d] / makespan : 0;
    }
    out_.overall_bubble_ratio = makespan > 0 ? 1 - busy / (P_ * makespan) : 0;
    double activation = 0;
    out_.param_bytes.assign(P_, 0);
    for (int c = 0; c < C_; ++c) {
      activation += cm_.chunks[c].activation_bytes;
      out_.param_bytes[dev(c)] += cm_.chunks[c].param_bytes;
    }
    const int stages = std::max(1, s_.num_stages());
    const double replicas = static_cast<double>(C_) / stages;
    out_.activation_unit_bytes = activation / replicas / P_;
    out_.peak_activation_units.assign(P_, 0);
    for (int d = 0; d < P_; ++d)
      out_.peak_activation_units[d] =
          out_.activation_unit_bytes > 0
              ? out_.peak_activation_bytes[d] / out_.activation_unit_bytes
              : 0;
    for (const Link& l : links_) {
      out_.links.push_back({l.src, l.dst, l.bytes, l.messages});
      out_.bytes_sent += l.bytes;
    }
    std::sort(out_.links.begin(), out_.links.end(), [](const auto& a, const auto& b) {
      return std::pair(a.src_device, a.dst_device) < std::pair(b.src_device, b.dst_device);
    });
  }

  const schedule::Schedule& s_;
  const CostModel& cm_;
  SimOptions opt_;
  int P_, C_, M_;
  bool lowered_ = false;
  // Per (chunk, microbatch), together so that a RECV, the transfer it waits for and the compute
  // that consumes it meet in one cache line: kFwdIn and kGradIn times (>= 0), kUnknown, or -2-d
  // when device d waits; and when the RECV was posted (lowered schedules).
  struct SlotTimes {
    double event[2];
    double recv_post[2];
  };
  std::vector<SlotTimes> slot_;
  std::vector<double> i_end_;  // kIEnd per slot, likewise; made at the first I or W
  double& i_end(size_t i) {
    if (i_end_.empty()) i_end_.assign(slot_.size(), kUnknown);
    return i_end_[i];
  }
  double& event(Event e, size_t i) { return e == kIEnd ? i_end(i) : slot_[i].event[e]; }
  std::vector<int> recv_at_[2];  // position of the RECV in its list (timeline only)
  std::vector<int> pos_;
  std::vector<int> prev_, next_;  // per chunk: Schedule::prev_chunk, next_chunk
  std::vector<double> gate_;      // per chunk: when its last UNSHARD finishes (0: never sharded)
  std::vector<double> clock_;
  std::vector<double> mem_;
  std::vector<int> ready_;
  std::vector<Link> links_;
  std::vector<int> link_index_;
  std::unordered_map<long long, int> link_map_;
  SimResult out_;
};

}  // namespace

SimResult simulate(const schedule::Schedule& s, const CostModel& costs, const SimOptions& options) {
  return Simulator(s, costs, options).run();
}

}  // namespace bw::sim
