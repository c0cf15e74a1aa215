#!/usr/bin/env python3
"""Two or more builds' (or adapters') adaptive Speculative Streaming defaults, prompt by prompt.

For the four held-out prompts of spec_sweep.py, each round runs plain decoding once (with the
first build) and, with every build in turn, `--spec stream` with pruning chosen from costs and
with `--prune 0`; the report is each configuration's speed-up over plain decoding, the median of
the rounds per prompt, and their geometric mean over the prompts. The adaptive default's choices
follow its timings, so one run of a prompt says little; many rounds of the same prompt, the builds
taking turns, are what tells two builds apart (docs/perf.md). Several adapters (--adapter A,B)
make every build run with each in turn; --fixed-ref GAMMA,K adds the fixed tree GAMMA,K without
pruning, the reference the default is held against.

    tests/bench/spec_ab.py --model M --adapter A --backend cpu --n 256 --rounds 8 BUILD_A BUILD_B
    tests/bench/spec_ab.py --model M --adapter OLD,NEW --fixed-ref 4,1 --rounds 8 BUILD
"""
import argparse
import re
import statistics
import subprocess
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from spec_sweep import PROMPTS  # noqa: E402

DECODE = re.compile(r"decode \d+ tokens in ([0-9.]+) ms")
CONFIGS = {"pruning from costs": [], "--prune 0": ["--prune", "0"]}


def decode_ms(cmd):
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    m = DECODE.search(err)
    if not m:
        sys.exit("no decode line from: " + " ".join(cmd))
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True, help="one adapter, or several comma-separated")
    ap.add_argument("--fixed-ref", help="also the fixed tree GAMMA,K without pruning")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--n", default="256")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("builds", nargs="+", help="build directories (each with tools/edgespec/edgespec)")
    a = ap.parse_args()
    configs = dict(CONFIGS)
    if a.fixed_ref:
        g, k = a.fixed_ref.split(",")
        configs[f"fixed gamma {g}, k {k}"] = ["--gamma", g, "--topk", k, "--prune", "0", "--fixed-tree"]
    variants = [(b, ad) for b in a.builds for ad in a.adapter.split(",")]
    times = {}
    for _ in range(a.rounds):
        for pi, prompt in enumerate(PROMPTS):
            for vi, (build, adapter) in enumerate(variants):
                base = [build + "/tools/edgespec/edgespec", "run", "-m", a.model, "-t", a.threads, "-n", a.n,
                        "--temp", "0", "--ignore-eos", "--backend", a.backend, "-p", prompt]
                if vi == 0:
                    times.setdefault(("plain", pi), []).append(decode_ms(base))
                for name, extra in configs.items():
                    cmd = base + ["--spec", "stream", "--ss", adapter] + extra
                    times.setdefault((build, adapter, name, pi), []).append(decode_ms(cmd))
    med = {k: statistics.median(v) for k, v in times.items()}
    print("| configuration | build | adapter | " + " | ".join(f"prompt {i + 1}" for i in range(len(PROMPTS))) +
          " | geometric mean |")
    print("| --- | --- | --- |" + " ---: |" * (len(PROMPTS) + 1))
    for name in configs:
        for build, adapter in variants:
            r = [med[("plain", pi)] / med[(build, adapter, name, pi)] for pi in range(len(PROMPTS))]
            print(f"| {name} | {build} | {adapter} | " + " | ".join(f"{x:.2f}x" for x in r) +
                  f" | {statistics.geometric_mean(r):.3f}x |")
    print("plain decoding, ms (median): " + ", ".join(f"{med[('plain', pi)]:.1f}" for pi in range(len(PROMPTS))))


if __name__ == "__main__":
    main()
