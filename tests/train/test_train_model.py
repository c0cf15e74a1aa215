"""test_train_model.py: tools/train/model.py against a naive per-position, per-stream reference.

The reference below is written from the formulas (papers/speculative-streaming.txt Eq. 2 and 3,
llama's RMSNorm, NORM-ordered RoPE with theta_i = pos * base^(-2i/n_rot), grouped-query heads,
SwiGLU) with explicit loops over positions, heads and streams, in float64. The batched model must
match it for main-stream, stream and early-exit logits on several shapes (GQA, untied head, partial
rotary dims, LoRA, pruning at different layers), and must satisfy the invariants the C library
relies on: streams never change the main stream; position t's outputs never depend on later
tokens; evaluating streams at a subset of positions gives the same values; SS-only fine-tuning
sends gradients to adapter tensors only.
"""

import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

testlib.tools("train")
import model as M  # noqa: E402


def rmsnorm(x, w, eps):
    return x / math.sqrt(float((x * x).mean()) + eps) * w


def rope(v, t, n_rot, base):
    v = v.clone()
    for i in range(n_rot // 2):
        th = t * base ** (-2.0 * i / n_rot)
        a, b = float(v[2 * i]), float(v[2 * i + 1])
        v[2 * i] = a * math.cos(th) - b * math.sin(th)
        v[2 * i + 1] = a * math.sin(th) + b * math.cos(th)
    return v


def reference(m, tok):
    """Main logits (T, V), stream logits (T, G, V), exit logits (T, V) for one sequence."""
    c = m.cfg
    T = len(tok)
    x = [m.token_embd.weight[int(t)].clone() for t in tok]
    S = None
    exit_h = None

    def proj(b, name, h, stream):
        y = getattr(b, name).weight @ h
        if stream and name in b.lora:
            y = y + b.lora[name].b @ (b.lora[name].a @ h)
        return y

    def qkv(b, h, t, stream):
        hn = rmsnorm(h, b.attn_norm, c.rms_eps)
        q = proj(b, "attn_q", hn, stream).view(c.n_head, c.head_dim)
        k = proj(b, "attn_k", hn, stream).view(c.n_head_kv, c.head_dim)
        v = proj(b, "attn_v", hn, stream).view(c.n_head_kv, c.head_dim)
        q = torch.stack([rope(q[h], t, c.n_rot, c.rope_base) for h in range(c.n_head)])
        k = torch.stack([rope(k[h], t, c.n_rot, c.rope_base) for h in range(c.n_head_kv)])
        return q, k, v

    def attend(q, keys, vals):
        out = []
        for h in range(c.n_head):
            g = h // (c.n_head // c.n_head_kv)
            sc = torch.tensor([float(q[h] @ k[g]) / math.sqrt(c.head_dim) for k in keys],
                              dtype=torch.float64)
            p = torch.softmax(sc, 0)
            out.append(sum(p[u] * vals[u][g] for u in range(len(vals))))
        return torch.cat(out)

    def ffn(b, a, stream):
        hn = rmsnorm(a, b.ffn_norm, c.rms_eps)
        g = proj(b, "ffn_gate", hn, stream)
        u = proj(b, "ffn_up", hn, stream)
        return a + proj(b, "ffn_down", g * torch.sigmoid(g) * u, stream)

    for li, b in enumerate(m.blocks):
        if li == c.prune_layer and m.prune_down is not None:
            exit_h = [h + m.prune_up.weight @ (m.prune_down.weight @ h) for h in x]
        if c.n_streams and li == c.msa_start:
            S = [[x[t] + m.stream_embd[j] for j in range(c.n_streams)] for t in range(T)]  # Eq. 3
        main = [qkv(b, x[t], t, False) for t in range(T)]
        newx = []
        for t in range(T):
            a = x[t] + proj(b, "attn_output", attend(main[t][0], [main[u][1] for u in range(t + 1)],
                                                     [main[u][2] for u in range(t + 1)]), False)
            newx.append(ffn(b, a, False))
        if S is not None:
            newS = []
            for t in range(T):
                st = [qkv(b, S[t][j], t, True) for j in range(c.n_streams)]
                row = []
                for j in range(c.n_streams):  # Eq. 2: main K/V at <= t, streams <= j at t
                    keys = [main[u][1] for u in range(t + 1)] + [st[i][1] for i in range(j + 1)]
                    vals = [main[u][2] for u in range(t + 1)] + [st[i][2] for i in range(j + 1)]
                    a = S[t][j] + proj(b, "attn_output", attend(st[j][0], keys, vals), True)
                    row.append(ffn(b, a, True))
                newS.append(row)
            S = newS
        x = newx
    if c.prune_layer == c.n_layer and m.prune_down is not None:
        exit_h = [h + m.prune_up.weight @ (m.prune_down.weight @ h) for h in x]
    W = m.head_weight()
    head = lambda h: W @ rmsnorm(h, m.output_norm, c.rms_eps)  # noqa: E731
    main_l = torch.stack([head(h) for h in x])
    st_l = torch.stack([torch.stack([head(h) for h in row]) for row in S]) if S else None
    ex_l = torch.stack([head(h) for h in exit_h]) if exit_h else None
    return main_l, st_l, ex_l


def randomise(m, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
        for b in m.blocks:
            b.attn_norm.add_(1.0)
            b.ffn_norm.add_(1.0)
        m.output_norm.add_(1.0)


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


CONFIGS = [
    dict(n_vocab=23, n_embd=16, n_layer=3, n_head=4, n_head_kv=2, n_ff=24, n_streams=3, n_msa=2),
    dict(n_vocab=19, n_embd=16, n_layer=2, n_head=2, n_head_kv=1, n_ff=20, n_streams=2, n_msa=1,
         tied=False, lora_rank=3, prune_layer=2),
    dict(n_vocab=17, n_embd=24, n_layer=3, n_head=3, n_ff=16, n_streams=4, n_msa=3, n_rot=4,
         rope_base=500.0, rms_eps=1e-3, lora_rank=2, lora_targets=("attn_q", "attn_v", "ffn_down"),
         prune_layer=1),
    dict(n_vocab=21, n_embd=16, n_layer=2, n_head=2, n_ff=16, n_streams=1, n_msa=2, prune_rank=0),
]

for ci, kw in enumerate(CONFIGS):
    cfg = M.Config(**kw)
    m = M.Model(cfg).double()
    randomise(m, ci)
    g = torch.Generator().manual_seed(100 + ci)
    tok = torch.randint(0, cfg.n_vocab, (2, 7), generator=g)
    with torch.no_grad():
        out = m(tok)
        for bi in range(tok.shape[0]):
            rm, rs, rx = reference(m, tok[bi])
            check(rel(out["logits"][bi], rm) < 1e-10, "config %d main logits" % ci)
            check(rel(out["stream_logits"][bi], rs) < 1e-10, "config %d stream logits" % ci)
            if rx is not None:
                check(rel(out["prune_logits"][bi], rx) < 1e-10, "config %d exit logits" % ci)
            else:
                check("prune_logits" not in out, "config %d has no exit" % ci)
        # Streams never change the main stream: a plain model with the same base weights.
        plain = M.Model(M.Config(**cfg.base_dict())).double()
        plain.load_state_dict({k: v for k, v in m.state_dict().items() if k in plain.state_dict()})
        check(torch.equal(plain(tok)["logits"], out["logits"]), "config %d main unchanged by streams" % ci)
        # Causality: changing the last token changes nothing before it.
        tok2 = tok.clone()
        tok2[:, -1] = (tok2[:, -1] + 1) % cfg.n_vocab
        o2 = m(tok2)
        for k in out:
            check(torch.equal(o2[k][:, :-1], out[k][:, :-1]), "config %d causal %s" % (ci, k))
        # Streams at a subset of positions.
        sp = torch.tensor([0, 2, 3, 6])
        o3 = m(tok, stream_pos=sp)
        check(rel(o3["stream_logits"], out["stream_logits"][:, sp]) < 1e-12, "config %d subset streams" % ci)
        if "prune_logits" in out:
            check(rel(o3["prune_logits"], out["prune_logits"][:, sp]) < 1e-12, "config %d subset exit" % ci)
    # SS-only fine-tuning: gradients reach adapter tensors only, and the base's outputs are those
    # of the plain model.
    for p in m.base_parameters():
        p.requires_grad_(False)
    o = m(tok, freeze_base=True)
    loss = o["stream_logits"].pow(2).mean() + (o["prune_logits"].pow(2).mean() if "prune_logits" in o else 0)
    loss.backward()
    ss_ids = {id(p) for p in m.ss_parameters()}
    for name, p in m.named_parameters():
        if id(p) in ss_ids:
            check(p.grad is not None and bool(p.grad.abs().sum() > 0) or (name.endswith(".a") and cfg.lora_rank),
                  "config %d: adapter tensor %s gets a gradient" % (ci, name))
        else:
            check(p.grad is None, "config %d: base tensor %s gets no gradient" % (ci, name))

print("%d configurations" % len(CONFIGS))
sys.exit(testlib.finish())
