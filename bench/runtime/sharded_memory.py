#!/usr/bin/env python3
"""Peak memory per device of one stage sharded over d = 1, 2, 4 devices, against the planner's model.

Usage: bench/runtime/sharded_memory.py [BUILD_DIR] [BLOCKS] [--recompute]

Each run trains `small:BLOCKS` (all layers on one stage, no pipelining) for 2 steps on one node of
d devices with pipeline.devices_per_stage = d, 2 microbatches of 4 samples. The measured figure is
the largest peak RSS of the stage's worker processes (metrics.jsonl), minus the peak RSS of the
same layout training `tiny` (what LibTorch, Gloo and the process cost without the model). The
prediction is the planner's sharded-stage memory (docs/planning.md): parameters, gradients and
two AdamW moments (16 bytes per parameter) / d, plus the largest layer's parameters and gradient
gathered whole (8 bytes per parameter), plus one microbatch's activations of the rank's
ceil(4 / d) samples (the runtime's activation estimate, elastic/planning.cc).

With --recompute every d also runs with pipeline.recompute = "full", predicted as the planner
charges it: the layers' inputs per microbatch in flight plus one layer's activations.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

args = [a for a in sys.argv[1:] if a != "--recompute"]
with_recompute = "--recompute" in sys.argv[1:]
build = args[0] if len(args) > 0 else "build"
blocks = int(args[1]) if len(args) > 1 else 160
exe = os.path.join(build, "breakwater")
D, T, H, MBS = 128, 64, 4, 4  # small: d_model, seq_len, heads; microbatch size


def run(model, d, out, recompute="none"):
    args = [exe, "train", f"--pipeline.recompute={recompute}", "--quiet",
            f"--model.name={model}", "--cluster.nodes=1",
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
    ckpt = os.path.join(out, "checkpoint-000002")
    with open(os.path.join(ckpt, "checkpoint.json")) as f:
        manifest = json.load(f)
    files = [s["model"] for s in manifest.get("shards", [])] or [manifest["weights"]]
    for name in files:
        with open(os.path.join(ckpt, name), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        if "layers.0.wte.weight" in header:
            return header["layers.0.wte.weight"]["shape"][0]
    raise KeyError("layers.0.wte.weight")


def predict(d, vocab_size, recompute=False):
    block = 12 * D * D + 13 * D  # attention + MLP weights and biases, two LayerNorms
    emb = vocab_size * D + T * D
    head = vocab_size * D + 2 * D
    params = blocks * block + emb + head
    largest = max(block, emb, head)
    rows = math.ceil(MBS / d)
    btd = rows * T * D
    att = rows * H * T * T
    acts = ([4 * btd] + [4 * (16 * btd + 2 * att)] * blocks +
            [4 * (2 * btd + 3.0 * rows * T * vocab_size)])
    if recompute:  # token ids, then one [rows, T, D] input per later layer; one layer recomputed
        act = 8 * rows * T + 4 * btd * (blocks + 1) + max(acts)
    else:
        act = sum(acts)
    return 16.0 * params / d + (8.0 * largest if d > 1 else 0.0) + act


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for mode in (["none", "full"] if with_recompute else ["none"]):
            for d in (1, 2, 4):
                base = run("tiny", d, os.path.join(tmp, f"tiny{d}{mode}"), mode)
                out = os.path.join(tmp, f"small{d}{mode}")
                got = run(f"small:{blocks}", d, out, mode)
                rows.append((mode, d, got - base, predict(d, vocab(out), mode == "full")))
        print(f"small:{blocks}, one stage, microbatches of {MBS} samples")
        print(f"{'recompute':>9} {'d':>2} {'measured MiB':>13} {'predicted MiB':>14} "
              f"{'excess MiB':>11} {'ratio':>6} {'measured vs d=1':>16} {'predicted vs d=1':>17}")
        for mode, d, got, want in rows:
            first = next(r for r in rows if r[0] == mode)
            print(f"{mode:>9} {d:>2} {got / 2**20:>13.1f} {want / 2**20:>14.1f} "
                  f"{(got - want) / 2**20:>11.1f} {got / want:>6.2f} {got / first[2]:>16.2f} "
                  f"{want / first[3]:>17.2f}")


if __name__ == "__main__":
    main()
