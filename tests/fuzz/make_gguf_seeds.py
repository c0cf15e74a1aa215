"""make_gguf_seeds.py: writes the small seed corpus of tests/fuzz/corpus/gguf with tools/pygguf.
usage: /usr/bin/python3 tests/fuzz/make_gguf_seeds.py tests/fuzz/corpus/gguf
The files are committed; rerun only to change them. Inputs that once crashed a target are added
to the same folder by hand, named crash-<what>.gguf. One more seed, a complete small model, is
made by the C tool:
  edgespec-mkmodel -o tests/fuzz/corpus/gguf/tiny-llama.gguf --quiet --n-vocab 260 --n-embd 32 \
      --n-layer 1 --n-head 2 --n-ff 32 --n-ctx 64 --type q4_0 --tied"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "pygguf"))
import pygguf  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)


def save(name, w, version=3):
    b = bytearray(w.tobytes())
    b[4] = version
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(b))


save("empty.gguf", pygguf.Writer())

w = pygguf.Writer()
for i, (t, v) in enumerate([(pygguf.UINT8, 1), (pygguf.INT8, -1), (pygguf.UINT16, 2), (pygguf.INT16, -2),
                            (pygguf.UINT32, 3), (pygguf.INT32, -3), (pygguf.FLOAT32, 0.5), (pygguf.BOOL, True),
                            (pygguf.UINT64, 4), (pygguf.INT64, -4), (pygguf.FLOAT64, 0.25)]):
    w.add("k.%d" % i, v, t)
w.add("k.str", "text")
w.add("k.arr", [1, 2, 3], elem_type=pygguf.INT32)
w.add("k.strs", ["a", "", "bc"])
w.add("k.bools", [True, False])
save("metadata.gguf", w)

w = pygguf.Writer()
w.add("general.architecture", "llama")
w.add("llama.embedding_length", 32)
w.add("llama.block_count", 1)
w.add("llama.attention.head_count", 2)
w.add("tokenizer.ggml.model", "llama")
w.add("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "<0x41>", "\u2581a", "b"])
w.add("tokenizer.ggml.scores", [0.0, 0.0, 0.0, 0.0, -1.0, -2.0])
w.add("tokenizer.ggml.token_type", [2, 3, 3, 6, 1, 1], elem_type=pygguf.INT32)
w.add_tensor("token_embd.weight", rng.standard_normal((6, 32)), "q8_0")
w.add_tensor("blk.0.attn_norm.weight", np.ones(32), "f32")
w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((32, 32)), "q4_0")
w.add_tensor("output.weight", rng.standard_normal((6, 32)), "f16")
save("model-like.gguf", w)

w = pygguf.Writer()
w.add("general.alignment", 64)
w.add_tensor("a", rng.standard_normal((2, 3)), "bf16")
w.add_tensor("b", rng.standard_normal((1, 2, 2, 32)), "f16")
save("aligned-v2.gguf", w, version=2)

# 256 weights of each K-quant, IQ4_NL and IQ4_XS, raw bytes (pygguf does not quantise them)
w = pygguf.Writer()
for t, nb in (("q4_K", 144), ("q5_K", 176), ("q6_K", 210), ("q2_K", 84), ("q3_K", 110), ("iq4_nl", 8 * 18),
              ("iq4_xs", 136)):
    w.add_tensor_raw("kq." + t, t, (256, 1), rng.integers(0, 256, nb, dtype=np.uint8))
save("kquants.gguf", w)
