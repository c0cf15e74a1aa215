"""alspec_sweep.py: ALSpec's hit rates and text agreement on a model, for docs/perf.md.

For each prompt file and each lambda, `edgespec run --spec alspec --lambda L --chunk S` decodes
greedily until the context is full; lambda 0 is the exact run (its text is the plain run's, as the
test cli_alspec checks). Reported per lambda, summed over the prompts: the layer hit rate over the
tokens whose speculation leaves keys out (>= 3 chunks of keys; below that the first and last
chunks cover every key and a hit is trivial), the same over all speculated tokens, the hit rate
per layer, and the agreement of the text with the exact run's: the words in common before the
first difference, and difflib's similarity of the word sequences. JSON lines on stdout.

usage: alspec_sweep.py CLI MODEL CHUNK PROMPT_FILE... [--backend cpu|vulkan]
"""

import difflib
import json
import re
import subprocess
import sys

LAMBDAS = [0.0, 0.05, 0.10, 0.15, 0.20, 0.25]


def run(cli, model, chunk, lam, path, backend):
    cmd = [cli, "run", "-m", model, "-f", path, "-n", "0", "--ignore-eos", "--temp", "0", "--spec", "alspec",
           "--lambda", str(lam), "--chunk", str(chunk), "--backend", backend]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    err = p.stderr
    m = re.search(r"(\d+) tokens decoded, (\d+) with a speculation .*layer hits (\d+) of (\d+)", err)
    mid = re.search(r"on the (\d+) tokens with keys left out .*layer hits (\d+) of (\d+)", err)
    per = re.search(r"hit rate per layer:(.*)", err)
    layers = [float(x.split(":")[1].rstrip("%")) for x in per.group(1).split()] if per else []
    return {"text": p.stdout, "spec_tokens": int(m.group(2)), "hits": int(m.group(3)), "checks": int(m.group(4)),
            "mid_tokens": int(mid.group(1)) if mid else 0, "mid_hits": int(mid.group(2)) if mid else 0,
            "mid_checks": int(mid.group(3)) if mid else 0, "layers": layers}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--backend")]
    backend = "vulkan" if "--backend=vulkan" in sys.argv else "cpu"
    cli, model, chunk, prompts = args[0], args[1], int(args[2]), args[3:]
    exact = {}
    for lam in LAMBDAS:
        tot = {"spec_tokens": 0, "hits": 0, "checks": 0, "mid_tokens": 0, "mid_hits": 0, "mid_checks": 0}
        layers, prefix, words, sim = None, 0, 0, []
        for path in prompts:
            r = run(cli, model, chunk, lam, path, backend)
            for k in tot:
                tot[k] += r[k]
            w = [x * r["spec_tokens"] for x in r["layers"]]
            layers = w if layers is None else [a + b for a, b in zip(layers, w)]
            if lam == 0.0:
                exact[path] = r["text"]
            a, b = exact[path].split(), r["text"].split()
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            prefix += n
            words += len(a)
            sim.append(difflib.SequenceMatcher(None, a, b).ratio())
        out = {"bench": "alspec_hits", "model": model, "chunk": chunk, "lambda": lam, "backend": backend,
               "prompts": len(prompts), "spec_tokens": tot["spec_tokens"],
               "hit_rate_all": tot["hits"] / tot["checks"] if tot["checks"] else 0.0,
               "tokens_keys_left_out": tot["mid_tokens"],
               "hit_rate": tot["mid_hits"] / tot["mid_checks"] if tot["mid_checks"] else 0.0,
               "hit_rate_per_layer": [round(x / tot["spec_tokens"], 1) for x in layers] if layers else [],
               "exact_words": words, "words_before_first_difference": prefix,
               "word_similarity": round(sum(sim) / len(sim), 3)}
        print(json.dumps(out))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
