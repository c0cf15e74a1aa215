#!/usr/bin/python3
"""grow.py: a wider copy of a llama GGUF model (and its Speculative Streaming adapter) that
computes the same function: Net2Net's WiderNet (Chen et al. 2016) for this architecture.

  grow.py IN.gguf OUT.gguf [--ss IN.ss.gguf OUT.ss.gguf] [--factor M] [--noise S] [--seed N]
          [--name NAME]

Every width the weights carry grows M times by copying units: the residual stream
(n_embd), the attention heads (query and key/value heads together, so the grouping is kept;
head_dim is unchanged) and the FFN's hidden units. A matrix that writes copied units gets
its rows copied; a matrix that reads them gets its columns copied and divided by M, so it
sums the copies back to the original. RMSNorm over M copies of a vector has the same mean
square, so norms only repeat their weights. A tied output head would read the residual with
the embedding's rows, which now must both write copies (input) and divide them (output): the
grown model unties it. The adapter follows the same rules (stream embeddings and the early
exit's up projection write the residual; its down projection and the LoRA A read; LoRA B
writes whatever its projection writes).

The result's logits, stream logits and early-exit logits equal the input's up to float
rounding (tests/train/test_grow.py checks them through tools/train's PyTorch model). Its weight
bytes per token are M^2 times the input's for the layers (about M^2 for the whole model): a
way to a model in the memory-bound regime that starts as good as a trained small one.
--noise S adds Gaussian noise of S times each matrix's RMS to break the copies' symmetry before
fine-tuning (0 = exact copies). Deliberately numpy only, no training here (train.py --init).
Only llama: a base of another architecture (general.architecture) is refused, since its extra block
tensors (biases, head and post-branch norms, fused matrices) and gemma's embedding scale sqrt(n_embd)
would need rules of their own.
"""

import argparse
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "pygguf"))
import pygguf  # noqa: E402

# How each base tensor grows, by the widths along (rows, columns): 'd' the residual, 'q' the
# query heads' rows, 'kv' the key/value heads' rows, 'f' the FFN's hidden units, '-' unchanged.
BLOCK = {
    "attn_norm.weight": ("d",),
    "attn_q.weight": ("q", "d"),
    "attn_k.weight": ("kv", "d"),
    "attn_v.weight": ("kv", "d"),
    "attn_output.weight": ("d", "q"),
    "ffn_norm.weight": ("d",),
    "ffn_gate.weight": ("f", "d"),
    "ffn_up.weight": ("f", "d"),
    "ffn_down.weight": ("d", "f"),
}
LORA = {  # projection -> (what it reads, what it writes)
    "attn_q": ("d", "q"), "attn_k": ("d", "kv"), "attn_v": ("d", "kv"), "attn_output": ("q", "d"),
    "ffn_gate": ("d", "f"), "ffn_up": ("d", "f"), "ffn_down": ("f", "d"),
}


def copy_rows(a, m):
    """Rows (the first axis) repeated as m stacked copies of the whole: [a; a; ...]."""
    return np.concatenate([a] * m, axis=0)


def read_cols(a, m):
    """Columns (the last axis) of a matrix that reads m copies of its input: [a / m, a / m, ...]."""
    return np.concatenate([a / m] * m, axis=-1)


def grow_tensor(a, dims, m):
    """a in numpy shape (rows, cols) or (n,); dims per axis: '-' unchanged, else copied units.
    The first axis of a matrix is what it writes, the last what it reads."""
    if len(dims) == 1:  # a norm's weight: one value per copied unit
        return copy_rows(a, m) if dims[0] != "-" else a
    out = copy_rows(a, m) if dims[0] != "-" else a
    return read_cols(out, m) if dims[1] != "-" else out


def add_noise(a, s, rng):
    if s <= 0 or a.ndim < 2:
        return a
    rms = float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))
    return (a + rng.standard_normal(a.shape) * s * rms).astype(np.float32)


ROPE_DIVISORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def scalar(r, key):
    return r.kv[key].value


