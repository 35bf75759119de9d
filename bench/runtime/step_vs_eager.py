#!/usr/bin/env python3
"""One training step of `small` and `gpt2-124m` in one process: breakwater (`train --devices 1`)
against PyTorch eager in Python on the same model (breakwater's GPT: learned positions, pre-LN
blocks with fused causal attention and exact GELU, untied head), the same global batch
(microbatches x microbatch_size sequences, gradients accumulated), AdamW and clipping, the same
intra-op threads, fp32 and bf16 (torch.autocast on the CPU). Both run side by side in this one
invocation; the table gives medians over the timed steps (the first step is left out) and the
ratio eager / breakwater (> 1: breakwater is faster).

On a GPU (--device cuda): both on cuda:0, timed with CUDA synchronisation, and a third column
for the same eager model under torch.compile; the gpt2-124m shape is then seq 1024 with 8
microbatches of 4 (llm.c's and nanoGPT's per-GPU batch), and the table adds tokens/s.

Usage: .venv/bin/python bench/runtime/step_vs_eager.py [--build build] [--steps 6] [--threads 1]
       python3 bench/runtime/step_vs_eager.py --device cuda --models gpt2-124m --precisions bf16
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

import torch
import torch.nn.functional as F

SHAPES = {  # name: d_model, heads, blocks, seq, microbatches, microbatch_size
    "small": (128, 4, 6, 64, 8, 4),
    "gpt2-124m": (768, 12, 12, 1024, 1, 2),
}
GPU_SHAPES = {"small": (128, 4, 6, 64, 8, 4), "gpt2-124m": (768, 12, 12, 1024, 8, 4)}


class Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, vocab, d, h, n, seq):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(Block(d, h) for _ in range(n))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def eager_step_ms(name, precision, steps, threads, vocab=256, device="cpu", compile=False):
    torch.set_num_threads(threads)
    d, h, n, seq, mbs, mb = (GPU_SHAPES if device == "cuda" else SHAPES)[name]
    torch.manual_seed(0)
    model = Gpt(vocab, d, h, n, seq).to(device)
    forward = torch.compile(model) if compile else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=3e-3, betas=(0.9, 0.95))
    data = torch.randint(0, vocab, (steps, mbs, mb, seq + 1), device=device)
    times = []
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for s in range(steps):
        sync()
        t0 = time.perf_counter()
        for m in range(mbs):
            x, y = data[s, m, :, :-1], data[s, m, :, 1:]
            with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
                logits = forward(x)
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1)) / mbs
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times[2 if compile else 1:])


def breakwater_step_ms(build, name, precision, steps, threads, device="cpu"):
    _, _, _, _, mbs, mb = (GPU_SHAPES if device == "cuda" else SHAPES)[name]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([os.path.join(build, "breakwater"), "train", "--devices=1", "--quiet",
                        f"--cluster.device={device}",
                        f"--model.name={name}", f"--train.precision={precision}",
                        f"--train.steps={steps}", f"--train.threads_per_worker={threads}",
                        f"--pipeline.microbatches={mbs}", f"--pipeline.microbatch_size={mb}",
                        "--train.sample_tokens=0", f"--train.out_dir={out}"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if '"step"' in line]
        return statistics.median(r["step_s"] * 1000 for r in rows[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="small,gpt2-124m")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    gpu = a.device == "cuda"
    head = f"{'model':<11} {'precision':<9} {'breakwater ms':>14} {'eager ms':>10} {'eager/bw':>9}"
    print(head + (f" {'compile ms':>11} {'compile/bw':>11} {'bw tokens/s':>12}" if gpu else ""))
    for name in a.models.split(","):
        for precision in a.precisions.split(","):
            bw = breakwater_step_ms(a.build, name, precision, a.steps, a.threads, a.device)
            eager = eager_step_ms(name, precision, a.steps, a.threads, device=a.device)
            row = f"{name:<11} {precision:<9} {bw:>14.1f} {eager:>10.1f} {eager / bw:>9.2f}"
            if gpu:
                compiled = eager_step_ms(name, precision, a.steps + 2, a.threads, device="cuda",
                                         compile=True)
                _, _, _, seq, mbs, mb = GPU_SHAPES[name]
                row += f" {compiled:>11.1f} {compiled / bw:>11.2f} {seq * mbs * mb / bw * 1e3:>12.0f}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
