#!/usr/bin/env python3
"""Encoding throughput of bw::tokenizer against Hugging Face `tokenizers`, side by side in one
run, on the same documents, tokenizers and thread counts; one table of tokens/s and ratios.

    .venv/bin/python bench/tokenizer/compare.py [--build build] [--repeat 3] [--max-mb 0]

Corpora: English prose (Debian's `fortunes`, one document per fortune) and the varied text of
the tokenizer oracle (tests/tokenizer/oracle.py: many scripts, whitespace and digit runs,
emoji, invalid UTF-8, every code point). Tokenizers: byte-level BPEs trained here by `tokenizers`
on the English corpus with GPT-2's and Llama 3's pre-tokenizers. Threads: one, and all.
`tokenizers` runs encode_batch_fast (no offsets: its fastest batch call) in a fresh process per
thread count (rayon reads RAYON_NUM_THREADS once); ours runs build/bench/tokenizer/
bw_tokenizer_encode. Both take the best of --repeat runs, and their ids must agree (checksum).
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
import oracle  # noqa: E402  (the corpus generator and file formats)

HF_RUNNER = r"""
import json, struct, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], "rb").read()
n, = struct.unpack_from("<I", data, 8)
at, docs = 12, []
for _ in range(n):
    l, = struct.unpack_from("<I", data, at)
    docs.append(data[at + 4:at + 4 + l].decode("utf-8", "replace"))
    at += 4 + l
best = 1e30
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    encs = tok.encode_batch_fast(docs, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
tokens, checksum = 0, 0
for e in encs:
    ids = e.ids
    tokens += len(ids)
    for i in ids:
        checksum = (checksum * 1000003 + i) & 0xFFFFFFFFFFFFFFFF
print(json.dumps({"tokens": tokens, "seconds": best, "tokens_per_s": tokens / best,
                  "checksum": checksum}))
"""


def fortunes(max_bytes):
    docs = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if os.path.islink(path) or path.endswith(".dat") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            for d in f.read().split(b"\n%\n"):
                if d.strip():
                    docs.append(d)
    if not docs:
        sys.exit("no fortunes: install Debian's `fortunes` package (scripts/setup.sh does)")
    return cut(docs, max_bytes)


def cut(docs, max_bytes):
    if not max_bytes:
        return docs
    out, total = [], 0
    for d in docs:
        if total >= max_bytes:
            break
        out.append(d)
        total += len(d)
    return out


def hf(tokenizer, docs_path, threads, repeat):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, "-c", HF_RUNNER, tokenizer, docs_path, str(repeat)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def ours(binary, tokenizer, docs_path, threads, repeat):
    out = subprocess.run([binary, tokenizer, docs_path, "--threads", str(threads), "--repeat",
                          str(repeat)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-mb", type=float, default=0, help="cut each corpus to this size")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "tokenizer", "bw_tokenizer_encode")
    if not os.access(binary, os.X_OK):
        sys.exit("%s is missing: cmake --build %s --target bw_tokenizer_encode" % (binary, args.build))
    cores = os.cpu_count()
    max_bytes = int(args.max_mb * 1e6)
    with tempfile.TemporaryDirectory() as tmp:
        english = fortunes(max_bytes)
        corpora = {"english": english, "varied": cut(oracle.corpus(), max_bytes)}
        paths = {}
        for name, docs in corpora.items():
            paths[name] = os.path.join(tmp, name + ".bin")
            oracle.write_docs(paths[name], docs)
        training = oracle.texts(english)
        toks = {}
        for kind in ["gpt2", "llama3"]:
            toks[kind] = os.path.join(tmp, kind + ".json")
            oracle.train(kind, training, 32000).save(toks[kind])
        rows = []
        for corpus in corpora:
            size_mb = sum(len(d) for d in corpora[corpus]) / 1e6
            for kind in toks:
                for threads in sorted({1, cores}):
                    a = hf(toks[kind], paths[corpus], threads, args.repeat)
                    b = ours(binary, toks[kind], paths[corpus], threads, args.repeat)
                    same = a["checksum"] == b["checksum"] and a["tokens"] == b["tokens"]
                    rows.append((corpus, size_mb, kind, threads, a["tokens_per_s"],
                                 b["tokens_per_s"], same))
    print("| corpus | MB | tokenizer | threads | tokenizers tokens/s | ours tokens/s | ours / "
          "tokenizers | same ids |")
    print("|---|---|---|---|---|---|---|---|")
    for corpus, mb, kind, threads, a, b, same in rows:
        print("| %s | %.1f | %s | %d | %.2f M | %.2f M | %.2fx | %s |" % (
            corpus, mb, kind, threads, a / 1e6, b / 1e6, b / a, "yes" if same else "NO"))
    if not all(r[-1] for r in rows):
        sys.exit("the ids differ")


if __name__ == "__main__":
    main()
