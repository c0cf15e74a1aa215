"""test_mem_model_reference.py: the in-memory models of the tests that compare the CPU backend with
itself (tests/cpu/mem_models.h: cpu_forward, session, context_shift, spec_stream, spec_edit,
spec_draft) against the independent numpy reference (tools/reference/llama_ref.py, float64).

Those tests pass whatever numbers a model gives, as long as the CPU gives them consistently: a
model built wrong (a residual scale or logit multiplier left 0 by mem_model.h once dropped every
branch and zeroed the logits) or a forward pass wrong on every path goes through them unseen. Here
mem_model_logits writes each of those models, built as the tests build them, as a llama GGUF file
holding the same weight bytes and the hyperparameters a llama file states, with the CPU logits of
the in-memory model for a prefill chain and a few decode steps; the reference reads the file and
computes the same tokens' logits.

Error measure and bound as in test_cpu_reference.py: max |cpu - ref| / max |ref| over the run
below 1e-5 (the reference dequantises the very weights stored, so quantisation is not part of it),
and the argmax agrees wherever the reference's top two are clearly apart.

usage: test_mem_model_reference.py MEM_MODEL_LOGITS_EXE WORKDIR
"""

import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import llama_ref  # noqa: E402
import test_cpu_reference as base  # noqa: E402
import testlib  # noqa: E402

BOUND = 1e-5


def read_logits(path):
    with open(path, "rb") as f:
        n, v = struct.unpack("<ii", f.read(8))
        tokens = np.frombuffer(f.read(4 * n), dtype="<i4").copy()
        got = np.frombuffer(f.read(4 * n * v), dtype="<f4").reshape(n, v).astype(np.float64)
    return tokens, got


def main(argv):
    exe, workdir = argv[1], os.path.join(argv[2], "mem-model-reference")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    proc = subprocess.run(testlib.wrap([exe, workdir]), capture_output=True, text=True)
    testlib.check(proc.returncode == 0, "mem_model_logits wrote every model and its logits", proc)
    index = os.path.join(workdir, "index")
    names = []
    if os.path.exists(index):
        with open(index) as f:
            names = f.read().split()
    testlib.check(len(names) > 0, "mem_model_logits listed its models in %s" % index)
    for name in names:
        tokens, got = read_logits(os.path.join(workdir, name + ".logits"))
        m = llama_ref.Model(os.path.join(workdir, name + ".gguf"))
        ok = m.arch == "llama" and m.n_vocab == got.shape[1]
        err = base.rel_err(got, llama_ref.forward(m, [int(t) for t in tokens])) if ok else float("inf")
        ok = ok and err < BOUND
        print("%-28s cpu (in memory) vs reference of its file: %.3g (bound %g) %s" % (
            name, err, BOUND, "ok" if ok else "FAIL"))
        testlib.check(ok, "%s: the CPU's logits of the in-memory model vs llama_ref: %.3g" % (name, err))
    if testlib.failures == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
