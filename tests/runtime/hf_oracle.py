"""transformers as the oracle for breakwater's Hugging Face models (tests/runtime/hf_test.cc).

  hf_oracle.py make DIR FAMILY TIED KV_HEADS SEED [VOCAB] [POSITIONS] [SCALE] [EMBED_SCALE]
                  [DTYPE]
                                                    random model saved by save_pretrained, plus
                                                    DIR/oracle.safetensors: tokens, logits, loss
                                                    (gpt2: POSITIONS learned positions, 12;
                                                    matrices times SCALE, 1: larger weights give
                                                    varied greedy output; the embeddings times
                                                    EMBED_SCALE, default SCALE; DTYPE float32,
                                                    bfloat16 or float16: the weights are saved in
                                                    it, and the oracle's logits are those of the
                                                    saved weights computed in float32)
  hf_oracle.py run DIR TOKENS OUT                   AutoModelForCausalLM.from_pretrained(DIR):
                                                    logits of TOKENS' "tokens" into OUT; exit 3
                                                    on a missing or unexpected key
  hf_oracle.py generate DIR IDS N OUT               greedy model.generate(do_sample=False) of N
                                                    new tokens after the comma-separated IDS;
                                                    the new ids, space-separated, into OUT
Exit 77 when transformers is not importable (the test skips). The tests run it through
oracle_server.py beside it, which imports this file once and calls main(argv) in a fork per
request.
"""
import sys

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)


def make(out, family, tied, kv, seed, vocab, positions, scale, embed_scale, dtype):
    torch.manual_seed(seed)
    seq = 12
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=32, n_layer=2,
                                      n_head=4, tie_word_embeddings=tied)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=kv, max_position_embeddings=64,
            rms_norm_eps=1e-5, tie_word_embeddings=tied,
            rope_scaling={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8})
        model = transformers.LlamaForCausalLM(cfg)
    # Norm weights and biases away from 1 and 0, so a mixed-up name cannot pass.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
            elif name.endswith(("embed_tokens.weight", "wte.weight", "wpe.weight")):
                p.mul_(embed_scale)
            else:
                p.mul_(scale)
    model.eval()
    if dtype != "float32":
        # Saved in the source dtype (config.json's torch_dtype says it); the oracle then runs the
        # rounded weights in float32, as breakwater reads them.
        model = model.to(getattr(torch, dtype))
        model.save_pretrained(out)
        model = model.float()
    else:
        model.save_pretrained(out)
    tokens = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        res = model(tokens, labels=tokens)
    # breakwater's loss is next-token cross-entropy with targets given; transformers shifts
    # labels inside, so the oracle loss is over logits[:, :-1] against tokens[:, 1:].
    logits = res.logits.float()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab),
                                             tokens[:, 1:].reshape(-1))
    save_file({"tokens": tokens, "logits": logits.contiguous(), "loss": loss.reshape(1)},
              f"{out}/oracle.safetensors")


def run(folder, tokens_file, out):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, output_loading_info=True, torch_dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys",
                                                        "mismatched_keys")}
    if bad:
        print(f"loading info: {bad}")
        sys.exit(3)
    model.eval()
    tokens = load_file(tokens_file)["tokens"]
    with torch.no_grad():
        logits = model(tokens).logits.float()
    save_file({"logits": logits.contiguous()}, out)


def generate(folder, ids, n, out):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.eval()
    prompt = torch.tensor([[int(t) for t in ids.split(",")]])
    with torch.no_grad():
        res = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                             do_sample=False, pad_token_id=0)
    new = res[0, prompt.shape[1]:].tolist()
    with open(out, "w") as f:
        f.write(" ".join(str(t) for t in new) + "\n")


def main(argv):
    if argv[1] == "make":
        make(argv[2], argv[3], argv[4] == "1", int(argv[5]), int(argv[6]),
             int(argv[7]) if len(argv) > 7 else 96,
             int(argv[8]) if len(argv) > 8 else 12,
             float(argv[9]) if len(argv) > 9 else 1.0,
             float(argv[10]) if len(argv) > 10 else (float(argv[9]) if len(argv) > 9 else 1.0),
             argv[11] if len(argv) > 11 else "float32")
    elif argv[1] == "generate":
        generate(argv[2], argv[3], int(argv[4]), argv[5])
    else:
        run(argv[2], argv[3], argv[4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
