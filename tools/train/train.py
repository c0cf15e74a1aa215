#!/usr/bin/python3
"""train.py: trains edgespec models: a llama base with Speculative Streaming, from scratch (joint
objective of Eq. 5) or as SS-only fine-tuning of an existing GGUF base with the base frozen.

  train.py --out DIR [--mode scratch|ss] [--base BASE.gguf] [model and SS flags] [--steps N] ...

DIR receives: tokenizer.json (trained here unless --tokenizer is given, or taken from --base),
ckpt.pt (the latest checkpoint; --resume continues from it bit for bit), log.jsonl (one record per
logged step and per evaluation) and final.pt. Progress (step, loss per stream, tokens/s, ETA) goes
to stdout. Export to GGUF with export.py.
Deliberately not here: the model (model.py), metrics (evaluate.py), GGUF writing (export.py).
"""

import argparse
import json
import math
import os
import sys
import time

# Threading is fixed before torch loads: OpenMP workers that spin while waiting make every small
# elementwise op ~100x slower when another process (a teammate's build) holds a core, and
# OpenBLAS keeps its own pool; both get --threads (default 2).
def _early_threads(argv):
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "2"


os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", _early_threads(sys.argv[1:]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe       # noqa: E402
import corpus    # noqa: E402
import data      # noqa: E402
import evaluate  # noqa: E402
import model as M  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--mode", choices=("scratch", "ss"), default="scratch",
                    help="scratch: train everything jointly; ss: freeze --base, train the SS adapter")
    ap.add_argument("--base", help="base GGUF for --mode ss (its tokenizer is used)")
    ap.add_argument("--ss-init", help="start from this adapter GGUF (its gamma, Ns, pruning and LoRA "
                    "shape replace the flags): with --mode ss instead of a fresh adapter; with --init "
                    "(a GGUF base) to fine-tune base and adapter jointly")
    ap.add_argument("--init", help="--mode scratch: start from this model (GGUF or checkpoint; its "
                    "shape and tokenizer replace the flags) instead of random weights, e.g. to "
                    "fine-tune a drafter on --corpus-file text")
    ap.add_argument("--tokenizer", help="tokenizer.json to use instead of training one")
    ap.add_argument("--vocab", type=int, default=2048, help="BPE vocabulary size")
    ap.add_argument("--valid-books", default=",".join(corpus.DEFAULT_VALID_BOOKS),
                    help="comma-separated books held out (bible's abbreviations)")
    ap.add_argument("--corpus-file", help="train on this text file's lines instead of the KJV "
                    "(the last --valid-frac of lines are held out)")
    ap.add_argument("--valid-frac", type=float, default=0.05)
    # model
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-head-kv", type=int, default=4)
    ap.add_argument("--n-ff", type=int, default=704)
    ap.add_argument("--n-ctx", type=int, default=512, help="context length written to the GGUF; "
                    "with --init, a larger value extends the model's context (rotary positions, "
                    "nothing learned per position)")
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--untied", action="store_true", help="separate output head")
    # Speculative Streaming
    ap.add_argument("--gamma", type=int, default=3, help="speculative streams (0 = plain model)")
    ap.add_argument("--n-msa", type=int, default=2, help="MSA blocks at the top (Ns)")
    ap.add_argument("--alpha0", type=float, default=1.0, help="main-stream loss weight (Eq. 5)")
    ap.add_argument("--alpha", type=float, default=0.1, help="stream loss weight alpha_j (Eq. 5)")
    ap.add_argument("--prune-layer", type=int, default=-1, help="-1 = n_layer - n_msa")
    ap.add_argument("--prune-rank", type=int, default=8)
    ap.add_argument("--lora-rank", type=int, default=0, help="stream-only LoRA rank (0 = none)")
    ap.add_argument("--lora-targets", default=",".join(M.LORA_TARGETS))
    ap.add_argument("--distill", action="store_true",
                    help="--mode ss: stream j at t learns the frozen main stream's distribution at "
                    "t+j (what verification will compare against) instead of the text's token "
                    "t+1+j; the pruning exit learns the main distribution at t")
    ap.add_argument("--stream-frac", type=float, default=1.0,
                    help="fraction of window positions (sampled per step) where the streams and "
                    "the pruning exit are trained; the main stream always trains on all")
    # optimisation
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds for the whole run: after warmup, --steps is set from the measured "
                    "speed so that training and evaluation end within it (the run prints the value; "
                    "pass it as --steps to reproduce the run exactly)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256, help="training window (tokens)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=0,
                    help="evaluate before training and every N steps; 0 = at the end only")
    ap.add_argument("--eval-windows", type=int, default=0, help="cap on eval windows (0 = all)")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="exit after this many steps of this run, as an interrupted run would "
                    "(with a checkpoint); for testing --resume")
    return ap.parse_args(argv)


