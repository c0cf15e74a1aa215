"""test_arch_reference.py: the CPU backend's logits against the independent numpy reference
(tools/reference/llama_ref.py, float64) on random-weight files of each architecture besides llama
(docs/formats.md, "Architectures"), written by the C GGUF writer (mkmodel): qwen2's Q/K/V biases,
qwen3's per-head Q and K norms (with heads wider than n_embd / n_head), gemma3's five sliding
layers to one global with their own RoPE base (and the global layers' linear scaling alone),
smollm3's layers without RoPE, granite's embedding, attention, residual and logit multipliers,
phi3's fused attn_qkv and gate-up, gemma's embedding scale and GeGLU, gemma2's post-branch norms,
soft-capping and alternating sliding window, and a mistral-style window on llama and qwen2; two
files whose head_dim is not n_embd / n_head (attention.key_length, as in Gemma 2 2B); llama 3's
rope_freqs.weight (per-pair frequency divisors); phi3's LongRoPE (short factors in a context within the
original one, long factors beyond it, the attention factor); YaRN on llama and qwen2 (with partial
rotation); Gemma 2 27B's query scale (46 layers, n_embd / n_head != head_dim); and every weight type
on every architecture. Each
model runs a prefill chain (every row's logits) and single-token decode steps past the window, so
both the in-batch and the committed sides of the window are exercised.

Error measure and bounds as in test_cpu_reference.py: max |cpu - ref| / max |ref| below 1e-5 for
the same file (the reference dequantises the stored weights), and the argmax agrees wherever the
reference's top two are clearly apart. Soft-capping caps are small (attention 2, logits 3) so that
they bend the values these tiny models produce; a cap of 50 would leave them almost linear.

usage: test_arch_reference.py CPU_LOGITS_EXE WORKDIR
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
sys.path.insert(0, HERE)
import llama_ref  # noqa: E402
import test_cpu_reference as base  # noqa: E402

BOUND = 1e-5

# name, arch, sliding window, attention cap, final cap, then test_cpu_reference's case fields:
# type, vocab, embd, layers, heads, kv heads, ff, tied, rope, n_rot (0 = head_dim), rope scale,
# prefill, decode, threads, freq base, eps
CASES = [
    ("qwen2-gqa-tied", "qwen2", 0, 0, 0, "f32", 270, 64, 2, 4, 2, 96, 1, "neox", 0, 1.0, 8, 4, 2, 1e6, 1e-6),
    ("qwen2-q8_0", "qwen2", 0, 0, 0, "q8_0", 280, 64, 2, 4, 1, 96, 0, "neox", 0, 1.0, 6, 3, 2, 10000.0, 1e-6),
    ("phi3-mha", "phi3", 0, 0, 0, "f32", 265, 48, 2, 4, 4, 80, 0, "neox", 0, 1.0, 7, 3, 2, 10000.0, 1e-5),
    ("phi3-q4_0-gqa", "phi3", 0, 0, 0, "q4_0", 275, 64, 2, 4, 2, 96, 0, "neox", 0, 1.0, 6, 3, 1, 10000.0, 1e-5),
    ("gemma-tied", "gemma", 0, 0, 0, "f32", 290, 64, 2, 4, 1, 128, 1, "neox", 0, 1.0, 7, 3, 2, 10000.0, 1e-6),
    ("gemma2-swa-caps", "gemma2", 4, 2.0, 3.0, "f32", 285, 64, 3, 4, 2, 96, 1, "neox", 0, 1.0, 9, 4, 2, 10000.0,
     1e-6),
    ("gemma2-q8_0", "gemma2", 3, 2.0, 3.0, "q8_0", 270, 64, 2, 4, 2, 64, 0, "neox", 0, 1.0, 6, 4, 3, 10000.0, 1e-6),
    ("llama-swa-mistral", "llama", 5, 0, 0, "f32", 300, 48, 2, 6, 2, 72, 0, "norm", 0, 1.0, 9, 4, 2, 10000.0, 1e-5),
    ("qwen2-swa", "qwen2", 3, 0, 0, "f16", 261, 32, 2, 2, 1, 64, 1, "neox", 0, 1.0, 7, 4, 2, 10000.0, 1e-6),
    ("qwen3-q8_0", "qwen3", 0, 0, 0, "q8_0", 280, 64, 2, 4, 2, 96, 0, "neox", 0, 1.0, 7, 3, 2, 1e6, 1e-6),
    # gemma3: layers 0-4 and 6 slide (rotating with base 10000), layer 5 is global (base 1e6)
    ("gemma3-swa-tied", "gemma3", 4, 0, 0, "f32", 270, 64, 7, 4, 2, 96, 1, "neox", 0, 1.0, 9, 4, 2, 1e6, 1e-6),
    ("gemma3-q8_0-hd", "gemma3", 3, 0, 0, "q8_0", 280, 64, 6, 4, 1, 64, 0, "neox", 0, 1.0, 7, 3, 2, 1e6, 1e-6),
    # smollm3: layers 3 and 7 take no RoPE
    ("smollm3-tied", "smollm3", 0, 0, 0, "f32", 270, 64, 8, 4, 2, 96, 1, "norm", 0, 1.0, 8, 4, 2, 10000.0, 1e-6),
    ("smollm3-q4_0-swa", "smollm3", 3, 0, 0, "q4_0", 290, 64, 4, 4, 1, 64, 0, "norm", 0, 1.0, 7, 3, 2, 1e5, 1e-6),
    # granite: Granite 3's multipliers (mkmodel writes them)
    ("granite-gqa", "granite", 0, 0, 0, "f32", 270, 64, 3, 4, 2, 96, 0, "norm", 0, 1.0, 8, 4, 2, 10000.0, 1e-6),
    ("granite-q8_0-tied", "granite", 0, 0, 0, "q8_0", 280, 64, 2, 4, 4, 64, 1, "norm", 0, 1.0, 7, 3, 2, 1e4, 1e-6),
]
# head_dim other than n_embd / n_head (Gemma 2 2B: 8 heads of 256 on n_embd 2304): case name -> head_dim
HEAD_DIM = {"gemma2-hd": 24, "qwen2-hd": 8, "qwen3-hd-tied": 32, "gemma3-q8_0-hd": 32}
# llama 3's rope_freqs.weight (per-pair frequency divisors; Llama 3.1/3.2 files carry it)
ROPE_FREQS = {"llama3-rope-freqs", "qwen2-hd"}
CASES += [
    ("llama3-rope-freqs", "llama", 0, 0, 0, "q8_0", 280, 64, 2, 4, 2, 96, 1, "norm", 0, 1.0, 9, 4, 2, 500000.0, 1e-5),
    ("gemma2-hd", "gemma2", 5, 2.0, 3.0, "f32", 270, 48, 2, 4, 2, 64, 1, "neox", 0, 1.0, 8, 3, 2, 10000.0, 1e-6),
    ("qwen2-hd", "qwen2", 0, 0, 0, "f32", 270, 64, 2, 4, 2, 64, 0, "neox", 0, 1.0, 6, 3, 2, 10000.0, 1e-6),
    # Qwen3's heads are wider than n_embd / n_head (0.6B: 16 heads of 128 on 1024)
    ("qwen3-hd-tied", "qwen3", 4, 0, 0, "f32", 270, 64, 3, 4, 2, 96, 1, "neox", 0, 1.0, 8, 4, 2, 1e6, 1e-6),
]

# RoPE scaling (cpu_logits' ROPE_SCALING): the context is prefill + decode = 12 or 10 positions, so
# LongRoPE with original context 8 takes the long factors, with 64 the short ones; YaRN's original
# context 4096 puts its ramp inside the 8 pairs (pairs 2..6 for head_dim 16)
ROPE_SCALING = {"phi3-longrope-long": "longrope,8", "phi3-longrope-short": "longrope,64",
                "llama-yarn": "yarn,4,4096", "qwen2-yarn-partial": "yarn,8,4096", "gemma3-linear": "linear,8"}
HEAD_DIM["gemma2-27b-qscale"] = 8
CASES += [
    ("phi3-longrope-long", "phi3", 0, 0, 0, "f32", 270, 64, 2, 4, 2, 96, 0, "neox", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("phi3-longrope-short", "phi3", 0, 0, 0, "q8_0", 270, 64, 2, 4, 4, 96, 0, "neox", 0, 1.0, 7, 3, 2, 10000.0, 1e-5),
    ("llama-yarn", "llama", 0, 0, 0, "f32", 280, 64, 2, 4, 2, 96, 0, "norm", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("qwen2-yarn-partial", "qwen2", 0, 0, 0, "f32", 270, 64, 2, 4, 2, 64, 1, "neox", 8, 1.0, 7, 3, 2, 10000.0, 1e-6),
    # Gemma 3 4B-27B scale the global layers' RoPE (linear, 8); the sliding layers stay unscaled
    ("gemma3-linear", "gemma3", 3, 0, 0, "f32", 270, 64, 7, 4, 2, 64, 1, "neox", 0, 1.0, 8, 3, 2, 1e6, 1e-6),
    # 46 layers: Gemma 2 27B's depth, whose queries scale by (n_embd / n_head)^-1/2 = 12^-1/2, not 8^-1/2
    ("gemma2-27b-qscale", "gemma2", 4, 2.0, 3.0, "f32", 265, 48, 46, 4, 2, 32, 1, "neox", 0, 1.0, 6, 2, 2,
     10000.0, 1e-6),
]

# every weight type on every architecture (small files, short runs; the cases above go deeper)
TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
CASES += [("%s-%s-sweep" % (arch, t), arch, window, acap, fcap, t, 263, 64, 1, 4, 2, 64, 0, "neox", 0, 1.0, 4, 2, 1,
           10000.0, 1e-6)
          for arch, window, acap, fcap in (("qwen2", 3, 0, 0), ("qwen3", 0, 0, 0), ("phi3", 0, 0, 0),
                                           ("gemma", 0, 0, 0), ("gemma2", 3, 2.0, 3.0), ("gemma3", 3, 0, 0))
          for t in TYPES]


def main(argv):
    exe, workdir = argv[1], argv[2]
    failures = 0
    for case in CASES:
        name, arch, window, acap, fcap = case[:5]
        ref_case = (name,) + case[5:]
        extra = [arch, str(window), repr(float(acap)), repr(float(fcap)), str(HEAD_DIM.get(name, 0)),
                 str(int(name in ROPE_FREQS)), ROPE_SCALING.get(name, "-")]
        model, tokens, got = base.run_cpu(exe, workdir, ref_case, ref_case[1], extra)
        m = llama_ref.Model(model)
        ok = m.arch == arch and m.n_vocab == got.shape[1]
        err = base.rel_err(got, llama_ref.forward(m, [int(t) for t in tokens])) if ok else float("inf")
        ok = ok and err < BOUND
        failures += not ok
        print("%-20s %-6s cpu vs reference of the same file: %.3g (bound %g) %s" % (
            name, arch, err, BOUND, "ok" if ok else "FAIL"))
        os.remove(model)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
