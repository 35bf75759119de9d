#!/usr/bin/env python3
"""What a checkpoint costs the step, side by side in one run (docs/checkpoints.md "Cost").

For each case, `breakwater train` runs with a checkpoint at the end only, every 10 steps and
every step, the three interleaved over --trials rounds; the figure is the sum of the committed
steps' wall time (metrics.jsonl step_s, start-up excluded), median over the trials, and the
overhead is its ratio to the end-only run of the same binary. Also reported: the time a step was
blocked handing its shard to the sink (the snapshot, plus waiting for the previous write when it
was still in flight: ranks' checkpoint_ms), median and worst over the checkpoints. With
--baseline OTHER_BINARY (a build of the path that wrote every shard inside the step and merged
the shards on the coordinator) the same runs of that binary are interleaved with these.

Cases: small on 4 workers (the default run), small on GPT-2's vocabulary (an llm.c shard of
random ids < 50257, about a 161 MB checkpoint) and gpt2-124m on 2 workers.

usage: bench/runtime/async_checkpoint.py [--binary build/breakwater] [--baseline B] [--trials 2]
       [--cases small,small-gpt2vocab,gpt2-124m] [--steps 30]
"""
import argparse, json, os, random, statistics, struct, subprocess, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpt2_vocab_shard(path, tokens=400_000, seed=5):
    """An llm.c version-1 shard (uint16 ids, GPT-2's vocabulary of 50257)."""
    rng = random.Random(seed)
    header = [20240520, 1, tokens] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{tokens}H", *(rng.randrange(50257) for _ in range(tokens))))
    return path


def cases(tmp, steps):
    shard = gpt2_vocab_shard(os.path.join(tmp, "gpt2vocab_000000.bin"))
    return {
        "small": (steps, ["--model.name=small"]),
        "small-gpt2vocab": (max(10, steps // 2), ["--model.name=small", f"--data.path={shard}"]),
        "gpt2-124m": (10, ["--model.name=gpt2-124m", "--model.seq_len=128", f"--data.path={shard}",
                           "--cluster.nodes=2", "--cluster.devices_per_node=1",
                           "--pipeline.pipelines=[2]", "--pipeline.fault_tolerance=0",
                           "--pipeline.microbatches=4", "--pipeline.microbatch_size=2"]),
    }


def run(binary, out, steps, args, every):
    cmd = [binary, "train", f"--train.steps={steps}", "--train.sample_tokens=0", "--quiet",
           f"--train.checkpoint_every={every}", f"--train.out_dir={out}",
           # Only the steps the variant names: no time-based checkpoints (checkpoint.every_s).
           "--checkpoint.every_s=0",
           "--elastic.step_timeout_s=600"] + args
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    total, blocked = 0.0, []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            doc = json.loads(line)
            if "event" in doc:
                continue
            total += doc["step_s"]
            b = max((r.get("checkpoint_ms", 0.0) for r in doc.get("ranks", [])), default=0.0)
            if b > 0:
                blocked.append(b)
    subprocess.run(["rm", "-rf", out], check=True)
    return total, blocked


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "breakwater"))
    p.add_argument("--baseline", default="")
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--cases", default="small,small-gpt2vocab,gpt2-124m")
    a = p.parse_args()
    binaries = [("new", a.binary)] + ([("baseline", a.baseline)] if a.baseline else [])
    with tempfile.TemporaryDirectory() as tmp:
        all_cases = cases(tmp, a.steps)
        print(f"{'case':16} {'binary':8} {'every':>5} {'steps s':>8} {'overhead':>9} "
              f"{'blocked ms med':>14} {'worst':>7}")
        for name in a.cases.split(","):
            steps, args = all_cases[name]
            times = {}
            blocks = {}
            for trial in range(a.trials):
                for label, binary in binaries:
                    for every in (0, 10, 1):
                        out = os.path.join(tmp, f"{name}-{label}-{every}-{trial}")
                        t, b = run(binary, out, steps, args, every)
                        times.setdefault((label, every), []).append(t)
                        blocks.setdefault((label, every), []).extend(b)
            for label, _ in binaries:
                base = statistics.median(times[(label, 0)])
                for every in (0, 10, 1):
                    t = statistics.median(times[(label, every)])
                    b = blocks[(label, every)]
                    med = f"{statistics.median(b):.1f}" if b else "-"
                    worst = f"{max(b):.1f}" if b else "-"
                    print(f"{name:16} {label:8} {every or 'end':>5} {t:8.2f} "
                          f"{100 * (t / base - 1):+8.1f}% {med:>14} {worst:>7}", flush=True)


if __name__ == "__main__":
    main()
