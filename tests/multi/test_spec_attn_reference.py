"""test_spec_attn_reference.py: the CPU backend's speculative flash decode (ALSpec, Algorithm 3)
against float64 numpy on the cases spec_attn_dump.c writes: the exact output A and the
speculation (attention over the first chunk [0, S) and the chunks of S that hold the last S
keys) within 2e-5 of the reference, normalised by the largest |reference| of the
case; the hit flag equal to the reference's decision ||spec - A|| < lambda ||A|| wherever the
reference's ratio is not within 2% of lambda; no speculation below 2S keys. The cases must
produce both hits and misses, else the check on the flag proves nothing.

usage: test_spec_attn_reference.py SPEC_ATTN_DUMP_EXE WORKDIR
"""

import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402

BOUND = 2e-5


def attend(q, k, v, scale):
    s = (k @ q) * scale
    p = np.exp(s - s.max())
    return (p @ v) / p.sum()


def main():
    exe, workdir = sys.argv[1], sys.argv[2]
    path = os.path.join(workdir, "spec_attn.bin")
    subprocess.run(testlib.wrap([exe, path]), check=True)
    data = open(path, "rb").read()
    off = 0

    def take(dtype, count):
        nonlocal off
        a = np.frombuffer(data, dtype=dtype, count=count, offset=off)
        off += a.nbytes
        return a

    n_case = int(take(np.int32, 1)[0])
    failures, hits, misses = 0, 0, 0
    for ci in range(n_case):
        n_head, n_kv, hd, n, chunk, n_ctx, valid, hit = (int(x) for x in take(np.int32, 8))
        lam = float(take(np.float32, 1)[0])
        q = take(np.float32, n_head * hd).astype(np.float64).reshape(n_head, hd)
        kc = take(np.float32, n_kv * n_ctx * hd).astype(np.float64).reshape(n_kv, n_ctx, hd)
        vc = take(np.float32, n_kv * n_ctx * hd).astype(np.float64).reshape(n_kv, n_ctx, hd)
        out = take(np.float32, n_head * hd).astype(np.float64).reshape(n_head, hd)
        spec = take(np.float32, n_head * hd).astype(np.float64).reshape(n_head, hd)
        scale = 1.0 / np.sqrt(np.float32(hd))
        scale = float(np.float32(scale))
        group = n_head // n_kv
        want_valid = n >= 2 * chunk
        s2 = (n - chunk) // chunk * chunk
        keys = np.r_[0:chunk, s2:n] if want_valid else None
        ref = np.zeros((n_head, hd))
        ref_spec = np.zeros((n_head, hd))
        for h in range(n_head):
            k, v = kc[h // group, :n], vc[h // group, :n]
            ref[h] = attend(q[h], k, v, scale)
            if want_valid:
                ref_spec[h] = attend(q[h], k[keys], v[keys], scale)
        err = np.abs(out - ref).max() / np.abs(ref).max()
        line = "case %d: n %d S %d heads %d/%d hd %d: exact err %.2e" % (ci, n, chunk, n_head, n_kv, hd, err)
        ok = err < BOUND and bool(valid) == want_valid
        if want_valid:
            serr = np.abs(spec - ref_spec).max() / np.abs(ref_spec).max()
            ratio = np.linalg.norm(ref_spec - ref) / np.linalg.norm(ref)
            decided = abs(ratio - lam) > 0.02 * max(lam, 1e-3)
            line += ", spec err %.2e, ratio %.4f, lambda %.2f, hit %d" % (serr, ratio, lam, hit)
            ok = ok and serr < BOUND
            if decided:
                ok = ok and bool(hit) == (ratio < lam)
                hits += bool(hit)
                misses += not hit
            else:
                line += " (at the boundary: flag not checked)"
        else:
            ok = ok and not hit
            line += ", no speculation (n < 2S)"
        print(("ok   " if ok else "FAIL ") + line)
        failures += not ok
    if off != len(data):
        print("FAIL trailing bytes in the dump")
        failures += 1
    if hits == 0 or misses == 0:
        print("FAIL the cases gave %d hits and %d misses: both are needed" % (hits, misses))
        failures += 1
    print("%d cases, %d failed" % (n_case, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
