#!/usr/bin/env python3
"""The verdict of the GPU check (docs/gpu.md): what the GPU tests' results mean on this machine.

    python3 scripts/gpu_verdict.py RESULTS.xml

RESULTS.xml is the GoogleTest XML of tests/gpu (bw_gpu_test --gtest_output=xml:RESULTS.xml). Each
GPU test records the GPUs it needs (the property gpus_needed) and, where it is the only test of a
part, what it exercises (the property exercises). The GPUs the machine has are what
`nvidia-smi -L` lists (none where it is missing or fails). Then, per test:

  passed    it ran and passed
  FAILED    it failed; or it skipped although nvidia-smi lists the GPUs it needs (the tests do not
            see them: CUDA_VISIBLE_DEVICES, a CPU build, a driver the CUDA runtime refuses); or it
            skipped without saying what it needs; or it did not run at all
  NOT RUN   it needs more GPUs than the machine has: what it exercises is untested here

Exit status: 0 when every test ran and passed; 1 when any FAILED, or when there are no results
(the binary crashed or ran out of time); 3 when nothing failed but some test could not run here
(a partial check, never reported as a pass). Standard library only.
"""
import subprocess
import sys
import xml.etree.ElementTree as ET


def visible_gpus():
    """GPUs nvidia-smi lists, and how that was found out (for the report)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return 0, "no nvidia-smi on PATH"
    except subprocess.TimeoutExpired:
        return 0, "nvidia-smi -L did not answer within 30 s"
    gpus = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    if out.returncode != 0 and not gpus:
        first = (out.stdout + out.stderr).strip().splitlines()
        return 0, "nvidia-smi -L failed (exit {}{})".format(
            out.returncode, ": " + first[0] if first else "")
    return len(gpus), "nvidia-smi -L lists {} GPU(s)".format(len(gpus))


def properties(case):
    """A testcase's recorded properties: <properties><property name value/> (GoogleTest 1.10
    and later) or, in older versions, attributes of the testcase itself."""
    props = {k: v for k, v in case.attrib.items()
             if k not in ("name", "file", "line", "status", "result", "time", "timestamp",
                          "classname")}
    for p in case.iter("property"):
        props[p.get("name")] = p.get("value")
    return props


def first_line(element):
    text = element.get("message") or element.text or ""
    lines = [line for line in text.splitlines() if line.strip()]
    # GoogleTest starts the message with file:line; the reason is on the next line.
    return lines[1] if len(lines) > 1 else (lines[0] if lines else "")


def main(argv):
    if len(argv) != 2:
        print("usage: gpu_verdict.py RESULTS.xml", file=sys.stderr)
        return 2
    gpus, how = visible_gpus()
    print("GPUs: {}".format(how))
    try:
        cases = list(ET.parse(argv[1]).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print("FAILED   no test results ({}): the GPU tests crashed or ran out of time".format(e))
        print("verdict: FAILED")
        return 1
    if not cases:
        print("FAILED   {} holds no tests".format(argv[1]))
        print("verdict: FAILED")
        return 1
    passed, failed, not_run = [], [], []
    for case in cases:
        name = "{}.{}".format(case.get("classname"), case.get("name"))
        props = properties(case)
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            failed.append(name)
            print("FAILED   {}: {}".format(name, first_line(failure)))
        elif case.get("status") == "notrun":
            failed.append(name)
            print("FAILED   {}: did not run (disabled)".format(name))
        elif skipped is not None or case.get("result") == "skipped":
            reason = first_line(skipped) if skipped is not None else "skipped"
            try:
                needed = int(props["gpus_needed"])
            except (KeyError, ValueError):
                failed.append(name)
                print("FAILED   {}: skipped without recording the GPUs it needs ({})".format(
                    name, reason))
                continue
            if gpus >= needed:
                failed.append(name)
                print("FAILED   {}: skipped ({}), but it needs {} GPU(s) and {}: the tests do "
                      "not see the machine's GPUs (CUDA_VISIBLE_DEVICES, a CPU build, the "
                      "driver)".format(name, reason, needed, how))
            else:
                what = props.get("exercises", "")
                not_run.append(what or name)
                print("NOT RUN  {}: needs {} GPU(s), the machine has {}{}".format(
                    name, needed, gpus, ": the {} is unexercised".format(what) if what else ""))
        else:
            passed.append(name)
            print("passed   {}".format(name))
    if failed:
        print("verdict: FAILED ({} of {} tests)".format(len(failed), len(cases)))
        return 1
    if not_run:
        print("verdict: INCOMPLETE, not a pass: {} of {} tests passed; {} could not run on {} "
              "GPU(s) ({} unexercised)".format(len(passed), len(cases), len(not_run), gpus,
                                               ", ".join(not_run)))
        return 3
    print("verdict: passed ({} tests on {} GPU(s))".format(len(passed), gpus))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
