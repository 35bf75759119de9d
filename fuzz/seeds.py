#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (docs/fuzzing.md): the inputs the tests and examples already
use, gathered from the repository, plus a few small files made here with the reference libraries
(safetensors, tokenizers, numpy). Usage: seeds.py OUT_DIR; writes OUT_DIR/<target>/<name>.
Nothing is committed: the corpora live in the build directory."""
import glob
import io
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = sys.argv[1]


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def copy(target, pattern):
    for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
        with open(path, "rb") as f:
            put(target, os.path.basename(path), f.read())


# Run config: the example, small files and overrides as the tests give them.
copy("run_config", "examples/*.toml")
put("run_config", "overrides", "[train]\nsteps = 2\n%%\npipeline.schedule=1f1b\n%%\n"
    "pipeline.pipelines=[1,3]\n%%\ntrain.lr=1e-3\n")
put("run_config", "sidecar_config", "[pipeline]\nmicrobatches = 8\nmicrobatch_size = 4\n"
    "[data]\nseed = 42\n")
put("run_config", "stages", "[pipeline]\npipelines = [3, 3]\nstage_devices = [2, 1, 1, 1, 1]\n"
    "microbatch_size = 4\n[cluster]\nnodes = 6\n")

copy("schedule_csv", "tests/golden/**/*.csv")

for path in sorted(glob.glob(os.path.join(ROOT, "examples/*.json"))):
    with open(path, "rb") as f:
        data = f.read()
    put("cluster_json" if "cluster" in os.path.basename(path) else "profile_json",
        os.path.basename(path), data)

# Safetensors: files the reference library writes, and the layout breakwater writes.
try:
    import numpy as np
    from safetensors.numpy import save
    put("safetensors_header", "two.safetensors",
        save({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.int64)},
             metadata={"crc32c": "00000000"}))
    put("safetensors_header", "empty.safetensors", save({}))
    put("safetensors_header", "bf16.safetensors", save({"x": np.zeros((2, 2), np.float16)}))
except ImportError as e:
    print(f"seeds: no safetensors seeds ({e})", file=sys.stderr)

sidecar = {"format": "breakwater-checkpoint", "version": 2, "step": 4, "next_sample": 128,
           "weights": "model.safetensors", "optimizer": "optimizer.safetensors",
           "config": "[pipeline]\nmicrobatches = 8\n", "extra": {"generation": 0},
           "files": {"model.safetensors": {"bytes": 1, "crc32c": "00000000"},
                     "optimizer.safetensors": {"bytes": 1, "crc32c": "0a0b0c0d"}}}
put("sidecar", "v2.json", json.dumps(sidecar, indent=2))
v1 = dict(sidecar, version=1)
del v1["files"]
put("sidecar", "v1.json", json.dumps(v1))

# llm.c .bin: version 1 (uint16 GPT-2 ids) and 2 (uint32).
for version, fmt, ids in ((1, "<H", [50256, 1, 2, 3]), (2, "<I", [128000, 5, 6])):
    header = struct.pack("<256i", 20240520, version, len(ids), *([0] * 253))
    put("token_bin", f"v{version}.bin", header + b"".join(struct.pack(fmt, t) for t in ids))

put("hostfile", "two", "node-a slots=2\nnode-b slots=2  # second\n")
put("hostfile", "comments", "# hosts\n\n10.0.0.1\n10.0.0.2 slots=1\n")

# tokenizer.json: a tiny byte-level BPE (as the hostile suite's), and one trained here.
put("tokenizer_json", "tiny.json", json.dumps({
    "version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2,
                                                           "<|endoftext|>": 3},
                                "merges": [["a", "b"]]},
    "added_tokens": [{"id": 3, "content": "<|endoftext|>", "special": True}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
    "decoder": {"type": "ByteLevel"}}) + "\n%%\nab ba<|endoftext|>ab")
try:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20 +
                            ["héllo wörld, 123 ünïcode ✓"] * 5, trainer)
    put("tokenizer_json", "trained.json", tok.to_str() + "\n%%\nthe lazy fox, héllo ✓ 42")
except ImportError as e:
    print(f"seeds: no trained tokenizer seed ({e})", file=sys.stderr)

# Store messages (elastic/messages.h): the first byte picks the message, as the workers and
# agents write them (agent.cc, worker_main.cc, runtime/step_report.cc).
messages = [
    {"worker": 3, "status": 137, "incarnation": 1},
    {"kind": "config", "message": "data path 'x' is not a regular file"},
    {"regroup_ms": 12.5, "transfer_ms": 3.0, "transfer_bytes": 4096},
    {"steps_done": 4, "layers": [0, 1], "ranges": [[0, 0, 1024], [1, 0, 2048]]},
    {"0": ["0a0b0c0d", "01020304"], "1/0-1024": ["deadbeef", "00000000"]},
    {"step": 2, "rank": 1, "loss": None, "grad_norm": 1.5, "lr": 0.003, "step_ms": 10.0,
     "exec_ms": 8.0, "compute_ms": 6.0, "wait_ms": 1.0, "data_ms": 0.1, "post_ms": 0.1,
     "free_ms": 0.0, "gather_ms": 0.0, "reduce_ms": 0.0, "sync_ms": 1.0, "num_actions": 16,
     "peak_rss_kb": 123456, "chunk_ms": [[1, 2, 0, 0]], "samples": [0, 5, 9]},
    {"name": "node-a", "host": "10.0.0.2", "devices": 1,
     "data": {"path": "corpus.txt", "digest": "20000 tokens of vocabulary 256, CRC-32C 0a0b0c0d"},
     "launch_ms": 812.0, "proof": "ab" * 32},
]
for i, m in enumerate(messages):
    put("store_messages", f"kind{i}", bytes([i]) + json.dumps(m).encode())

# etcd's v3 JSON gateway (3.4.23): replies as the control store's etcd backend receives them,
# under the run prefix "bw/run/" (etcd_json_fuzz.cc: the first byte picks the decoder).
def b64(text):
    import base64
    return base64.b64encode(text.encode()).decode()


header = {"cluster_id": "324952591200643719", "member_id": "3319814642761637952",
          "revision": "5", "raft_term": "2"}
kv = {"key": b64("bw/run/g0/decision/3"), "create_revision": "4", "mod_revision": "5",
      "version": "2", "value": b64("commit"), "lease": "2324035817217807120"}
etcd_replies = [
    (0, {"header": header, "kvs": [kv], "count": "1"}),
    (0, {"header": header}),
    (1, {"header": header, "succeeded": True, "responses": [
        {"response_put": {"header": {"revision": "5"}}},
        {"response_range": {"header": {"revision": "5"}, "kvs": [kv], "count": "1"}}]}),
    (1, {"header": header, "responses": [{"response_range": {"header": {}}}]}),
    (9, {"header": header, "succeeded": True, "responses": [{"response_txn": {
        "header": {}, "succeeded": True, "responses": [
            {"response_put": {"header": {}}}, {"response_range": {"kvs": [kv]}}]}}]}),
    (2, {"result": {"header": header, "events": [
        {"type": "DELETE", "kv": {"key": b64("bw/run/leader"), "mod_revision": "3"}},
        {"kv": kv}]}}),
    (2, {"result": {"header": header, "canceled": True, "compact_revision": "4"}}),
    (3, {"header": header, "ID": "2324035817217807113", "TTL": "2"}),
    (4, {"result": {"header": header, "ID": "123", "TTL": "5"}}),
    (5, {"etcdserver": "3.4.23", "etcdcluster": "3.4.0"}),
    (6, {"error": "etcdserver: requested lease not found",
         "message": "etcdserver: requested lease not found", "code": 5}),
    (7, {"header": header, "deleted": "1"}),
]
for i, (kind, reply) in enumerate(etcd_replies):
    put("etcd_json", f"reply{i}", bytes([kind]) + json.dumps(reply).encode())

# Hugging Face config.json: the ones transformers writes for the shapes the tests use, and the
# files of the test fixtures.
copy("hf_config", "tests/**/config.json")
try:
    from transformers import GPT2Config, LlamaConfig
    put("hf_config", "gpt2.json", GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=16,
                                             vocab_size=300).to_json_string())
    put("hf_config", "llama.json", LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=300, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    ).to_json_string())
except ImportError as e:
    print(f"seeds: no transformers config seeds ({e})", file=sys.stderr)