def grow_base(r, m, noise, rng, name):
    """The base model: the writer of the grown GGUF."""
    w = pygguf.Writer()
    arch = scalar(r, "general.architecture")
    grown_keys = {arch + ".embedding_length", arch + ".feed_forward_length", arch + ".attention.head_count",
                  arch + ".attention.head_count_kv", "general.name"}
    for key in r.kv:
        if key not in grown_keys:
            w.add_kv_from(r, key)
    for key in sorted(grown_keys - {"general.name"}):
        w.add(key, int(scalar(r, key)) * m, pygguf.UINT32)
    w.add("general.name", name)
    n_layer = int(scalar(r, arch + ".block_count"))
    embd = r.tensors["token_embd.weight"].numpy()           # (n_vocab, n_embd)
    head = r.tensors["output.weight"].numpy() if "output.weight" in r.tensors else embd
    w.add_tensor("token_embd.weight", add_noise(copy_rows(embd.T, m).T, noise, rng))  # writes copies
    for il in range(n_layer):
        for suffix, dims in BLOCK.items():
            a = r.tensors["blk.%d.%s" % (il, suffix)].numpy()
            w.add_tensor("blk.%d.%s" % (il, suffix), add_noise(grow_tensor(a, dims, m), noise, rng))
    for name in ROPE_DIVISORS:  # per pair of a head: heads are added, not widened
        if name in r.tensors:
            w.add_tensor(name, r.tensors[name].numpy())
    w.add_tensor("output_norm.weight", copy_rows(r.tensors["output_norm.weight"].numpy(), m))
    w.add_tensor("output.weight", add_noise(read_cols(head, m), noise, rng))  # untied: reads copies
    return w


def check_llama(r, path):
    """Refuses a base grow.py would grow wrong: BLOCK knows llama's tensors only, so another
    architecture's would be dropped, and gemma's embedding scale sqrt(n_embd) grows with the width
    (sqrt(M) times the copied rows)."""
    arch = scalar(r, "general.architecture") if "general.architecture" in r.kv else None
    if arch != "llama":
        raise SystemExit("grow.py: %s: architecture %r: only llama models can be grown (no rules for %s's "
                         "own tensors and scales)" % (path, arch, arch))


def grow_adapter(r, m, noise, rng):
    """The Speculative Streaming adapter (docs/formats.md) of the grown model."""
    w = pygguf.Writer()
    for key in r.kv:
        w.add_kv_from(r, key)
    for name, t in r.tensors.items():
        a = t.numpy()
        if name == "ss.stream_embd.weight":        # (γ, n_embd): added to the residual (Eq. 3)
            g = np.concatenate([a] * m, axis=-1)
        elif name == "ss.prune_down.weight":       # (r, n_embd): reads the residual
            g = read_cols(a, m)
        elif name == "ss.prune_up.weight":         # (n_embd, r): writes it
            g = copy_rows(a, m)
        elif name.endswith(".lora_a"):             # (rank, n_in): reads the projection's input
            g = read_cols(a, m)
        elif name.endswith(".lora_b"):             # (n_out, rank): writes its output
            g = copy_rows(a, m)
        else:
            raise SystemExit("grow.py: adapter tensor %r: unknown, cannot grow it" % name)
        w.add_tensor(name, add_noise(g, noise, rng))
    return w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--ss", nargs=2, metavar=("IN", "OUT"), help="grow this adapter of the model too")
    ap.add_argument("--factor", type=int, default=2, help="width multiplier M (default 2)")
    ap.add_argument("--noise", type=float, default=0.0, help="symmetry-breaking noise, times each matrix's RMS")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="general.name of the result (default: the input's + '-xM')")
    a = ap.parse_args(argv)
    if a.factor < 1:
        raise SystemExit("grow.py: --factor must be >= 1")
    rng = np.random.default_rng(a.seed)
    r = pygguf.read(a.model)
    check_llama(r, a.model)
    name = a.name or "%s-x%d" % (scalar(r, "general.name") if "general.name" in r.kv else "model", a.factor)
    grow_base(r, a.factor, a.noise, rng, name).write(a.out)
    if a.ss:
        grow_adapter(pygguf.read(a.ss[0]), a.factor, a.noise, rng).write(a.ss[1])


if __name__ == "__main__":
    main()
