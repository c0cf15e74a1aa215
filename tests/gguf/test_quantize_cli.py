"""test_quantize_cli.py: `edgespec quantize MODEL OUT TYPE` (es_quantize).

mkmodel draws the same weights for every --type from one seed and quantises them with the
library's quantisers, so quantising its f32 model must give exactly the tensors of its model
written directly in that type (every K-quant, iq4_nl, iq4_xs and q8_0/q4_0/q4_1/q5_0/q5_1), with
general.file_type set and the norms left f32. Also: an f16 input, rows that are not whole
super-blocks (stored in llama.cpp's fallback type with a warning), and the errors (a quantised input, an unknown type, a missing file, bad usage).

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
errors()
for f in os.listdir("."):
    if f.startswith("qz-") and f.endswith(".gguf"):
        os.remove(f)
sys.exit(testlib.finish())
