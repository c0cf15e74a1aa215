"""test_grow.py: tools/train/grow.py computes the same function, wider.

A small random model and adapter (GQA, an untied and a tied head, LoRA on every projection of the
MSA blocks, pruning below them; the untied one with llama 3's per-pair RoPE divisors, which grow.py
must carry over) are written with export.py's writers, grown 2x and 3x with grow.py,
and read back through export.load_gguf_model: the grown model's main-stream, stream and early-exit
logits must equal the original's within float rounding on random token sequences, its widths must
be the factor times the original's, and --noise must move the logits (it breaks the copies'
symmetry for fine-tuning). A base of every other architecture of tools/train/model.py is refused
with a message that names it, and no file is written. Then the shipped default model, grown 2x,
must give the C library's CLI the same greedy text as the original.
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

testlib.tools("train")
import bpe  # noqa: E402
import export  # noqa: E402
import grow  # noqa: E402
import model as M  # noqa: E402


def random_model(tied, seed):
    torch.manual_seed(seed)
    freqs = () if tied else tuple(float(v) for v in np.linspace(1.0, 8.0, 6))  # head_dim 12: 6 pairs
    cfg = M.Config(n_vocab=384, n_embd=48, n_layer=3, n_head=4, n_head_kv=2, n_ff=80, n_ctx=64, n_streams=3,
                   n_msa=2, prune_layer=1, prune_rank=4, lora_rank=3, tied=tied, rope_freqs=freqs)
    m = M.Model(cfg)
    with torch.no_grad():  # LoRA B and the exit's up projection start at zero: make them count
        for p in m.ss_parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return m


def outputs(m, tokens):
    with torch.no_grad():
        o = m(tokens)
    return o["logits"], o["stream_logits"], o["prune_logits"]


def check_grown(tmp, tied, factor, seed):
    m = random_model(tied, seed)
    base, ss = os.path.join(tmp, "m.gguf"), os.path.join(tmp, "m.ss.gguf")
    export.base_writer(m, tiny_vocab(384), name="grow-test").write(base)
    export.adapter_writer(m, name="grow-test").write(ss)
    gbase, gss = os.path.join(tmp, "g.gguf"), os.path.join(tmp, "g.ss.gguf")
    grow.main([base, gbase, "--ss", ss, gss, "--factor", str(factor)])
    a, _ = export.load_gguf_model(base, ss)
    g, _ = export.load_gguf_model(gbase, gss)
    c, gc = a.cfg, g.cfg
    check(gc.n_embd == factor * c.n_embd and gc.n_ff == factor * c.n_ff and gc.n_head == factor * c.n_head
          and gc.n_head_kv == factor * c.n_head_kv and gc.head_dim == c.head_dim and not gc.tied
          and gc.rope_freqs == c.rope_freqs,
          "x%d: grown widths %s" % (factor, gc))
    tokens = torch.randint(0, 384, (2, 17), generator=torch.Generator().manual_seed(seed))
    worst = 0.0
    for x, y in zip(outputs(a, tokens), outputs(g, tokens)):
        worst = max(worst, float((x - y).abs().max() / x.abs().max()))
    check(worst < 1e-5, "x%d, tied=%s: grown outputs differ by %.2e of the largest" % (factor, tied, worst))
    # noise breaks the copies' symmetry: the logits move
    grow.main([base, gbase, "--ss", ss, gss, "--factor", str(factor), "--noise", "0.01", "--seed", "3"])
    n, _ = export.load_gguf_model(gbase, gss)
    moved = float((outputs(a, tokens)[0] - outputs(n, tokens)[0]).abs().max())
    check(moved > 1e-4, "x%d: --noise 0.01 left the logits where they were (%.2e)" % (factor, moved))
    print("x%d tied=%s: max relative difference %.2e; with noise the logits move by %.2e" % (factor, tied, worst, moved))


def check_refuses_other_archs(tmp):
    """grow.py knows llama's tensors only: another architecture's extra tensors would be dropped."""
    for arch in sorted(set(M.ARCHS) - {"llama"}):
        m = M.Model(M.Config(n_vocab=384, n_embd=32, n_layer=1, n_head=2, n_ff=48, arch=arch, n_swa=4))
        base, out = os.path.join(tmp, arch + ".gguf"), os.path.join(tmp, arch + ".x2.gguf")
        export.base_writer(m, tiny_vocab(384)).write(base)
        try:
            grow.main([base, out])
            msg = None
        except SystemExit as e:
            msg = str(e)
        check(msg is not None and repr(arch) in msg and not os.path.exists(out),
              "grow.py on a %s base: %s" % (arch, msg or "grown"))
        print("%s refused: %s" % (arch, msg))


def tiny_vocab(n):
    """A llama vocabulary of n tokens for the writer."""
    return bpe.train_bpe(["In the beginning God created the heaven and the earth."], n)[0]


def check_default_model(tmp):
    """The shipped default model grown 2x: the C library's greedy text is the original's."""
    cli = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ES_CLI")
    root = testlib.ROOT
    model = os.path.join(root, "models", "default.gguf")
    if not cli:
        check(False, "ES_CLI is not set (meson passes the edgespec CLI)")
        return
    grown = os.path.join(tmp, "default.x2.gguf")
    grow.main([model, grown])
    texts = []
    for m in (model, grown):
        p = subprocess.run(testlib.wrap([cli, "run", "-m", m, "-p", "In the beginning", "-n", "48", "--temp", "0", "-t", "2"]),
                           capture_output=True, timeout=120)
        check(p.returncode == 0, "CLI on %s: %s" % (m, p.stderr.decode(errors="replace")[-400:]))
        texts.append(p.stdout)
    check(texts[0] == texts[1] and len(texts[0]) > 0, "the grown default model's greedy text differs: %r vs %r"
          % (texts[0][:80], texts[1][:80]))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for tied, factor, seed in ((True, 2, 1), (False, 3, 2)):
            check_grown(tmp, tied, factor, seed)
        check_refuses_other_archs(tmp)
        check_default_model(tmp)
    sys.exit(testlib.finish())


if __name__ == "__main__":
    main()
