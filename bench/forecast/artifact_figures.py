#!/usr/bin/env python3
"""The figures of Oobleck's SOSP'23 artifact simulator, for data/oobleck-sosp23/figures.csv.

Runs the artifact's own simulators (github.com/SymbioticLab/Oobleck, branch sosp23-artifact,
tools/simulator/{oobleck,varuna,bamboo}_simulator.py, MIT) as its eval_tput_vs_freq.py runs them
(time_hard_stop, steps_per_run 200000), instrumented from outside: nothing of it is copied, its
classes are wrapped at run time to record every step it completes and, for the "fixed" column,
to correct its accounting bugs (docs/forecast.md, "Where the artifact's own accounting is
inconsistent", items 3, 8, 9, 10).

    python3 bench/forecast/artifact_figures.py ARTIFACT/tools/simulator SPOT_TRACES_DIR \\
        > data/oobleck-sosp23/figures.csv

SPOT_TRACES_DIR holds aws-p3.csv, aws-g4dn.csv and scaled-gcp.csv (the artifact's
traces/p3-trace.csv, g4dn-trace.csv, scaled/scale_gcp-trace.csv). The fixed-interval traces are
written as forecast::fixed_removal_trace makes them (30 nodes, node1, node3, ... removed every
10m/30m/1h/3h/6h until 15 remain): the artifact's own 10m ... 6h traces remove other nodes at the
same times, which changes nothing for Oobleck and Varuna and moves Bamboo (which nodes are
spares) by up to 1.7 points.
"""
import contextlib
import io
import logging
import os
import re
import sys
import tempfile

MODELS = {"bert-large": "BERT-large", "gpt2": "GPT-2-ours", "gpt3-medium": "GPT-3-medium",
          "gpt3-2.7b": "GPT-3-2_7b", "gpt3-6.7b": "GPT-3-6_7b"}
FIXED = [("10m", 601200), ("30m", 1800000), ("1h", 3600000), ("3h", 10800000), ("6h", 21600000)]
SPOT = [("p3", "aws-p3.csv"), ("g4dn", "aws-g4dn.csv"), ("scaled-gcp", "scaled-gcp.csv")]
FIXES = {"heap_order", "latest_timeout", "checkpoint_window", "checkpoint_rollback"}


