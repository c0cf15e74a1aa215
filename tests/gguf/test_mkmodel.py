"""test_mkmodel.py: the edgespec-mkmodel command line, checked with tools/pygguf.

usage: test_mkmodel.py MKMODEL_EXE   (run by meson in the build directory)
Determinism (same flags, same bytes; another seed, other weights), every shape and type flag,
tied output, NeOX ordering, the synthetic vocabulary's structure (unique pieces, byte tokens,
scores, every piece reachable by merges), --vocab copying a real tokenizer, the 24m preset's
shape and weight statistics, and refusal of bad flags."""

import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("pygguf")
import pygguf  # noqa: E402

MK = os.path.abspath(sys.argv[1])


def mk(out, *flags, expect=0):
    p = subprocess.run(testlib.wrap([MK, "-o", out, "--quiet"] + list(flags)), capture_output=True, text=True)
    check(p.returncode == expect, "mkmodel %s: exit %d, expected %d\n%s" % (" ".join(flags), p.returncode, expect,
                                                                              p.stderr))
    return p


def read(path):
    return open(path, "rb").read()


def determinism():
    mk("mk-a.gguf")
    mk("mk-b.gguf")
    mk("mk-c.gguf", "--seed", "2")
    check(read("mk-a.gguf") == read("mk-b.gguf"), "same flags, same bytes")
    a, c = pygguf.read("mk-a.gguf"), pygguf.read("mk-c.gguf")
    check(not np.array_equal(a.tensors["blk.0.attn_q.weight"].raw, c.tensors["blk.0.attn_q.weight"].raw),
          "another seed, other weights")
    check(a.get("tokenizer.ggml.tokens") == c.get("tokenizer.ggml.tokens"), "the vocabulary does not depend on the seed")


def flags():
    mk("mk-f.gguf", "--n-vocab", "300", "--n-embd", "96", "--n-layer", "3", "--n-head", "6", "--n-head-kv", "2",
       "--n-ff", "160", "--n-ctx", "77", "--type", "q8_0", "--tied", "--rope", "neox", "--freq-base", "500000",
       "--name", "flagged")
    r = pygguf.read("mk-f.gguf")
    want = {"general.architecture": "llama", "general.name": "flagged", "general.file_type": 7,
            "llama.vocab_size": 300, "llama.context_length": 77, "llama.embedding_length": 96,
            "llama.block_count": 3, "llama.feed_forward_length": 160, "llama.attention.head_count": 6,
            "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 16, "llama.rope.freq_base": 500000.0,
            "edgespec.rope.ordering": "neox", "tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_bos_token": True}
    for k, v in want.items():
        check(r.get(k) == v, "%s = %r, expected %r" % (k, r.get(k), v))
    check("output.weight" not in r.tensors, "tied: no output.weight")
    check(len(r.tensors) == 2 + 9 * 3, "tensor count")
    shapes = {"token_embd.weight": (96, 300), "output_norm.weight": (96,), "blk.2.attn_q.weight": (96, 96),
              "blk.2.attn_k.weight": (96, 32), "blk.2.attn_v.weight": (96, 32), "blk.2.attn_output.weight": (96, 96),
              "blk.2.ffn_gate.weight": (96, 160), "blk.2.ffn_up.weight": (96, 160),
              "blk.2.ffn_down.weight": (160, 96), "blk.2.ffn_norm.weight": (96,)}
    for name, ne in shapes.items():
        t = r.tensors.get(name)
        check(t is not None and t.ne == ne, "%s shape %r, expected %r" % (name, t and t.ne, ne))
        check(t is not None and t.type == ("f32" if "norm" in name else "q8_0"), "%s type %s" % (name, t and t.type))
    for t in ("f32", "f16", "bf16", "q4_0"):
        mk("mk-t.gguf", "--type", t)
        check(pygguf.read("mk-t.gguf").tensors["blk.1.ffn_up.weight"].type == t, "--type %s" % t)
    for t, ftype in (("q4_K", 14), ("q5_K", 16), ("q6_K", 18)):
        mk("mk-t.gguf", "--type", t, "--n-embd", "256", "--n-ff", "512", "--n-layer", "1", "--n-vocab", "300")
        r = pygguf.read("mk-t.gguf")
        check(r.tensors["blk.0.ffn_down.weight"].type == t and r.tensors["token_embd.weight"].type == t and
              r.tensors["blk.0.ffn_norm.weight"].type == "f32", "--type %s" % t)
        check(r.get("general.file_type") == ftype, "--type %s: file_type %r" % (t, r.get("general.file_type")))


