#!/usr/bin/python3
"""dsi_heatmap.py: a Figure-1-style heatmap (Timor et al., DSI) on the latency-controlled harness.

Usage: dsi_heatmap.py --bench build/tests/bench/bench_dsi [--png docs/dsi_heatmap.png] [--json OUT]
                      [--target-ms 10] [--tokens 50] [--repeats 3] [--max-servers 7]
       dsi_heatmap.py --from-json OUT --png PNG     (redraw from saved numbers)

Over drafter latency (a fraction of the target's) x acceptance rate, runs bench_dsi: non-SI;
SI at the lookahead that minimises its expected time (Appendix D's loop; that lookahead and its
neighbours are measured, the best counts); DSI with at most --max-servers target servers, at the
smallest lookahead whose ceil(T_target / (lookahead T_draft)) servers fit (Appendix D). Draws
(a) SI's speedup over non-SI and (b) DSI's over the faster of the two, as the paper's Figure 1
(a) and (d), and prints the configurations where DSI is slower than that baseline. Needs
matplotlib for the picture (python3-matplotlib); the numbers come without it.
"""
import argparse
import json
import math
import subprocess
import sys

FRACTIONS = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
ACCEPTS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]


def si_expected(c, p, k):
    """SI's expected time per token, the target's latency 1, the drafter's c."""
    toks = (1 - p ** (k + 1)) / (1 - p) if p < 1 else k + 1
    return (k * c + 1) / toks


def dsi_config(c, max_servers):
    for k in range(1, 16):
        s = math.ceil(1.0 / (k * c) - 1e-9)
        if s <= max_servers:
            return k, max(1, s)
    return 15, max_servers


def run(a):
    cells = []
    for c in FRACTIONS:
        for p in ACCEPTS:
            k_si = min(range(1, 31), key=lambda k: si_expected(c, p, k))
            si_grid = sorted({max(1, k_si - 1), k_si, k_si + 1})
            k, s = dsi_config(c, a.max_servers)
            cmd = [a.bench, str(a.target_ms), str(c * a.target_ms), str(p), str(a.tokens), str(a.repeats), f"{k}:{s}",
                   ",".join(map(str, si_grid)), str(a.seed)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            summary = [json.loads(x) for x in out.stdout.splitlines() if '"summary"' in x]
            if out.returncode != 0 or not summary:
                print(f"bench_dsi failed at drafter {c}, accept {p}: {out.stderr}", file=sys.stderr)
                return None
            r = summary[0]
            r["fraction"] = c
            cells.append(r)
            base = min(r["si_ms"], r["nonsi_ms"])
            print(f"drafter {c:.2f}, accept {p:.2f}: non-SI {r['nonsi_ms']:.0f} ms, SI {r['si_ms']:.0f} ms "
                  f"(lookahead {r['si_lookahead']}), DSI {r['dsi_ms']:.0f} ms (lookahead {k}, {s} servers): "
                  f"DSI / min {r['dsi_ms'] / base:.3f}", file=sys.stderr, flush=True)
    return cells


def draw(cells, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm
    import numpy as np

    fr = sorted({x["fraction"] for x in cells})
    ac = sorted({x["accept"] for x in cells})
    si = np.full((len(ac), len(fr)), np.nan)
    dsi = np.full((len(ac), len(fr)), np.nan)
    for x in cells:
        i, j = ac.index(x["accept"]), fr.index(x["fraction"])
        si[i, j] = x["nonsi_ms"] / x["si_ms"]
        dsi[i, j] = min(x["si_ms"], x["nonsi_ms"]) / x["dsi_ms"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, m, title in [(axes[0], si, "(a) SI / non-SI speedup"), (axes[1], dsi, "(b) DSI / min(SI, non-SI) speedup")]:
        norm = TwoSlopeNorm(vcenter=1.0, vmin=min(0.5, np.nanmin(m)), vmax=max(1.5, np.nanmax(m)))
        im = ax.imshow(m, origin="lower", cmap="RdBu", norm=norm, aspect="auto")
        ax.set_xticks(range(len(fr)), [f"{f:g}" for f in fr], rotation=45)
        ax.set_yticks(range(len(ac)), [f"{a:g}" for a in ac])
        ax.set_xlabel("drafter latency / target latency")
        ax.set_ylabel("acceptance rate")
        ax.set_title(title)
        for i in range(len(ac)):
            for j in range(len(fr)):
                if not np.isnan(m[i, j]):
                    ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6)
        fig.colorbar(im, ax=ax, shrink=0.85)
    fig.suptitle("edgespec DSI scheduler on the latency-controlled harness (speedup > 1: faster; red: slower)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench")
    ap.add_argument("--from-json")
    ap.add_argument("--png")
    ap.add_argument("--json")
    ap.add_argument("--target-ms", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-servers", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            cells = json.load(f)["cells"]
    else:
        cells = run(a)
        if cells is None:
            return 1
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"target_ms": a.target_ms, "tokens": a.tokens, "repeats": a.repeats,
                           "max_servers": a.max_servers, "seed": a.seed, "cells": cells}, f, indent=1)
    worst = max(cells, key=lambda x: x["dsi_ms"] / min(x["si_ms"], x["nonsi_ms"]))
    slower = [x for x in cells if x["dsi_ms"] > 1.02 * min(x["si_ms"], x["nonsi_ms"])]
    print(f"{len(cells)} configurations; DSI / min(SI, non-SI) at worst {worst['dsi_ms'] / min(worst['si_ms'], worst['nonsi_ms']):.3f} "
          f"(drafter {worst['fraction']}, accept {worst['accept']}); {len(slower)} more than 2% slower; "
          f"every DSI run exact: {all(x['exact'] for x in cells)}")
    for x in slower:
        print(f"  slower: drafter {x['fraction']}, accept {x['accept']}: DSI {x['dsi_ms']:.1f} ms, SI {x['si_ms']:.1f}, "
              f"non-SI {x['nonsi_ms']:.1f}")
    if a.png:
        draw(cells, a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