def run(mods, policy, model, trace, fixes):
    """One simulation; returns (printed share, useful share of the window, samples/s)."""
    om, vm, bm = mods
    mod = {"breakwater": om, "restart": vm, "redundant": bm}[policy]
    S = mod.Simulator
    saved = {}

    def patch(name, fn):
        saved.setdefault(name, getattr(S, name))
        setattr(S, name, fn)

    kept = []  # per completed step: [nominal step ms, index of its first throughput point]

    o_create = S.create_training_step_complete_event

    def create(self, delta, version):
        ev = o_create(self, delta, version)
        ev.data["step"] = self.step_delta
        return ev
    patch("create_training_step_complete_event", create)

    o_done = S.simulate_training_step_complete

    def done(self, delta, data):
        n = len(self.performance_ys)
        o_done(self, delta, data)
        if len(self.performance_ys) > n:
            # Bamboo's failover slows the step 1.5x; it still does one step of work.
            kept.append([getattr(self, "_nominal", None) or data.get("step", self.step_delta), n])
    patch("simulate_training_step_complete", done)

    o_remove = S.simulate_spot_instance_remove

    def remove(self, delta, data):
        before = getattr(self, "step_delta", None)
        o_remove(self, delta, data)
        if policy == "redundant" and before and self.step_delta != before:
            self._nominal = getattr(self, "_nominal", None) or before
    patch("simulate_spot_instance_remove", remove)

    o_timeout = S.simulate_rendezvous_timeout

    def timeout(self, delta, is_global):
        o_timeout(self, delta, is_global)
        self._nominal = None
    patch("simulate_rendezvous_timeout", timeout)

    if "latest_timeout" in fixes:
        # Item 8: a new rendezvous start supersedes the timeout already scheduled; only the
        # latest start's timeout completes the rendezvous.
        for name in ("create_global_rendezvous_timeout_event",
                     "create_local_rendezvous_timeout_event"):
            def tag(orig):
                def f(self, delta):
                    ev = orig(self, delta)
                    ev.data["start"] = self.rendezvous_start_counter
                    return ev
                return f
            patch(name, tag(getattr(S, name)))
        for name in ("simulate_global_rendezvous_timeout", "simulate_local_rendezvous_timeout"):
            def only_latest(orig):
                def f(self, delta, data):
                    if data.get("start") == self.rendezvous_start_counter:
                        orig(self, delta, data)
                return f
            patch(name, only_latest(getattr(S, name)))

    if policy == "restart" and fixes & {"heap_order", "checkpoint_window", "checkpoint_rollback"}:
        ck_kind, rm_kind = vm.EventKind.CHECKPOINT_COMPLETE, vm.EventKind.SPOT_INSTANCE_REMOVE

        def will_fail(self):
            # Item 3: in time order, not heap-array order. Item 9: the checkpoint ends C after
            # its step (the artifact schedules its completion event 2C after).
            ck = [e.delta for e in self.events if e.kind == ck_kind]
            rm = [e.delta for e in self.events if e.kind == rm_kind]
            end = max(ck) - (self.checkpointing_overhead if "checkpoint_window" in fixes else 0)
            failed = bool(ck) and bool(rm) and min(rm) < end
            self._failed = failed
            # Item 10: a failed checkpoint only stays out of the rollback target; the removal
            # that makes it fail rolls back the steps since the last completed one.
            return failed and "checkpoint_rollback" not in fixes
        patch("checkpointing_will_fail", will_fail)
        if "checkpoint_rollback" in fixes:
            inner = S.simulate_training_step_complete

            def keep_target(self, delta, data):
                prev = self.prev_checkpoint_delta
                self._failed = False
                inner(self, delta, data)
                if self._failed:
                    self.prev_checkpoint_delta = prev
            patch("simulate_training_step_complete", keep_target)

    extra = {"no_small_model_fallback": False} if policy == "restart" else {}
    with open(trace) as f:
        window = int(f.read().strip().split("\n")[-1].split(",")[0])
        f.seek(0)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            s = S(seed=None, start_hour=0, generate_addition_probabilities=None,
                  removal_probability=None, generate_graphs=False, spot_instance_trace=f,
                  model=MODELS[model], steps_per_run=200000, time_hard_stop=True, **extra)
            s.simulate()
    for name, fn in saved.items():
        setattr(S, name, fn)
    m = re.search(r"Effective Time:([0-9.e+]+), ([0-9.e+-]+)", out.getvalue())
    printed = float(m.group(2)) if m else float("nan")
    # A step counts if its throughput segment survives (its second point, the one the
    # artifact's own average integrates, is not zeroed by a rollback).
    ys = s.performance_ys
    steps = [t for t, i in kept if i + 1 < len(ys) and ys[i + 1] > 0]
    share = 1 - getattr(s, "redundant_ratio", 0)
    return printed, sum(steps) * share / window, len(steps) * s.samples_per_step / (window / 1e3)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sim, spot = sys.argv[1], sys.argv[2]
    sys.path.insert(0, sim)
    logging.disable(logging.CRITICAL)
    import oobleck_simulator as om
    import varuna_simulator as vm
    import bamboo_simulator as bm
    tmp = tempfile.mkdtemp()
    traces = []
    for name, period in FIXED:
        path = os.path.join(tmp, name + ".csv")
        with open(path, "w") as f:
            f.write("".join(f"0,add,node{i}\n" for i in range(1, 31)))
            f.write("".join(f"{k * period},remove,node{2 * k - 1}\n" for k in range(1, 16)))
        traces.append((name, path))
    traces += [(name, os.path.join(spot, file)) for name, file in SPOT]
    only = os.environ.get("TRACES")  # a comma-separated subset, to run in parallel
    if only:
        traces = [t for t in traces if t[0] in only.split(",")]
    print(__doc__.strip().replace("\n", "\n# ").join(["# ", ""]))
    print("# printed: the Effective Time share it prints; wall_clock: committed steps' time over "
          "[0, last event]\n# (x 0.1971 for Bamboo); wall_clock_fixed: the same with items 3, "
          "8, 9, 10 fixed; samples_per_s: fixed.")
    print("model,trace,policy,printed,wall_clock,wall_clock_fixed,samples_per_s")
    for tname, path in traces:
        for model in MODELS:
            for policy in ("breakwater", "restart", "redundant"):
                printed, wall, _ = run((om, vm, bm), policy, model, path, set())
                _, fixed, sps = run((om, vm, bm), policy, model, path, FIXES)
                print(f"{model},{tname},{policy},{printed:.4f},{wall:.4f},{fixed:.4f},{sps:.3f}",
                      flush=True)


if __name__ == "__main__":
    main()