def load_splits(args, vocab_for=None):
    """Returns (train_verses, valid_verses)."""
    if args.corpus_file:
        with open(args.corpus_file, encoding="utf-8") as f:
            lines = [ln.rstrip("\n") for ln in f if ln.strip()]
        n_valid = max(1, int(len(lines) * args.valid_frac))
        return lines[:-n_valid], lines[-n_valid:]
    tr, va = corpus.split_books(corpus.read_kjv(), tuple(args.valid_books.split(",")))
    return [v for _, vs in tr for v in vs], [v for _, vs in va for v in vs]


def make_config(args, n_vocab):
    return M.Config(n_vocab=n_vocab, n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
                    n_head_kv=args.n_head_kv, n_ff=args.n_ff, n_ctx=args.n_ctx,
                    rms_eps=args.rms_eps, rope_base=args.rope_base, tied=not args.untied,
                    n_streams=args.gamma, n_msa=args.n_msa if args.gamma else 0,
                    prune_layer=args.prune_layer, prune_rank=args.prune_rank,
                    lora_rank=args.lora_rank, lora_targets=tuple(args.lora_targets.split(",")))


def lr_at(args, step):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    frac = (step - args.warmup) / max(1, args.steps - args.warmup)
    lo = args.lr * args.min_lr_frac
    return lo + 0.5 * (args.lr - lo) * (1 + math.cos(math.pi * min(1.0, frac)))


def losses(model, out, batch, cfg, args, sp=None):
    """Eq. 5: alpha0 * main CE + sum_j alpha_j * CE of stream j (token t+1+j); plus the pruning
    exit's next-token CE (3.2.3), which only trains the adapter (its inputs are detached). Streams
    and the exit are evaluated at window offsets sp (None = all); their CE is a mean over those."""
    T = args.ctx
    V = cfg.n_vocab
    sp = torch.arange(T) if sp is None else sp
    res = {"main": F.cross_entropy(out["logits"].reshape(-1, V), batch[:, 1:T + 1].reshape(-1))}
    total = args.alpha0 * res["main"] if args.mode == "scratch" else 0.0
    G = cfg.n_streams
    if G:
        # targets (B, P, G): stream j (1-based) at t predicts token t+1+j; one CE call for all
        if args.distill:
            tgt = torch.stack([teacher(out, sp + j) for j in range(1, G + 1)], dim=2)
            tgt = tgt.reshape(-1, V)
        else:
            tgt = torch.stack([batch[:, sp + 1 + j] for j in range(1, G + 1)], dim=-1).reshape(-1)
        per = F.cross_entropy(out["stream_logits"].reshape(-1, V), tgt,
                              reduction="none").view(-1, G).mean(0)
        for j in range(G):
            res["s%d" % (j + 1)] = per[j]
        total = total + args.alpha * per.sum()
    if "prune_logits" in out:
        tgt = teacher(out, sp).reshape(-1, V) if args.distill else batch[:, sp + 1].reshape(-1)
        res["prune"] = F.cross_entropy(out["prune_logits"].reshape(-1, V), tgt)
        total = total + res["prune"]
    return total, res


def teacher(out, pos):
    """The frozen main stream's next-token distribution at window offsets pos: (B, P, V)."""
    return F.softmax(out["logits"][:, pos].detach().float(), dim=-1)


def history_steps(history, default):
    """The --steps a time-budgeted run settled on (from its log), else default."""
    for rec in history:
        if "steps_set" in rec:
            return rec["steps_set"]
    return default


def save_ckpt(path, model, opt, step, rng, args, vocab, history):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                "config": model.cfg.__dict__, "args": vars(args), "vocab": vocab.to_json(),
                "history": history}, tmp)
    os.replace(tmp, path)


