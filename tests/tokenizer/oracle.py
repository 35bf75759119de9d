#!/usr/bin/env python3
"""The reference side of the tokenizer tests: Hugging Face `tokenizers` from the package index.

    oracle.py build OUT      a seeded corpus of varied text (>= 10 MB: many scripts, whitespace
                             runs, digit runs, contractions, emoji and ZWJ sequences, combining
                             marks, added and special tokens, invalid UTF-8, every code point),
                             byte-level BPE tokenizers trained on part of it with GPT-2's and
                             Llama 3's pre-tokenizers, and their ids and decodings of all of it
    oracle.py shards TOKENIZER OUT SHARD_TOKENS VAL_DOCS DOC_TOKEN INPUT...
                             llm.c .bin shards of the documents of INPUT (text files: one
                             document each; .jsonl: field "text" of each line), each document
                             after DOC_TOKEN: the reference for `breakwater data prepare`
    oracle.py encode TOKENIZER DOCS OUT
                             the ids of each document of DOCS (corpus.bin format) under the
                             tokenizer.json TOKENIZER, without special tokens, into OUT (ids)

File formats (little-endian): corpus.bin is "BWCORPUS", u32 count, then per document u32 length
and its bytes; an ids file is u32 count, then per document u32 n and n u32 ids; a text file is
the same as corpus.bin. Invalid UTF-8 reaches `tokenizers` as bytes.decode("utf-8", "replace"),
the documented policy of the C++ encoder (docs/tokenizer.md).
"""
import json
import os
import random
import struct
import sys
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from tokenizers import processors, trainers

GPT2_PATTERN = None  # ByteLevel(use_regex=True) has it built in
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                 "<|end_header_id|>"] + ["<|reserved_special_token_%d|>" % i for i in range(6)]
# Non-special added tokens: normalized (second pass), with lstrip, rstrip and single_word, and
# one that is a prefix of a special token (the special pass comes first).
LLAMA_ADDED = [AddedToken("<tag>", lstrip=True), AddedToken("</tag>", rstrip=True),
               AddedToken("[MASK]", single_word=True, normalized=False),
               AddedToken("<|begin", normalized=True), AddedToken("zq", single_word=True),
               AddedToken("@@", lstrip=True, rstrip=True, normalized=False)]
ALL_ADDED_TEXT = LLAMA_SPECIAL + ["<|endoftext|>", "<tag>", "</tag>", "[MASK]", "<|begin", "zq",
                                  "@@", "<|endoftext", "<|eot_id", "<|", "|>", "<tag"]

# ---------------------------------------------------------------------------------------------
# The corpus

SCRIPTS = {  # (first, last) code point blocks of letters of many scripts
    "latin": [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F), (0x180, 0x24F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9), (0x1F00, 0x1FFC)],
    "cyrillic": [(0x410, 0x44F), (0x400, 0x40F), (0x450, 0x45F), (0x460, 0x481)],
    "armenian": [(0x531, 0x556), (0x561, 0x587)],
    "hebrew": [(0x5D0, 0x5EA), (0x591, 0x5C7)],
    "arabic": [(0x621, 0x64A), (0x660, 0x669), (0x64B, 0x65F), (0x671, 0x6D3)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F)],
    "bengali": [(0x985, 0x9B9), (0x9BE, 0x9CD), (0x9E6, 0x9F9)],
    "tamil": [(0xB85, 0xBB9), (0xBBE, 0xBCD), (0xBE6, 0xBFA)],
    "thai": [(0xE01, 0xE30), (0xE31, 0xE3A), (0xE40, 0xE4E), (0xE50, 0xE59)],
    "georgian": [(0x10D0, 0x10FA)],
    "ethiopic": [(0x1200, 0x1248)],
    "hangul": [(0xAC00, 0xD7A3), (0x1100, 0x11FF)],
    "kana": [(0x3041, 0x3096), (0x30A1, 0x30FA), (0xFF66, 0xFF9D)],
    "cjk": [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF)],
    "tibetan": [(0xF40, 0xF6C), (0xF71, 0xF84)],
    "mongolian": [(0x1820, 0x1878)],
    "cherokee": [(0x13A0, 0x13F5)],
    "runic": [(0x16A0, 0x16EA)],
    "math": [(0x1D400, 0x1D7FF)],
    "fullwidth": [(0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0xFF10, 0xFF19)],
}
WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have "
         "an they which one you were her all she there would their we him been has when who will "
         "more no if out so said what up its about into than them can only other new some could "
         "time these two may then do first any my now such like our over man me even most made "
         "after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still "
         "own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take "
         "three naïve café résumé coöperate Straße façade jalapeño").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u3000", "\u2028", "\u2029",
          "\x0b", "\x0c", "\u0085", "\u180e", "\u200b", "\u2009", "\u202f", "\u205f", "\u1680",
          "\x1c", "\x1f", " \n", "\t\t", "    ", "\n \n"]
