#!/usr/bin/python3
"""spec_sweep.py: speculative decoding against plain decoding, measured through the CLI.

For held-out KJV verses as prompts (books the default model was not trained on), runs
`edgespec run` plainly, with Speculative Streaming over a grid of top-k and gamma (with and
without tree pruning; fixed trees, as in the paper's Figure 5, and the adaptive default) and with
draft-model speculation over lookaheads, each configuration `--reps` times per prompt, the
configurations in turn, each run beside a plain run of its own. Checks that every speculative run printed the plain run's text, and reports per
configuration: tokens per target call (the call-reduction ratio), decode tokens/s, the wall-time
speed-up over the plain runs measured alongside (median of per-repetition ratios; the JSON rows
also the same for whole-process CPU time, cpu_time_speedup), acceptance
per depth, mean tree size. Writes a markdown table to stdout, the rows as JSON (--json) and a
plot of speed-up against k per gamma (--png).

With --defaults-only, runs just `--spec stream` and `--spec draft` with no tuning flags (the
adaptive defaults) against plain decoding (their calibration times their first decoding steps'
own calls: it is in the decode time), and `--spec stream --prune 0` (the adaptive trees without
the pruning they choose from costs, as before that choice existed).

Usage: spec_sweep.py --cli EDGESPEC --model M.gguf [--adapter M.ss.gguf] [--draft D.gguf]
                     [--backend cpu|vulkan] [--threads N] [--n TOKENS] [--reps R]
                     [--ks 1,2,3,4] [--gammas 1,2,3,4] [--prune T] [--lookaheads 2,4,6]
                     [--defaults-only [--fixed-ref GAMMA,K]]
"""
import argparse
import json
import re
import resource
import statistics
import subprocess
import sys

PROMPTS = [  # first verses of the held-out books (tools/train/corpus.py DEFAULT_VALID_BOOKS)
    "Now it came to pass in the days when the judges ruled, that there was a famine in the land.",
    "Now the word of the LORD came unto Jonah the son of Amittai, saying,",
    "Vanity of vanities, saith the Preacher, vanity of vanities; all is vanity.",
    "That which was from the beginning, which we have heard, which we have seen with our eyes,",
]

DECODE = re.compile(r"decode (\d+) tokens in ([0-9.]+) ms")
CALLS = re.compile(r"target calls (\d+), tokens per call ([0-9.]+).*draft calls (\d+), mean tree ([0-9.]+) nodes "
                   r"\((\d+) pruned\)")
ACCEPT = re.compile(r"acceptance per depth:((?: \d+:[0-9.]+)*)")
PRUNING = re.compile(r"pruning: last threshold ([0-9.e+-]+)(?:; in plain calls, a pruning call adds ([0-9.]+), a pruned "
                     r"node saves ([0-9.]+))?")


