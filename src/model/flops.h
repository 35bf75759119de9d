// Model FLOPs and the peak a device can reach, for achieved FLOP/s and MFU (model FLOPs
// utilisation) in the progress line, the summary and metrics.jsonl.
//
// Model FLOPs per token follow PaLM (Chowdhery et al. 2022, appendix B), as llm.c counts them:
// 6 N + 12 L d T, where N counts the parameters that multiply activations (every block's and the
// LM head's; not the embedding tables, which are looked up), L is the number of blocks, d the
// model width (heads x head size) and T the sequence length: 6 N for forward and backward of the
// matmuls, 12 L d T for attention's two matmuls (q k^T and the weighted sum of v) forward and
// backward, counted over the whole T x T square as PaLM does although a causal mask needs half.
// Recomputation is not counted (model FLOPs, not hardware FLOPs).
//
// Peak FLOP/s per device: a table of known GPUs (dense, no sparsity) by precision, and on a CPU a
// matmul probe measured at start (the best of several 512 x 512 x 512 matmuls in the run's dtype
// on the worker's intra-op threads). PeakFlops::source says which one.
//
// Thread-safety: the probe sets the calling thread's intra-op thread count and restores it.
#pragma once

#include <string>

#include "model/gpt.h"
#include "model/placement.h"

namespace bw::model {

double flops_per_token(const GptConfig& config);

struct PeakFlops {
  double flops_per_s = 0.0;  // per device
  std::string source;        // "table: H100 SXM bf16 dense" or "measured: 512^3 fp32 matmul, 1 thread"
};

// The table's entry for a GPU whose name (as CUDA reports it) contains A100, H100 or H200, in
// `precision`; flops_per_s 0 when the name is not in the table.
PeakFlops peak_from_table(const std::string& device_name, Precision precision);

// A matmul probe on the CPU in `precision` with `threads` intra-op threads (about 0.1 s).
PeakFlops measure_cpu_peak(Precision precision, int threads);

}  // namespace bw::model
