#!/usr/bin/env python3
"""Recovery benchmark: breakwater's in-place recovery against checkpoint-restart, side by side.

For each of --runs repetitions (medians reported):
  elastic   the run with node --node's worker SIGKILLed in step --fail-step: recovery_ms from the
            fault to the next committed step, split into detect / stop / plan / regroup /
            transfer / replay (metrics.jsonl events);
  restart   the same failure handled as TorchElastic does: detection (the same), then every process
            stopped and started again, the last checkpoint (every --ckpt-every steps) loaded and
            the lost steps redone up to the failed step, timed as the wall time of
            `breakwater train --train.resume=... --train.steps=<fail step + 1>` on the survivors;
  steady    step time after the recovery (steps fail+3 ..) against a fresh run of the same plan.

Usage: bench/elastic/recovery.py [--binary build/breakwater] [--runs 5] [--model small] ...
"""
import argparse, json, os, statistics, subprocess, tempfile, time


def train(binary, out, extra):
    args = [binary, "train", "--quiet", f"--train.out_dir={out}", "--train.sample_tokens=0"] + extra
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    steps, events = [], []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            (events if "event" in d else steps).append(d)
    return wall, steps, events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/breakwater")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default="small")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--fail-step", type=int, default=25)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--node", type=int, default=3)
    a = ap.parse_args()
    base = [f"--model.name={a.model}", f"--train.steps={a.steps}", "--cluster.nodes=4"]
    tmp = tempfile.mkdtemp(prefix="bw_recovery_bench_")
    parts = {k: [] for k in ["detect_ms", "quiesce_ms", "plan_ms", "regroup_ms", "transfer_ms",
                             "replay_ms", "recovery_ms"]}
    restart_ms, after, fresh = [], [], []
    for i in range(a.runs):
        out = os.path.join(tmp, f"elastic{i}")
        _, steps, events = train(a.binary, out, base + [
            f"--train.checkpoint_every={a.ckpt_every}",
            f"--elastic.inject=kill:node={a.node}:step={a.fail_step}:phase=grad_sync"])
        rec = [e for e in events if e["event"] == "recovered"][0]
        for k in parts:
            parts[k].append(rec[k])
        after.append(statistics.median(s["step_s"] for s in steps if s["step"] > a.fail_step + 2))
        # The plan the survivors run, as explicit pipelines, for the restart and the fresh run.
        sizes = [len(p.strip("[]").split("]")[0].split(",")) for p in rec["new_plan"].split(" ")]
        plan = [f"--cluster.nodes={sum(sizes)}", f"--pipeline.pipelines=[{','.join(map(str, sizes))}]"]
        last = (a.fail_step // a.ckpt_every) * a.ckpt_every
        ckpt = os.path.join(out, f"checkpoint-{last:06d}")
        wall, _, _ = train(a.binary, os.path.join(tmp, f"restart{i}"),
                           base[:-1] + plan + [f"--train.steps={a.fail_step + 1}",
                                               f"--train.resume={ckpt}"])
        restart_ms.append(rec["detect_ms"] + wall * 1000)
        _, fsteps, _ = train(a.binary, os.path.join(tmp, f"fresh{i}"), base[:-1] + plan)
        fresh.append(statistics.median(s["step_s"] for s in fsteps if s["step"] > a.fail_step + 2))
    med = {k: statistics.median(v) for k, v in parts.items()}
    print(f"model {a.model}, 4 nodes, SIGKILL of node {a.node} in step {a.fail_step} "
          f"(grad_sync), checkpoint every {a.ckpt_every} steps, medians of {a.runs} runs")
    print(f"{'part':<14} {'ms':>10}")
    for k, v in med.items():
        print(f"{k:<14} {v:>10.1f}")
    r = statistics.median(restart_ms)
    print(f"{'restart_ms':<14} {r:>10.1f}   (checkpoint-restart: detect + restart + reload + "
          f"redo {a.fail_step - (a.fail_step // a.ckpt_every) * a.ckpt_every} steps)")
    print(f"restart / elastic recovery: {r / med['recovery_ms']:.1f}x")
    s_after, s_fresh = statistics.median(after), statistics.median(fresh)
    print(f"step after recovery {s_after * 1000:.1f} ms, fresh run of the same plan "
          f"{s_fresh * 1000:.1f} ms: ratio {s_after / s_fresh:.3f}")


if __name__ == "__main__":
    main()
