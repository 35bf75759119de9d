#!/usr/bin/env bash
# `breakwater data prepare` on about GB gigabytes of JSONL: wall time, tokens/s and peak memory
# (it streams: the peak must not grow with the input). The corpus is Debian's `fortunes`, one
# document per fortune, repeated with the copy's number in front of each document until it
# reaches the size; the tokenizer is a GPT-2-style byte-level BPE that `tokenizers` trains on it
# (tests/tokenizer/oracle.py), so this needs BW_PYTHON with `tokenizers` too.
#   bench/dataprep/prepare_bench.sh [build dir] [GB] [threads]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
gb=${2:-1}
threads=${3:-$(nproc)}
python=${BW_PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" - "$work" "$gb" <<'PY'
import glob, json, os, sys
sys.path.insert(0, os.path.join(os.environ.get("ROOT", "."), "tests", "tokenizer"))
work, gb = sys.argv[1], float(sys.argv[2])
docs = []
for p in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if os.path.islink(p) or p.endswith(".dat") or not os.path.isfile(p):
        continue
    docs += [d for d in open(p, "rb").read().decode("utf-8", "replace").split("\n%\n") if d.strip()]
lines = [json.dumps({"text": d}) for d in docs]
with open(os.path.join(work, "train.txt"), "w") as f:
    f.write("\n".join(docs))
target, total, copy = gb * 1e9, 0, 0
with open(os.path.join(work, "corpus.jsonl"), "w") as f:
    while total < target:
        block = "".join('{"text": "%d ' % copy + l[10:] + "\n" for l in lines)
        f.write(block)
        total += len(block)
        copy += 1
PY
ROOT=$root "$python" -c "
import sys; sys.path.insert(0, '$root/tests/tokenizer'); import oracle
docs = open('$work/train.txt').read().split('\n')
oracle.train('gpt2', docs, 32000).save('$work/tokenizer.json')"
ls -l "$work/corpus.jsonl" | awk '{printf "corpus: %.2f GB of JSONL\n", $5 / 1e9}'
/usr/bin/time -v "$build/breakwater" data prepare --tokenizer "$work/tokenizer.json" \
    --out "$work/out" --val-docs 10000 --threads "$threads" "$work/corpus.jsonl" \
    2> "$work/time.txt"
grep -E "Elapsed \(wall|Maximum resident|User time|System time" "$work/time.txt"
