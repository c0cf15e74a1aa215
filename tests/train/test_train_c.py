"""test_train_c.py: models and tokenizers exported by tools/train, run by the C library.

usage: test_train_c.py TRAIN_C EDGESPEC_CLI

1. Tokenizer: a vocabulary trained on KJV text, exported as a vocabulary-only GGUF, is loaded by
   the C tokenizer (`edgespec tokenize --no-parse-special`), which must give exactly the ids of
   tools/train's encoder on held-out books and on awkward strings (spaces, tabs, newlines, digits,
   non-ASCII text that needs byte fallback, control-token text).
2. Parity: random-weight models of several shapes (GQA, untied head, partial rotary dims, LoRA),
   exported in f32, f16 and q8_0 with their Speculative Streaming adapters, run through train_c
   (CPU backend). Main-stream logits, every stream's logits and the tree-pruning decisions of a
   chain must match tools/train/model.py in float64 on the GGUF's (dequantised) weights: for each
   row, max |C - ref| / max |ref| < 1e-4.
3. The shipped models/default.gguf, default.ss.gguf and draft.gguf: the same tokenizer and parity
   checks on a held-out passage.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402
import train_c_output  # noqa: E402

testlib.tools("train", "pygguf")
import bpe     # noqa: E402
import corpus  # noqa: E402
import dump    # noqa: E402
import export  # noqa: E402
import model as M  # noqa: E402

TRAIN_C, CLI = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
TOL = 1e-4


def c_tokenize(path, text, tmp):
    f = os.path.join(tmp, "text.txt")
    with open(f, "wb") as fh:
        fh.write(text.encode("utf-8"))
    p = subprocess.run(testlib.wrap([CLI, "tokenize", "-m", path, "-f", f, "--no-parse-special"]),
                       capture_output=True, text=True)
    if p.returncode != 0:
        check(False, "edgespec tokenize failed: %s" % p.stderr.strip())
        return None
    return [int(x) for x in p.stdout.split()]


def tokenizer(tmp):
    verses = corpus.read_kjv()
    tr, va = corpus.split_books(verses)
    train_text = "\n".join(v for _, vs in tr[:8] for v in vs)
    vocab, _ = bpe.train_bpe([train_text], 1200)
    m = M.Model(M.Config(n_vocab=len(vocab), n_embd=32, n_layer=1, n_head=2, n_ff=32))
    path = os.path.join(tmp, "vocab.gguf")
    export.base_writer(m, vocab, vocab_only=True).write(path)
    texts = [corpus.book_text(vs) for _, vs in va]
    texts += ["In the beginning God created the heaven and the earth.", "", " ", "  ", "\n", "\n\n x",
              " leading space", "trailing space ", "two  spaces\tand a tab", "line\nbreaks\r\nhere",
              "Psalm 23:1-6, verse 119!", "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001f999 \u0416",
              "<s> and </s> and <unk> as text", "\u2581already escaped", "x" * 300,
              "LORD'S (Selah) -- 'quoted' \"double\""]
    n_ids = 0
    for t in texts:
        want = vocab.encode(t)  # BOS + pieces, as `edgespec tokenize` without --no-bos
        got = c_tokenize(path, t, tmp)
        n_ids += len(want)
        if got != want:
            i = next((k for k in range(min(len(got or []), len(want))) if got[k] != want[k]), None)
            check(False, "tokenize %r: C %s... != Python %s... (first difference at %s)"
                  % (t[:30], (got or [])[:10], want[:10], i))
        else:
            check(True, "")
    print("tokenizer: %d strings, %d ids agree" % (len(texts), n_ids))


def run_c(path, ss, ids, streams=0, prune=0.0):
    cmd = [TRAIN_C, path, "--threads", "2"]
    if ss:
        cmd += ["--ss", ss]
    if streams:
        cmd += ["--streams", str(streams)]
    if prune:
        cmd += ["--prune", repr(prune)]
    p = subprocess.run(testlib.wrap(cmd + [str(i) for i in ids]), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("train_c failed: %s" % p.stderr)
    return train_c_output.parse(p.stdout)


def row_err(c, ref):
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.abs(c - ref).max() / max(np.abs(ref).max(), 1e-30)) if np.all(np.isfinite(c)) else float("inf")


def randomise(m, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            scale = 1.0 / p.shape[-1] ** 0.5 if p.dim() == 2 else 0.3
            p.copy_(torch.randn(p.shape, generator=g) * scale * 1.5)
        for b in m.blocks:
            b.attn_norm.add_(1.0)
            b.ffn_norm.add_(1.0)
        m.output_norm.add_(1.0)


CONFIGS = [
    dict(n_vocab=384, n_embd=64, n_layer=3, n_head=4, n_head_kv=2, n_ff=96, n_streams=3, n_msa=2,
         lora_rank=4),
    dict(n_vocab=400, n_embd=96, n_layer=2, n_head=3, n_ff=64, n_streams=2, n_msa=1, tied=False,
         prune_layer=1, rms_eps=1e-6, rope_base=500000.0),
    dict(n_vocab=416, n_embd=64, n_layer=4, n_head=2, n_head_kv=1, n_ff=128, n_streams=4, n_msa=3,
         n_rot=16, lora_rank=2, lora_targets=("attn_v", "ffn_up"), prune_layer=0),
]


def parity(tmp):
    vocab, _ = bpe.train_bpe(["In the beginning God created the heaven and the earth."], 384)
    worst = {}
    for ci, kw in enumerate(CONFIGS):
        m = M.Model(M.Config(**kw))
        randomise(m, 40 + ci)
        v = vocab
        if kw["n_vocab"] != len(vocab):  # pad the vocabulary with plain pieces
            extra = ["x%d" % i for i in range(kw["n_vocab"] - len(vocab))]
            v = bpe.Vocab(vocab.tokens + extra, vocab.scores + [-1e4] * len(extra),
                          vocab.types + [bpe.TYPE_NORMAL] * len(extra))
        rng = np.random.default_rng(ci)
        ids = [1] + [int(x) for x in rng.integers(3, kw["n_vocab"], 40)]
        for wtype in ("f32", "f16", "q8_0"):
            base = os.path.join(tmp, "m%d-%s.gguf" % (ci, wtype))
            ss = os.path.join(tmp, "m%d-%s.ss.gguf" % (ci, wtype))
            export.base_writer(m, v, wtype).write(base)
            export.adapter_writer(m, wtype).write(ss)
            ref_model, _ = export.load_gguf_model(base, ss)  # the file's own (dequantised) weights
            ref = dump.reference(ref_model, ids)
            G = kw["n_streams"]
            plain = run_c(base, None, ids)
            full = run_c(base, ss, ids, streams=G)
            tag = "config %d %s" % (ci, wtype)
            errs = [row_err(plain["main"][i], ref["main"][i]) for i in range(len(ids))]
            check(len(plain["main"]) == len(ids) and max(errs) < TOL,
                  "%s: main logits max row error %.3g" % (tag, max(errs)))
            serrs = [row_err(full["stream"][(i, j + 1)], ref["streams"][i, j])
                     for i in range(len(ids)) for j in range(G)]
            check(len(full["stream"]) == len(ids) * G and max(serrs) < TOL,
                  "%s: stream logits max row error %.3g" % (tag, max(serrs)))
            worst[tag] = (max(errs), max(serrs))
            # Pruning along the chain: child i+1 goes (with everything after it) when its
            # probability under token i's early exit is below the threshold.
            ex = ref["exit"]
            p = np.array([np.exp(ex[i, ids[i + 1]] - np.logaddexp.reduce(ex[i]))
                          for i in range(len(ids) - 1)])
            order = np.sort(p)
            gaps = np.log(order[1:] / order[:-1])
            k = int(np.argmax(gaps[len(gaps) // 4:])) + len(gaps) // 4
            thr = float(np.sqrt(order[k] * order[k + 1]))
            first = next((i + 1 for i in range(len(p)) if p[i] < thr), len(ids))
            want = [i >= first for i in range(len(ids))]
            pr = run_c(base, ss, ids, streams=G, prune=thr)
            got = [pr["pruned"].get(i) for i in range(len(ids))]
            check(got == want, "%s: pruned %s, want %s (threshold %.4g, log margin %.3g)"
                  % (tag, [i for i, g in enumerate(got) if g], [i for i, w in enumerate(want) if w],
                     thr, gaps[k] / 2))
            check(0 < first < len(ids), "%s: the threshold prunes part of the chain" % tag)
    for tag, (a, b) in worst.items():
        print("%s: main %.2e, streams %.2e" % (tag, a, b))


def shipped(tmp):
    """The shipped models: their vocabulary through the C tokenizer, and main-stream and stream
    parity of models/default.gguf with its adapter (and of the drafter) on a held-out passage."""
    models = os.path.join(testlib.ROOT, "models")
    base, ss, draft = (os.path.join(models, f) for f in ("default.gguf", "default.ss.gguf", "draft.gguf"))
    model, vocab = export.load_gguf_model(base, ss)
    _, va = corpus.split_books(corpus.read_kjv())
    text = corpus.book_text(va[0][1][:6])
    got = c_tokenize(base, text, tmp)
    want = vocab.encode(text)
    check(got == want, "shipped vocabulary: C and Python tokenizers agree on %r" % text[:40])
    ids = want[:96]
    ref = dump.reference(model, ids)
    G = model.cfg.n_streams
    c = run_c(base, ss, ids, streams=G)
    errs = [row_err(c["main"][i], ref["main"][i]) for i in range(len(ids))]
    serrs = [row_err(c["stream"][(i, j + 1)], ref["streams"][i, j]) for i in range(len(ids)) for j in range(G)]
    check(max(errs) < TOL, "default.gguf: main logits max row error %.3g" % max(errs))
    check(max(serrs) < TOL, "default.ss.gguf: stream logits max row error %.3g" % max(serrs))
    dm, dv = export.load_gguf_model(draft)
    check(dv.tokens == vocab.tokens, "the drafter shares the default model's vocabulary")
    dref = dump.reference(dm, ids)
    dc = run_c(draft, None, ids)
    derrs = [row_err(dc["main"][i], dref["main"][i]) for i in range(len(ids))]
    check(max(derrs) < TOL, "draft.gguf: main logits max row error %.3g" % max(derrs))
    print("shipped: default main %.2e, streams %.2e; draft %.2e" % (max(errs), max(serrs), max(derrs)))


with tempfile.TemporaryDirectory() as tmp:
    tokenizer(tmp)
    parity(tmp)
    shipped(tmp)
sys.exit(testlib.finish())