def run(cmd):
    """The run's stdout, stderr and process CPU time in ms (user and system, its threads'
    together: on a loaded machine less noisy than wall time, since waiting for a core is not in
    it; with --threads 1 it is the run's own work)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, timeout=600)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr.decode(errors="replace")))
    cpu_ms = 1e3 * (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return p.stdout, p.stderr.decode(errors="replace"), cpu_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter")
    ap.add_argument("--draft")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--n", default="128")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ks", default="1,2,3,4")
    ap.add_argument("--gammas", default="")
    ap.add_argument("--prune", default="0.02")
    ap.add_argument("--max-nodes", default="32")
    ap.add_argument("--lookaheads", default="2,4,6")
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--defaults-only", action="store_true")
    ap.add_argument("--fixed-ref", help="with --defaults-only: also the fixed tree GAMMA,K (no pruning), as the "
                    "reference the adaptive default is held against")
    a = ap.parse_args()
    base = [a.cli, "run", "-m", a.model, "-n", a.n, "--temp", "0", "--ignore-eos", "-t", a.threads,
            "--backend", a.backend]
    configs = []
    if a.defaults_only:
        if a.adapter:
            configs.append(("stream", dict(gamma=0, k=2, prune=-1.0, fixed=False), ["--spec", "stream", "--ss", a.adapter]))
            configs.append(("stream", dict(gamma=0, k=2, prune=0.0, fixed=False),
                            ["--spec", "stream", "--ss", a.adapter, "--prune", "0"]))
        if a.draft:
            configs.append(("draft", dict(lookahead=4, fixed=False), ["--spec", "draft", "-md", a.draft]))
        if a.adapter and a.fixed_ref:
            g, k = a.fixed_ref.split(",")
            configs.append(("stream", dict(gamma=int(g), k=int(k), prune=0.0, fixed=True),
                            ["--spec", "stream", "--ss", a.adapter, "--gamma", g, "--topk", k, "--prune", "0",
                             "--fixed-tree"]))
    elif a.adapter:
        gammas = [int(g) for g in a.gammas.split(",")] if a.gammas else [0]
        for g in gammas:
            for k in [int(x) for x in a.ks.split(",")]:
                for prune in ["0", a.prune]:
                    configs.append(("stream", dict(gamma=g, k=k, prune=float(prune), fixed=True),
                                    ["--spec", "stream", "--ss", a.adapter, "--gamma", str(g), "--topk", str(k),
                                     "--prune", prune, "--max-nodes", a.max_nodes, "--fixed-tree"]))
        configs.append(("stream", dict(gamma=0, k=3, prune=0.0, fixed=False),
                        ["--spec", "stream", "--ss", a.adapter, "--topk", "3", "--max-nodes", a.max_nodes]))
    if a.draft and not a.defaults_only:
        for la in [int(x) for x in a.lookaheads.split(",")]:
            configs.append(("draft", dict(lookahead=la, fixed=True),
                            ["--spec", "draft", "-md", a.draft, "--lookahead", str(la), "--fixed-tree"]))
        configs.append(("draft", dict(lookahead=6, fixed=False), ["--spec", "draft", "-md", a.draft, "--lookahead", "6"]))
    # every configuration once per repetition and prompt, in turn, each beside a plain run of its
    # own: the configurations compared see the same stretch of a loaded machine
    acc = [dict(ratios=[], cpu_ratios=[], tps=[], calls=0, toks=0, trees=[], pruned=0, draft_calls=0, accept=[], chosen=[])
           for _ in configs]
    for rep in range(a.reps):
        for prompt in PROMPTS:
            for (kind, params, extra), r in zip(configs, acc):
                out_p, err_p, cpu_p = run(base + ["-p", prompt])
                out_s, err_s, cpu_s = run(base + ["-p", prompt] + extra)
                r["cpu_ratios"].append(cpu_p / cpu_s)
                if out_p != out_s:
                    sys.exit("LOSSLESSNESS FAILURE: %s %s on %r" % (kind, params, prompt))
                dp, ds = DECODE.search(err_p), DECODE.search(err_s)
                c = CALLS.search(err_s)
                n_tok, ms_p, ms_s = int(ds.group(1)), float(dp.group(2)), float(ds.group(2))
                r["ratios"].append(ms_p / ms_s)
                r["tps"].append(n_tok * 1e3 / ms_s)
                r["calls"] += int(c.group(1))
                r["toks"] += n_tok
                r["draft_calls"] += int(c.group(3))
                r["trees"].append(float(c.group(4)))
                r["pruned"] += int(c.group(5))
                ac = ACCEPT.search(err_s)
                r["accept"].append(ac.group(1).strip() if ac else "")
                pr = PRUNING.search(err_s)
                if pr:  # the tuner's pruning: the last threshold, a pruning call's overhead, a node's saving
                    r["chosen"].append([float(g) if g else None for g in pr.groups()])
    rows = []
    for (kind, params, extra), r in zip(configs, acc):
        row = dict(kind=kind, **params, tokens_per_call=r["toks"] / r["calls"], speedup=statistics.median(r["ratios"]),
                   ratio_range=[min(r["ratios"]), max(r["ratios"])],
                   cpu_time_speedup=statistics.median(r["cpu_ratios"]),
                   cpu_ratio_range=[min(r["cpu_ratios"]), max(r["cpu_ratios"])], tokens_per_s=statistics.median(r["tps"]),
                   mean_tree=statistics.mean(r["trees"]), pruned=r["pruned"],
                   draft_calls_per_call=r["draft_calls"] / r["calls"], acceptance=r["accept"][0],
                   pruning_chosen=r["chosen"])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print("| strategy | parameters | tokens/call | speed-up | CPU-time speed-up | tokens/s | mean tree | pruned | "
          "acceptance per depth (first prompt) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["kind"] == "stream":
            prune = "prune from costs" if r["prune"] < 0 else "prune %g" % r["prune"]
            p = "gamma %s, k %d, %s, %s" % (r["gamma"] or "adapter's", r["k"], prune,
                                            "fixed tree" if r["fixed"] else "adaptive")
        else:
            p = "lookahead %d, %s" % (r["lookahead"], "fixed" if r["fixed"] else "adaptive")
        print("| %s | %s | %.2f | %.2fx | %.2fx | %.1f | %.1f | %d | %s |" % (
            r["kind"], p, r["tokens_per_call"], r["speedup"], r["cpu_time_speedup"], r["tokens_per_s"], r["mean_tree"],
            r["pruned"], r["acceptance"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(backend=a.backend, model=a.model, n=a.n, reps=a.reps, rows=rows), f, indent=1)
    if a.png and a.adapter:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for prune in sorted({r["prune"] for r in rows if r["kind"] == "stream" and r["fixed"]}):
            for g in sorted({r["gamma"] for r in rows if r["kind"] == "stream" and r["fixed"]}):
                sel = [r for r in rows if r["kind"] == "stream" and r["fixed"] and r["gamma"] == g and r["prune"] == prune]
                lab = "gamma %s%s" % (g or "adapter", ", pruning %g" % prune if prune else "")
                ax[0].plot([r["k"] for r in sel], [r["speedup"] for r in sel], marker="o", label=lab)
                ax[1].plot([r["k"] for r in sel], [r["tokens_per_call"] for r in sel], marker="o", label=lab)
        ax[0].axhline(1.0, color="gray", lw=0.8)
        ax[0].set_xlabel("k (tokens drafted per stream)")
        ax[0].set_ylabel("wall-time speed-up over plain decoding")
        ax[1].set_xlabel("k (tokens drafted per stream)")
        ax[1].set_ylabel("tokens per target call")
        ax[0].legend(fontsize=7)
        fig.suptitle("Speculative Streaming, %s backend, greedy, %s tokens" % (a.backend, a.n))
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