EMOJI = ["😀", "😂", "🥲", "❤️", "👍", "👍🏽", "👩🏿‍🔬", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "#️⃣",
         "🧑‍🤝‍🧑", "👁️‍🗨️", "🐻‍❄️", "😶‍🌫️", "✋🏻", "🫠", "🪿", "☕", "⚽", "✈️", "🧔‍♀️", "💁‍♂️"]
PUNCT = list(".,;:!?-—–()[]{}\"'`~@#$%^&*_+=|\\/<>«»„“”‘’…·•¡¿§¶©®™°±×÷")


def pick(rng, block_list):
    a, b = rng.choice(block_list)
    return chr(rng.randint(a, b))


def script_word(rng, script):
    n = rng.randint(1, 12)
    return "".join(pick(rng, SCRIPTS[script]) for _ in range(n))


def number(rng):
    kind = rng.random()
    if kind < 0.4:
        return str(rng.randint(0, 10 ** rng.randint(1, 6)))
    if kind < 0.55:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(7, 60)))
    if kind < 0.7:
        return "%d.%0*d" % (rng.randint(0, 9999), rng.randint(1, 4), rng.randint(0, 999))
    if kind < 0.8:
        return "%d,%03d,%03d" % (rng.randint(1, 999), rng.randint(0, 999), rng.randint(0, 999))
    if kind < 0.9:  # non-ASCII digits and numerals
        return "".join(chr(rng.choice([0x660, 0x966, 0x9E6, 0xFF10, 0x1D7CE, 0xE50]) +
                           rng.randint(0, 9)) for _ in range(rng.randint(1, 8)))
    return rng.choice(["½", "²", "Ⅻ", "①", "⅔", "٣", "𝟗", "¼"]) * rng.randint(1, 3)


def contraction(rng):
    c = rng.choice(CONTRACTIONS)
    r = rng.random()
    if r < 0.3:
        c = c.upper()
    elif r < 0.4:
        c = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in c)
    elif r < 0.45:
        c = c.replace("'", "’")
    elif r < 0.5:
        c = "'ſ" if c == "'s" else c  # long s folds to s under (?i)
    return c


def prose(rng, n_words):
    out = []
    for i in range(n_words):
        r = rng.random()
        if r < 0.6:
            w = rng.choice(WORDS)
            if rng.random() < 0.15:
                w = w.capitalize()
            if rng.random() < 0.03:
                w = w.upper()
        elif r < 0.7:
            w = rng.choice(WORDS) + contraction(rng)
        elif r < 0.78:
            w = number(rng)
        elif r < 0.86:
            w = script_word(rng, rng.choice(list(SCRIPTS)))
        elif r < 0.9:
            w = rng.choice(EMOJI)
        elif r < 0.95:
            w = "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
        else:
            w = contraction(rng)
        out.append(w)
        out.append(rng.choice(SPACES) if rng.random() < 0.1 else " ")
        if rng.random() < 0.05:
            out.append(rng.choice(".!?") + rng.choice([" ", "\n", "\n\n", "\r\n"]))
    return "".join(out)


def multiscript(rng, n_words):
    script = rng.choice(list(SCRIPTS))
    out = []
    for _ in range(n_words):
        if rng.random() < 0.1:
            script = rng.choice(list(SCRIPTS))
        out.append(script_word(rng, script))
        out.append(rng.choice([" ", " ", " ", "", "、", "。", ", ", "\n", "؟ ", "। "]))
    return "".join(out)


