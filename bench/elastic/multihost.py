#!/usr/bin/env python3
"""Multi-host benchmark on network-namespace hosts (docs/multihost.md), run as root.

Makes a coordinator namespace and --hosts agent namespaces on a bridge (as the netns tests do),
then, for each of --runs repetitions, side by side (medians reported):
  steps     median step time of `breakwater coordinator` + agents across the namespace hosts
            against `breakwater train` of the same config on loopback (ratio);
  cut link  host 2's link is cut at the switch after --fail-step committed steps; from the cut to
            the next committed step = detection (cut -> node_lost line) + recovered.recovery_ms;
  sigkill   the same node's worker SIGKILLed (--elastic.inject) at the same step: recovery_ms.
  transfer  the state transfers of a recovery, over the veth links and on loopback (`train`):
            node 1's worker is SIGKILLed at --fail-step and its node re-joins 1 s later, so each
            run has two (survivors receive the lost node's layers; the joiner receives its own).
            From the `recovered` events: transfer_bytes (received by all ranks), transfer_ms (the
            slowest rank) and their ratio in MB/s.

Usage: sudo bench/elastic/multihost.py [--binary build/breakwater] [--runs 3] [--model small]
                                       [--parts steps,cut,kill,transfer]
"""
import argparse, json, os, signal, statistics, subprocess, tempfile, time

TOKEN = "bench-token"


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


class Hosts:
    def __init__(self, n):
        pid = os.getpid()
        self.prefix = f"bwb{pid}"
        self.subnet = f"10.{100 + pid % 100}.{(pid // 100) % 250}"
        self.made = []
        self.add(self.sw())
        sh(f"ip -n {self.sw()} link add br0 type bridge && ip -n {self.sw()} link set br0 up")
        for k in range(n + 1):
            h = self.host(k)
            self.add(h)
            sh(f"ip link add eth0 netns {h} type veth peer name p{k} netns {self.sw()} && "
               f"ip -n {self.sw()} link set p{k} master br0 up && "
               f"ip -n {h} addr add {self.addr(k)}/24 dev eth0 && ip -n {h} link set eth0 up && "
               f"ip -n {h} link set lo up")

    def sw(self):
        return self.prefix + "sw"

    def host(self, k):
        return f"{self.prefix}h{k}"

    def addr(self, k):
        return f"{self.subnet}.{k + 1}"

    def add(self, name):
        sh(f"ip netns add {name}")
        self.made.append(name)

    def link(self, k, up):
        sh(f"ip -n {self.sw()} link set p{k} {'up' if up else 'down'}")

    def close(self):
        for n in self.made:
            subprocess.run(["ip", "netns", "del", n], stderr=subprocess.DEVNULL)


def metrics(out):
    steps, events = [], []
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                (events if "event" in d else steps).append(d)
    except FileNotFoundError:
        pass
    return steps, events


