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

With --hf the eager side is a Hugging Face model instead: transformers' GPT2LMHeadModel and
LlamaForCausalLM (SDPA attention, no dropout, no KV cache, tied embeddings; the Llama with
grouped-query attention, SwiGLU and RoPE), written to a folder by save_pretrained and trained by
`breakwater train --devices 1 --model.init_from=FOLDER` from the same folder: the same weights,
shapes and global batch, on the default corpus (bytes: vocabulary 256). The shapes are
d256 (d 256, 4 heads, 2 key/value heads for llama, 6 blocks, seq 256, 2 microbatches of 4) and
124m-width (gpt2-124m's width: d 768, 12 heads, 4 key/value heads for llama, --wide-blocks
blocks, seq 256, 2 microbatches of 4). The runs are interleaved, --rounds times each, in
alternating order (the machine may be shared); the table gives the median over all timed steps of
every round (not the first; for breakwater not the last either, which also writes the end-of-run
checkpoint), the ratio eager / breakwater, and breakwater's runtime overhead: the share of its
step spent outside forward/backward compute and outside gradient sync, norm and optimizer
(data, bookkeeping, freeing microbatches). Beside the wall times it gives CPU times per step
(breakwater: the process's CPU time less that of a one-step run, per extra step; eager: the
process's), which a loaded machine disturbs less. The load average is printed as it goes.

Usage: .venv/bin/python bench/runtime/step_vs_eager.py [--build build] [--steps 6] [--threads 1]
       python3 bench/runtime/step_vs_eager.py --device cuda --models gpt2-124m --precisions bf16
       .venv/bin/python bench/runtime/step_vs_eager.py --hf [--shapes d256,124m-width]
           [--families gpt2,llama] [--rounds 3] [--steps 4] [--wide-blocks 4]
           [--baseline OTHER_BUILD]  (a second breakwater, e.g. before a change, same rounds)
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


HF_SHAPES = {  # name: d_model, heads, kv_heads (llama), llama ffn width, seq, microbatches, size
    "d256": (256, 4, 2, 704, 256, 2, 4),
    "124m-width": (768, 12, 4, 2048, 256, 2, 4),
}


def hf_folder(work, family, shape, blocks):
    """A randomly initialised transformers model saved with save_pretrained; its path."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    d, h, kv, ffn, seq, _, _ = HF_SHAPES[shape]
    path = os.path.join(work, f"{family}-{shape}-{blocks}")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(0)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(
            vocab_size=256, n_positions=seq, n_embd=d, n_layer=blocks, n_head=h, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, use_cache=False,
            bos_token_id=0, eos_token_id=0))
    else:
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=256, hidden_size=d, intermediate_size=ffn, num_hidden_layers=blocks,
            num_attention_heads=h, num_key_value_heads=kv, max_position_embeddings=seq,
            rms_norm_eps=1e-5, tie_word_embeddings=True, use_cache=False, bos_token_id=0,
            eos_token_id=0))
    model.save_pretrained(path, safe_serialization=True)
    return path


def hf_eager_steps(path, shape, precision, steps, threads):
    """Per-step ms of the folder's transformers model in eager PyTorch (first step left out)."""
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    _, _, _, _, seq, mbs, mb = HF_SHAPES[shape]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.train()
    vocab = model.config.vocab_size
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=3e-3, betas=(0.9, 0.95))
    data = torch.randint(0, vocab, (steps, mbs, mb, seq + 1))
    times, cpu = [], []
    for s in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        for m in range(mbs):
            x, y = data[s, m, :, :-1], data[s, m, :, 1:]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                logits = model(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1)) / mbs
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return times[1:], cpu[1:]