def whitespace(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.4:
            out.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 30))))
        elif r < 0.5:
            out.append(rng.choice([" ", "\t", "\n", "\r\n"]) * rng.randint(30, 3000))
        elif r < 0.8:
            out.append(rng.choice(WORDS))
        else:
            out.append(rng.choice(PUNCT + ["1", "22", "a", "'s", "é"]))
    return "".join(out)


def emoji(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.5:
            out.append(rng.choice(EMOJI))
        elif r < 0.7:  # a random ZWJ sequence with skin tones and variation selectors
            parts = [chr(rng.randint(0x1F466, 0x1F469)) + (chr(rng.randint(0x1F3FB, 0x1F3FF))
                                                        if rng.random() < 0.5 else "")
                     for _ in range(rng.randint(2, 5))]
            out.append("\u200d".join(parts) + ("\ufe0f" if rng.random() < 0.3 else ""))
        elif r < 0.8:
            out.append(chr(rng.randint(0x1F1E6, 0x1F1FF)) * rng.randint(1, 3))
        else:
            out.append(rng.choice(WORDS + [" ", "\n", "!", "1"]))
        if rng.random() < 0.3:
            out.append(" ")
    return "".join(out)


def combining(rng, n):
    out = []
    for _ in range(n):
        base = rng.choice(["a", "e", "o", "n", "ا", "क", "ก", "\u1100", " ", "1", "'", "x"])
        marks = "".join(chr(rng.choice([rng.randint(0x300, 0x36F), rng.randint(0x1AB0, 0x1ABE),
                                        rng.randint(0x20D0, 0x20F0), 0x94D, 0xE48, 0x1161,
                                        0x11A8, 0x5B4, 0x64E]))
                        for _ in range(rng.randint(0, 8)))
        out.append(base + marks)
        if rng.random() < 0.3:
            out.append(rng.choice([" ", "  ", "\n", "s", "'s"]))
    return "".join(out)


def specials(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            out.append(rng.choice(ALL_ADDED_TEXT))
        elif r < 0.5:
            out.append(rng.choice([" ", "  ", "\t", "\n", " \n "]))
        elif r < 0.8:
            out.append(rng.choice(WORDS))
        else:
            out.append(rng.choice(PUNCT + ["é", "中", "1", "'s"]))
    return "".join(out)


def code(rng, n_lines):
    lines = []
    for _ in range(n_lines):
        indent = rng.choice(["", "    ", "        ", "\t", "\t\t", "  "])
        r = rng.random()
        if r < 0.3:
            lines.append("%sdef %s_%d(x, y=%d):" % (indent, rng.choice(WORDS), rng.randint(0, 99),
                                                    rng.randint(0, 1000)))
        elif r < 0.6:
            lines.append("%sif (a[%d] != b->%s && c <= 0x%X) { return \"%s\"; }" % (
                indent, rng.randint(0, 9), rng.choice(WORDS), rng.randint(0, 65535),
                rng.choice(WORDS)))
        elif r < 0.8:
            lines.append("%s# %s's %s -- %s" % (indent, rng.choice(WORDS), rng.choice(WORDS),
                                                prose(rng, 5)))
        else:
            lines.append("%s<div class=\"%s\">%s</div>" % (indent, rng.choice(WORDS),
                                                           rng.choice(WORDS)))
    return rng.choice(["\n", "\r\n"]).join(lines)


def random_codepoints(rng, n):
    out = []
    for _ in range(n):
        c = rng.choice([rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF),
                        rng.randint(0x10000, 0x10FFFF), rng.randint(0x20, 0x7E)])
        if 0xD800 <= c < 0xE000:
            c = 0xFFFD
        out.append(chr(c))
        if rng.random() < 0.2:
            out.append(rng.choice([" ", "a", "1", "\n", "'s"]))
    return "".join(out)


def long_runs(rng):
    r = rng.random()
    if r < 0.25:
        return rng.choice(WORDS) * rng.randint(1000, 20000)  # one long word
    if r < 0.5:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1000, 50000)))
    if r < 0.75:
        return " " * rng.randint(1000, 50000) + "x" + "\n" * rng.randint(100, 5000)
    return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1000, 20000)))


