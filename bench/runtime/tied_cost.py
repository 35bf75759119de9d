#!/usr/bin/env python3
"""Cost per step of tying the embedding and the head across pipeline stages.

Usage: bench/runtime/tied_cost.py [BUILD_DIR] [--model small] [--steps 12] [--pipelines [2]]

Trains the same layout twice, model.tie_embeddings = false and true, on llm.c GPT-2 tokens
(vocabulary 50257, written here at random, so the tied matrix is GPT-2's size: 50257 x d), with
1F1B on the given pipelines; the embedding and the head are on different devices, so the tied run
adds one all-reduce of the V x d gradient between the first and last stage of each pipeline
(docs/runtime.md "Tied embeddings across stages"). Reports, per run, the median over steps (the
first left out) of the step time and of the gradient-sync phase (sync + norm + AdamW) on the
ranks, and the difference. The model to compare it with (docs/runtime.md "Tied embeddings
across stages"): a ring of two ranks moves V x d x 4 bytes per rank, at the link's bandwidth.
"""
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile

argv = sys.argv[1:]
opts = {"--model": "small", "--steps": "12", "--pipelines": "[2]"}
rest = []
i = 0
while i < len(argv):
    if argv[i] in opts and i + 1 < len(argv):
        opts[argv[i]] = argv[i + 1]
        i += 2
    else:
        rest.append(argv[i])
        i += 1
build = rest[0] if rest else "build"
exe = os.path.join(build, "breakwater")
VOCAB = 50257
D = {"tiny": 32, "small": 128, "gpt2-124m": 768}[opts["--model"].split(":")[0]]


def write_tokens(path, n):
    import random
    rng = random.Random(1)
    header = [20240520, 1, n] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{n}H", *[rng.randrange(VOCAB) for _ in range(n)]))


def run(tied, out, data):
    devices = sum(int(x) for x in opts["--pipelines"].strip("[]").split(","))
    args = [exe, "train", "--quiet", f"--model.name={opts['--model']}", f"--data.path={data}",
            f"--model.tie_embeddings={'true' if tied else 'false'}",
            "--pipeline.schedule=1f1b", f"--pipeline.pipelines={opts['--pipelines']}",
            "--pipeline.fault_tolerance=0", "--pipeline.microbatches=4",
            "--pipeline.microbatch_size=2", f"--train.steps={opts['--steps']}",
            "--train.sample_tokens=0", "--elastic.step_timeout_s=600", f"--devices={devices}",
            f"--train.out_dir={out}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    steps, syncs = [], []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            doc = json.loads(line)
            if "event" in doc or doc["step"] == 0:
                continue
            ranks = doc.get("ranks", [])
            steps.append(max(r["step_ms"] for r in ranks))
            syncs.append(max(r["sync_ms"] for r in ranks))
    return statistics.median(steps), statistics.median(syncs)


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "tokens.bin")
    write_tokens(data, 400000)
    untied = run(False, os.path.join(tmp, "untied"), data)
    tied = run(True, os.path.join(tmp, "tied"), data)

mb = VOCAB * D * 4 / 1e6
print(f"model {opts['--model']} (tied matrix {VOCAB} x {D}, {mb:.1f} MB fp32), 1F1B on "
      f"{opts['--pipelines']}, medians of {int(opts['--steps']) - 1} steps")
print("| run | step ms | sync ms (slowest rank) |")
print("|---|---|---|")
print(f"| untied | {untied[0]:.1f} | {untied[1]:.1f} |")
print(f"| tied | {tied[0]:.1f} | {tied[1]:.1f} |")
print(f"| tied - untied | {tied[0] - untied[0]:+.1f} | {tied[1] - untied[1]:+.1f} |")