def hf_breakwater_steps(build, path, shape, precision, steps, threads):
    """Per-step ms of `train --devices 1 --model.init_from` and the runtime's share of each."""
    _, _, _, _, seq, mbs, mb = HF_SHAPES[shape]

    def run(n):
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.Popen(
                [os.path.join(build, "breakwater"), "train", "--devices=1", "--quiet",
                 f"--model.init_from={path}", f"--model.seq_len={seq}",
                 f"--train.precision={precision}", f"--train.steps={n}",
                 f"--train.threads_per_worker={threads}", f"--pipeline.microbatches={mbs}",
                 f"--pipeline.microbatch_size={mb}", "--train.sample_tokens=0",
                 f"--train.out_dir={out}"], stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            if status != 0:
                raise SystemExit(f"breakwater train exited with status {status}")
            with open(os.path.join(out, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f if '"step"' in line and "step_s" in line]
        return rows, (usage.ru_utime + usage.ru_stime) * 1000

    rows, cpu_all = run(steps)
    # CPU time per step: the process's, less a one-step run's (start, load, first step).
    _, cpu_one = run(1)
    times, overhead = [], []
    # The last step also writes the end-of-run checkpoint (train.checkpoint_every = 0): left out.
    for r in rows[1:-1]:
        rank = r["ranks"][0]
        times.append(r["step_s"] * 1000)
        own = rank["step_ms"] - rank["compute_ms"] - rank["sync_ms"]
        overhead.append(own / rank["step_ms"])
    return times, overhead, (cpu_all - cpu_one) / (steps - 1)


def hf_main(a):
    import itertools
    work = a.work or tempfile.mkdtemp(prefix="bw_step_vs_eager_")
    cases = list(itertools.product(a.shapes.split(","), a.families.split(","),
                                   a.precisions.split(",")))
    bw = {c: [] for c in cases}
    eager = {c: [] for c in cases}
    own = {c: [] for c in cases}
    bw_cpu = {c: [] for c in cases}
    eager_cpu = {c: [] for c in cases}
    base = {c: [] for c in cases}
    base_cpu = {c: [] for c in cases}
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
          f"{os.cpu_count()} cores; {a.threads} thread(s); {a.rounds} rounds of {a.steps} steps, "
          f"first step of each run left out (and breakwater's last, which writes the "
          f"checkpoint); work folder {work}", flush=True)
    for rnd in range(a.rounds):
        for i, (shape, family, precision) in enumerate(cases):
            blocks = 6 if shape == "d256" else a.wide_blocks
            path = hf_folder(work, family, shape, blocks)
            order = ["bw", "eager"] + (["base"] if a.baseline else [])
            k = (rnd + i) % len(order)
            order = order[k:] + order[:k]
            for side in order:
                c = (shape, family, precision)
                if side == "base":
                    t, _, cpu = hf_breakwater_steps(a.baseline, path, shape, precision, a.steps,
                                                    a.threads)
                    base[c] += t
                    base_cpu[c].append(cpu)
                elif side == "bw":
                    t, o, cpu = hf_breakwater_steps(a.build, path, shape, precision, a.steps,
                                                    a.threads)
                    bw[c] += t
                    own[c] += o
                    bw_cpu[c].append(cpu)
                else:
                    t, cpu = hf_eager_steps(path, shape, precision, a.steps, a.threads)
                    eager[c] += t
                    eager_cpu[c] += cpu
            print(f"  round {rnd + 1}: {shape} {family} {precision}: breakwater "
                  f"{statistics.median(bw[c][-(a.steps - 1):]):.1f} ms "
                  f"(cpu {bw_cpu[c][-1]:.1f}), eager "
                  f"{statistics.median(eager[c][-(a.steps - 1):]):.1f} ms "
                  f"(cpu {statistics.median(eager_cpu[c][-(a.steps - 1):]):.1f}); load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print("wall: medians of the steps' wall times; cpu: CPU time per step (breakwater: the "
          "process's, less a one-step run's, per extra step; eager: the process's per step)")
    print(f"{'shape':<11} {'family':<7} {'precision':<9} {'bw ms':>9} {'eager ms':>9} "
          f"{'eager/bw':>9} {'bw cpu ms':>10} {'eager cpu':>10} {'cpu ratio':>10} "
          f"{'bw runtime overhead':>20}")
    for c in cases:
        b, e = statistics.median(bw[c]), statistics.median(eager[c])
        bc, ec = statistics.median(bw_cpu[c]), statistics.median(eager_cpu[c])
        print(f"{c[0]:<11} {c[1]:<7} {c[2]:<9} {b:>9.1f} {e:>9.1f} {e / b:>9.2f} "
              f"{bc:>10.1f} {ec:>10.1f} {ec / bc:>10.2f} "
              f"{100 * statistics.median(own[c]):>19.2f}%")
    if a.baseline:
        print(f"baseline {a.baseline} in the same rounds:")
        print(f"{'shape':<11} {'family':<7} {'precision':<9} {'base ms':>9} {'eager/base':>11} "
              f"{'base cpu ms':>12} {'cpu ratio':>10} {'base/bw':>8} {'base/bw cpu':>12}")
        for c in cases:
            b, e = statistics.median(base[c]), statistics.median(eager[c])
            bc, ec = statistics.median(base_cpu[c]), statistics.median(eager_cpu[c])
            print(f"{c[0]:<11} {c[1]:<7} {c[2]:<9} {b:>9.1f} {e / b:>11.2f} {bc:>12.1f} "
                  f"{ec / bc:>10.2f} {b / statistics.median(bw[c]):>8.2f} "
                  f"{bc / statistics.median(bw_cpu[c]):>12.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="small,gpt2-124m")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--hf", action="store_true", help="transformers models against init_from")
    ap.add_argument("--shapes", default="d256,124m-width")
    ap.add_argument("--families", default="gpt2,llama")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wide-blocks", type=int, default=4)
    ap.add_argument("--work", default="")
    ap.add_argument("--baseline", default="",
                    help="--hf: the build folder of another breakwater, run in the same rounds")
    a = ap.parse_args()
    if a.hf and a.steps < 3:
        ap.error("--hf needs --steps >= 3: the first step and the last (which writes the "
                 "checkpoint) are not timed")
    if a.hf:
        return hf_main(a)
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