def multihost(a, hosts, out, extra, during=None):
    env = dict(os.environ, BW_RUN_TOKEN=TOKEN)
    listen = f"{hosts.addr(0)}:29500"
    coord = subprocess.Popen(
        ["ip", "netns", "exec", hosts.host(0), a.binary, "coordinator", "--quiet", "--listen",
         listen, "--wait-s", "60", f"--train.out_dir={out}"] + a.base + extra,
        env=env, stdout=subprocess.DEVNULL, stderr=open(out + ".log", "w"))
    agents = [subprocess.Popen(
        ["ip", "netns", "exec", hosts.host(k), a.binary, "agent", "--coordinator", listen,
         "--node-name", f"host{k}", "--wait-s", "30"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k in range(1, a.hosts + 1)]
    result = during(coord, out) if during else None
    rc = coord.wait(timeout=600)
    for p in agents:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    if rc != 0:
        raise SystemExit(f"coordinator failed ({rc}), see {out}.log")
    return metrics(out), result


def loopback(a, out, extra=()):
    subprocess.run([a.binary, "train", "--quiet", f"--train.out_dir={out}"] + a.base + list(extra),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return metrics(out)


def transfers(events):
    """{cause: (bytes, ms)} of the first recovered event of each cause that moved state (the
    injected kill and its re-join; a later, unplanned loss on a loaded machine is left out)."""
    out = {}
    for e in events:
        if e["event"] == "recovered" and e.get("transfer_bytes", 0) > 0:
            out.setdefault(e["cause"], (e["transfer_bytes"], e["transfer_ms"]))
    return out


def median_step(steps):
    return statistics.median(s["step_s"] for s in steps[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/breakwater")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="small")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--fail-step", type=int, default=10)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--parts", default="steps,cut,kill,transfer")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    a.binary = os.path.abspath(a.binary)
    a.base = [f"--model.name={a.model}", f"--train.steps={a.steps}",
              f"--cluster.nodes={a.hosts}", "--train.sample_tokens=0",
              "--elastic.heartbeat_timeout_s=1.5"]
    tmp = tempfile.mkdtemp(prefix="bw_multihost_bench_")
    hosts = Hosts(a.hosts)
    ratios, net_step, lo_step, cut_ms, cut_detect, kill_ms = [], [], [], [], [], []
    moved = {"veth": {}, "loopback": {}}  # where -> cause -> [(bytes, ms)]
    rejoin = [f"--elastic.inject=kill:node=1:step={a.fail_step}:phase=grad_sync",
              "--elastic.rejoin_after_s=1"]
    try:
        for i in range(a.runs):
            if "transfer" in parts:
                (_, events), _ = multihost(a, hosts, os.path.join(tmp, f"xfer{i}"), rejoin)
                for cause, v in transfers(events).items():
                    moved["veth"].setdefault(cause, []).append(v)
                _, events = loopback(a, os.path.join(tmp, f"xferlo{i}"), rejoin)
                for cause, v in transfers(events).items():
                    moved["loopback"].setdefault(cause, []).append(v)
            if "steps" not in parts:
                continue
            (steps, _), _ = multihost(a, hosts, os.path.join(tmp, f"net{i}"), [])
            lo, _ = loopback(a, os.path.join(tmp, f"lo{i}"))
            net_step.append(median_step(steps))
            lo_step.append(median_step(lo))
            ratios.append(net_step[-1] / lo_step[-1])

            def cut(coord, out):
                while len(metrics(out)[0]) < a.fail_step and coord.poll() is None:
                    time.sleep(0.005)
                hosts.link(2, False)
                t0 = time.monotonic()
                while coord.poll() is None:
                    if any(e["event"] == "node_lost" for e in metrics(out)[1]):
                        break
                    time.sleep(0.005)
                detect = time.monotonic() - t0
                hosts.link(2, True)
                return detect

            if "cut" not in parts:
                continue
            (_, events), detect = multihost(a, hosts, os.path.join(tmp, f"cut{i}"), [], cut)
            rec = [e for e in events if e["event"] == "recovered" and e["cause"] == "node_lost"]
            cut_detect.append(detect * 1000)
            cut_ms.append(detect * 1000 + rec[0]["recovery_ms"])
            if "kill" not in parts:
                continue
            (_, events), _ = multihost(
                a, hosts, os.path.join(tmp, f"kill{i}"),
                [f"--elastic.inject=kill:node=1:step={a.fail_step}:phase=grad_sync"])
            rec = [e for e in events if e["event"] == "recovered" and e["cause"] == "node_lost"]
            kill_ms.append(rec[0]["recovery_ms"])
    finally:
        hosts.close()
    m = statistics.median
    print(f"model {a.model}, {a.hosts} hosts, {a.runs} runs (medians)")
    if net_step:
        print(f"step time: namespace hosts {m(net_step)*1000:.1f} ms, loopback "
              f"{m(lo_step)*1000:.1f} ms, ratio {m(ratios):.2f}")
    if kill_ms:
        print(f"recovery, cut link: {m(cut_ms):.0f} ms (detection {m(cut_detect):.0f} ms, "
              f"heartbeat timeout 1500 ms); SIGKILL: {m(kill_ms):.0f} ms; ratio "
              f"{m(cut_ms)/m(kill_ms):.1f}")
    if "transfer" in parts:
        print("state transfer        where     bytes moved   transfer ms   MB/s")
        for cause in ("node_lost", "node_joined"):
            for where in ("veth", "loopback"):
                runs = moved[where].get(cause, [])
                if not runs:
                    print(f"  {cause:<19} {where:<9} (no transfer)")
                    continue
                b, ms = m(r[0] for r in runs), m(r[1] for r in runs)
                rate = m(r[0] / max(r[1], 1e-6) / 1000 for r in runs)
                print(f"  {cause:<19} {where:<9} {b:>11,.0f}   {ms:>11.1f}   {rate:6.0f}")


if __name__ == "__main__":
    main()
