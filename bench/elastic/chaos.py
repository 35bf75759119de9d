#!/usr/bin/env python3
"""Chaos run (not CI): random SIGKILLs and SIGSTOPs of workers and SIGKILLs of agents, sent from
outside, while `breakwater train` runs with re-joining nodes; then the same config without faults.

Reports: failures sent, failures the run survived (node_lost events), recoveries, steps committed,
steps whose sample digest equals the failure-free run's (exactly-once), and the largest difference
of the final parameters from the failure-free run.

Usage: bench/elastic/chaos.py [--binary build/breakwater] [--failures 200] [--steps 20000]
"""
import argparse, json, os, random, signal, subprocess, tempfile, time


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
            with open(f"/proc/{p}/cmdline") as f:
                cmd = f.read().split("\0")
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
            out.append((int(p), cmd))
    return out


def metrics(out):
    steps, events = {}, []
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if "event" in d:
                    events.append(d)
                else:
                    steps[d["step"]] = d
    except OSError:
        pass
    return steps, events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/breakwater")
    ap.add_argument("--failures", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--max-minutes", type=float, default=12)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="bw_chaos_")
    common = ["train", "--quiet", "--model.name=tiny", f"--train.steps={a.steps}",
              "--cluster.nodes=4", "--pipeline.microbatches=4", "--pipeline.microbatch_size=2",
              "--train.sample_tokens=0", "--train.lr=1e-3", "--train.min_lr=1e-3"]
    out = os.path.join(tmp, "chaos")
    proc = subprocess.Popen([a.binary] + common + [
        f"--train.out_dir={out}", "--elastic.rejoin_after_s=0.3",
        "--elastic.heartbeat_timeout_s=1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    sent = {"worker SIGKILL": 0, "worker SIGSTOP": 0, "agent SIGKILL": 0}
    deadline = time.monotonic() + a.max_minutes * 60
    total = 0
    while total < a.failures and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(rng.uniform(0.3, 1.0))
        steps, _ = metrics(out)
        if not steps or steps[max(steps)]["world"] != 4:
            continue  # wait until every node is back in the plan (at most f = 1 at a time)
        agents = [(p, c) for p, c in children(proc.pid) if len(c) > 1 and c[1] == "agent"]
        if not agents:
            continue
        apid, _ = rng.choice(agents)
        workers = [p for p, c in children(apid) if len(c) > 1 and c[1] == "worker"]
        kind = rng.choice(list(sent))
        try:
            if kind == "agent SIGKILL":
                os.kill(apid, signal.SIGKILL)
            elif workers:
                os.kill(workers[0], signal.SIGKILL if kind == "worker SIGKILL" else signal.SIGSTOP)
            else:
                continue
        except ProcessLookupError:
            continue
        sent[kind] += 1
        total += 1
        # the next failure only after this one was seen
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            _, events = metrics(out)
            if sum(e["event"] == "node_lost" for e in events) >= total:
                break
            time.sleep(0.05)
    err = proc.communicate()[1]
    chaos_steps, events = metrics(out)
    ref_out = os.path.join(tmp, "reference")
    subprocess.run([a.binary] + common + [f"--train.out_dir={ref_out}"], check=True,
                   stdout=subprocess.DEVNULL)
    ref_steps, _ = metrics(ref_out)
    same = sum(1 for k, v in ref_steps.items() if k in chaos_steps and chaos_steps[k]["samples"] == v["samples"])
    print(f"chaos run exit status {proc.returncode}{': ' + err.strip()[-300:] if proc.returncode else ''}")
    print(f"failures sent: {total} ({', '.join(f'{k} {v}' for k, v in sent.items())})")
    print(f"node_lost events: {sum(e['event'] == 'node_lost' for e in events)}, recoveries: "
          f"{sum(e['event'] == 'recovered' for e in events)} "
          f"(joins {sum(e['event'] == 'recovered' and e['cause'] == 'node_joined' for e in events)}), "
          f"generations: {max((s['generation'] for s in chaos_steps.values()), default=0) + 1}")
    print(f"steps committed: {len(chaos_steps)} of {a.steps}; steps with the failure-free run's "
          f"samples: {same} of {len(ref_steps)}")
    rec = sorted(e["recovery_ms"] for e in events if e["event"] == "recovered" and e["cause"] == "node_lost")
    if rec:
        print(f"recovery_ms after a loss: median {rec[len(rec) // 2]:.0f}, max {rec[-1]:.0f}")
    try:
        import struct
        def load(path):
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
                data = f.read()
            out = {}
            for name, meta in header.items():
                if name == "__metadata__" or meta["dtype"] != "F32":
                    continue
                b, e = meta["data_offsets"]
                out[name] = struct.unpack(f"<{(e - b) // 4}f", data[b:e])
            return out
        def load_checkpoint(root):
            """Every stored tensor of the final checkpoint: its shards (or its one file)."""
            ckpt = os.path.join(root, f"checkpoint-{a.steps:06d}")
            with open(os.path.join(ckpt, "checkpoint.json")) as f:
                manifest = json.load(f)
            files = [s["model"] for s in manifest.get("shards", [])] or [manifest["weights"]]
            out = {}
            for name in files:
                out.update(load(os.path.join(ckpt, name)))
            return out
        got, want = load_checkpoint(out), load_checkpoint(ref_out)
        worst = max(max(abs(x - y) for x, y in zip(got[k], want[k])) for k in want)
        print(f"final parameters: max |chaos - failure-free| = {worst:.3g}")
    except (OSError, KeyError, ValueError) as e:
        print(f"final parameters: not compared ({e})")


if __name__ == "__main__":
    main()
