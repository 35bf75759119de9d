// The timeline simulator: runs a schedule's action lists on a cost model and reports time,
// bubbles, activation memory and traffic.
//
// Event-driven and exact for the model below (no time steps). Each device runs its list in order,
// one compute at a time; a compute starts when the device is free and its input is there.
// Communication never occupies a device: a transfer starts when its SEND was reached, its RECV was
// posted (lowered schedules; compute-only schedules transfer implicitly at the producer's end and
// count every receive as posted) and the link (one per ordered device pair, FIFO in the sender's
// order) is free; it occupies the link for bytes/bandwidth and arrives after latency on top.
// Consecutive chunks on one device hand off locally, at no cost.
//
// Memory: a chunk's activation_bytes are held from the start of its F until the end of its B (or
// of its W when the backward is split); peak activation memory per device is reported in bytes and
// in units of M_a = one replica's activation bytes per microbatch / P (one 1F1B stage's worth).
//
// simulate() expects a schedule that validate() accepts; on one that stalls (a deadlock) it throws
// schedule::ScheduleError naming the waiting devices. Pure; thread-safe.
#pragma once

#include <vector>

#include "schedule/schedule.h"
#include "sim/cost_model.h"

namespace bw::sim {

struct ActionTiming {
  double start_ms = 0;
  double end_ms = 0;  // compute: when it finished; SEND/RECV: when the tensor arrived
};

struct Transfer {
  int src_device = 0;
  int dst_device = 0;
  schedule::Action send;  // SEND_F or SEND_B, naming the producing chunk
  double bytes = 0;
  double start_ms = 0;  // left the sender
  double end_ms = 0;    // arrived
};

struct MemorySample {
  double time_ms = 0;
  double bytes = 0;  // activation bytes held from this time on
};

struct LinkTraffic {
  int src_device = 0;
  int dst_device = 0;
  double bytes = 0;
  int messages = 0;
};

struct SimResult {
  double makespan_ms = 0;
  std::vector<double> busy_ms;                // per device: time computing
  std::vector<double> bubble_ratio;           // per device: 1 - busy / makespan
  double overall_bubble_ratio = 0;            // 1 - sum(busy) / (P * makespan)
  double activation_unit_bytes = 0;           // M_a
  std::vector<double> peak_activation_bytes;  // per device
  std::vector<double> peak_activation_units;  // per device, in M_a
  std::vector<double> param_bytes;            // per device (chunks it holds)
  std::vector<LinkTraffic> links;             // per ordered device pair that carried data
  double bytes_sent = 0;
  // Filled when SimOptions::timeline: per device, one entry per action of schedule.actions[d];
  // and every transfer, in the order it left its sender.
  std::vector<std::vector<ActionTiming>> timing;
  std::vector<Transfer> transfers;
  std::vector<std::vector<MemorySample>> activation;  // per device, at every change
};

struct SimOptions {
  bool timeline = true;  // off: only the summary numbers (faster, less memory)
};

SimResult simulate(const schedule::Schedule& s, const CostModel& costs,
                   const SimOptions& options = {});

}  // namespace bw::sim
