"""test_pygguf.py: tools/pygguf against the C reader and writer, both ways.

usage: test_pygguf.py XCHECK_EXE   (run by meson with the build directory as the working directory)

1. C writes the reference content; pygguf reads it and checks every value and tensor.
2. pygguf writes the same content; the bytes must equal the C file; `xcheck read-all` parses it.
3. pygguf quantises random data (odd scales, ties, zero and one-sided blocks) to every type;
   `xcheck check-quant` requires C to produce the same bytes and the same dequantised floats.
4. pygguf reads the llama.cpp vocabulary files, and rejects malformed files with GGUFError.
The reference content is defined twice, here and in xcheck.c, on purpose.
"""

import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("pygguf")
import pygguf  # noqa: E402

XCHECK = os.path.abspath(sys.argv[1])


def ref_values(k, n):
    i = np.arange(n, dtype=np.int64)
    return (((i * 7919 + k * 13) % 2001) - 1000).astype(np.float32) / np.float32(64)


STRS = ["", "a", "\u2581the", "<0x0A>"]
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]


def reference_content():
    w = pygguf.Writer()
    w.add("general.architecture", "llama")
    w.add("general.name", "xcheck")
    w.add("s.u8", 200, pygguf.UINT8)
    w.add("s.i8", -100, pygguf.INT8)
    w.add("s.u16", 60000, pygguf.UINT16)
    w.add("s.i16", -30000, pygguf.INT16)
    w.add("s.u32", 4000000000)
    w.add("s.i32", -2000000000)
    w.add("s.f32", 0.1)
    w.add("s.bool", True)
    w.add("s.u64", (1 << 63) + 5)
    w.add("s.i64", -(1 << 50), pygguf.INT64)
    w.add("s.f64", -3.25e300, pygguf.FLOAT64)
    w.add("s.str", "h\u00e9llo")
    w.add("a.u8", np.array([0, 128, 255], np.uint8))
    w.add("a.i8", [-128, 0, 127], elem_type=pygguf.INT8)
    w.add("a.u16", [1, 65535], elem_type=pygguf.UINT16)
    w.add("a.i16", np.array([-32768, 32767], np.int16))
    w.add("a.u32", [0, 4294967295])
    w.add("a.i32", [-1, 0, 2147483647])
    w.add("a.f32", [1.5, -0.0, 1e30])
    w.add("a.bool", [True, False, True])
    w.add("a.u64", np.array([0, 2**64 - 1], np.uint64))
    w.add("a.i64", [-(1 << 63), 5], elem_type=pygguf.INT64)
    w.add("a.f64", np.array([1e-300, -2.0]))
    w.add("a.empty", [], elem_type=pygguf.FLOAT32)
    w.add("a.str", STRS)
    w.add("general.alignment", 64)
    for k, t in enumerate(TYPES):
        w.add_tensor("t." + t, ref_values(k, 192).reshape(3, 64), t)
    w.add_tensor("t.3d", ref_values(5, 60).reshape(3, 4, 5), "f32")
    return w


