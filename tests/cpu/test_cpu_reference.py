"""test_cpu_reference.py: the CPU backend's logits against the independent numpy reference
(tools/reference/llama_ref.py, float64) on random models written by the C GGUF writer (mkmodel):
GQA and not, tied and separate heads, NORM and NEOX RoPE, partial rotation, linear RoPE scaling,
every weight type, odd sizes. Each model runs a prefill chain (every row's logits) and then
single-token decode steps, all compared with the reference's logits for the same tokens.

Error measure: max over rows and vocabulary of |cpu - ref| / max |ref| over the whole run (the
logits' scale), i.e. normalised by the largest reference logit. The reference dequantises the very
weights stored in the file, so quantisation error is not part of it: what remains is the CPU's
f32 arithmetic against float64 (observed: about 1e-7). Bound: 1e-5 for every type, tighter than
the 1e-4 asked of F32 weights, since the reference sees the same stored weights.

A second, looser check per quantised type measures quantisation itself: the same model written
in f32 (mkmodel draws the same values for any --type from the same seed) gives the float64
reference, and the quantised model's CPU logits must stay within QUANT_BOUND of it, with the same
normalisation: f16 2e-3, bf16 2e-2, q8_0 2e-2, q4_0 2e-1, q4_K 1.5e-1, q5_K 4e-2, q6_K 4e-2, q3_K 1.5e-1,
q2_K 7e-1 (two bits: 0.49 observed), iq4_nl 1.5e-1, iq4_xs 1.5e-1, q4_1 1.5e-1, q5_0 6e-2, q5_1 1e-1 (observed values are
printed).

usage: test_cpu_reference.py CPU_LOGITS_EXE WORKDIR
"""

import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import llama_ref  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import testlib  # noqa: E402

BOUND = {"f32": 1e-5, "f16": 1e-5, "bf16": 1e-5, "q8_0": 1e-5, "q4_0": 1e-5, "q4_K": 1e-5, "q5_K": 1e-5, "q6_K": 1e-5,
         "q2_K": 1e-5, "q3_K": 1e-5, "iq4_nl": 1e-5, "iq4_xs": 1e-5, "q4_1": 1e-5, "q5_0": 1e-5, "q5_1": 1e-5}
QUANT_BOUND = {"f16": 2e-3, "bf16": 2e-2, "q8_0": 2e-2, "q4_0": 2e-1, "q4_K": 1.5e-1, "q5_K": 4e-2, "q6_K": 4e-2,
               "q3_K": 1.5e-1, "q2_K": 7e-1, "iq4_nl": 1.5e-1, "iq4_xs": 1.5e-1, "q4_1": 1.5e-1, "q5_0": 6e-2, "q5_1": 1e-1}

