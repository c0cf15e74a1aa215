"""test_train_smoke.py: a few steps of tools/train on a tiny configuration, end to end.

Trains a tiny Speculative Streaming model from scratch on a small synthetic corpus (the loss must
fall for the main stream and every stream), checks that an interrupted run resumed from its
checkpoint ends bit-identical to an uninterrupted one, exports the base and adapter GGUF in f32,
f16 and q8_0 and reads them back (f32 must reproduce the checkpoint's logits exactly; f16/q8_0
within their rounding), then fine-tunes an SS adapter on the exported base with --mode ss and
checks that the base model's outputs did not move. Leaves the f32 files in the working directory
for the C-side tests (test_train_c.py).
"""

import json
import os
import random
import shutil
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("train", "pygguf")
import export  # noqa: E402
import pygguf  # noqa: E402

TRAIN = os.path.join(testlib.ROOT, "tools", "train")
PY = sys.executable
WORK = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "train_smoke")


def run(args):
    p = subprocess.run([PY] + args, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr, file=sys.stderr)
        raise SystemExit("command failed: %s" % " ".join(args))
    return p.stdout


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
# A corpus where the future is learnable in a few steps: each line walks a cycle of words from a
# random start, so the next words are a function of the current one.
WORDS = ("In the beginning God created heaven and earth light was good day night "
         "waters firmament dry land grass herb seed fruit tree").split()
rnd = random.Random(5)
text = os.path.join(WORK, "corpus.txt")
with open(text, "w") as f:
    for _ in range(400):
        s, n = rnd.randrange(len(WORDS)), rnd.randrange(6, 30)
        f.write(" ".join(WORDS[(s + i) % len(WORDS)] for i in range(n)) + ".\n")

COMMON = ["--corpus-file", text, "--valid-frac", "0.1", "--vocab", "384", "--n-embd", "32",
          "--n-layer", "3", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "64", "--n-ctx", "64",
          "--ctx", "32", "--batch", "8", "--gamma", "2", "--n-msa", "2", "--lora-rank", "2",
          "--stream-frac", "0.5", "--lr", "4e-2", "--warmup", "3", "--seed", "7", "--threads", "1",
          "--log-every", "1", "--ckpt-every", "1000"]
STEPS = ["--steps", "60"]


def log(d):
    with open(os.path.join(d, "log.jsonl")) as f:
        return [json.loads(ln) for ln in f]


# 1. Train; the loss falls for the main stream and each stream.
a = os.path.join(WORK, "a")
out = run([os.path.join(TRAIN, "train.py"), "--out", a] + COMMON + STEPS)
check("ETA" in out and "tok/s" in out, "progress lines show tokens/s and ETA")
recs = [r for r in log(a) if "step" in r and "main" in r]
for k in ("main", "s1", "s2", "prune"):
    first = sum(r[k] for r in recs[:3]) / 3
    last = sum(r[k] for r in recs[-3:]) / 3
    check(last < first - 0.8, "%s loss falls: %.3f -> %.3f" % (k, first, last))

# 2. Interrupted after 25 steps and resumed: bit-identical to the uninterrupted run.
b = os.path.join(WORK, "b")
run([os.path.join(TRAIN, "train.py"), "--out", b] + COMMON + STEPS + ["--stop-after", "25"])
run([os.path.join(TRAIN, "train.py"), "--out", b, "--resume"] + COMMON + STEPS)
sa = torch.load(os.path.join(a, "final.pt"))["model"]
sb = torch.load(os.path.join(b, "final.pt"))["model"]
check(sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa),
      "resumed run equals the uninterrupted run")

# 3. Export and read back.
ck = os.path.join(a, "final.pt")
ref, vocab = export.load_checkpoint(ck)
tok = torch.tensor([vocab.encode("In the beginning God created the heaven and the earth.")])
with torch.no_grad():
    want = ref(tok)
