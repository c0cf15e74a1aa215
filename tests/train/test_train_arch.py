"""test_train_arch.py: Speculative Streaming adapters for the architectures besides llama.

usage: test_train_arch.py TRAIN_C MKMODEL [vulkan]
       test_train_arch.py TRAIN_C MKMODEL bpe VOCAB.gguf LIBEDGESPEC [--preload PATH]

For qwen2 (with a sliding window on every layer), qwen3 (its Q and K head norms, heads of 32 wider
than n_embd / n_head as Qwen3's), phi3, gemma (tied head), gemma2 (soft-capping with small caps,
so that they matter, and its alternating window, shorter than the chain) and gemma3 (7 layers:
five sliding, a global one, a sliding one, the MSA blocks being the last two; the window shorter
than the chain; the model's RoPE base 1e6 against the sliding layers' own 10000), smollm3 (4
layers, GQA: layer 3 takes no RoPE, and it is one of the two MSA blocks) and granite (3 layers,
GQA; Granite 3's multipliers from mkmodel: embedding 12, attention 1/head_dim, residual 0.22,
logits / 8), tiny random-weight bases written by the project's GGUF writer (edgespec-mkmodel):
1. tools/train/export.py loads the base into tools/train/model.py, whose logits equal the
   independent numpy reference (tools/reference/llama_ref.py) in float64, and writes it again
   (the architecture's keys and tensors: phi3's fused matrices, qwen2's biases, qwen3's head
   norms, gemma2's post norms, caps and window, gemma3's rope.freq_base_swa as the file has it,
   granite's four multipliers as the file has them) as a file that model.py reads back to the
   same logits and the C library runs (its main logits below are those of the rewritten file);
   the depth rules of the query scale (gemma2 at 46 layers, gemma3 at 62, the latter with its own
   rope.freq_base_swa), and granite's attention.scale 0 (head_dim^-1/2), only this far;
2. an adapter: for qwen3, gemma2, gemma3, smollm3 and granite, trained for a few steps by
   `train.py --mode ss --base` (the base frozen: its logits do not move) and exported with
   export.py; for the others, random values (LoRA on every projection, pruning) written by
   export.adapter_writer;
3. the C library (train_c, CPU backend; with "vulkan" the Vulkan backend, streams both in the
   forward's rows and from stream passes) gives main-stream and every stream's logits within
   1e-4 (max |C - ref| / max |ref| per row) of model.py in float64 on the file's weights, the
   tree-pruning decisions along the chain that model.py's early exit gives, and the early-exit
   probabilities of every child (the values pruning compares; with a threshold that keeps them
   all) within 1e-4 of model.py's, relative.
The same for bases with RoPE scaling (SCALED): llama 3's rope_freqs.weight, YaRN, gemma3's linear
scaling of its global layers, and phi3's LongRoPE with the long factors (the chain longer than the
original context) and the short ones, and bases quantised as people download them (Q4_K with
rope_freqs.weight, Llama 3.2's kind; Q6_K), whose own files the C library runs as well; export.py writes the keys and divisor tensors back as found,
and model.Config refuses scalings the C library refuses.
With "bpe": the same for qwen2 and qwen3 bases with a GPT-2 BPE vocabulary (VOCAB.gguf's, copied
by mkmodel) and adapters trained by train.py, whose corpus is encoded by the file's own tokenizer
through the C library (tools/train/gguf_vocab.py, the Python binding on LIBEDGESPEC; an
instrumented library needs its sanitizer runtime preloaded into the interpreter: --preload).
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402
import train_c_output  # noqa: E402

testlib.tools("train", "pygguf", "reference")
import dump    # noqa: E402
import pygguf  # noqa: E402
import export  # noqa: E402
import llama_ref  # noqa: E402
import model as M  # noqa: E402

TRAIN_C, MKMODEL = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
VULKAN = len(sys.argv) > 3 and sys.argv[3] == "vulkan"
BPE = sys.argv[4] if len(sys.argv) > 5 and sys.argv[3] == "bpe" else None
if BPE:
    os.environ["EDGESPEC_LIBRARY"] = os.path.abspath(sys.argv[5])  # train.py inherits it
    if len(sys.argv) > 7 and sys.argv[6] == "--preload" and sys.argv[7] not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=sys.argv[7])  # Python's own allocations are not the library's leaks
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
TOL = 1e-4
SHAPE = ["--n-vocab", "300", "--n-embd", "64", "--n-layer", "3", "--n-head", "4", "--n-ff", "96"]
ARCHS = [  # (arch, mkmodel flags, trained)
    ("qwen2", ["--n-head-kv", "2", "--sliding-window", "9"], False),
    ("qwen3", ["--n-head-kv", "2", "--head-dim", "32"], True),  # heads wider than n_embd / n_head
    ("phi3", ["--n-head-kv", "2"], False),
    ("gemma", ["--n-head-kv", "1", "--tied"], False),
    ("gemma2", ["--n-head-kv", "2", "--sliding-window", "5", "--softcap", "2,3"], True),
    ("gemma3", ["--n-layer", "7", "--n-head-kv", "2", "--sliding-window", "5", "--freq-base", "1000000"], True),
    ("smollm3", ["--n-layer", "4", "--n-head-kv", "2"], True),  # layer 3, an MSA block, without RoPE
    ("granite", ["--n-head-kv", "2"], True),  # Granite 3's multipliers (mkmodel)
]
SCALED = [  # (label, arch, mkmodel flags, trained): RoPE scaling as the files people have ask for it
    ("llama rope_freqs", "llama", ["--n-head-kv", "2", "--rope-freqs"], True),   # Llama 3.1 / 3.2
    ("llama yarn", "llama", ["--rope-scaling", "yarn,4,16"], False),           # the chain past 16
    ("gemma3 linear", "gemma3", ["--n-layer", "7", "--n-head-kv", "2", "--sliding-window", "5", "--freq-base",
                                 "1000000", "--rope-scaling", "linear,8"], True),  # Gemma 3 4B-27B
    ("phi3 longrope", "phi3", ["--n-head-kv", "2", "--rope-scaling", "longrope,16"], False),  # long factors
    ("phi3 longrope short", "phi3", ["--n-head-kv", "2", "--rope-scaling", "longrope,64"], False),
    ("llama q4_K rope_freqs", "llama", ["--n-embd", "256", "--n-ff", "256", "--n-head-kv", "2", "--rope-freqs",
                                        "--type", "q4_K"], True),  # a Llama 3.2 file as people have it
    ("qwen2 q6_K", "qwen2", ["--n-embd", "256", "--n-ff", "256", "--n-head-kv", "2", "--type", "q6_K"], False),
]
DEEP = [  # (arch, mkmodel flags): the depths that take (n_embd / n_head)^-1/2 as the query scale
    ("gemma2", ["--n-layer", "46", "--n-head-kv", "2", "--head-dim", "32", "--sliding-window", "5"]),
    ("gemma3", ["--n-layer", "62", "--n-head-kv", "2", "--head-dim", "32", "--sliding-window", "5",
                "--freq-base", "1000000", "--freq-base-swa", "20000"]),
]
BPE_ARCHS = [  # the architectures whose models ship a GPT-2 BPE vocabulary (with "bpe")
    ("qwen2", ["--n-head-kv", "2", "--sliding-window", "5"], True),
    ("qwen3", ["--n-head-kv", "2", "--head-dim", "32"], True),
]
SS = dict(n_streams=3, n_msa=2, prune_rank=4, lora_rank=2)


def run_c(base, ss, ids, streams, prune=0.0, fuse=None):
    cmd = [TRAIN_C, base, "--threads", "2", "--ss", ss, "--streams", str(streams)]
    if VULKAN:
        cmd += ["--vulkan"] + (["--fuse", fuse] if fuse else [])
    if prune:
        cmd += ["--prune", repr(prune)]
    p = subprocess.run(testlib.wrap(cmd + [str(i) for i in ids]), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("train_c failed: %s" % p.stderr)
    return train_c_output.parse(p.stdout)


def row_err(c, ref):
    if not np.all(np.isfinite(c)):
        return float("inf")
    return float(np.abs(c - ref).max() / max(np.abs(ref).max(), 1e-30))


def random_adapter(base, seed):
    """model.py with the base's weights and random adapter values (B of the LoRA nonzero)."""
    plain, _ = export.load_gguf_model(base)
    m = M.Model(M.Config(**{**plain.cfg.base_dict(), **SS}))
    m.load_state_dict(plain.state_dict(), strict=False)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.ss_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 / p.shape[-1] ** 0.5)
        m.stream_embd.mul_(3.0)
    return m


