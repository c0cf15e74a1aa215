"""test_kquant.py: the C library's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), IQ4_NL, IQ4_XS, Q4_1, Q5_0
and Q5_1 against the independent numpy decoder (tools/reference/kquants.py).

1. Dequantisation, bit for bit: random super-blocks written by tools/pygguf with ordinary scales,
   scales of any bit pattern (subnormal, zero, huge, infinite, NaN) and all-zero scales; xcheck
   dequantises them in C; numpy must give the same float32 bits (NaN where C has NaN).
2. Quantisation: xcheck quantises float32 rows of several distributions (uniform, offset, heavy
   tailed, rows with all-zero super-blocks, small values whose scales are f16 subnormals) in C; numpy decodes the result and the
   error must stay within per-type bounds (RMS relative to the input's RMS, and the worst element
   relative to its super-block's largest magnitude); zero super-blocks stay exactly zero, and the
   scale structure is the reference quantiser's: in Q4_K/Q5_K the largest 6-bit scale of a
   non-zero super-block is 63, in Q6_K some sub-block's int8 scale is -128, in Q2_K the largest
   4-bit scale is 15, in Q3_K and IQ4_XS some 6-bit scale is 0 (that is -32, the largest magnitude's).

usage: test_kquant.py XCHECK_EXE   (run by meson in the build directory)
"""

import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("pygguf")
testlib.tools("reference")
import kquants  # noqa: E402
import pygguf  # noqa: E402

XCHECK = os.path.abspath(sys.argv[1])
rng = np.random.default_rng(20261126)

# bounds (observed values are printed): RMS error / RMS of x, worst |error| / super-block amax
RMS_BOUND = {"q4_K": 0.11, "q5_K": 0.065, "q6_K": 0.038, "q2_K": 0.5, "q3_K": 0.28, "iq4_nl": 0.15,
             "iq4_xs": 0.15, "q4_1": 0.15, "q5_0": 0.08, "q5_1": 0.07}
MAX_BOUND = {"q4_K": 0.12, "q5_K": 0.12, "q6_K": 0.09, "q2_K": 0.55, "q3_K": 0.35, "iq4_nl": 0.18,
             "iq4_xs": 0.2, "q4_1": 0.12, "q5_0": 0.08, "q5_1": 0.06}
# the f16 scales' byte offsets in a type's 256 elements
SCALE_OFFS = {"q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208], "q2_K": [80, 82], "q3_K": [108],
              "iq4_nl": list(range(0, 144, 18)), "iq4_xs": [0], "q5_0": list(range(0, 176, 22)),
              "q4_1": [o for b in range(0, 160, 20) for o in (b, b + 2)],
              "q5_1": [o for b in range(0, 192, 24) for o in (b, b + 2)]}


def random_blocks(type_name, nb, scales):
    bb = kquants.TYPES[type_name][1]
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in SCALE_OFFS[type_name]:
        h = rng.integers(0, 65536, size=nb, dtype=np.uint32)
        if scales == "ordinary":
            h = (h & 0x83FF) | (rng.integers(5, 13, size=nb, dtype=np.uint32) << 10)
        elif scales == "zero":
            h[:] = 0
        elif scales == "special":  # one of each kind at least
            h[:6] = [0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFE00, 0x8000]
        raw[:, o] = h & 255
        raw[:, o + 1] = h >> 8
    return raw