def synthetic_vocab():
    mk("mk-v.gguf", "--n-vocab", "32000", "--n-embd", "32", "--n-layer", "1", "--n-head", "2", "--n-ff", "32")
    r = pygguf.read("mk-v.gguf")
    tok = r.get("tokenizer.ggml.tokens")
    typ = list(r.get("tokenizer.ggml.token_type"))
    sc = r.get("tokenizer.ggml.scores")
    check(len(tok) == 32000 and len(set(tok)) == 32000, "32000 unique pieces")
    check(tok[:3] == ["<unk>", "<s>", "</s>"] and typ[:3] == [2, 3, 3], "control tokens")
    check(tok[3:259] == ["<0x%02X>" % b for b in range(256)] and typ[3:259] == [6] * 256, "byte tokens")
    check(all(t == 1 for t in typ[259:]) and np.all(np.diff(sc[259:]) < 0), "normal pieces, falling scores")
    vocab = set(tok)
    unreachable = [t for t in tok[259:] if len(t) > 1 and t[:-1] not in vocab]
    check(not unreachable, "every piece extends another piece: %r" % unreachable[:5])
    check(all(" " not in t for t in tok), "no raw spaces (SentencePiece writes \u2581)")
    mk("mk-v.gguf", "--n-vocab", "100", expect=1)


def copied_vocab():
    src = os.path.join(testlib.SHARED, "vocab-tests", "ggml-vocab-llama-spm.gguf")
    mk("mk-cv.gguf", "--vocab", src, "--type", "q4_0")
    r, s = pygguf.read("mk-cv.gguf"), pygguf.read(src)
    keys = [k for k in s.kv if k.startswith("tokenizer.ggml.")]
    check(keys == [k for k in r.kv if k.startswith("tokenizer.ggml.")], "the same tokenizer keys, in order")
    for k in keys:
        a, b = r.kv[k], s.kv[k]
        same = a.type == b.type and (np.array_equal(a.value, b.value) if a.type == pygguf.ARRAY and a.elem_type !=
                                     pygguf.STRING else a.value == b.value)
        check(same, "%s copied" % k)
    check(r.get("llama.vocab_size") == 32000 and r.tensors["token_embd.weight"].ne == (64, 32000), "n_vocab from file")


def preset():
    mk("mk-24m.gguf", "--preset", "24m", "--type", "q8_0")
    r = pygguf.read("mk-24m.gguf")
    n = sum(t.n_elements for t in r.tensors.values())
    check(n == 24407712, "24m preset has %d parameters" % n)
    check(r.get("llama.embedding_length") == 288 and r.get("llama.block_count") == 6 and
          r.get("llama.feed_forward_length") == 768 and r.get("llama.context_length") == 2048 and
          "output.weight" in r.tensors, "24m shape")
    q = r.tensors["blk.0.attn_q.weight"].numpy()
    down = r.tensors["blk.5.ffn_down.weight"].numpy()
    norm = r.tensors["blk.3.attn_norm.weight"].numpy()
    emb = r.tensors["token_embd.weight"].numpy()
    check(abs(q.std() * np.sqrt(288) - 1) < 0.03 and abs(q.mean()) < 0.01, "q std 1/sqrt(n_in): %g" % q.std())
    check(abs(down.std() * np.sqrt(768) * np.sqrt(12) - 1) < 0.03, "ffn_down std: %g" % down.std())
    check(norm.min() >= 0.9 and norm.max() <= 1.1 and norm.std() > 0.01, "norms 1 +- 0.1")
    check(abs(emb.std() - 1) < 0.02, "embedding std 1: %g" % emb.std())


def bad_flags():
    for flags in (["--type", "q8_1"], ["--n-embd", "x"], ["--rope", "sideways"], ["--preset", "7b"], ["--bogus"],
                  ["--n-layer"]):
        p = mk("mk-bad.gguf", *flags, expect=2)
        check(p.stderr.strip() != "", "%s: a message" % flags)
    p = mk("mk-bad.gguf", "--n-embd", "80", "--type", "q8_0", expect=1)
    check("multiples of 32" in p.stderr, "block size message: %s" % p.stderr)
    p = mk("mk-bad.gguf", "--type", "q4_K", expect=1)
    check("multiples of 256 for q4_K" in p.stderr, "super-block size message: %s" % p.stderr)
    p = mk("mk-bad.gguf", "--vocab", "/nonexistent.gguf", expect=1)
    check("/nonexistent.gguf" in p.stderr, "missing vocabulary message: %s" % p.stderr)


determinism()
flags()
synthetic_vocab()
copied_vocab()
preset()
bad_flags()
for f in os.listdir("."):
    if f.startswith("mk-") and f.endswith(".gguf"):
        os.remove(f)
sys.exit(testlib.finish())
