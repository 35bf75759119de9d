#!/usr/bin/env python3
"""Peak memory per device of one stage sharded over d = 1, 2, 4 devices, against the planner's model.

Usage: bench/runtime/sharded_memory.py [BUILD_DIR] [BLOCKS]

Each run trains `small:BLOCKS` (all layers on one stage, no pipelining) for 2 steps on one node of
d devices with pipeline.devices_per_stage = d, 2 microbatches of 4 samples. The measured figure is
the largest peak RSS of the stage's worker processes (metrics.jsonl), minus the peak RSS of the
same layout training `tiny` (what LibTorch, Gloo and the process cost without the model). The
prediction is the planner's sharded-stage memory (docs/planning.md): parameters, gradients and
two AdamW moments (16 bytes per parameter) / d, plus the largest layer's parameters and gradient
gathered whole (8 bytes per parameter), plus one microbatch's activations of the rank's
ceil(4 / d) samples (the runtime's activation estimate, elastic/planning.cc).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 160
exe = os.path.join(build, "breakwater")
D, T, H, MBS = 128, 64, 4, 4  # small: d_model, seq_len, heads; microbatch size


def run(model, d, out):
    args = [exe, "train", "--quiet", f"--model.name={model}", "--cluster.nodes=1",
            f"--cluster.devices_per_node={d}", f"--pipeline.pipelines=[{d}]",
            f"--pipeline.devices_per_stage={d}", "--pipeline.schedule=1f1b",
            "--pipeline.fault_tolerance=0", "--pipeline.microbatches=2",
            f"--pipeline.microbatch_size={MBS}", "--train.steps=2", "--train.sample_tokens=0",
            "--elastic.step_timeout_s=600", f"--train.out_dir={out}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    peak = 0
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            doc = json.loads(line)
            for r in doc.get("ranks", []):
                peak = max(peak, r["peak_rss_kb"])
    return peak * 1024


def vocab(out):
    """Vocabulary size from the final checkpoint's token embedding [V, D] (safetensors header)."""
    path = os.path.join(out, "checkpoint-000002", "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return header["layers.0.wte.weight"]["shape"][0]


def predict(d, vocab_size):
    block = 12 * D * D + 13 * D  # attention + MLP weights and biases, two LayerNorms
    emb = vocab_size * D + T * D
    head = vocab_size * D + 2 * D
    params = blocks * block + emb + head
    largest = max(block, emb, head)
    rows = math.ceil(MBS / d)
    btd = rows * T * D
    att = rows * H * T * T
    act = 4 * btd + blocks * 4 * (16 * btd + 2 * att) + 4 * (2 * btd + 3.0 * rows * T * vocab_size)
    return 16.0 * params / d + (8.0 * largest if d > 1 else 0.0) + act


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for d in (1, 2, 4):
            base = run("tiny", d, os.path.join(tmp, f"tiny{d}"))
            got = run(f"small:{blocks}", d, os.path.join(tmp, f"small{d}"))
            rows.append((d, got - base, predict(d, vocab(os.path.join(tmp, f"small{d}")))))
        print(f"small:{blocks}, one stage, microbatches of {MBS} samples")
        print(f"{'d':>2} {'measured MiB':>13} {'predicted MiB':>14} {'excess MiB':>11} "
              f"{'ratio':>6} {'measured vs d=1':>16} {'predicted vs d=1':>17}")
        for d, got, want in rows:
            print(f"{d:>2} {got / 2**20:>13.1f} {want / 2**20:>14.1f} {(got - want) / 2**20:>11.1f} "
                  f"{got / want:>6.2f} {got / rows[0][1]:>16.2f} {want / rows[0][2]:>17.2f}")


if __name__ == "__main__":
    main()
