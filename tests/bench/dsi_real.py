#!/usr/bin/python3
"""dsi_real.py: non-SI, SI (--spec draft), DSI (--spec dsi) with the draft model and with the model's
own Speculative Streaming streams as drafter, and SS alone (--spec stream), in real wall time.

Usage: dsi_real.py --cli build/tools/edgespec/edgespec [--model models/default.gguf]
                   [--draft models/draft.gguf] [--backend cpu] [--tokens 200] [--repeats 5] [--json OUT]

Runs `edgespec run --temp 0` for each configuration below on three held-out KJV verse openings,
the configurations taking turns within every repeat (a noisy moment hits all of them), and
reports each configuration's median decode time (the CLI's "decode N tokens in X ms", prompt
excluded) summed over the prompts, with tokens per second and the ratio to plain decoding with
the same thread count. Every speculative run's text is checked against the plain run's.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

PROMPTS = ["Now it came to pass in the days when the judges ruled,", "Vanity of vanities, saith the Preacher,",
           "That which was from the beginning, which we have heard,"]
DECODE = re.compile(r"decode (\d+) tokens in ([0-9.]+) ms")


def configs(draft, backend):
    cpu = backend == "cpu"
    out = [("non-SI", 1, []), ("non-SI", 2, [])] if cpu else [("non-SI", 0, [])]
    for k in (2, 4):
        for t in ((1, 2) if cpu else (0,)):
            out.append((f"SI lookahead {k}", t, ["--spec", "draft", "-md", draft, "--lookahead", str(k), "--fixed-tree"]))
    for k in (1, 2, 4):
        for n in (1, 2):
            out.append((f"DSI lookahead {k}, {n} servers", 1 if cpu else 0,
                        ["--spec", "dsi", "-md", draft, "--lookahead", str(k), "--targets", str(n)]))
    out.append(("DSI lookahead 4, measured servers", 1 if cpu else 0, ["--spec", "dsi", "-md", draft, "--lookahead", "4"]))
    # the model's own Speculative Streaming adapter (X.ss.gguf beside it): alone, and drafting for DSI
    for t in ((1, 2) if cpu else (0,)):
        out.append(("SS (--spec stream)", t, ["--spec", "stream"]))
    for k, n in ((4, 1), (4, 2)):
        out.append((f"DSI streams lookahead {k}, {n} servers", 1 if cpu else 0,
                    ["--spec", "dsi", "--lookahead", str(k), "--targets", str(n)]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", default="models/default.gguf")
    ap.add_argument("--draft", default="models/draft.gguf")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    cfgs = configs(a.draft, a.backend)
    times = {i: [] for i in range(len(cfgs))}
    texts = {}
    stats = {}
    for rep in range(a.repeats):
        for i, (name, threads, extra) in enumerate(cfgs):
            total = 0.0
            for p in PROMPTS:
                cmd = [a.cli, "run", "-m", a.model, "-p", p, "-n", str(a.tokens), "--temp", "0", "--backend", a.backend]
                if threads:
                    cmd += ["-t", str(threads)]
                r = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=300)
                m = DECODE.search(r.stderr)
                if r.returncode != 0 or not m:
                    print(f"failed: {' '.join(cmd + extra)}\n{r.stderr}", file=sys.stderr)
                    return 1
                total += float(m.group(2))
                want = texts.setdefault(p, r.stdout) if not extra else texts.get(p)
                if want is not None and r.stdout != want:
                    print(f"text differs from plain decoding: {' '.join(cmd + extra)}", file=sys.stderr)
                    return 1
                if rep == a.repeats - 1 and p == PROMPTS[0]:
                    stats[i] = [x for x in r.stderr.splitlines() if "DSI" in x or "target calls" in x]
            times[i].append(total)
        print(f"repeat {rep + 1}/{a.repeats} done", file=sys.stderr, flush=True)
    n_tok = a.tokens * len(PROMPTS)
    base = {}
    rows = []
    for i, (name, threads, extra) in enumerate(cfgs):
        med = statistics.median(times[i])
        if not extra:
            base[threads] = med
        rows.append({"config": name, "threads": threads, "median_ms": med, "runs_ms": times[i],
                     "tokens_per_s": n_tok * 1e3 / med, "stderr": stats.get(i, [])})
    print(f"| configuration | target threads | decode ms ({n_tok} tokens, median of {a.repeats}) | tokens/s | "
          "vs non-SI, same threads | vs non-SI, 2 threads |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        same = base.get(r["threads"]) or base.get(0)
        two = base.get(2) or base.get(0)
        print(f"| {r['config']} | {r['threads'] or 'n/a'} | {r['median_ms']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{same / r['median_ms']:.2f}x | {two / r['median_ms']:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": os.path.basename(a.model), "draft": os.path.basename(a.draft), "backend": a.backend,
                       "tokens": a.tokens, "prompts": PROMPTS, "repeats": a.repeats, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