for wtype, tol in (("f32", 0.0), ("f16", 2e-2), ("q8_0", 6e-2)):
    base = os.path.join(WORK, "tiny-%s.gguf" % wtype)
    ss = os.path.join(WORK, "tiny-%s.ss.gguf" % wtype)
    export.main([ck, base, "--type", wtype, "--ss", ss, "--ss-type", wtype])
    r = pygguf.read(base)
    check(r.get("general.architecture") == "llama", "%s: architecture" % wtype)
    check(r.get("general.file_type") == export.FILE_TYPE[wtype], "%s: file_type" % wtype)
    check(r.tensors["blk.0.attn_norm.weight"].type == "f32", "%s: norms stay f32" % wtype)
    check(r.tensors["blk.1.ffn_down.weight"].type == wtype, "%s: matrices are %s" % (wtype, wtype))
    check(r.tensors["token_embd.weight"].ne == (32, 384), "%s: token_embd ne" % wtype)
    check("output.weight" not in r.tensors, "%s: tied head has no output.weight" % wtype)
    check(len(r.tensors) == 2 + 9 * 3, "%s: tensor count %d" % (wtype, len(r.tensors)))
    ra = pygguf.read(ss)
    for k, v in (("general.type", "adapter"), ("edgespec.adapter.type", "speculative_streaming"),
                 ("edgespec.ss.n_streams", 2), ("edgespec.ss.n_msa_layers", 2),
                 ("edgespec.ss.prune_layer", 1), ("edgespec.ss.prune_rank", 8),
                 ("edgespec.ss.lora_rank", 2)):
        check(ra.get(k) == v, "%s adapter: %s = %r" % (wtype, k, ra.get(k)))
    check(ra.tensors["ss.stream_embd.weight"].ne == (32, 2), "stream_embd ne")
    check(ra.tensors["ss.prune_down.weight"].ne == (32, 8), "prune_down ne")
    check(ra.tensors["ss.prune_up.weight"].ne == (8, 32), "prune_up ne")
    check(ra.tensors["ss.blk.1.attn_k.lora_a"].ne == (32, 2), "lora_a ne")
    check(ra.tensors["ss.blk.1.attn_k.lora_b"].ne == (2, 16), "lora_b ne")
    check(len(ra.tensors) == 3 + 2 * 7 * 2, "adapter tensor count %d" % len(ra.tensors))
    m, v2 = export.load_gguf_model(base, ss)
    check(v2.tokens == vocab.tokens, "%s: vocabulary round trip" % wtype)
    with torch.no_grad():
        got = m(tok)
    for k in want:
        err = float((got[k] - want[k]).abs().max() / want[k].abs().max())
        check(err <= tol, "%s: %s relative error %.3g > %.3g" % (wtype, k, err, tol))

# 4. SS-only fine-tuning of the exported f32 base: only the adapter trains.
c = os.path.join(WORK, "c")
base = os.path.join(WORK, "tiny-f32.gguf")
run([os.path.join(TRAIN, "train.py"), "--out", c, "--mode", "ss", "--base", base, "--corpus-file", text,
     "--valid-frac", "0.1", "--ctx", "32", "--batch", "8", "--gamma", "3", "--n-msa", "1",
     "--lora-rank", "4", "--steps", "40", "--lr", "3e-2", "--warmup", "2", "--threads", "1",
     "--log-every", "5", "--eval-every", "1000"])
evals = [r["eval"] for r in log(c) if "eval" in r]
check(len(evals) == 2, "evaluated before and after")
for j in range(3):
    before, after = evals[0]["streams"][j]["loss"], evals[-1]["streams"][j]["loss"]
    check(after < before - 0.2, "ss mode: stream %d held-out loss falls: %.3f -> %.3f" % (j + 1, before, after))
check(evals[0]["main_loss"] == evals[-1]["main_loss"], "ss mode: main held-out loss unchanged")
ft, _ = export.load_checkpoint(os.path.join(c, "final.pt"))
plain, _ = export.load_gguf_model(base)
with torch.no_grad():
    check(torch.equal(ft(tok)["logits"], plain(tok)["logits"]), "ss mode leaves the base unchanged")
check(ft.cfg.n_streams == 3 and ft.cfg.prune_layer == 2, "ss mode config")

