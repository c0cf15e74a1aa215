#!/usr/bin/python3
"""dump.py: PyTorch reference logits of an exported model, for parity tests against the C library.

  dump.py MODEL.gguf [--ss ADAPTER.ss.gguf] (--text TEXT | --ids ID...) [--out FILE.npz]

Runs tokens as one chain at positions 0..n-1 (as one es_forward batch does) in float64 with the
GGUF's weights dequantised, and writes (or prints a summary of) the arrays:
  ids      (n,)        the tokens (TEXT is encoded with BOS, as `edgespec tokenize` does)
  main     (n, V)      main-stream logits; row i predicts token i+1
  streams  (n, G, V)   stream j (1-based, index j-1) of token i predicts token i+1+j
  exit     (n, V)      the tree-pruning early exit at prune_layer (3.2.3) for token i
Deliberately not here: any comparison (the tests do that) or tree batches (a node's outputs
depend only on its ancestors, so a chain along one root-to-node path gives the same values).
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402


@torch.no_grad()
def reference(model, ids, double=True):
    """dict of numpy arrays: main (n, V), streams (n, G, V) if any, exit (n, V) if any."""
    m = model.double() if double else model
    m.eval()
    out = m(torch.as_tensor([list(ids)], dtype=torch.long))
    res = {"ids": np.asarray(ids, dtype=np.int64), "main": out["logits"][0].numpy()}
    if "stream_logits" in out:
        res["streams"] = out["stream_logits"][0].numpy()
    if "prune_logits" in out:
        res["exit"] = out["prune_logits"][0].numpy()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ss", help="Speculative Streaming adapter")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--text")
    g.add_argument("--ids", type=int, nargs="+")
    ap.add_argument("--out", help="write the arrays to this .npz")
    args = ap.parse_args(argv)
    model, vocab = export.load_any(args.model, args.ss)
    ids = vocab.encode(args.text) if args.text is not None else args.ids
    res = reference(model, ids)
    if args.out:
        np.savez(args.out, **res)
    for k, v in res.items():
        print("%s %s" % (k, v.shape))
    top = res["main"].argmax(-1)
    print("main argmax:", " ".join(str(int(t)) for t in top))
    if "streams" in res:
        for j in range(res["streams"].shape[1]):
            print("stream %d argmax: %s" % (j + 1, " ".join(str(int(t)) for t in res["streams"][:, j].argmax(-1))))


if __name__ == "__main__":
    main()
