#!/usr/bin/env python3
"""How long a standby coordinator takes to take a run over, against a worker's recovery in the
same runs (docs/elastic.md "Takeover").

Starts a 3-member etcd on loopback (as bench/elastic/fenced_run.py does: data on /dev/shm,
heartbeat 50 ms, election timeout 250 ms), then runs --kills runs of a multi-host run on
loopback for each path, interleaved: an active `breakwater coordinator --control etcd://...`, a
`--standby` beside it, and two agents following the leadership (`agent --control`), one worker
each, two pipelines. In each run a worker of node 1 is killed first (--elastic.inject, a worker's
recovery), then, once --kill-after steps have committed, the active coordinator is:
  evidence   SIGKILLed: its store refuses connections, the standby revokes its lease at once;
  lease      SIGSTOPped (its port still accepts: no evidence): the standby waits out the lease
             (--lease-ttl-s), then takes over; the old one is resumed after the run and exits 3.
Reported per path, median and p95 over the runs: the stall (from the signal to the first step the
standby commits, less that run's median step, which the replayed step costs anyway), the
standby's own breakdown (campaign: from the old leader's last sign of life to its lead;
reconcile: agents back and state read; then quiesce, re-plan, regroup, replay), and the worker's
recovery_ms from the same runs.

usage: bench/elastic/takeover.py [--binary build/breakwater] [--kills 20] [--steps 24]
       [--kill-after 10] [--lease-ttl-s 2] [--model tiny]
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fenced_run import Etcd, ROOT  # noqa: E402

TOKEN = "takeover-bench"


def lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


def steps(path):
    return [d for d in lines(path) if "event" not in d and "step_s" in d]


def corpus(tmp):
    path = os.path.join(tmp, "corpus.txt")
    import random
    rng = random.Random(11)
    words = ["wave", "pipeline", "lease", "epoch", "fence", "leader", "standby", "quorum"]
    with open(path, "w") as f:
        f.write("".join(rng.choice(words) + ("\n" if i % 11 == 10 else " ")
                        for i in range(20000)))
    return path


def one(args, etcd, tmp, data, name, path):
    base = os.path.join(tmp, name)
    os.makedirs(base)
    cfg = [f"--model.name={args.model}", f"--data.path={data}", f"--train.steps={args.steps}",
           "--train.sample_tokens=0", "--quiet", "--checkpoint.every_s=0",
           "--train.checkpoint_every=0", "--cluster.nodes=2", "--cluster.devices_per_node=1",
           "--pipeline.pipelines=[1,1]", "--pipeline.fault_tolerance=1",
           "--pipeline.microbatches=4", "--pipeline.microbatch_size=2",
           f"--checkpoint.dir={base}/ckpt", "--elastic.inject=kill:node=1:step=3"]
    control = ["--control", etcd.url(), "--run-id", name, "--lease-ttl-s", str(args.lease_ttl_s)]
    env = dict(os.environ, BW_RUN_TOKEN=TOKEN)
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def coordinator(who, more):
        return subprocess.Popen([args.binary, "coordinator", "--listen", "127.0.0.1:0",
                                 "--wait-s", "60"] + control + more + cfg +
                                [f"--train.out_dir={base}/{who}"], **quiet)

    active = coordinator("active", [])
    while subprocess.run(["etcdctl", f"--endpoints={etcd.url()[7:].split(',')[0]}", "get",
                          f"bw/{name}/leader", "--print-value-only"],
                         capture_output=True, text=True).stdout.strip() == "":
        time.sleep(0.02)
    standby = coordinator("standby", ["--standby"])
    agents = [subprocess.Popen([args.binary, "agent", "--control", etcd.url(), "--run-id", name,
                                "--node-name", f"n{i}", "--wait-s", "60"], **quiet)
              for i in range(2)]
    while active.poll() is None and len(steps(f"{base}/active/metrics.jsonl")) < args.kill_after:
        time.sleep(0.005)
    sig = signal.SIGKILL if path == "evidence" else signal.SIGSTOP
    t_kill = time.time()
    active.send_signal(sig)
    t_first = None
    while standby.poll() is None and t_first is None:
        if steps(f"{base}/standby/metrics.jsonl"):
            t_first = time.time()
        time.sleep(0.002)
    rc = standby.wait(timeout=180)
    for a in agents:
        a.wait(timeout=60)
    if path == "lease":
        active.send_signal(signal.SIGCONT)
    active.wait(timeout=60)
    if rc != 0 or t_first is None:
        raise RuntimeError(f"run {name} failed: standby exit {rc}")
    all_steps = steps(f"{base}/active/metrics.jsonl") + steps(f"{base}/standby/metrics.jsonl")
    median_step = statistics.median(d["step_s"] for d in all_steps)
    events = [d for d in lines(f"{base}/active/metrics.jsonl") +
              lines(f"{base}/standby/metrics.jsonl") if d.get("event") == "recovered"]
    takeover = [e for e in events if e["cause"] == "coordinator"]
    worker = [e for e in events if e["cause"] != "coordinator"]
    return {"stall_ms": (t_first - t_kill - median_step) * 1000, "takeover": takeover[0],
            "worker_ms": worker[0]["recovery_ms"] if worker else None,
            "step_ms": median_step * 1000}


def p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "breakwater"))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--kill-after", type=int, default=10)
    ap.add_argument("--lease-ttl-s", type=int, default=2)
    ap.add_argument("--model", default="tiny")
    args = ap.parse_args()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    etcd = Etcd(shm)
    tmp = tempfile.mkdtemp(prefix="bw-takeover-")
    data = corpus(tmp)
    results = {"evidence": [], "lease": []}
    try:
        for k in range(args.kills):
            for path in results:
                results[path].append(one(args, etcd, tmp, data, f"{path}-{k}", path))
    finally:
        etcd.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.model}, 2 agents x 1 worker, 2 pipelines, {args.kills} kills per path, "
          f"lease TTL {args.lease_ttl_s} s (median / p95, ms)")
    print(f"{'path':<9} {'stall':>13} {'campaign':>13} {'reconcile':>11} {'quiesce':>9} "
          f"{'regroup':>9} {'replay':>9} {'worker':>13} {'step':>6}")
    for path, runs in results.items():
        def mp(xs):
            return f"{statistics.median(xs):.0f} / {p95(xs):.0f}"
        t = [r["takeover"] for r in runs]
        workers = [r["worker_ms"] for r in runs if r["worker_ms"] is not None]
        print(f"{path:<9} {mp([r['stall_ms'] for r in runs]):>13} "
              f"{mp([e['campaign_ms'] for e in t]):>13} {mp([e['reconcile_ms'] for e in t]):>11} "
              f"{statistics.median(e['quiesce_ms'] for e in t):>9.0f} "
              f"{statistics.median(e['regroup_ms'] for e in t):>9.0f} "
              f"{statistics.median(e['replay_ms'] for e in t):>9.0f} "
              f"{mp(workers) if workers else '-':>13} "
              f"{statistics.median(r['step_ms'] for r in runs):>6.0f}")


if __name__ == "__main__":
    main()
