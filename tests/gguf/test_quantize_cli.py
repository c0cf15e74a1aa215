"""test_quantize_cli.py: `edgespec quantize MODEL OUT TYPE` (es_quantize).

mkmodel draws the same weights for every --type from one seed and quantises them with the
library's quantisers, so quantising its f32 model must give exactly the tensors of its model
written directly in that type (every K-quant, iq4_nl, iq4_xs and q8_0/q4_0/q4_1/q5_0/q5_1), with
general.file_type set and the norms left f32. Also: an f16 input, rows that are not whole
super-blocks (stored in llama.cpp's fallback type with a warning), the mixes q4_K_M and q5_K_M
(each matrix in the type llama.cpp's recipe gives it, on llama, tied and phi3 files), and the
errors (a quantised input, an unknown type, a missing file, bad usage).

usage: test_quantize_cli.py EDGESPEC_EXE MKMODEL_EXE   (run by meson in the build directory)
"""

import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("pygguf")
import pygguf  # noqa: E402

CLI, MK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SHAPE = ["--n-embd", "256", "--n-ff", "512", "--n-layer", "2", "--n-vocab", "300", "--seed", "7", "--quiet"]
FILE_TYPE = {"q4_K": 14, "q5_K": 16, "q6_K": 18, "q8_0": 7, "q4_0": 2, "q2_K": 10, "q3_K": 11, "iq4_nl": 25,
             "iq4_xs": 30, "q4_1": 3, "q5_0": 8, "q5_1": 9}


def run(*args, expect=0):
    p = subprocess.run(testlib.wrap([CLI, "quantize"] + list(args)), capture_output=True, text=True)
    check(p.returncode == expect, "quantize %s: exit %d, expected %d" % (" ".join(args), p.returncode, expect), p)
    return p


def mk(out, *flags):
    subprocess.run(testlib.wrap([MK, "-o", out] + list(flags)), check=True)


def same_as_direct():
    mk("qz-f32.gguf", *SHAPE)
    for t, ftype in FILE_TYPE.items():
        mk("qz-direct.gguf", *SHAPE, "--type", t)
        p = run("qz-f32.gguf", "qz-out.gguf", t)
        check("100%" in p.stderr, "%s: progress reaches 100%%: %r" % (t, p.stderr[-200:]))
        a, b = pygguf.read("qz-out.gguf"), pygguf.read("qz-direct.gguf")
        check(list(a.tensors) == list(b.tensors), "%s: the same tensors in the same order" % t)
        for name, ta in a.tensors.items():
            tb = b.tensors[name]
            check(ta.type == tb.type and ta.ne == tb.ne and np.array_equal(ta.raw, tb.raw),
                  "%s: tensor %s (%s) differs from mkmodel --type %s (%s)" % (t, name, ta.type, t, tb.type))
        check(a.get("general.file_type") == ftype, "%s: general.file_type %r" % (t, a.get("general.file_type")))
        check(a.get("general.quantization_version") == 2, "%s: general.quantization_version" % t)
        check(a.tensors["blk.0.attn_norm.weight"].type == "f32", "%s: norms stay f32" % t)
        check(a.get("tokenizer.ggml.tokens") == b.get("tokenizer.ggml.tokens"), "%s: keys copied" % t)
        info = subprocess.run(testlib.wrap([CLI, "info", "-m", "qz-out.gguf"]), capture_output=True, text=True)
        check(info.returncode == 0, "%s: the output loads" % t, info)


def f16_and_fallback():
    mk("qz-f16.gguf", *SHAPE, "--type", "f16")
    run("qz-f16.gguf", "qz-out.gguf", "q6_K")
    r = pygguf.read("qz-out.gguf")
    check(r.tensors["blk.1.ffn_down.weight"].type == "q6_K", "f16 input to q6_K")
    mk("qz-odd.gguf", "--n-embd", "96", "--n-ff", "160", "--n-layer", "1", "--n-vocab", "300", "--quiet")
    for target, fallback in (("q4_K", "q5_0"), ("q5_K", "q5_1"), ("q2_K", "iq4_nl"), ("iq4_xs", "iq4_nl"),
                             ("q6_K", "q8_0")):
        p = run("qz-odd.gguf", "qz-out.gguf", target)
        r = pygguf.read("qz-out.gguf")
        check(r.tensors["blk.0.ffn_down.weight"].type == fallback, "%s: rows of 160 fall back to %s" % (target, fallback))
        check("'blk.0.ffn_down.weight': rows of 160 are not whole %s blocks: stored as %s" % (target, fallback)
              in p.stderr, "fallback warning: %r" % p.stderr[-300:])
        info = subprocess.run(testlib.wrap([CLI, "info", "-m", "qz-out.gguf"]), capture_output=True, text=True)
        check(info.returncode == 0, "%s with %s fallbacks loads" % (target, fallback), info)


