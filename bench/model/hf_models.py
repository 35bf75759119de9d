#!/usr/bin/env python3
"""Hugging Face models in breakwater: import memory and time, build times, and gpt2 against llama
step times.

Usage: bench/model/hf_models.py [BUILD_DIR] [--work DIR] [--steps 4] [--seq 128] [--repeat 2]
                                [--load SHAPE,SHAPE,...] [--load-only]

Needs transformers and torch (the project's .venv has them after scripts/test.sh). Writes, with
transformers, a randomly initialised Hugging Face folder of each shape below (model.safetensors
in fp32) and then measures, side by side in one run:

  load     each shape of --load (default gpt2-124m and llama-3.2-1b; llama-500m is a smaller
           Llama-3.2-shaped model for machines with less memory): `breakwater generate
           --max-tokens 1` from the folder (config.json read, every tensor loaded and checked, one
           forward) against transformers' own from_pretrained plus one forward of the same
           prompt. Both are whole processes: their wall time and their peak resident set (the
           kernel's ru_maxrss of that child), the latter also as a multiple of the model's fp32
           bytes (every stored tensor at 4 bytes an element). The two alternate --repeat times;
           the fastest of each is shown, with the largest peak.
  build    gpt2-124m built from a seed (`train --model.family gpt2 --model.name 124m`) against
           imported (`--model.init_from`), one step each, one process; the first step's time
           from metrics.jsonl.
  step     gpt2-124m against a Llama of about the same size (d 768, 12 heads with 4 key/value
           heads, 12 blocks, SwiGLU 2048, vocabulary 50257, tied): the median step time (the first
           step left out) of `train` on one process, the same batch.

--load-only stops after the load rows. The 1B model trains nowhere here: AdamW on 1.24 B fp32
parameters needs about 20 GB beside the activations, more than a 24 GB CI-sized machine holds;
its import is measured through generate.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

argv = sys.argv[1:]
opts = {"--work": "", "--steps": "4", "--seq": "128", "--repeat": "2",
        "--load": "gpt2-124m,llama-3.2-1b"}
flags = set()
rest = []
i = 0
while i < len(argv):
    if argv[i] in opts and i + 1 < len(argv):
        opts[argv[i]] = argv[i + 1]
        i += 2
    elif argv[i].startswith("--"):
        flags.add(argv[i])
        i += 1
    else:
        rest.append(argv[i])
        i += 1
build = rest[0] if rest else "build"
exe = os.path.abspath(os.path.join(build, "breakwater"))
work = opts["--work"] or tempfile.mkdtemp(prefix="bw_hf_models_")
os.makedirs(work, exist_ok=True)
steps, seq = int(opts["--steps"]), int(opts["--seq"])
repeat = max(1, int(opts["--repeat"]))
load_shapes = [n for n in opts["--load"].split(",") if n]
if "--skip-1b" in flags:
    load_shapes = [n for n in load_shapes if n != "llama-3.2-1b"]

import torch  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM)

torch.set_num_threads(os.cpu_count())
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
SHAPES = {
    "gpt2-124m": lambda: GPT2LMHeadModel(GPT2Config()),
    "llama-124m": lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
        num_key_value_heads=4, vocab_size=50257, max_position_embeddings=1024,
        tie_word_embeddings=True, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE,
        bos_token_id=50256, eos_token_id=50256)),
    "llama-3.2-1b": lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
        tie_word_embeddings=True, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE,
        bos_token_id=128000, eos_token_id=128001, head_dim=64)),
    # Llama 3.2's vocabulary, tied, at about 3/4 of the 1B's width: 0.5 B parameters, 2.0 GB.
    "llama-500m": lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=1536, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=24,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
        tie_word_embeddings=True, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE,
        bos_token_id=128000, eos_token_id=128001, head_dim=64)),
}


def folder(name):
    path = os.path.join(work, name)
    if not os.path.exists(os.path.join(path, "config.json")):
        torch.manual_seed(0)
        model = SHAPES[name]()
        model.save_pretrained(path, safe_serialization=True)
        del model
    return path


def wall(args):
    return measured(args)[0]


def measured(args):
    """Wall seconds and peak resident bytes of one child process."""
    t = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{args[:2]} exited {p.returncode}: {err[-2000:]}")
    return seconds, usage.ru_maxrss * 1024  # Linux reports KiB


def bw_generate(path):
    return measured([exe, "generate", f"--checkpoint={path}", "--tokenizer", "",
                     "--prompt=1 2 3 4", "--max-tokens=1", "--temperature=0"])


def hf_load_and_forward(path):
    code = ("import sys, torch, time\nfrom transformers import AutoModelForCausalLM\n"
            f"torch.set_num_threads({os.cpu_count()})\n"
            f"m = AutoModelForCausalLM.from_pretrained({path!r}, dtype=torch.float32)\n"
            "with torch.no_grad(): m(torch.tensor([[1, 2, 3, 4]]))\n")
    return measured([sys.executable, "-c", code])


def fp32_bytes(path):
    """4 bytes for every element of every tensor the folder stores."""
    import glob
    import math
    total = 0
    for f in glob.glob(os.path.join(path, "*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        total += sum(4 * math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def tokens_file(vocab):
    path = os.path.join(work, "tokens.bin")
    if not os.path.exists(path):
        import random
        import struct
        rng = random.Random(1)
        n = 200_000
        with open(path, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack(f"<{n}H", *[rng.randrange(vocab) for _ in range(n)]))
    return path


def train(out, model_args, n_steps):
    args = [exe, "train", "--quiet", f"--data.path={tokens_file(50257)}", "--devices=1",
            f"--model.seq_len={seq}", "--pipeline.microbatches=2", "--pipeline.microbatch_size=2",
            f"--train.steps={n_steps}", "--train.sample_tokens=0", "--train.precision=fp32",
            "--elastic.step_timeout_s=1200", f"--train.out_dir={out}"] + model_args
    total = wall(args)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    step_s = [r["step_s"] for r in rows if "step_s" in r]
    return total, step_s


rows = []
print(f"work folder {work}; {os.cpu_count()} cores; seq {seq}, 2 x 2 samples a step")
for name in load_shapes:
    path = folder(name)
    bw_runs, hf_runs = [], []
    for _ in range(repeat):  # alternating, so both see the same page cache and machine load
        bw_runs.append(bw_generate(path))
        hf_runs.append(hf_load_and_forward(path))
    bw_s, hf_s = min(r[0] for r in bw_runs), min(r[0] for r in hf_runs)
    bw_rss, hf_rss = max(r[1] for r in bw_runs), max(r[1] for r in hf_runs)
    model = fp32_bytes(path)
    rows.append(f"load {name:13s} fp32 {model / 2**30:5.2f} GiB   time: breakwater generate "
                f"{bw_s:6.2f} s, transformers from_pretrained + forward {hf_s:6.2f} s, ratio "
                f"{bw_s / hf_s:4.2f}   peak RSS: breakwater {bw_rss / 2**30:5.2f} GiB "
                f"({bw_rss / model:4.2f} x fp32), transformers {hf_rss / 2**30:5.2f} GiB "
                f"({hf_rss / model:4.2f} x fp32)")
    print(rows[-1], flush=True)
if "--load-only" in flags:
    sys.exit(0)

seeded = train(os.path.join(work, "seeded"), ["--model.family=gpt2", "--model.name=124m"], 1)
imported = train(os.path.join(work, "imported"),
                 [f"--model.init_from={folder('gpt2-124m')}"], 1)
rows.append(f"build gpt2-124m  seeded: run {seeded[0]:6.2f} s, first step {seeded[1][0]:6.2f} s"
            f"   imported: run {imported[0]:6.2f} s, first step {imported[1][0]:6.2f} s")
print(rows[-1], flush=True)

medians = {}
for name in ["gpt2-124m", "llama-124m"]:
    _, step_s = train(os.path.join(work, f"step-{name}"), [f"--model.init_from={folder(name)}"],
                      steps)
    medians[name] = statistics.median(step_s[1:] or step_s)
    params = sum(p.numel() for p in SHAPES[name]().parameters()) / 1e6
    rows.append(f"step  {name:13s} {params:6.1f} M parameters  median step {medians[name]:6.3f} s")
    print(rows[-1], flush=True)
print(f"step  llama-124m / gpt2-124m = {medians['llama-124m'] / medians['gpt2-124m']:.2f}")
