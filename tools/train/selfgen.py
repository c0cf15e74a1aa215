"""selfgen.py: a self-distillation corpus, the model's own continuations of training-verse openings.

Speculative drafts are judged against what the target model itself generates, not against the
Bible: a stream trained on the model's own outputs learns the distribution it is verified against
(including the loops small models fall into under greedy decoding). This script runs the C CLI on
the opening words of random training verses (never the held-out books, so held-out evaluation
stays honest) and writes prompt + continuation as text, one verse-like line per newline, which
train.py reads with --corpus-file.

  selfgen.py --cli build/tools/edgespec/edgespec --model models/default.gguf --out FILE \
      [--n-seq 4000] [--n-new 200] [--sampled-frac 0.25] [--temp 0.8] [--jobs 2] [--seed 1234]

Greedy continuations are `--temp 0`; a --sampled-frac share is sampled at --temp with a per-sequence
seed, so the corpus also covers sampled decoding. Progress goes to stderr.
Deliberately not here: training (train.py) and the loss that uses this text (train.py --distill).
"""

import argparse
import concurrent.futures as cf
import subprocess
import sys
import time

import numpy as np

import corpus


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True, help="edgespec CLI binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-seq", type=int, default=4000)
    ap.add_argument("--n-new", type=int, default=200)
    ap.add_argument("--sampled-frac", type=float, default=0.25)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--min-words", type=int, default=2)
    ap.add_argument("--max-words", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    return ap.parse_args(argv)


def continuation(args, prompt, temp, seed):
    cmd = [args.cli, "run", "-m", args.model, "-p", prompt, "-n", str(args.n_new), "-t", "1",
           "--temp", "%g" % temp, "-s", str(seed)]
    out = subprocess.run(cmd, capture_output=True, check=False)
    if out.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(cmd), out.returncode,
                                                        out.stderr.decode(errors="replace")[-400:]))
    return out.stdout.decode("utf-8", errors="replace")


def plan(args):
    """(prompt, temp, seed) per sequence, reproducible from --seed."""
    train_books, _ = corpus.split_books(corpus.read_kjv())
    verses = [v for _, vs in train_books for v in vs]
    rng = np.random.default_rng(args.seed)
    jobs = []
    for i in range(args.n_seq):
        words = verses[int(rng.integers(0, len(verses)))].split()
        n = int(rng.integers(args.min_words, args.max_words + 1))
        sampled = rng.random() < args.sampled_frac
        jobs.append((" ".join(words[:n]), args.temp if sampled else 0.0, args.seed + i))
    return jobs


def main(argv=None):
    args = parse_args(argv)
    jobs = plan(args)
    t0 = time.time()
    texts = [None] * len(jobs)
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = {pool.submit(continuation, args, p, t, s): i for i, (p, t, s) in enumerate(jobs)}
        for n_done, fut in enumerate(cf.as_completed(futs), 1):
            i = futs[fut]
            texts[i] = jobs[i][0] + fut.result()
            if n_done % 250 == 0 or n_done == len(jobs):
                el = time.time() - t0
                print("selfgen: %d/%d sequences, %.0fs, ETA %.0fs" % (
                    n_done, len(jobs), el, el * (len(jobs) - n_done) / n_done), file=sys.stderr,
                    flush=True)
    n_lines = 0
    with open(args.out, "w", encoding="utf-8") as f:
        for t in texts:
            for line in t.split("\n"):
                line = " ".join(line.split())
                if line:
                    f.write(line + "\n")
                    n_lines += 1
    print("selfgen: wrote %d lines from %d sequences to %s" % (n_lines, len(jobs), args.out),
          file=sys.stderr)


if __name__ == "__main__":
    main()