def invalid_utf8(rng, n):
    """Bytes: valid text with ill-formed sequences of every kind."""
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80",
           b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xe2\x82",
           b"\xf0\x9f\x98", b"\xf0\x9f", b"\xc3", b"\xe2", b"\xf8\x88\x80\x80\x80",
           b"\xc3\x28", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc", b"\xef\xbb\xbf"]
    out = bytearray()
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            out += rng.choice(bad)
        elif r < 0.4:
            out += bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 10)))
        else:
            out += (rng.choice(WORDS + EMOJI + ["é", "中文", "'s", " ", "\n", "1234"])).encode()
        if rng.random() < 0.3:
            out += b" "
    return bytes(out)


def all_codepoints(rng):
    """Every code point of planes 0-3 and 14-16 but the surrogates, and every 64th of the
    unassigned planes 4-13, each in a random short context (words stay short), in documents of
    5000 code points."""
    docs, cur = [], []
    contexts = [" %s", "%s ", "1%s ", "a%s ", "'%s ", "%s's ", "%s%s ", "\n%s "]
    for c in range(0x80, 0x110000):
        if 0xD800 <= c < 0xE000 or (0x40000 <= c < 0xE0000 and c % 64):
            continue
        cur.append(rng.choice(contexts).replace("%s", chr(c)))
        if len(cur) == 5000:
            docs.append("".join(cur).encode())
            cur = []
    docs.append("".join(cur).encode())
    return docs


def corpus(seed=20240520):
    rng = random.Random(seed)
    docs = []
    kinds = [lambda: prose(rng, rng.randint(3, 400)),
             lambda: multiscript(rng, rng.randint(3, 200)),
             lambda: whitespace(rng, rng.randint(3, 80)),
             lambda: emoji(rng, rng.randint(3, 100)),
             lambda: combining(rng, rng.randint(3, 150)),
             lambda: specials(rng, rng.randint(3, 100)),
             lambda: code(rng, rng.randint(2, 60)),
             lambda: random_codepoints(rng, rng.randint(3, 200))]
    total = 0
    while total < 8_000_000:
        if rng.random() < 0.0008:
            d = long_runs(rng).encode()
        elif rng.random() < 0.06:
            d = invalid_utf8(rng, rng.randint(3, 200))
        else:
            d = rng.choice(kinds)().encode()
        if rng.random() < 0.05:  # document edges: leading and trailing whitespace, empty
            d = rng.choice([b"", b" ", b"\n", b"\r\n", b"  "]) + d + rng.choice([b"", b" ", b"\n"])
        if rng.random() < 0.002:
            d = b""
        docs.append(d)
        total += len(d)
    docs += all_codepoints(rng)
    return docs


# ---------------------------------------------------------------------------------------------
# Files

def write_docs(path, docs):
    with open(path, "wb") as f:
        f.write(b"BWCORPUS" + struct.pack("<I", len(docs)))
        for d in docs:
            f.write(struct.pack("<I", len(d)) + d)


def write_ids(path, encodings):
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(encodings)))
        for ids in encodings:
            f.write(struct.pack("<I", len(ids)) + struct.pack("<%dI" % len(ids), *ids))


def texts(docs):
    return [d.decode("utf-8", "replace") for d in docs]


def train(kind, training_docs, vocab_size):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        special = ["<|endoftext|>"]
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special = LLAMA_SPECIAL
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_docs, trainer)
    if kind == "gpt2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        tok.add_tokens(LLAMA_ADDED)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def variant(src, dst, edit):
    """A copy of tokenizer.json `src` changed by edit(json) (the model stays trained)."""
    with open(src) as f:
        j = json.load(f)
    edit(j)
    with open(dst, "w") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_file(dst)


def wide_ids(j):
    """Every model id + 70000, so that the vocabulary needs uint32 (llm.c version 2)."""
    shift = 70000
    j["model"]["vocab"] = {k: v + shift for k, v in j["model"]["vocab"].items()}
    for t in j["added_tokens"]:
        t["id"] = j["model"]["vocab"].get(t["content"], t["id"])
    for proc in j["post_processor"]["processors"]:
        if proc["type"] == "TemplateProcessing":
            for st in proc["special_tokens"].values():
                st["ids"] = [i + shift for i in st["ids"]]