def run(*args):
    p = subprocess.run(testlib.wrap([XCHECK] + list(args)), capture_output=True, text=True)
    check(p.returncode == 0, "xcheck %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))


def c_writes_python_reads():
    run("write-all", "xc-c.gguf")
    r = pygguf.read("xc-c.gguf")
    check(r.version == 3 and r.alignment == 64 and len(r.kv) == 28 and len(r.tensors) == 6, "header")
    expect = {"general.architecture": (pygguf.STRING, "llama"), "s.u8": (pygguf.UINT8, 200),
              "s.i8": (pygguf.INT8, -100), "s.u16": (pygguf.UINT16, 60000), "s.i16": (pygguf.INT16, -30000),
              "s.u32": (pygguf.UINT32, 4000000000), "s.i32": (pygguf.INT32, -2000000000),
              "s.f32": (pygguf.FLOAT32, float(np.float32(0.1))), "s.bool": (pygguf.BOOL, True),
              "s.u64": (pygguf.UINT64, (1 << 63) + 5), "s.i64": (pygguf.INT64, -(1 << 50)),
              "s.f64": (pygguf.FLOAT64, -3.25e300), "s.str": (pygguf.STRING, "h\u00e9llo")}
    for k, (t, v) in expect.items():
        got = r.kv.get(k)
        check(got is not None and got.type == t and got.value == v, "%s = %r" % (k, got))
    arrays = {"a.u8": (pygguf.UINT8, [0, 128, 255]), "a.i8": (pygguf.INT8, [-128, 0, 127]),
              "a.u16": (pygguf.UINT16, [1, 65535]), "a.i16": (pygguf.INT16, [-32768, 32767]),
              "a.u32": (pygguf.UINT32, [0, 4294967295]), "a.i32": (pygguf.INT32, [-1, 0, 2147483647]),
              "a.f32": (pygguf.FLOAT32, [1.5, -0.0, float(np.float32(1e30))]),
              "a.bool": (pygguf.BOOL, [True, False, True]), "a.u64": (pygguf.UINT64, [0, 2**64 - 1]),
              "a.i64": (pygguf.INT64, [-(1 << 63), 5]), "a.f64": (pygguf.FLOAT64, [1e-300, -2.0]),
              "a.empty": (pygguf.FLOAT32, []), "a.str": (pygguf.STRING, STRS)}
    for k, (et, v) in arrays.items():
        got = r.kv.get(k)
        ok = got is not None and got.type == pygguf.ARRAY and got.elem_type == et and len(got.value) == len(v)
        check(ok and all(a == b for a, b in zip(list(got.value), v)), "%s = %r" % (k, got))
    check(np.signbit(r.get("a.f32")[1]), "a.f32[1] is -0.0")
    for k, t in enumerate(TYPES):
        tt = r.tensors.get("t." + t)
        src = ref_values(k, 192)
        check(tt is not None and tt.type == t and tt.ne == (64, 3) and tt.shape == (3, 64), "t.%s info" % t)
        check(tt.offset % 64 == 0, "t.%s aligned" % t)
        check(np.array_equal(tt.raw, pygguf.quantize(src, t)), "t.%s bytes equal pygguf's quantisation" % t)
        deq = tt.numpy().reshape(-1)
        tol = {"f32": 0, "f16": 2**-11, "bf16": 2**-8, "q8_0": 0.6 / 127, "q4_0": 1 / 8 * 1.01}[t]
        bound = tol * np.abs(src.reshape(-1, 32 if t.startswith("q") else 1)).max(axis=1).repeat(
            32 if t.startswith("q") else 1)
        check(np.all(np.abs(deq - src) <= bound), "t.%s dequantises within its error bound" % t)
    t3 = r.tensors["t.3d"]
    check(t3.shape == (3, 4, 5) and np.array_equal(t3.numpy().reshape(-1), ref_values(5, 60)), "t.3d")


def python_writes_c_reads():
    w = reference_content()
    w.write("xc-py.gguf")
    a = open("xc-py.gguf", "rb").read()
    b = open("xc-c.gguf", "rb").read()
    check(a == b and a == w.tobytes(), "pygguf's bytes equal the C writer's (%d vs %d bytes)" % (len(a), len(b)))
    run("read-all", "xc-py.gguf")
    # replacing a key keeps its position
    w.add("general.name", "renamed")
    r = pygguf.read(w.tobytes())
    check(list(r.kv)[1] == "general.name" and r.get("general.name") == "renamed", "replace in place")


def quantisers_agree():
    rng = np.random.default_rng(1234)
    w = pygguf.Writer()
    cases = [
        rng.standard_normal(32 * 64).astype(np.float32),
        (rng.standard_normal(32 * 16) * 1e-3).astype(np.float32),
        (rng.uniform(-1, 1, 32 * 16) * np.float32(65504)).astype(np.float32),
        np.round(rng.standard_normal(32 * 32) * 8).astype(np.float32) / 8,  # many ties
        np.concatenate([np.zeros(32), np.full(32, 3.0), np.full(32, -3.0), np.arange(32) - 16.0,
                        np.r_[np.full(16, 4.0), np.full(16, -4.0)], np.r_[np.full(16, -4.0), np.full(16, 4.0)],
                        np.full(32, 1e-30), np.full(32, 1e-40)]).astype(np.float32),
        (rng.standard_normal(32 * 16) * np.exp2(rng.integers(-20, 10, 32 * 16))).astype(np.float32),
        # exact scales (amax 127 * 2^k, so d and 1/d are powers of two): q8_0 ties at x.5 round away
        # from zero, q4_0 (amax 8 * 2^k) truncates at exact integers
        np.concatenate([np.r_[127.0, np.arange(31) - 15.5] * 2.0**k for k in range(-3, 4)] +
                       [np.r_[-8.0, np.arange(31) / 2 - 7.5] * 2.0**k for k in range(-3, 4)]).astype(np.float32),
    ]
    for i, x in enumerate(cases):
        w.add_tensor("src.%d" % i, x, "f32")
        for t in TYPES[1:] + ["q4_1", "q5_0", "q5_1"]:
            raw = pygguf.quantize(x, t)
            w.add_tensor_raw("%s.%d" % (t, i), t, (x.size,), raw)
            w.add_tensor("deq.%s.%d" % (t, i), pygguf.dequantize(raw, t, x.size), "f32")
    w.write("xc-quant.gguf")
    run("check-quant", "xc-quant.gguf")
    # conversions agree with numpy's own half type on every finite half
    h = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    f = pygguf.f16_bits_to_f32(h)
    fin = np.isfinite(f)
    check(np.array_equal(pygguf.f32_to_f16_bits(f[fin]), h[fin]), "f16 round trip")
    b = pygguf.bf16_bits_to_f32(h)
    nn = ~np.isnan(b)
    check(np.array_equal(pygguf.f32_to_bf16_bits(b)[nn], h[nn]), "bf16 round trip")
    check(pygguf.f32_to_bf16_bits(np.array([1.0 + 2**-8], np.float32))[0] == 0x3F80, "bf16 tie to even")
    check(pygguf.f32_to_bf16_bits(np.array([1.0 + 3 * 2**-8], np.float32))[0] == 0x3F82, "bf16 tie up")


def vocab_and_malformed():
    shared = testlib.SHARED
    for name, model, n in [("ggml-vocab-llama-spm.gguf", "llama", 32000), ("ggml-vocab-gpt-2.gguf", "gpt2", 50257)]:
        r = pygguf.read(os.path.join(shared, "vocab-tests", name))
        check(r.get("tokenizer.ggml.model") == model and len(r.get("tokenizer.ggml.tokens")) == n, name)
    good = bytearray(open("xc-c.gguf", "rb").read())
    r = pygguf.read(bytes(good))
    t_a, t_b = r.tensors["t.f32"], r.tensors["t.f16"]

    def bad(data, needle, label):
        try:
            pygguf.read(bytes(data))
            check(False, "%s: accepted" % label)
        except pygguf.GGUFError as e:
            check(needle in str(e), "%s: %s (expected %r)" % (label, e, needle))

    b = bytearray(good)
    b[0:4] = b"GGUX"
    bad(b, "bad magic", "magic")
    b = bytearray(good)
    b[4:8] = struct.pack("<I", 1)
    bad(b, "version 1", "version")
    bad(good[:t_b.offset + 3], "runs past the end", "truncated data")
    bad(good[:300], "offset", "truncated metadata")
    # overlap: point t.f16's data offset at t.f32's
    info = t_b.info_offset + 8 + len("t.f16") + 4 + 16 + 4
    b = bytearray(good)
    b[info:info + 8] = struct.pack("<Q", t_a.offset - r.data_offset)
    bad(b, "overlap", "overlap")
    b = bytearray(good)
    b[info - 4:info] = struct.pack("<I", 21)  # iq3_s
    bad(b, "not supported", "tensor type")


c_writes_python_reads()
python_writes_c_reads()
quantisers_agree()
vocab_and_malformed()
for f in ("xc-c.gguf", "xc-py.gguf", "xc-quant.gguf"):
    if os.path.exists(f):
        os.remove(f)
sys.exit(testlib.finish())