def expected_mix(name, base, n_layer, has_output):
    """llama.cpp's Q4_K_M / Q5_K_M recipe, stated independently of lib/core/quantize.c."""
    if name == "output.weight" or (name == "token_embd.weight" and not has_output):
        return "q6_K"
    if not name.startswith("blk."):
        return base
    i = int(name.split(".")[1])
    more = i < n_layer // 8 or i >= 7 * n_layer // 8 or (i - n_layer // 8) % 3 == 2
    if name.endswith((".attn_v.weight", ".ffn_down.weight")) and more:
        return "q6_K"
    if name.endswith(".attn_qkv.weight"):
        return {"q4_K": "q5_K", "q5_K": "q6_K"}[base]
    return base


def mixes():
    """q4_K_M and q5_K_M: each matrix in the recipe's type, bit for bit what mkmodel writes for that
    type from the same seed; llama.cpp's file types 15 and 17."""
    for flags in ([], ["--tied"], ["--arch", "phi3"]):
        shape = ["--n-embd", "256", "--n-ff", "512", "--n-layer", "16", "--n-vocab", "300", "--seed", "3",
                 "--quiet"] + flags
        mk("qz-mix-f32.gguf", *shape)
        direct = {}
        for t in ("q4_K", "q5_K", "q6_K"):
            mk("qz-mix-%s.gguf" % t, *shape, "--type", t)
            direct[t] = pygguf.read("qz-mix-%s.gguf" % t)
        for mix, base, ftype in (("q4_K_M", "q4_K", 15), ("q5_K_M", "q5_K", 17)):
            run("qz-mix-f32.gguf", "qz-out.gguf", mix)
            r = pygguf.read("qz-out.gguf")
            has_output = "output.weight" in r.tensors
            check(has_output == ("--tied" not in flags), "%s %s: output.weight present as made" % (mix, flags))
            n6 = 0
            for name, t in r.tensors.items():
                if t.type == "f32":
                    continue
                want = expected_mix(name, base, 16, has_output)
                n6 += want == "q6_K"
                check(t.type == want, "%s %s: %s is %s, expected %s" % (mix, flags, name, t.type, want))
                d = direct[want].tensors[name] if want in direct else None
                check(d is not None and np.array_equal(t.raw, d.raw),
                      "%s %s: %s equals mkmodel --type %s" % (mix, flags, name, want))
            # 8 layers with more bits (0, 1, 4, 7, 10, 13, 14, 15 of 16): their attn_v and ffn_down
            # (phi3 has no attn_v: its 16 fused attn_qkv are q6_K in q5_K_M), and the head
            want6 = 1 + 8 if "phi3" in flags else 1 + 16
            want6 += 16 if "phi3" in flags and base == "q5_K" else 0
            check(n6 == want6, "%s %s: %d q6_K matrices, expected %d" % (mix, flags, n6, want6))
            check(r.get("general.file_type") == ftype, "%s: general.file_type %r" % (mix, r.get("general.file_type")))
            info = subprocess.run(testlib.wrap([CLI, "info", "-m", "qz-out.gguf"]), capture_output=True, text=True)
            check(info.returncode == 0, "%s %s: the output loads" % (mix, flags), info)


def errors():
    mk("qz-q.gguf", *SHAPE, "--type", "q8_0")
    p = run("qz-q.gguf", "qz-bad.gguf", "q4_K", expect=1)
    check("tensor 'token_embd.weight' is already q8_0" in p.stderr, "quantised input: %r" % p.stderr)
    p = run("qz-f32.gguf", "qz-bad.gguf", "iq2_xs", expect=2)
    check("unknown type 'iq2_xs'" in p.stderr and "q4_K" in p.stderr, "unknown type: %r" % p.stderr)
    p = run("qz-missing.gguf", "qz-bad.gguf", "q4_K", expect=1)
    check("qz-missing.gguf" in p.stderr, "missing input: %r" % p.stderr)
    run("qz-f32.gguf", "qz-bad.gguf", expect=2)
    check(not os.path.exists("qz-bad.gguf"), "no output file after a failure")


same_as_direct()
f16_and_fallback()
mixes()
errors()
for f in os.listdir("."):
    if f.startswith("qz-") and f.endswith(".gguf"):
        os.remove(f)
sys.exit(testlib.finish())