def dequantisation(workdir):
    w = pygguf.Writer()
    want = {}
    for t in kquants.TYPES:
        for scales in ("ordinary", "any", "special", "zero"):
            nb = 48
            name = "%s.%s" % (t, scales)
            raw = random_blocks(t, nb, scales)
            w.add_tensor_raw(name, t, (512, nb // 2), raw)
            want[name] = kquants.dequantize(raw.reshape(-1), t, nb * 256)
    src, out = os.path.join(workdir, "kq-deq-in.gguf"), os.path.join(workdir, "kq-deq-out.gguf")
    w.write(src)
    subprocess.run(testlib.wrap([XCHECK, "kquant", src, out]), check=True, stdout=subprocess.DEVNULL)
    r = pygguf.read(out)
    for name, ref in want.items():
        got = r.tensors["deq." + name].numpy().reshape(-1)
        same = (got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))
        bad = np.flatnonzero(~same)
        check(bad.size == 0, "%s: %d of %d values differ, first at %s: C %r, numpy %r" % (
            name, bad.size, got.size, bad[:1], got[bad[:1]], ref[bad[:1]]))
    print("dequantisation: %d tensors bit-identical" % len(want))
    os.remove(src), os.remove(out)


def rows(kind):
    n_rows, n = 24, 1024
    u = rng.uniform(-1, 1, size=(n_rows, n)).astype(np.float32)
    if kind == "uniform":
        return u
    if kind == "offset":
        return (u + 0.75).astype(np.float32)
    if kind == "heavy":
        return (rng.standard_t(3, size=(n_rows, n)) * 0.02).astype(np.float32)
    if kind == "zeros":
        u[:, 256:512] = 0
        u[3] = 0
        return u
    if kind == "tiny":
        return (u * 2e-3).astype(np.float32)  # sub-block scales in f16's subnormal range
    raise ValueError(kind)


def quantisation(workdir):
    kinds = ["uniform", "offset", "heavy", "zeros", "tiny"]
    w = pygguf.Writer()
    xs = {}
    for k in kinds:
        xs[k] = rows(k)
        w.add_tensor("src." + k, xs[k], "f32")
    src, out = os.path.join(workdir, "kq-q-in.gguf"), os.path.join(workdir, "kq-q-out.gguf")
    w.write(src)
    subprocess.run(testlib.wrap([XCHECK, "kquant", src, out]), check=True, stdout=subprocess.DEVNULL)
    r = pygguf.read(out)
    for t in kquants.TYPES:
        bb = kquants.TYPES[t][1]
        for k in kinds:
            x = xs[k].reshape(-1).astype(np.float64)
            tensor = r.tensors["%s.%s" % (t, k)]
            check(tensor.type == t, "%s.%s stored as %s" % (t, k, tensor.type))
            y = kquants.dequantize(tensor.raw, t, x.size).astype(np.float64)
            rms = np.sqrt(np.sum((y - x) ** 2) / np.sum(x ** 2))
            amax = np.abs(x).reshape(-1, 256).max(axis=1)
            worst = np.max(np.abs(y - x).reshape(-1, 256).max(axis=1) / np.where(amax > 0, amax, 1))
            print("%s %-8s rms error / rms %.4f, worst / block amax %.4f" % (t, k, rms, worst))
            check(rms <= RMS_BOUND[t], "%s %s: rms error %g > %g" % (t, k, rms, RMS_BOUND[t]))
            check(worst <= MAX_BOUND[t], "%s %s: worst error %g > %g" % (t, k, worst, MAX_BOUND[t]))
            zero = amax == 0
            check(np.all(y.reshape(-1, 256)[zero] == 0), "%s %s: a zero super-block is not zero" % (t, k))
            blk = np.asarray(tensor.raw, dtype=np.uint8).reshape(-1, bb)
            if t == "q2_K":
                check(np.all((blk[~zero, 0:16] & 15).max(axis=1) == 15), "%s %s: largest 4-bit scale is not 15" % (t, k))
            elif t == "q3_K":
                s = blk[:, 96:108].astype(np.int64)
                i = np.arange(16)
                s6 = np.where(i < 8, s[:, i % 8] & 15, s[:, i % 8] >> 4) | (((s[:, 8 + i % 4] >> (2 * (i // 4))) & 3) << 4)
                check(np.all(s6[~zero].min(axis=1) == 0), "%s %s: no 6-bit scale of -32" % (t, k))
            elif t == "iq4_xs":
                sh = blk[:, 2].astype(np.int64) | (blk[:, 3].astype(np.int64) << 8)
                j = np.arange(8)
                ls = ((blk[:, 4 + j // 2].astype(np.int64) >> (4 * (j % 2))) & 15) | (((sh[:, None] >> (2 * j)) & 3) << 4)
                check(np.all(ls[~zero].min(axis=1) == 0), "%s %s: no 6-bit scale of -32" % (t, k))
            elif t in kquants.B32:
                pass  # one f16 scale (and min) per 32 elements: no scale structure to check
            elif t == "q6_K":
                sc = blk[:, 192:208].view(np.int8)
                check(np.all(sc[~zero].min(axis=1) == -128), "%s %s: no sub-block scale of -128" % (t, k))
                check(np.all(blk[zero] == 0), "%s %s: a zero super-block has nonzero bytes" % (t, k))
            else:
                sc, _ = kquants._scale_min(blk[:, 4:16])
                check(np.all(sc[~zero].max(axis=1) == 63), "%s %s: largest 6-bit scale is not 63" % (t, k))
    os.remove(src), os.remove(out)


def main():
    workdir = os.getcwd()
    dequantisation(workdir)
    quantisation(workdir)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
