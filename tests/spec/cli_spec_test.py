#!/usr/bin/python3
"""cli_spec_test.py: `edgespec run --spec stream|draft|dsi` prints exactly the plain run's text.

Usage: cli_spec_test.py --cli EDGESPEC --model M.gguf --adapter M.ss.gguf --draft D.gguf [--backend B]
On a random-weights model with a random Speculative Streaming adapter (acceptance near zero:
exactness must not depend on good drafts) and a draft model sharing its first layer, for several
prompts, lengths, trees, pruning thresholds, DSI lookaheads and server counts and sampling
settings, stdout of the speculative run equals stdout of the plain run byte for byte, and stderr
carries the speculation statistics (DSI: its servers' utilisation and the preempted work).
Bad options fail with a message and exit status 1 or 2. Exit status: the number of failed checks.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

ENV = dict(os.environ)  # main makes it testlib.vulkan_env() for a Vulkan backend


def run(cmd):
    p = subprocess.run(testlib.wrap(cmd), capture_output=True, timeout=120, stdin=subprocess.DEVNULL, env=ENV)
    check(p.returncode >= 0, f"no signal (got signal {-p.returncode})", p)
    return p


CALLS = re.compile(rb"edgespec run: target calls (\d+), tokens per call ([0-9.]+) \(call reduction ([0-9.]+)x\)")
ACCEPT = re.compile(rb"edgespec run: acceptance per depth:( \d+:[0-9.]+)+")
TREE = re.compile(rb"mean tree ([0-9.]+) nodes \((\d+) pruned\)")
DSI_USE = re.compile(rb"edgespec run: DSI utilisation \(busy, of which preempted\): drafter \d+% \(\d+%\)(, server \d+ "
                     rb"\d+% \(\d+%\))+")
DSI_JOBS = re.compile(rb"edgespec run: DSI jobs \d+, preempted \d+")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--kjv", action="store_true", help="the model was trained on the KJV: held-out verses as prompts")
    ap.add_argument("--smoke", action="store_true",
                    help="one prompt, greedy, the default stream and draft runs only (a large model on lavapipe)")
    a = ap.parse_args()
    # ES_TEST_SMOKE=1: .ci/run's validation and sanitizer lanes, which check how the code runs
    # (API use, memory), not the sweep's breadth that the release suite already covered
    a.smoke = a.smoke or os.environ.get("ES_TEST_SMOKE") == "1"
    be = ["--backend", a.backend]
    if a.backend == "vulkan":
        ENV.update(testlib.vulkan_env())
    prompts = ["In the beginning", "a", "the quick brown fox jumps over the lazy dog and then some more words follow"]
    if a.kjv:  # the first verses of books tools/train held out
        prompts = ["Now it came to pass in the days when the judges ruled,", "Vanity of vanities, saith the Preacher,",
                   "That which was from the beginning, which we have heard,"]
    sampling = [["--temp", "0"], ["--temp", "0.8", "--top-k", "30", "--seed", "11"],
                ["--temp", "1.2", "--top-p", "0.9", "--repeat-penalty", "1.2", "--seed", "4"]]
    specs = [["--spec", "stream", "--ss", a.adapter],
             ["--spec", "stream", "--ss", a.adapter, "--topk", "3", "--max-nodes", "20", "--prune", "0.001"],
             ["--spec", "stream", "--ss", a.adapter, "--gamma", "1", "--topk", "4"],
             ["--spec", "stream", "--ss", a.adapter, "--topk", "8", "--max-nodes", "64", "--fixed-tree"],
             ["--spec", "draft", "-md", a.draft, "--lookahead", "3"],
             ["--spec", "dsi", "-md", a.draft, "--lookahead", "3"],
             ["--spec", "dsi", "-md", a.draft, "--lookahead", "1", "--targets", "3"],
             ["--spec", "dsi", "-md", a.draft, "--lookahead", "6", "--targets", "2"]]
    quick = a.backend != "cpu"  # lavapipe: a subset of the combinations, the same checks
    if not quick:  # DSI drafting with the streams (test_dsi covers it on lavapipe)
        specs.append(["--spec", "dsi", "--ss", a.adapter, "--lookahead", "3", "--targets", "2"])
    if a.smoke:
        prompts, sampling, specs = prompts[:1], sampling[:1], [specs[0], specs[7]]
    for pi, prompt in enumerate(prompts):
        for si, samp in enumerate(sampling):
            if quick and (pi + si) % 2:
                continue
            n = ["7", "33", "64"][(pi + si) % 3]
            base = [a.cli, "run", "-m", a.model, "-p", prompt, "-n", n, "-t", "1"] + be + samp
            plain = run(base)
            if not check(plain.returncode == 0, "plain run succeeds", plain):
                continue
            for sp in specs:
                r = run(base + sp)
                if not check(r.returncode == 0, "speculative run succeeds", r):
                    continue
                check(r.stdout == plain.stdout, f"stdout equals the plain run's ({' '.join(sp)}; {' '.join(samp)})", r)
                m = CALLS.search(r.stderr)
                # a short DSI run may decide every token before a draft reaches a verification, and
                # a short pruned run may see every draft pruned (adaptive trees are sized to the
                # measured costs: a few small trees): then the list is empty
                tree = TREE.search(r.stderr)
                # (the mean tree is printed to 0.1 node: the drafted nodes are known to 0.05 per call)
                all_pruned = tree is not None and m is not None and \
                    abs((float(tree.group(1)) - 1) * int(m.group(1)) - int(tree.group(2))) <= 0.05 * int(m.group(1)) + 0.5
                accept = ACCEPT.search(r.stderr) is not None or (("dsi" in sp or all_pruned) and
                                                                 b"acceptance per depth:" in r.stderr)
                check(m is not None and accept, "statistics on stderr", r)
                if "dsi" in sp:
                    check(DSI_USE.search(r.stderr) is not None and DSI_JOBS.search(r.stderr) is not None,
                          "DSI's utilisation and preempted work on stderr", r)
                check(b"edgespec run:" not in r.stdout, "no statistics on stdout", r)
    if a.smoke:
        return testlib.finish()
    # pruning: chosen from measured costs by default, off with --prune 0 (and then nothing pruned)
    base = [a.cli, "run", "-m", a.model, "-p", "In the beginning", "-n", "24", "-t", "1", "--temp", "0"] + be
    plain = run(base)
    for extra, says in [([], b"prune from costs"), (["--prune", "0"], b"prune off"), (["--prune", "0.05"], b"prune 0.05")]:
        r = run(base + ["--spec", "stream", "--ss", a.adapter] + extra)
        check(r.returncode == 0 and r.stdout == plain.stdout and says in r.stderr,
              f"--prune {' '.join(extra) or '(not given)'}: the plain run's text, and the statistics say {says!r}", r)
        if extra == ["--prune", "0"]:
            tree = TREE.search(r.stderr)
            check(tree is not None and tree.group(2) == b"0", "--prune 0 prunes nothing", r)
    # rejection sampling runs and is reproducible for a seed
    base = [a.cli, "run", "-m", a.model, "-p", "In the beginning", "-n", "30", "-t", "1"] + be + ["--temp", "0.9",
            "--seed", "5", "--spec", "stream", "--ss", a.adapter, "--rejection", "--fixed-tree"]
    r1, r2 = run(base), run(base)
    check(r1.returncode == 0 and r1.stdout == r2.stdout and len(r1.stdout) > 0, "rejection sampling reproducible", r1)
    # DSI's rejection sampling repeats for a seed, whatever the lookahead and the servers
    base = [a.cli, "run", "-m", a.model, "-p", "In the beginning", "-n", "30", "-t", "1"] + be + ["--temp", "0.9",
            "--seed", "5", "--spec", "dsi", "-md", a.draft, "--rejection"]
    r1, r2 = run(base + ["--lookahead", "2"]), run(base + ["--lookahead", "5", "--targets", "3"])
    check(r1.returncode == 0 and r1.stdout == r2.stdout and len(r1.stdout) > 0, "DSI rejection sampling reproducible", r1)
    # the default adapter path: X.gguf -> X.ss.gguf beside the model
    with tempfile.TemporaryDirectory() as d:
        m2 = os.path.join(d, "m.gguf")
        shutil.copy(a.model, m2)
        r = run([a.cli, "run", "-m", m2, "-p", "hi", "-n", "5", "--spec", "stream"])
        check(r.returncode == 1 and b"m.ss.gguf" in r.stderr and b"--ss" in r.stderr,
              "a missing default adapter is named", r)
        r = run([a.cli, "run", "-m", m2, "-p", "hi", "-n", "5", "--spec", "dsi"])
        check(r.returncode == 1 and b"m.ss.gguf" in r.stderr and b"-md" in r.stderr,
              "--spec dsi with neither a draft model nor an adapter", r)
        shutil.copy(a.adapter, os.path.join(d, "m.ss.gguf"))
        r = run([a.cli, "run", "-m", m2, "-p", "hi", "-n", "5", "--spec", "stream", "--temp", "0"])
        p = run([a.cli, "run", "-m", m2, "-p", "hi", "-n", "5", "--temp", "0"])
        check(r.returncode == 0 and r.stdout == p.stdout, "the default adapter beside the model is used", r)
    # bad options
    r = run([a.cli, "run", "-m", a.model, "-p", "hi", "--spec", "draft"])
    check(r.returncode == 1 and b"-md" in r.stderr, "--spec draft without a draft model", r)
    r = run([a.cli, "run", "-m", a.model, "-p", "hi", "--spec", "dsi", "-md", a.draft, "--lookahead", "16"])
    check(r.returncode == 1 and b"lookahead 16" in r.stderr, "DSI's lookahead beyond 15", r)
    r = run([a.cli, "run", "-m", a.model, "-p", "hi", "--spec", "dsi", "-md", a.draft, "--targets", "17"])
    check(r.returncode == 2, "--targets beyond the most servers", r)
    r = run([a.cli, "run", "-m", a.model, "-p", "hi", "--spec", "sideways"])
    check(r.returncode == 2, "unknown --spec kind", r)
    r = run([a.cli, "run", "-m", a.model, "-p", "hi", "--spec", "stream", "--ss", a.adapter, "--gamma", "9"])
    check(r.returncode == 1 and b"n_streams 9" in r.stderr, "more streams than the adapter has", r)
    r = run([a.cli, "run", "-m", a.model, "-p", "hi", "--spec", "stream", "--ss", a.model])
    check(r.returncode == 1 and b"general.type" in r.stderr, "a base model given as adapter", r)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