def trained_adapter(base, tmp):
    """An adapter trained by train.py --mode ss on base for a few steps, exported by export.py;
    the frozen base's outputs must not move."""
    text = os.path.join(tmp, "corpus.txt")
    with open(text, "w") as f:
        for i in range(40):
            f.write(" ".join("w%d" % ((i + k) % 7) for k in range(12)) + "\n")
    out = os.path.join(tmp, "ss-run")
    train = os.path.join(testlib.ROOT, "tools", "train")
    args = [sys.executable, os.path.join(train, "train.py"), "--out", out, "--mode", "ss", "--base", base,
            "--corpus-file", text, "--valid-frac", "0.1", "--gamma", str(SS["n_streams"]), "--n-msa",
            str(SS["n_msa"]), "--prune-rank", str(SS["prune_rank"]), "--lora-rank", str(SS["lora_rank"]),
            "--ctx", "24", "--batch", "4", "--steps", "3", "--threads", "1", "--eval-every", "1000"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("train.py --mode ss failed:\n%s\n%s" % (p.stdout[-2000:], p.stderr[-4000:]))
    ck = os.path.join(out, "final.pt")
    rebase, ss = os.path.join(tmp, "rebase.gguf"), os.path.join(tmp, "trained.ss.gguf")
    p = subprocess.run([sys.executable, os.path.join(train, "export.py"), ck, rebase, "--ss", ss],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("export.py failed: %s" % p.stderr[-4000:])
    # the base left train.py as it came in: the re-exported file computes the same logits
    a, _ = export.load_gguf_model(base)
    b, _ = export.load_gguf_model(rebase)
    tok = torch.arange(3, 40)[None]
    with torch.no_grad():
        check(torch.equal(a(tok)["logits"], b(tok)["logits"]), "ss mode leaves the %s base unchanged" % a.cfg.arch)
    return ss


def prune_threshold(ex, ids):
    """A threshold in the widest gap of the children's early-exit probabilities along the chain
    (upper three quarters), the pruning it implies (child i+1 goes, with all after it, when its
    probability under token i's exit is below it), the log margin, and the probabilities (p[i]:
    child i+1's)."""
    p = np.array([np.exp(ex[i, ids[i + 1]] - np.logaddexp.reduce(ex[i])) for i in range(len(ids) - 1)])
    order = np.sort(p)
    gaps = np.log(order[1:] / order[:-1])
    k = int(np.argmax(gaps[len(gaps) // 4:])) + len(gaps) // 4
    thr = float(np.sqrt(order[k] * order[k + 1]))
    first = next((i + 1 for i in range(len(p)) if p[i] < thr), len(ids))
    return thr, [i >= first for i in range(len(ids))], gaps[k] / 2, p


def make_base(arch, flags, tmp):
    base = os.path.join(tmp, arch + ".gguf")
    subprocess.run(testlib.wrap([MKMODEL, "-o", base, "--quiet", "--arch", arch, "--seed", "17"] + SHAPE + flags),
                   check=True)
    return base


def check_base(arch, base, ids, tmp, label=None):
    """Step 1: model.py against the numpy reference, and written again by export.py. Returns the
    rewritten file. label: the case's name where the architecture alone does not say it."""
    name = label or arch
    plain, vocab = export.load_gguf_model(base)
    want = llama_ref.forward(llama_ref.Model(base), ids)
    got = dump.reference(plain, ids)["main"]
    err = max(row_err(got[i], want[i]) for i in range(len(ids)))
    check(err < 1e-9, "%s %d layers: model.py against llama_ref.py: max row error %.3g" % (name, plain.cfg.n_layer, err))
    rewritten = os.path.join(tmp, name.replace(" ", "-") + "-rewritten.gguf")
    export.base_writer(plain, vocab).write(rewritten)
    again, _ = export.load_gguf_model(rewritten)
    check(np.array_equal(dump.reference(again, ids)["main"], got), "%s: export.py writes the base back" % name)
    keys = ["rope.freq_base_swa"] + [k for k, _ in export.MUP_KEYS] + [
        "rope.scaling." + k for k in ("type", "factor", "original_context_length", "attn_factor")]
    for key in keys:  # written back as found, absent included
        key = arch + "." + key
        found, kept = pygguf.read(base).get(key), pygguf.read(rewritten).get(key)
        check(found == kept, "%s: %s %s, written back as %s" % (name, key, found, kept))
    for tname, _ in export.ROPE_DIVISORS:
        found, kept = (f.tensors[tname].numpy() if tname in f.tensors else None
                       for f in (pygguf.read(base), pygguf.read(rewritten)))
        check((found is None and kept is None) or np.array_equal(found, kept),
              "%s: %s written back as found" % (name, tname))
    if plain.cfg.a["mup"]:  # attention.scale 0: head_dim^-1/2, as llama.cpp and the C library read it
        plain.cfg.attention_scale = 0.0
        zero = os.path.join(tmp, arch + "-attn0.gguf")
        export.base_writer(plain, vocab).write(zero)
        m0, _ = export.load_gguf_model(zero)
        want0 = llama_ref.forward(llama_ref.Model(zero), ids)
        got0 = dump.reference(m0, ids)["main"]
        err0 = max(row_err(got0[i], want0[i]) for i in range(len(ids)))
        check(m0.cfg.attention_scale == 0.0 and err0 < 1e-9 and row_err(got0, got) > 1e-3,
              "%s: attention.scale 0: model.py against llama_ref.py: max row error %.3g (%.3g from 1/head_dim's)"
              % (arch, err0, row_err(got0, got)))
        for bad in (dict(arch="llama", residual_scale=0.5), dict(arch=arch, logit_scale=-8.0),
                    dict(arch=arch, attention_scale=-0.1), dict(arch=arch, embedding_scale=0.0)):
            try:
                M.Config(**bad)
                msg = None
            except ValueError as e:
                msg = str(e)
            check(msg is not None, "model.Config(%s): %s" % (bad, msg or "accepted"))
    return rewritten


def check_scaling_refused():
    """model.Config refuses what the C library refuses, with a message."""
    for bad in (dict(rope_scaling="dynamic", rope_factor=2.0), dict(rope_scaling="linear"),
                dict(rope_scaling="longrope"), dict(rope_freqs=(1.0, 2.0)),
                dict(rope_long=(1.0,) * 8, rope_short=(1.0,) * 8, rope_freqs=(1.0,) * 8),
                dict(rope_long=(1.0,) * 8), dict(rope_freqs=(1.0,) * 7 + (0.0,))):
        try:
            M.Config(n_embd=64, n_head=4, **bad)
            msg = None
        except ValueError as e:
            msg = str(e)
        check(msg is not None, "model.Config(%s): %s" % (bad, msg or "accepted"))


def one(arch, flags, trained, tmp, label=None):
    base = make_base(arch, flags, tmp)
    rng = np.random.default_rng(len(arch))
    ids = [1] + [int(x) for x in rng.integers(3, 300, 11 if BPE else 27)]  # BPE: 50k logits a row
    rewritten = check_base(arch, base, ids, tmp, label)
    arch = label or arch  # the case's name from here on
    # 2. the adapter
    if trained:
        ss = trained_adapter(base, tmp)
    else:
        ss = os.path.join(tmp, arch.replace(" ", "-") + ".ss.gguf")
        export.adapter_writer(random_adapter(base, 3)).write(ss)
    ref_model, _ = export.load_gguf_model(base, ss)
    ref = dump.reference(ref_model, ids)
    G = SS["n_streams"]
    # 3. the C library
    # a quantised base: its own file too (model.py reads its weights decoded; export writes f32)
    files = [rewritten] + ([base] if "--type" in flags else [])
    for fuse, path in [(f, p) for f in (["all", "never"] if VULKAN else [None]) for p in files]:
        tag = "%s %s%s%s" % (arch, "vulkan" if VULKAN else "cpu", " fuse " + fuse if fuse else "",
                             " (as written)" if path == base else "")
        c = run_c(path, ss, ids, G, fuse=fuse)
        errs = [row_err(c["main"][i], ref["main"][i]) for i in range(len(ids))]
        check(len(c["main"]) == len(ids) and max(errs) < TOL, "%s: main logits max row error %.3g" % (tag, max(errs)))
        serrs = [row_err(c["stream"][(i, j + 1)], ref["streams"][i, j]) for i in range(len(ids)) for j in range(G)]
        check(len(c["stream"]) == len(ids) * G and max(serrs) < TOL,
              "%s: stream logits max row error %.3g" % (tag, max(serrs)))
        if path != rewritten:
            continue
        thr, want_pruned, margin, p = prune_threshold(ref["exit"], ids)
        pr = run_c(base, ss, ids, G, prune=thr, fuse=fuse)
        got_pruned = [pr["pruned"].get(i) for i in range(len(ids))]
        check(got_pruned == want_pruned, "%s: pruned %s, want %s (threshold %.4g, log margin %.3g)"
              % (tag, [i for i, g in enumerate(got_pruned) if g], [i for i, w in enumerate(want_pruned) if w],
                 thr, margin))
        # the probabilities the pruning compares, every child's under a threshold that keeps them all
        pa = run_c(base, ss, ids, G, prune=1e-30, fuse=fuse)
        perr = max(abs(pa["exit"].get(i, -1.0) - p[i - 1]) / p[i - 1] for i in range(1, len(ids)))
        check(not any(pa["pruned"].values()) and perr < TOL,
              "%s: early-exit probabilities max relative error %.3g" % (tag, perr))
        print("%s: main %.2e, streams %.2e, early exit %.2e" % (tag, max(errs), max(serrs), perr))


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        archs = [(a, f + ["--vocab", BPE], t) for a, f, t in BPE_ARCHS] if BPE else ARCHS
        for arch, flags, trained in archs:
            one(arch, flags, trained, tmp)
        for label, arch, flags, trained in [] if BPE else SCALED:
            one(arch, flags, trained, tmp, label)
        if not BPE and not VULKAN:  # the reference check alone: no backend runs it here
            check_scaling_refused()
            for arch, flags in DEEP:
                check_base(arch, make_base(arch, flags, tmp), [1] + list(range(3, 30)), tmp)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
