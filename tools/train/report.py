#!/usr/bin/python3
"""report.py: held-out metrics, speculation simulation and loss curves for shipped models.

  report.py --model M.gguf --ss M.ss.gguf [--draft D.gguf] [--log RUN/log.jsonl ...]
            [--json OUT.json] [--plot OUT.png] [--prompts N] [--new N]

Everything is computed from the GGUF files as shipped (weights dequantised to f32), on the
validation books of corpus.py: main-stream perplexity and top-1 accuracy; each stream's loss, top-1
and top-k accuracy (stream j at t against the text's token t+1+j); the pruning exit's top-1; the
drafter's perplexity and its argmax agreement with the main model; then tokens advanced per target
call for Speculative Streaming (full top-k trees and best-first trees of N nodes) and for draft
model speculation, simulated on greedy generations from held-out verse openings (evaluate.py).
Deliberately not here: timing. The speed-up prediction in models/README.md combines these
acceptance numbers with a stated cost model.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus    # noqa: E402
import data      # noqa: E402
import evaluate  # noqa: E402
import export    # noqa: E402


def plot(logs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(logs), figsize=(6.5 * len(logs), 4.2), squeeze=False)
    for ax, (name, lp) in zip(axes[0], logs):
        recs = [json.loads(ln) for ln in open(lp)]
        tr = [r for r in recs if "main" in r and "lr" in r]
        ev = [r for r in recs if "eval" in r]
        steps = [r["step"] for r in tr]
        keys = ["main"] + sorted(k for k in tr[0] if k.startswith("s") and k[1:].isdigit())
        colour = {}
        for k in keys + (["prune"] if "prune" in tr[0] else []):
            (line,) = ax.plot(steps, [r[k] for r in tr], lw=1,
                              label="train %s" % (k if k != "main" else "main stream"))
            colour[k] = line.get_color()
        if ev:
            ax.plot([r["step"] for r in ev], [r["eval"]["main_loss"] for r in ev], "o-", ms=4,
                    color=colour["main"], label="held-out main")
            for j in range(len(ev[0]["eval"]["streams"])):
                ax.plot([r["step"] for r in ev], [r["eval"]["streams"][j]["loss"] for r in ev], "o--",
                        ms=3, lw=1, color=colour["s%d" % (j + 1)], label="held-out s%d" % (j + 1))
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_ylim(bottom=1.0, top=min(8.0, max(r["main"] for r in tr) + 0.5))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


CLI_CONFIGS = [  # (name, extra edgespec run flags); greedy, the simulation's setting
    ("ss g2 top8 n16", ["--spec", "stream", "--gamma", "2", "--topk", "8", "--max-nodes", "16"]),
    ("ss g2 top8 n32", ["--spec", "stream", "--gamma", "2", "--topk", "8", "--max-nodes", "32"]),
    ("ss g3 top8 n32", ["--spec", "stream", "--gamma", "3", "--topk", "8", "--max-nodes", "32"]),
    ("ss g3 top8 n64", ["--spec", "stream", "--gamma", "3", "--topk", "8", "--max-nodes", "64"]),
    ("ss g2 top5 full 31", ["--spec", "stream", "--gamma", "2", "--topk", "5", "--max-nodes", "31"]),
    ("draft la4", ["--spec", "draft", "--lookahead", "4"]),
]


def cli_tokens_per_call(cli, model, draft, texts, n_new):
    """Runs each config of CLI_CONFIGS on every prompt text; sums generated tokens and target
    calls from the CLI's statistics lines."""
    import re
    import subprocess
    out = []
    for name, flags in CLI_CONFIGS:
        gen, calls = 0, 0
        for t in texts:
            cmd = [cli, "run", "-m", model, "-p", t, "-n", str(n_new), "--temp", "0", "-t", "1"] + flags
            if "draft" in flags:
                cmd += ["-md", draft]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit("%s failed: %s" % (" ".join(cmd), p.stderr))
            m = re.search(r"decode (\d+) tokens", p.stderr)
            c = re.search(r"target calls (\d+)", p.stderr)
            gen += int(m.group(1))
            calls += int(c.group(1))
        out.append({"config": name, "flags": " ".join(flags), "generated": gen, "target_calls": calls,
                    "tokens_per_call": gen / calls})
        print("cli", json.dumps(out[-1]), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ss", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--log", action="append", default=[], help="NAME=RUN/log.jsonl for the plot")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--prompt-tokens", type=int, default=8)
    ap.add_argument("--new", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cli", help="edgespec CLI: also run the same prompts through the C library's "
                    "speculative decoding and record its tokens per target call")
    ap.add_argument("--only-cli", action="store_true", help="skip the PyTorch metrics and simulation")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    model, vocab = export.load_gguf_model(args.model, args.ss)
    _, va = corpus.split_books(corpus.read_kjv())
    verses = [v for _, vs in va for v in vs]
    split = data.Split(vocab, verses)
    res = {"model": os.path.basename(args.model), "adapter": os.path.basename(args.ss),
           "valid_books": list(corpus.DEFAULT_VALID_BOOKS), "valid_tokens": split.n_tokens(),
           "config": model.cfg.__dict__}
    # Prompts: <s> + the opening tokens of held-out verses spread over the validation books.
    step = max(1, split.n_verses // args.prompts)
    prompts = []
    for k in range(0, split.n_verses, step)[:args.prompts]:
        head = split.pref[split.pref_off[k]:split.pref_off[k + 1]][:args.prompt_tokens]
        prompts.append([vocab.bos_id] + [int(x) for x in head])
    if args.cli:
        texts = [vocab.decode(p) for p in prompts]
        assert all(vocab.encode(t) == p for t, p in zip(texts, prompts)), "prompt text round trip"
        res["cli"] = cli_tokens_per_call(args.cli, args.model, args.draft, texts, args.new)
    if args.only_cli:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    res["target"] = evaluate.evaluate(model, split, args.ctx, topk=(1, 2, 3, 4, 8))
    print("target:", json.dumps(res["target"]), flush=True)
    drafter = None
    if args.draft:
        drafter, dv = export.load_gguf_model(args.draft)
        if dv.tokens != vocab.tokens:
            sys.exit("the drafter's vocabulary differs from the model's")
        res["draft"] = evaluate.evaluate(drafter, split, args.ctx, topk=(1,))
        res["draft"]["agreement_with_target"] = evaluate.agreement(drafter, model, split, args.ctx)
        res["draft"]["config"] = drafter.cfg.__dict__
        print("draft:", json.dumps(res["draft"]), flush=True)
    G = model.cfg.n_streams
    sim, seqs = evaluate.simulate(model, prompts, args.new, gammas=list(range(1, G + 1)),
                                  ks=(1, 2, 3, 4, 5), caps=(4, 8, 16, 32, 64), drafter=drafter,
                                  lookaheads=(1, 2, 3, 4, 5, 6))
    res["simulation"] = {"prompts": len(prompts), "new_tokens": args.new, **sim}
    res["samples"] = [vocab.decode(s) for s in seqs[:3]]
    for kind in ("ss_full", "ss_best_first", "draft"):
        for r in sim[kind]:
            print(kind, json.dumps(r), flush=True)
    print("sample:", res["samples"][0][:400].replace("\n", " | "))
    res["seconds"] = time.time() - t0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.plot and args.log:
        plot([tuple(s.split("=", 1)) for s in args.log], args.plot)


if __name__ == "__main__":
    main()