# 5. --ss-init continues from an existing adapter: before its first step it evaluates exactly as
# the model that adapter was exported from.
e = os.path.join(WORK, "e")
run([os.path.join(TRAIN, "train.py"), "--out", e, "--mode", "ss", "--base", base, "--ss-init",
     os.path.join(WORK, "tiny-f32.ss.gguf"), "--corpus-file", text, "--valid-frac", "0.1", "--ctx", "32",
     "--batch", "8", "--steps", "2", "--threads", "1", "--eval-every", "1000"])
first = [r["eval"] for r in log(e) if "eval" in r][0]
final_a = [r["eval"] for r in log(a) if "eval" in r][-1]
check(first["main_loss"] == final_a["main_loss"] and
      [s["loss"] for s in first["streams"]] == [s["loss"] for s in final_a["streams"]] and
      first["prune_loss"] == final_a["prune_loss"],
      "--ss-init starts from the adapter: %s vs %s" % (first, final_a))

# --init starts a scratch-mode run (a drafter's fine-tuning) from an exported model's weights.
f = os.path.join(WORK, "f")
run([os.path.join(TRAIN, "train.py"), "--out", f, "--init", base, "--corpus-file", text, "--valid-frac", "0.1",
     "--ctx", "32", "--batch", "8", "--steps", "2", "--threads", "1", "--eval-every", "1000"])
first = [r["eval"] for r in log(f) if "eval" in r][0]
check(first["main_loss"] == final_a["main_loss"] and not first["streams"],
      "--init starts from the model: %s vs %s" % (first["main_loss"], final_a["main_loss"]))

# 6. --distill: stream j at window offset t learns the frozen main stream's distribution at t + j.
# Stream logits equal to the main logits at exactly that offset reach the teacher's entropy, the
# least cross-entropy possible; one offset off must cost more.
import argparse  # noqa: E402
import train as T  # noqa: E402
B, TT, G, V = 2, 12, 3, 17
gen = torch.Generator().manual_seed(3)
main_logits = 3 * torch.randn(B, TT, V, generator=gen)
sp = torch.tensor([0, 2, 5, 7])
targs = argparse.Namespace(ctx=TT, mode="ss", alpha0=1.0, alpha=1.0, distill=True)
tcfg = argparse.Namespace(n_streams=G, n_vocab=V)
batch = torch.randint(0, V, (B, TT + G + 1), generator=gen)
p_main = torch.softmax(main_logits, -1)
for shift, exact in ((0, True), (1, False)):
    sl = torch.stack([main_logits[:, sp + j + shift] for j in range(1, G + 1)], 2)
    _, parts = T.losses(None, {"logits": main_logits, "stream_logits": sl}, batch, tcfg, targs, sp)
    for j in range(1, G + 1):
        pj = p_main[:, sp + j]
        ent = float(-(pj * pj.log()).sum(-1).mean())
        got = float(parts["s%d" % j])
        if exact:
            check(abs(got - ent) < 1e-4, "distill: stream %d at the teacher's own offset: CE %.5f vs entropy %.5f"
                  % (j, got, ent))
        else:
            check(got > ent + 0.1, "distill: stream %d one offset off should cost more: %.5f vs %.5f" % (j, got, ent))
# and end to end: a distilled adapter's streams learn the (learnable) future of the corpus
d = os.path.join(WORK, "d")
run([os.path.join(TRAIN, "train.py"), "--out", d, "--mode", "ss", "--base", base, "--corpus-file", text,
     "--distill", "--valid-frac", "0.1", "--ctx", "32", "--batch", "8", "--gamma", "3", "--n-msa", "1",
     "--lora-rank", "4", "--steps", "40", "--lr", "3e-2", "--warmup", "2", "--threads", "1",
     "--log-every", "5", "--eval-every", "1000"])
evals = [r["eval"] for r in log(d) if "eval" in r]
for j in range(3):
    before, after = evals[0]["streams"][j]["loss"], evals[-1]["streams"][j]["loss"]
    check(after < before - 0.2, "distill: stream %d held-out loss falls: %.3f -> %.3f" % (j + 1, before, after))

sys.exit(testlib.finish())
