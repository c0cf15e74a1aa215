"""alspec_latency.py: the paper's latency model (Appendix F) fed with times measured here, for
docs/perf.md: what ALSpec on two devices would gain at 1K..128K keys, per hit rate.

Measured (on whatever machine runs this; the CPU backend):
  per_layer   the ops of one decoder layer other than attention, per decode token, and fixed (the
              embedding and the output head), from `edgespec run --profile` on MODEL;
  FD(K)       plain flash decode of one token over K keys, and SFD_S(K) the speculative kernel
              (the sender's), from bench_spec_attn at MODEL's head shape, K = 1K..32K;
  SFD_R       the receiver's wait: the speculation alone, i.e. attention over the first chunk and
              the chunks of the last S keys (2S..3S keys): FD scaled linearly to 2.5 S keys.
Beyond 32K keys FD and SFD_S are extrapolated linearly from 16K..32K (marked). The formulas:
  plain:  fixed + N (per_layer + FD(K))
  ALSpec: fixed + floor(N r) (SFD_R + max(SFD_S(K) - SFD_R, per_layer))
                + ceil(N (1 - r)) (per_layer + SFD_S(K))
Nothing here is a measured speed-up: it is the model's projection for two devices that do not
share their cores, which this machine does not have.

usage: alspec_latency.py CLI BENCH_SPEC_ATTN MODEL N_LAYER N_HEAD N_HEAD_KV HEAD_DIM CHUNK RATES...
"""

import json
import math
import re
import subprocess
import sys


def profile(cli, model, n_layer):
    p = subprocess.run([cli, "run", "-m", model, "-p", "hello world", "-n", "64", "--ignore-eos", "--temp", "0",
                        "--profile", "--threads", "1"], capture_output=True, text=True, check=True)
    ops = {}
    for line in p.stderr.splitlines():
        m = re.match(r"\s+(\w+)\s+(\d+)\s+([0-9.]+)\s+[0-9.]+%", line)
        if m:
            ops[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    calls = ops["mul_mat_head"][0]
    layer_ops = [k for k in ops if k not in ("get_rows", "mul_mat_head", "attention")]
    per_layer = sum(ops[k][1] for k in layer_ops) / (calls * n_layer)
    fixed = (ops["get_rows"][1] + ops["mul_mat_head"][1]) / calls
    return per_layer, fixed


def kernels(bench, nh, nkv, hd, chunk):
    p = subprocess.run([bench, "cpu", "9", str(nh), str(nkv), str(hd), str(chunk), "1"], capture_output=True,
                       text=True, check=True)
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    return {r["n"]: (r["plain_ms"], r["spec_ms"]) for r in rows}


def main():
    cli, bench, model = sys.argv[1:4]
    n_layer, nh, nkv, hd, chunk = (int(x) for x in sys.argv[4:9])
    rates = [float(x) for x in sys.argv[9:]]
    per_layer, fixed = profile(cli, model, n_layer)
    k = kernels(bench, nh, nkv, hd, chunk)
    ks = sorted(k)
    sfd_r = k[ks[0]][0] * (2.5 * chunk) / ks[0]
    print(json.dumps({"bench": "alspec_latency_inputs", "model": model, "per_layer_ms": per_layer, "fixed_ms": fixed,
                      "sfd_r_ms": sfd_r, "fd_ms": {n: v[0] for n, v in k.items()},
                      "sfd_s_ms": {n: v[1] for n, v in k.items()}}))
    a, b = ks[-2], ks[-1]
    for K in [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]:
        if K in k:
            fd, sfd = k[K]
            extrap = False
        else:
            fd = k[b][0] + (k[b][0] - k[a][0]) * (K - b) / (b - a)
            sfd = k[b][1] + (k[b][1] - k[a][1]) * (K - b) / (b - a)
            extrap = True
        plain = fixed + n_layer * (per_layer + fd)
        row = {"bench": "alspec_latency", "keys": K, "extrapolated": extrap, "fd_ms": round(fd, 4),
               "sfd_s_ms": round(sfd, 4), "plain_ms": round(plain, 3)}
        for r in rates:
            hit = math.floor(n_layer * r)
            miss = math.ceil(n_layer * (1 - r))
            spec = fixed + hit * (sfd_r + max(sfd - sfd_r, per_layer)) + miss * (per_layer + sfd)
            row["speedup_r%.3f" % r] = round(plain / spec, 3)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
