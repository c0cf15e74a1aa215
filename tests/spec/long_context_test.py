#!/usr/bin/env python3
"""long_context_test.py: the long-context model (models/long.gguf) decodes past the 256 positions the
default model knows, and every strategy stays token for token equal to plain greedy decoding there.

A held-out book (Ruth, which tools/train never trained on) is the prompt, cut to --prompt-chars, so
the generated tokens sit at positions well past 1024. Plain decoding is the reference; Speculative
Streaming (the adaptive default and a fixed tree with pruning), the draft model, DSI and ALSpec
with lambda 0 (on one context, and on the CPU over two) must print the same text. The CLI's
prompt-token count is checked, so a silently shortened prompt (a truncated context) cannot pass.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402

ENV = dict(os.environ)
PROMPT_TOKENS = re.compile(rb"prompt (\d+) tokens")


def held_out_text(chars):
    testlib.tools("train")
    import corpus  # the KJV via Debian's bible-kjv, split as the models were trained
    try:
        _, valid = corpus.split_books(corpus.read_kjv(), ("Ruth",))
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("long_context_test: cannot read the KJV (Debian package bible-kjv): %s" % e)
    text = " ".join(v for _, vs in valid for v in vs)
    if len(text) < chars:
        sys.exit("long_context_test: Ruth has %d characters, fewer than --prompt-chars %d" % (len(text), chars))
    return text[:chars]


def run(cmd):
    return subprocess.run(testlib.wrap(cmd), env=ENV, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--prompt-chars", type=int, default=4600, help="about 1,300 tokens")
    ap.add_argument("--min-prompt-tokens", type=int, default=1100)
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--smoke", action="store_true", help="one speculative run besides ALSpec (sanitizer lanes)")
    a = ap.parse_args()
    a.smoke = a.smoke or os.environ.get("ES_TEST_SMOKE") == "1"
    if a.backend == "vulkan":
        ENV.update(testlib.vulkan_env())
    with tempfile.TemporaryDirectory() as d:
        prompt_file = os.path.join(d, "prompt.txt")
        with open(prompt_file, "w", encoding="utf-8") as f:
            f.write(held_out_text(a.prompt_chars))
        base = [a.cli, "run", "-m", a.model, "-f", prompt_file, "-n", str(a.n), "--temp", "0", "-t", "2",
                "--backend", a.backend]
        plain = run(base)
        if not testlib.check(plain.returncode == 0, "plain run succeeds", plain):
            return testlib.finish()
        m = PROMPT_TOKENS.search(plain.stderr)
        n_prompt = int(m.group(1)) if m else 0
        testlib.check(n_prompt >= a.min_prompt_tokens,
                      "the prompt is %d tokens (at least %d)" % (n_prompt, a.min_prompt_tokens), plain)
        testlib.check(len(plain.stdout.strip()) > 0, "plain decoding printed text", plain)
        specs = [["--spec", "stream", "--ss", a.adapter],
                 ["--spec", "stream", "--ss", a.adapter, "--gamma", "4", "--topk", "2", "--prune", "0.02", "--fixed-tree"],
                 ["--spec", "draft", "-md", a.draft, "--lookahead", "4"],
                 ["--spec", "dsi", "-md", a.draft, "--lookahead", "3", "--targets", "2"],
                 ["--spec", "alspec", "--lambda", "0", "--chunk", "256"]]
        if a.backend == "cpu":  # ALSpec's Algorithm 2 over two CPU contexts
            specs.append(["--spec", "alspec", "--lambda", "0", "--chunk", "256", "--device", "host,host"])
        else:  # lavapipe: the same checks, fewer runs (DSI's servers are CPU threads there too)
            specs = specs[:3] + specs[4:]
        if a.smoke:
            specs = [specs[0], specs[-1]]
        for sp in specs:
            r = run(base + sp)
            if testlib.check(r.returncode == 0, "run succeeds (%s)" % " ".join(sp), r):
                testlib.check(r.stdout == plain.stdout, "stdout equals plain decoding's (%s)" % " ".join(sp), r)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