def build(out):
    os.makedirs(out, exist_ok=True)
    docs = corpus()
    write_docs(os.path.join(out, "corpus.bin"), docs)
    text = texts(docs)
    valid = [t for d, t in zip(docs, text) if len(d) < 100_000]
    training = valid[: len(valid) // 3]
    subset = text[:3000]
    for kind, vocab in [("gpt2", 6000), ("llama3", 9000)]:
        tok = train(kind, training, vocab)
        path = os.path.join(out, kind + ".json")
        tok.save(path)
        tok = Tokenizer.from_file(path)  # encode with what was saved, as the C++ side reads it
        encs = tok.encode_batch(text, add_special_tokens=False)
        ids = [e.ids for e in encs]
        write_ids(os.path.join(out, kind + ".ids"), ids)
        with_special = tok.encode_batch(subset, add_special_tokens=True)
        write_ids(os.path.join(out, kind + ".special.ids"), [e.ids for e in with_special])
        write_docs(os.path.join(out, kind + ".decoded"),
                   [s.encode() for s in tok.decode_batch(ids[:3000], skip_special_tokens=False)])
        write_docs(os.path.join(out, kind + ".decoded_skip"),
                   [s.encode() for s in tok.decode_batch(ids[:3000], skip_special_tokens=True)])
    # Variants on a subset: the same models with other options.
    edits = {
        "gpt2_prefix": ("gpt2", lambda j: j["pre_tokenizer"].update(add_prefix_space=True)),
        "llama3_merges": ("llama3", lambda j: j["model"].update(ignore_merges=False)),
        "llama3_wide": ("llama3", wide_ids),
    }
    for name, (base, edit) in edits.items():
        tok = variant(os.path.join(out, base + ".json"), os.path.join(out, name + ".json"), edit)
        encs = tok.encode_batch(subset, add_special_tokens=False)
        write_ids(os.path.join(out, name + ".ids"), [e.ids for e in encs])
    with open(os.path.join(out, "done"), "w") as f:
        f.write("%d documents, %d bytes\n" % (len(docs), sum(len(d) for d in docs)))


# ---------------------------------------------------------------------------------------------
# Reference shards for `breakwater data prepare`

def documents(paths):
    for p in paths:
        if p.endswith(".jsonl"):
            with open(p, "rb") as f:
                for line in f:
                    if line.strip():
                        yield json.loads(line)["text"]
        else:
            with open(p, "rb") as f:
                data = f.read()
            if data:
                yield data.decode("utf-8", "replace")


def shards(tokenizer, out, shard_tokens, val_docs, doc_token, inputs):
    tok = Tokenizer.from_file(tokenizer)
    os.makedirs(out, exist_ok=True)
    big = tok.get_vocab_size(with_added_tokens=True) > 65536 or max(tok.get_vocab().values()) >= 65536
    fmt, version = ("<%dI", 2) if big else ("<%dH", 1)
    docs = list(documents(inputs))
    encs = tok.encode_batch(docs, add_special_tokens=False)
    for split, chosen in [("val", encs[:val_docs]), ("train", encs[val_docs:])]:
        stream = []
        for e in chosen:
            stream.append(doc_token)
            stream.extend(e.ids)
        for k in range(0, len(stream), shard_tokens):
            part = stream[k:k + shard_tokens]
            header = struct.pack("<3i", 20240520, version, len(part)) + b"\0" * (1024 - 12)
            with open(os.path.join(out, "ref_%s_%06d.bin" % (split, k // shard_tokens)), "wb") as f:
                f.write(header + struct.pack(fmt % len(part), *part))


def read_docs(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"BWCORPUS", path
    (n,) = struct.unpack_from("<I", data, 8)
    at, docs = 12, []
    for _ in range(n):
        (length,) = struct.unpack_from("<I", data, at)
        docs.append(data[at + 4:at + 4 + length])
        at += 4 + length
    return docs


def encode(tokenizer, docs_path, out):
    tok = Tokenizer.from_file(tokenizer)
    encs = tok.encode_batch(texts(read_docs(docs_path)), add_special_tokens=False)
    write_ids(out, [e.ids for e in encs])


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) >= 8 and sys.argv[1] == "shards":
        shards(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
               sys.argv[7:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
