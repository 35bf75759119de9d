#!/usr/bin/env python3
"""The instruments of a run, measured (docs/observability.md):

  overhead   the default run (4 workers, 2 Hanayo pipelines of `small`) untraced, with every step
             from the 4th on traced (train.trace_steps), and with TensorBoard on, interleaved
             A B C A B C in one invocation: the median step time of each against the untraced one
  compare    the traced default run against the simulator's step of the same schedule, fed with a
             profile measured on this machine (`breakwater profile measure`), per action class
             (`breakwater trace compare`); with --gpt2, gpt2-124m on one pipeline of 4 workers
             too (128 tokens a sample, 8 samples a step)
  rebalance  [2,2] of `small` with node 1 injected slow (slow:node=1:factor=F), with and without
             elastic.rebalance: tokens/s of the steps after the rebalance against the same steps
             without it

usage: bench/elastic/observability.py BUILD_DIR [overhead|compare|rebalance ...] [--steps N]
       [--gpt2] [--factor F]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def train(binary, out_dir, extra):
    args = [binary, "train", "--train.out_dir=" + out_dir, "--train.sample_tokens=0",
            "--quiet"] + extra
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    steps, events = [], []
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            doc = json.loads(line)
            (events if "event" in doc else steps).append(doc)
    return steps, events


def overhead(binary, tmp, steps):
    first = 3
    variants = {
        "untraced": [],
        "traced": [f"--train.trace_steps={first}-{steps - 1}"],
        "tensorboard": ["--train.tensorboard=true"],
    }
    times = {k: [] for k in variants}
    for rep in range(2):
        for name, extra in variants.items():
            s, _ = train(binary, os.path.join(tmp, f"{name}{rep}"),
                         [f"--train.steps={steps}"] + extra)
            times[name] += [x["step_s"] for x in s[first:]]
    base = statistics.median(times["untraced"])
    print(f"overhead: default run, steps {first}..{steps - 1}, 2 runs each, interleaved")
    for name, t in times.items():
        m = statistics.median(t)
        print(f"  {name:<12} median step {1000 * m:8.1f} ms   {m / base:6.3f}x untraced "
              f"({len(t)} steps)")


def compare(binary, tmp, steps, model, extra_train, kind, devices, microbatches, waves, mbs,
            seq=0):
    out = os.path.join(tmp, f"compare_{model}")
    train(binary, out, [f"--train.steps={steps}", f"--train.trace_steps={steps - 2}-{steps - 1}",
                        f"--model.name={model}"] + extra_train)
    profile = os.path.join(tmp, f"profile_{model}.json")
    run([binary, "profile", "measure", "--model", model, "--microbatch-size", str(mbs),
         "--seq-len", str(seq), "--out", profile])
    sim = os.path.join(tmp, f"sim_{model}.json")
    run([binary, "schedule", "--kind", kind, "-P", str(devices), "-B", str(microbatches),
         "--waves", str(waves), "--profile", profile, "--trace", sim])
    r = run([binary, "trace", "compare", os.path.join(out, "trace.json"), sim])
    print(f"compare: {model}, {kind} P={devices} B={microbatches} per pipeline, the last 2 of "
          f"{steps} steps traced, against the simulator fed with `profile measure`")
    print(r.stdout)


def rebalance(binary, tmp, steps, factor):
    common = [f"--train.steps={steps}", "--cluster.nodes=4", "--pipeline.pipelines=[2,2]",
              "--pipeline.schedule=1f1b", "--pipeline.microbatches=8",
              f"--elastic.inject=slow:node=1:factor={factor}", "--elastic.slow_window=3"]
    rates = {"without": [], "with": []}
    moved_at = None
    for rep in range(2):
        for name in ("without", "with"):
            extra = ["--elastic.rebalance=true"] if name == "with" else []
            s, events = train(binary, os.path.join(tmp, f"rebalance_{name}{rep}"), common + extra)
            if name == "with":
                for e in events:
                    if e["event"] == "recovered" and e["cause"] == "rebalance":
                        moved_at = e["step"] if moved_at is None else moved_at
                        print(f"  rebalanced at step {e['step']}: {e['old_plan']} -> "
                              f"{e['new_plan']} in {e['recovery_ms']:.0f} ms")
            rates[name].append(s)
    start = (moved_at or steps // 2) + 1
    print(f"rebalance: [2,2] small, node 1 {factor}x slow, steps {start}..{steps - 1}, 2 runs each")
    base = None
    for name, runs in rates.items():
        t = [x["tokens_per_s"] for s in runs for x in s[start:]]
        m = statistics.median(t)
        base = base or m
        print(f"  {name:<8} rebalance: median {m:8.0f} tokens/s   {m / base:6.3f}x")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("what", nargs="*", default=["overhead", "compare", "rebalance"])
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--gpt2", action="store_true")
    p.add_argument("--factor", type=float, default=3.0)
    a = p.parse_args()
    binary = os.path.join(a.build, "breakwater")
    with tempfile.TemporaryDirectory(prefix="bw_observability_") as tmp:
        if "overhead" in a.what:
            overhead(binary, tmp, a.steps)
        if "compare" in a.what:
            # The default run: 2 Hanayo pipelines of 2 devices, W = 2, 4 microbatches each.
            compare(binary, tmp, min(a.steps, 10), "small", [], "hanayo", 2, 4, 2, 4)
            if a.gpt2:
                # One pipeline of 4 workers, 128 tokens a sample, one sample a microbatch (a step
                # of 1024 tokens: seconds, not minutes, on a small machine); its 14 layers hold
                # 8 chunks, so one wave.
                compare(binary, tmp, 4, "gpt2-124m",
                        ["--cluster.nodes=4", "--pipeline.pipelines=[4]", "--pipeline.fault_tolerance=0",
                         "--pipeline.microbatches=8", "--pipeline.microbatch_size=1",
                         "--pipeline.waves=1", "--model.seq_len=128"],
                        "hanayo", 4, 8, 1, 1, seq=128)
        if "rebalance" in a.what:
            rebalance(binary, tmp, a.steps, a.factor)


if __name__ == "__main__":
    main()
