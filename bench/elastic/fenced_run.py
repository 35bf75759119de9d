#!/usr/bin/env python3
"""What leading a run in etcd costs the step, side by side in one run (docs/elastic.md
"Leadership and fenced decisions").

Starts a 3-member etcd on loopback (etcd from PATH, data folders on /dev/shm, heartbeat 50 ms,
election timeout 250 ms, as the tests start it), then for --trials rounds runs the same multi-host
run on loopback (`breakwater coordinator` and one agent with --devices workers) three ways,
interleaved:
  embedded      the coordinator's own store (--control embedded, the default);
  etcd          --control etcd://...: every step's decision a fenced write in etcd first;
  etcd-leader   as etcd, and the etcd member that leads the cluster is SIGKILLed once
                --kill-after steps have committed (restarted after the run).
The figure per run is the committed steps' wall time (metrics.jsonl step_s, start-up excluded);
reported: the median over the trials, the ratio to embedded, the median step, and, for
etcd-leader, the stall: the longest step minus the median step of that run.

usage: bench/elastic/fenced_run.py [--binary build/breakwater] [--trials 3] [--steps 40]
       [--model small] [--devices 4] [--kill-after 15]
"""
import argparse, json, os, shutil, signal, socket, statistics, subprocess, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "fenced-run-bench"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Etcd:
    def __init__(self, base):
        self.dir = tempfile.mkdtemp(prefix="bw-etcd-", dir=base)
        self.client = [free_port() for _ in range(3)]
        self.peer = [free_port() for _ in range(3)]
        self.procs = [None] * 3
        for i in range(3):
            self.start(i)
        self.wait_healthy()

    def args(self, i):
        initial = ",".join(f"m{k}=http://127.0.0.1:{self.peer[k]}" for k in range(3))
        return ["etcd", "--name", f"m{i}", "--data-dir", f"{self.dir}/m{i}",
                "--listen-client-urls", f"http://127.0.0.1:{self.client[i]}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.client[i]}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"bw-bench-{os.getpid()}",
                "--heartbeat-interval", "50", "--election-timeout", "250",
                "--logger", "zap", "--log-level", "error"]

    def start(self, i):
        self.procs[i] = subprocess.Popen(self.args(i), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)

    def url(self):
        return "etcd://" + ",".join(f"127.0.0.1:{p}" for p in self.client)

    def status(self, i):
        out = subprocess.run(["etcdctl", f"--endpoints=http://127.0.0.1:{self.client[i]}",
                              "--command-timeout=2s", "endpoint", "status", "-w", "json"],
                             capture_output=True, text=True)
        try:
            return json.loads(out.stdout)[0]["Status"]
        except (ValueError, IndexError, KeyError):
            return None

    def wait_healthy(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if all(self.status(i) and self.status(i).get("leader") for i in range(3)):
                return
            time.sleep(0.2)
        raise RuntimeError("etcd did not become healthy")

    def leader(self):
        for i in range(3):
            st = self.status(i)
            if st and st.get("leader") == st.get("header", {}).get("member_id"):
                return i
        return -1

    def kill(self, i):
        self.procs[i].kill()
        self.procs[i].wait()

    def restart(self, i):
        if self.procs[i].poll() is not None:
            self.start(i)
        self.wait_healthy()

    def close(self):
        for p in self.procs:
            if p and p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def steps_of(out):
    steps = []
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if "event" not in doc and "step_s" in doc:
                    steps.append(doc["step_s"])
    except FileNotFoundError:
        pass
    return steps


def run(args, out, control, etcd=None, kill_after=None):
    port = free_port()
    at = f"127.0.0.1:{port}"
    cfg = [f"--model.name={args.model}", f"--train.steps={args.steps}", "--train.sample_tokens=0",
           "--quiet", f"--train.out_dir={out}", "--checkpoint.every_s=0",
           "--train.checkpoint_every=0", "--cluster.nodes=1",
           f"--cluster.devices_per_node={args.devices}", f"--pipeline.pipelines=[{args.devices}]",
           "--pipeline.fault_tolerance=0", "--elastic.step_timeout_s=600"]
    env = dict(os.environ, BW_RUN_TOKEN=TOKEN)
    coord = subprocess.Popen([args.binary, "coordinator", "--listen", at, "--wait-s", "60"] +
                             control + cfg, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    agent = subprocess.Popen([args.binary, "agent", "--coordinator", at, "--node-name", "local",
                              "--wait-s", "60"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    killed = None
    if kill_after is not None:
        while coord.poll() is None and len(steps_of(out)) < kill_after:
            time.sleep(0.02)
        killed = etcd.leader()
        if killed >= 0:
            etcd.kill(killed)
    rc = coord.wait()
    agent.wait(timeout=60)
    if rc != 0:
        raise RuntimeError(f"run {out} failed with exit {rc}")
    if killed is not None and killed >= 0:
        etcd.restart(killed)
    return steps_of(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "breakwater"))
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--model", default="small")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--kill-after", type=int, default=15)
    args = ap.parse_args()
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    etcd = Etcd(base)
    tmp = tempfile.mkdtemp(prefix="bw-fenced-run-")
    results = {"embedded": [], "etcd": [], "etcd-leader": []}
    try:
        for t in range(args.trials):
            for name in results:
                out = os.path.join(tmp, f"{name}-{t}")
                control = [] if name == "embedded" else [
                    "--control", etcd.url(), "--run-id", f"bench-{name}-{t}"]
                steps = run(args, out, control, etcd,
                            args.kill_after if name == "etcd-leader" else None)
                results[name].append(steps)
    finally:
        etcd.close()
        shutil.rmtree(tmp, ignore_errors=True)
    base_total = statistics.median(sum(s) for s in results["embedded"])
    print(f"{args.model}, {args.devices} workers on one agent, {args.steps} steps, "
          f"{args.trials} trials (medians)")
    print(f"{'variant':<12} {'steps (s)':>10} {'vs embedded':>12} {'median step (ms)':>17} "
          f"{'stall (ms)':>11}")
    for name, runs in results.items():
        total = statistics.median(sum(s) for s in runs)
        step = statistics.median(statistics.median(s) for s in runs)
        stall = ""
        if name == "etcd-leader":
            stall = f"{statistics.median(max(s) - statistics.median(s) for s in runs) * 1000:.0f}"
        print(f"{name:<12} {total:>10.2f} {total / base_total:>12.3f} {step * 1000:>17.1f} "
              f"{stall:>11}")
    per_step = (statistics.median(sum(s) for s in results["etcd"]) - base_total) / args.steps
    print(f"etcd's fenced decision: {per_step * 1000:+.2f} ms a step (median totals' difference)")


if __name__ == "__main__":
    main()