def load_model_file(path, adapter=None):
    """(Model, Vocab) from a checkpoint (.pt) or a GGUF base with an optional adapter."""
    import export  # GGUF import lives with the writer
    return export.load_any(path, adapter)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    log_path = os.path.join(args.out, "log.jsonl")
    t_setup = time.time()

    base = None
    if args.mode == "ss":
        if not args.base:
            sys.exit("--mode ss needs --base")
        if args.init:
            sys.exit("--init is for --mode scratch; --mode ss starts from --base and --ss-init")
        base, vocab = load_model_file(args.base)
    elif args.distill:
        sys.exit("--distill needs --mode ss (the teacher is the frozen base)")
    elif args.init:
        init, vocab = load_model_file(args.init, args.ss_init)
    elif args.ss_init:
        sys.exit("--ss-init needs --mode ss or --init")
    elif args.tokenizer:
        vocab = bpe.Vocab.load(args.tokenizer)
    train_verses, valid_verses = load_splits(args)
    if base is None and not args.tokenizer and not args.init:
        if args.resume and os.path.exists(ckpt_path):
            vocab = bpe.Vocab.from_json(torch.load(ckpt_path, map_location="cpu")["vocab"])
        else:
            texts = ["\n".join(train_verses)]
            vocab, _ = bpe.train_bpe(texts, args.vocab, log=print)
    vocab.save(os.path.join(args.out, "tokenizer.json"))
    train = data.Split(vocab, train_verses)
    valid = data.Split(vocab, valid_verses)
    print("corpus: train %d verses %d tokens; valid %d verses %d tokens; vocab %d"
          % (train.n_verses, train.n_tokens(), valid.n_verses, valid.n_tokens(), len(vocab)),
          flush=True)

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if base is not None:
        if args.ss_init:
            init, _ = load_model_file(args.base, args.ss_init)
            cfg = init.cfg
        else:
            cfg = M.Config(**{**base.cfg.base_dict(), "n_streams": args.gamma, "n_msa": args.n_msa,
                              "prune_layer": args.prune_layer, "prune_rank": args.prune_rank,
                              "lora_rank": args.lora_rank,
                              "lora_targets": tuple(args.lora_targets.split(","))})
        model = M.Model(cfg)
        missing = model.load_state_dict(base.state_dict(), strict=False)
        assert not missing.unexpected_keys, missing.unexpected_keys
        if args.ss_init:
            model.load_state_dict(init.state_dict())
        for p in model.base_parameters():
            p.requires_grad_(False)
    elif args.init:
        model, cfg = init, init.cfg
        if "--n-ctx" in (argv if argv is not None else sys.argv) and args.n_ctx > cfg.n_ctx:
            print("context extended from %d to %d" % (cfg.n_ctx, args.n_ctx), flush=True)
            cfg.n_ctx = args.n_ctx
    else:
        cfg = make_config(args, len(vocab))
        model = M.Model(cfg)
    if cfg.n_ctx < args.ctx:
        sys.exit("--ctx %d exceeds the model's n_ctx %d" % (args.ctx, cfg.n_ctx))
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    n_base = sum(p.numel() for p in model.base_parameters())
    n_ss = sum(p.numel() for p in model.ss_parameters())
    print("model: %s; base %d params, SS adapter %d params, trainable %d"
          % (json.dumps(cfg.__dict__), n_base, n_ss, sum(p.numel() for p in trainable)), flush=True)

    step = 0
    history = []
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        rng.bit_generator.state = ck["rng"]
        torch.set_rng_state(ck["torch_rng"])
        history = ck["history"]
        print("resumed at step %d" % step, flush=True)
    elif os.path.exists(log_path):
        os.remove(log_path)
    logf = open(log_path, "a")

    def log(rec):
        history.append(rec)
        logf.write(json.dumps(rec) + "\n")
        logf.flush()

    def run_eval():
        res = evaluate.evaluate(model, valid, args.ctx,
                                max_windows=args.eval_windows or None)
        model.train()
        log({"eval": res, "step": step})
        s = " ".join("s%d %.3f/%.2f" % (r["j"], r["loss"], r["top1"]) for r in res["streams"])
        print("eval step %d: main loss %.4f ppl %.2f top1 %.3f %s%s" % (
            step, res["main_loss"], res["main_ppl"], res["main_top1"], s,
            " prune %.3f/%.2f" % (res["prune_loss"], res["prune_top1"]) if "prune_loss" in res else ""),
            flush=True)

    L = args.ctx + cfg.n_streams + 1
    model.train()
    freeze = args.mode == "ss"
    print("setup %.1fs" % (time.time() - t_setup), flush=True)
    eval_s = 0.0
    if args.eval_every and step == 0:
        te = time.time()
        run_eval()
        eval_s = time.time() - te
    calibrate = args.time_budget > 0 and step <= args.warmup
    if calibrate:
        args.steps = 1 << 40  # replaced at the end of warmup
    if args.time_budget > 0 and not calibrate:
        args.steps = history_steps(history, args.steps)
    t0 = time.time()
    step0 = step
    toks = 0
    acc = {}
    n_acc = 0
    while step < args.steps:
        lr = lr_at(args, step)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = torch.as_tensor(train.sample_batch(rng, args.batch, L))
        sp = None
        if args.stream_frac < 1.0 or args.distill:
            # distillation reads the main stream at t+j, which must lie inside the window
            span = args.ctx - cfg.n_streams if args.distill else args.ctx
            n_sp = min(span, max(1, int(round(args.ctx * args.stream_frac))))
            sp = torch.as_tensor(np.sort(rng.choice(span, n_sp, replace=False)))
        out = model(batch[:, :args.ctx], freeze_base=freeze, stream_pos=sp)
        total, parts = losses(model, out, batch, cfg, args, sp)
        opt.zero_grad(set_to_none=True)
        total.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(trainable, args.clip)
        opt.step()
        step += 1
        toks += args.batch * args.ctx
        for k, v in parts.items():
            acc[k] = acc.get(k, 0.0) + v.item()
        n_acc += 1
        if calibrate and step == args.warmup:
            # Steps from the speed measured so far; lr up to here depended only on warmup.
            rate = (step - step0) / (time.time() - t0)
            left = args.time_budget - (time.time() - t_setup)
            n_evals = int(left * rate / args.eval_every) if args.eval_every else 0
            left -= 1.5 * eval_s * (n_evals + 1) + 30.0  # evaluations, final checkpoint
            args.steps = max(step + 1, step + int(left * rate))
            calibrate = False
            log({"step": step, "steps_set": args.steps})
            print("time budget %.0fs: %.2f steps/s, --steps set to %d (pass --steps %d to reproduce)"
                  % (args.time_budget, rate, args.steps, args.steps), flush=True)
        if step % args.log_every == 0 or step == args.steps:
            el = time.time() - t0
            rate = toks / el
            eta = _hms((args.steps - step) * el / (step - step0)) if not calibrate else "(calibrating)"
            means = {k: v / n_acc for k, v in acc.items()}
            log({"step": step, "lr": lr, "tok_s": rate, "elapsed": el, **means})
            print("step %d/%s  %s  lr %.2e  %.0f tok/s  elapsed %s  ETA %s" % (
                step, "?" if calibrate else args.steps,
                " ".join("%s %.4f" % kv for kv in means.items()), lr, rate, _hms(el), eta), flush=True)
            acc, n_acc = {}, 0
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            run_eval()
        if step % args.ckpt_every == 0 or step == args.steps:
            save_ckpt(ckpt_path, model, opt, step, rng, args, vocab, history)
        if args.stop_after and step - step0 >= args.stop_after and step < args.steps:
            save_ckpt(ckpt_path, model, opt, step, rng, args, vocab, history)
            print("stopping after %d steps (--stop-after)" % (step - step0), flush=True)
            return
    run_eval()
    save_ckpt(ckpt_path, model, opt, step, rng, args, vocab, history)
    torch.save({"model": model.state_dict(), "config": model.cfg.__dict__, "vocab": vocab.to_json(),
                "args": vars(args), "history": history}, os.path.join(args.out, "final.pt"))
    print("done: %d steps in %s" % (step, _hms(time.time() - t0)), flush=True)


def _hms(s):
    s = int(s)
    return "%d:%02d:%02d" % (s // 3600, s // 60 % 60, s % 60)


if __name__ == "__main__":
    main()