# name, type, vocab, embd, layers, heads, kv heads, ff, tied, rope, n_rot (0 = head_dim), rope scale,
# prefill, decode, threads, freq base, eps
CASES = [
    ("f32-gqa-neox-odd", "f32", 261, 40, 2, 4, 2, 72, 0, "neox", 0, 1.0, 9, 4, 2, 10000.0, 1e-5),
    ("f32-mha-norm-tied", "f32", 300, 48, 3, 6, 6, 100, 1, "norm", 0, 1.0, 7, 3, 1, 10000.0, 1e-6),
    ("f32-partial-rot-scaled", "f32", 280, 64, 2, 4, 1, 96, 0, "norm", 10, 4.0, 12, 3, 3, 500000.0, 1e-5),
    ("f16-gqa-neox", "f16", 270, 40, 2, 4, 2, 72, 0, "neox", 6, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("bf16-tied-norm", "bf16", 290, 48, 2, 6, 3, 80, 1, "norm", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("q8_0-gqa-norm", "q8_0", 300, 64, 2, 4, 2, 96, 0, "norm", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("q8_0-mqa-neox-tied", "q8_0", 261, 96, 2, 6, 1, 160, 1, "neox", 8, 2.0, 6, 3, 3, 10000.0, 1e-5),
    ("q4_0-gqa-neox", "q4_0", 275, 64, 2, 8, 4, 128, 0, "neox", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("q4_0-tied-norm", "q4_0", 260, 32, 3, 2, 2, 64, 1, "norm", 0, 1.0, 5, 5, 1, 10000.0, 1e-5),
    # K-quants: rows of whole 256-element super-blocks
    ("q4_K-gqa-neox", "q4_K", 261, 256, 2, 4, 2, 512, 0, "neox", 0, 1.0, 6, 3, 2, 10000.0, 1e-5),
    ("q5_K-mha-norm-tied", "q5_K", 270, 256, 1, 4, 4, 256, 1, "norm", 0, 1.0, 5, 3, 1, 10000.0, 1e-5),
    ("q6_K-mqa-norm", "q6_K", 300, 256, 2, 8, 1, 512, 0, "norm", 0, 1.0, 6, 3, 3, 10000.0, 1e-5),
    ("q3_K-gqa-norm-tied", "q3_K", 270, 256, 2, 4, 2, 512, 1, "norm", 0, 1.0, 6, 3, 2, 10000.0, 1e-5),
    ("q2_K-mha-neox", "q2_K", 261, 256, 1, 4, 4, 256, 0, "neox", 0, 1.0, 5, 3, 1, 10000.0, 1e-5),
    # IQ4_NL: 32-element blocks
    ("iq4_nl-gqa-neox-tied", "iq4_nl", 280, 64, 2, 4, 2, 96, 1, "neox", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    # IQ4_XS: IQ4_NL's blocks under 256-element super-blocks
    ("iq4_xs-mqa-norm", "iq4_xs", 266, 256, 2, 4, 1, 512, 0, "norm", 0, 1.0, 6, 3, 2, 10000.0, 1e-5),
    # llama.cpp's fallbacks for rows that are not whole super-blocks (widths of 96 and 160 here)
    ("q5_0-gqa-neox-tied", "q5_0", 270, 96, 2, 6, 2, 160, 1, "neox", 0, 1.0, 8, 4, 2, 10000.0, 1e-5),
    ("q5_1-mha-norm", "q5_1", 265, 64, 2, 4, 4, 96, 0, "norm", 0, 1.0, 7, 3, 1, 10000.0, 1e-5),
    ("q4_1-gqa-norm-tied", "q4_1", 275, 96, 1, 4, 2, 160, 1, "norm", 0, 1.0, 6, 3, 3, 10000.0, 1e-5),
]


def run_cpu(exe, workdir, case, typ, extra=()):
    """Writes the case's model in type typ, runs it on the CPU; returns (model path, tokens, logits).
    extra: cpu_logits' optional ARCH SLIDING_WINDOW ATTN_CAP FINAL_CAP."""
    (name, _, vocab, embd, layers, heads, kv, ff, tied, rope, n_rot, scale, p, d, threads, base, eps) = case
    model = os.path.join(workdir, "ref-%s-%s.gguf" % (name, typ))
    out = os.path.join(workdir, "ref-%s-%s.logits" % (name, typ))
    args = [exe, model, out, str(p), str(d), str(threads), typ, str(vocab), str(embd), str(layers), str(heads),
            str(kv), str(ff), str(tied), rope, str(n_rot), repr(scale), str(len(name) * 7919 + 1), repr(base),
            repr(eps)] + list(extra)
    subprocess.run(testlib.wrap(args), check=True)
    with open(out, "rb") as f:
        n, v = struct.unpack("<ii", f.read(8))
        tokens = np.frombuffer(f.read(4 * n), dtype="<i4").copy()
        got = np.frombuffer(f.read(4 * n * v), dtype="<f4").reshape(n, v).astype(np.float64)
    os.remove(out)
    return model, tokens, got


def rel_err(got, ref):
    """max |got - ref| / max |ref|; inf if got is not finite or a clear argmax differs."""
    if not np.all(np.isfinite(got)):
        return float("inf")
    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    # the same argmax wherever the reference's top two are further apart than the error allows
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 4 * err * np.max(np.abs(ref))
    if not np.all(got.argmax(axis=1)[clear] == ref.argmax(axis=1)[clear]):
        return float("inf")
    return err


def main(argv):
    exe, workdir = argv[1], argv[2]
    failures = 0
    for case in CASES:
        name, typ = case[0], case[1]
        model, tokens, got = run_cpu(exe, workdir, case, typ)
        m = llama_ref.Model(model)
        assert m.n_vocab == got.shape[1], (m.n_vocab, got.shape)
        err = rel_err(got, llama_ref.forward(m, [int(t) for t in tokens]))
        ok = err < BOUND[typ]
        failures += not ok
        print("%-24s cpu vs reference of the same file: %.3g (bound %g) %s" % (
            name, err, BOUND[typ], "ok" if ok else "FAIL"))
        os.remove(model)
        if typ in QUANT_BOUND:
            model32, tokens32, _ = run_cpu(exe, workdir, case, "f32")
            assert np.array_equal(tokens, tokens32)
            qerr = rel_err(got, llama_ref.forward(llama_ref.Model(model32), [int(t) for t in tokens]))
            ok = qerr < QUANT_BOUND[typ]
            failures += not ok
            print("%-24s %s cpu vs f32 reference (quantisation): %.3g (bound %g) %s" % (
                name, typ, qerr, QUANT_BOUND[typ], "ok" if ok else "FAIL"))
            os.remove(model32)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
