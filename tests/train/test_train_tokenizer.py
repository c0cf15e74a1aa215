"""test_train_tokenizer.py: tools/train's tokenizer trainer and SentencePiece-style encoder.

1. The Python encoder reproduces every expected id of llama.cpp's llama-spm test vocabulary
   (../shared/vocab-tests), so it applies SentencePiece merges as llama.cpp does.
2. A vocabulary trained on KJV text has the llama layout (<unk> <s> </s>, 256 byte tokens, pieces
   with scores), encodes every training chunk exactly as the learned merges do, falls back to
   bytes for unseen characters, and decodes back to the text.
3. The exported vocabulary survives a GGUF round trip through tools/pygguf.
The C tokenizer's agreement with this encoder is checked in test_train_c.py.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("train", "pygguf")
import bpe      # noqa: E402
import corpus   # noqa: E402
import export   # noqa: E402
import pygguf   # noqa: E402



def llama_spm_vectors():
    base = os.path.join(testlib.SHARED, "vocab-tests", "ggml-vocab-llama-spm.gguf")
    vocab = export.load_vocab(pygguf.read(base))
    with open(base + ".inp", encoding="utf-8") as f:
        inputs = f.read().split("\n__ggml_vocab_test__\n")[:-1]
    with open(base + ".out", encoding="utf-8") as f:
        outputs = f.read().split("\n")[:len(inputs)]
    check(len(inputs) > 20 and len(inputs) == len(outputs), "vocab-test files parsed")
    check(not vocab.chunk_local, "the llama vocabulary has pieces spanning words")
    for text, out in zip(inputs, outputs):
        want = [int(x) for x in out.split()]
        got = vocab.encode(text, add_bos=False)
        check(got == want, "llama-spm %r: got %s want %s" % (text[:40], got[:12], want[:12]))
    print("llama-spm vectors: %d strings" % len(inputs))


def trained_vocab():
    verses = [v[3] for v in corpus.read_kjv()[:3000]]
    text = "\n".join(verses)
    vocab, merges = bpe.train_bpe([text], 600)
    check(len(vocab) == 600, "vocabulary size %d" % len(vocab))
    check(vocab.tokens[:3] == ["<unk>", "<s>", "</s>"], "control tokens first")
    check(vocab.types[:3] == [bpe.TYPE_UNKNOWN, bpe.TYPE_CONTROL, bpe.TYPE_CONTROL], "control types")
    check(all(vocab.tokens[3 + b] == "<0x%02X>" % b and vocab.types[3 + b] == bpe.TYPE_BYTE
              for b in range(256)), "byte tokens <0x00>..<0xFF> at 3..258")
    normal = [i for i, t in enumerate(vocab.types) if t == bpe.TYPE_NORMAL]
    check(len({vocab.tokens[i] for i in normal}) == len(normal), "pieces are unique")
    check(vocab.chunk_local, "trained pieces never span words or lines")
    # Scores: later merges score lower; every merged piece scores above every base character.
    pieces = [i for i in normal if len(vocab.tokens[i]) > 1]
    chars = [i for i in normal if len(vocab.tokens[i]) == 1]
    check(min(vocab.scores[i] for i in pieces) > max(vocab.scores[i] for i in chars),
          "pieces outrank characters")
    rank = {m: i for i, m in enumerate(merges)}
    chunks = bpe._chunk_counts([text])
    bad = [c for c in chunks
           if [vocab.tokens[i] for i in vocab._spm(c.encode())] != bpe.apply_merges(c, rank)]
    check(not bad, "SentencePiece encoding replays the training merges (%d differ: %r)"
          % (len(bad), bad[:5]))
    for s in [text[:2000], "In the beginning God created the heaven and the earth.",
              "  two  spaces and\ttab\n\nnew lines", "caf\u00e9 \u65e5\u672c 123 \U0001f999!", "x", ""]:
        ids = vocab.encode(s, add_bos=True)
        check(ids[:1] == [1], "BOS first")
        check(vocab.decode(ids) == s, "round trip %r -> %r" % (s[:30], vocab.decode(ids)[:30]))
    ids = vocab.encode("\u00e9", add_bos=False)
    check(ids == [vocab.by_bytes[bpe.SPACE.encode()], 3 + 0xC3, 3 + 0xA9],
          "byte fallback for an unknown character: %s" % ids)
    # chunk-local fast path equals the whole-text algorithm
    s = text[:3000]
    fast = vocab.encode(s, add_bos=False)
    slow = vocab._spm(bpe.escape_text(s).encode())
    check(fast == slow, "chunked encoding equals whole-text encoding")
    return vocab


def gguf_round_trip(vocab):
    import model as M
    m = M.Model(M.Config(n_vocab=len(vocab), n_embd=32, n_layer=1, n_head=2, n_ff=32))
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "v.gguf")
        export.base_writer(m, vocab, vocab_only=True).write(p)
        r = pygguf.read(p)
        check(len(r.tensors) == 0, "vocab-only file has no tensors")
        check(r.get("tokenizer.ggml.model") == "llama", "tokenizer.ggml.model")
        v2 = export.load_vocab(r)
        check(v2.tokens == vocab.tokens and v2.scores == vocab.scores and v2.types == vocab.types,
              "tokens, scores and types survive GGUF")
        check(r.kv["tokenizer.ggml.scores"].elem_type == pygguf.FLOAT32, "scores are f32")
        check(r.kv["tokenizer.ggml.token_type"].elem_type == pygguf.INT32, "token types are i32")
        for k, want in (("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.eos_token_id", 2),
                        ("tokenizer.ggml.unknown_token_id", 0), ("tokenizer.ggml.add_bos_token", True),
                        ("tokenizer.ggml.add_eos_token", False),
                        ("tokenizer.ggml.add_space_prefix", True)):
            check(r.get(k) == want, "%s = %r" % (k, r.get(k)))


llama_spm_vectors()
v = trained_vocab()
gguf_round_trip(v)
sys.exit(testlib.finish())
