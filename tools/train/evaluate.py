"""evaluate.py: held-out metrics and a speculation simulator for trained models.

Metrics on a validation split: main-stream loss and perplexity; each stream's loss, top-1 and
top-k accuracy against the text (stream j at t predicting token t+1+j); the pruning exit's loss
and top-1 accuracy; and the agreement of a drafter with a target model (the drafter's argmax
equals the target's argmax at the same position).

The simulator predicts what Speculative Streaming with greedy decoding will accept: it decodes
greedily with the main stream from prompts, runs one forward pass over each generated sequence,
and walks it as the C library's loop does (papers/speculative-streaming.txt, 3.2.2): a call at the
last accepted position t drafts from streams 1..gamma at t, and accepts the longest tree path that
matches the greedy continuation; a call advances 1 + accepted tokens. Two tree policies: the full
tree of top-k per level (1 + sum k^d nodes, the paper's) and a best-first tree of at most N nodes
by summed stream log-probability (lib/core/tree.c's). Stream logits at t depend only on the main
stream at positions <= t (Eq. 2), so one pass over the final sequence gives exactly the logits
each call would compute. Deliberately not here: tree pruning's effect on tree size (it needs the
tree forward the C library implements); the simulator reports acceptance without pruning.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F


def _ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="sum").item()


def position_buckets(length):
    """Edges 0, 64, 256, 1024, ... (x4) up to length: where in a window a loss was scored."""
    edges, e = [0], 64
    while e < length:
        edges.append(e)
        e *= 4
    return edges + [length]


@torch.no_grad()
def evaluate(model, split, length, topk=(1, 2, 4, 8), max_windows=None):
    """Metrics of model on split with windows of `length` tokens (gamma extra tokens of context
    are not needed: stream targets past a window's scored region are skipped)."""
    model.eval()
    G = model.cfg.n_streams
    main_nll, main_n, main_top1 = 0.0, 0, 0
    s_nll = [0.0] * G
    s_n = [0] * G
    s_hits = [[0] * len(topk) for _ in range(G)]
    p_nll, p_top1 = 0.0, 0
    edges = position_buckets(length)
    b_nll, b_n = [0.0] * (len(edges) - 1), [0] * (len(edges) - 1)
    for wi, (w, ns) in enumerate(split.eval_windows(length)):
        if max_windows is not None and wi >= max_windows:
            break
        x = torch.as_tensor(w[None, :ns])  # positions 0..ns-1 predict tokens 1..ns
        out = model(x)
        tgt = torch.as_tensor(w[1:ns + 1])
        lg = out["logits"][0, :ns]
        nll = F.cross_entropy(lg, tgt, reduction="none")
        main_nll += nll.sum().item()
        main_n += ns
        for b in range(len(edges) - 1):
            part = nll[edges[b]:min(edges[b + 1], ns)]
            b_nll[b] += part.sum().item()
            b_n[b] += part.numel()
        main_top1 += (lg.argmax(-1) == tgt).sum().item()
        if "prune_logits" in out:
            pl = out["prune_logits"][0, :ns]
            p_nll += _ce(pl, tgt)
            p_top1 += (pl.argmax(-1) == tgt).sum().item()
        if G:
            sl = out["stream_logits"][0]  # (ns, G, V)
            kmax = max(topk)
            for j in range(G):
                n = ns - (j + 1)  # positions whose target t+1+(j+1) is still in the scored span
                if n <= 0:
                    continue
                lj = sl[:n, j]
                tj = torch.as_tensor(w[j + 2:j + 2 + n])
                s_nll[j] += _ce(lj, tj)
                s_n[j] += n
                top = lj.topk(kmax, dim=-1).indices
                for ki, k in enumerate(topk):
                    s_hits[j][ki] += (top[:, :k] == tj[:, None]).any(-1).sum().item()
    res = {"tokens": main_n, "main_loss": main_nll / main_n,
           "main_ppl": math.exp(main_nll / main_n), "main_top1": main_top1 / main_n}
    # Whether the model uses a long context shows in the loss falling with the position.
    res["main_loss_by_position"] = [{"from": edges[b], "to": edges[b + 1], "tokens": b_n[b],
                                     "loss": b_nll[b] / b_n[b]} for b in range(len(b_n)) if b_n[b]]
    if p_nll:
        res["prune_loss"] = p_nll / main_n
        res["prune_top1"] = p_top1 / main_n
    res["streams"] = []
    for j in range(G):
        n = max(s_n[j], 1)
        res["streams"].append({"j": j + 1, "loss": s_nll[j] / n,
                               **{"top%d" % k: s_hits[j][ki] / n for ki, k in enumerate(topk)}})
    return res


@torch.no_grad()
def agreement(draft, target, split, length, max_windows=None):
    """Fraction of scored positions where draft's and target's argmax agree."""
    draft.eval()
    target.eval()
    agree, n = 0, 0
    for wi, (w, ns) in enumerate(split.eval_windows(length)):
        if max_windows is not None and wi >= max_windows:
            break
        x = torch.as_tensor(w[None, :ns])
        a = draft(x, want_streams=False, want_prune=False)["logits"][0].argmax(-1)
        b = target(x, want_streams=False, want_prune=False)["logits"][0].argmax(-1)
        agree += (a == b).sum().item()
        n += ns
    return agree / max(n, 1)


@torch.no_grad()
def greedy_generate(model, prompt, n_new):
    """Plain greedy decoding (argmax, ties to the lowest id) without a KV cache."""
    seq = list(prompt)
    for _ in range(n_new):
        x = torch.as_tensor([seq[-model.cfg.n_ctx:]])
        lg = model(x, want_streams=False, want_prune=False)["logits"][0, -1]
        seq.append(int(torch.argmax(lg)))  # torch.argmax returns the first maximal index
    return seq


def _accept_full(cand, seq, t, g, k, end):
    """Accepted depth for the full tree of top-k per level (1 + sum k^d nodes)."""
    a = 0
    while a < g and t + 2 + a <= end and seq[t + 2 + a] in cand[t, a, :k]:
        a += 1
    return a


def _accept_best_first(cand, lp, seq, t, g, k, cap, end):
    """Accepted depth for a best-first tree: the cap - 1 non-root nodes of highest path
    log-probability (sum over depths of the streams' log-softmax) among the full top-k tree, as
    lib/core/tree.c builds it (ties, rare with float sums, are ignored here)."""
    a, path = 0, 0.0
    sums = np.zeros(1)
    levels = []
    for d in range(g):
        sums = (sums[:, None] + lp[t, d, :k][None, :]).reshape(-1)
        levels.append(sums)
    allv = np.concatenate(levels)
    while a < g and t + 2 + a <= end:
        hit = np.nonzero(cand[t, a, :k] == seq[t + 2 + a])[0]
        if len(hit) == 0:
            break
        path += lp[t, a, hit[0]]
        if np.count_nonzero(allv > path) >= cap - 1:
            break
        a += 1
    return a


@torch.no_grad()
def simulate(model, prompts, n_new, gammas, ks, caps=(), drafter=None, lookaheads=(), kmax=8):
    """Tokens advanced per target call, from greedy generations of n_new tokens after each prompt:
    Speculative Streaming with full top-k trees for each gamma <= n_streams and k, best-first
    trees of at most cap nodes (candidates: top-kmax per level) for each cap, and with a drafter,
    draft-model speculation with chain drafts of each lookahead (the drafter's greedy tokens,
    accepted while they equal the target's). Returns (results, sequences)."""
    model.eval()
    seqs = [(len(p), greedy_generate(model, p, n_new)) for p in prompts]
    per_seq = []
    for p_len, seq in seqs:
        out = model(torch.as_tensor([seq]), want_prune=False)
        ls = torch.log_softmax(out["stream_logits"][0].double(), dim=-1)  # (T, G, V)
        top = ls.topk(kmax, dim=-1)
        per_seq.append((p_len, seq, top.indices.numpy(), top.values.numpy()))

    def walk(accept):
        calls, adv = 0, 0
        hist = np.zeros(max(gammas) + 1, dtype=np.int64)
        for p_len, seq, cand, lp in per_seq:
            # The prompt call yields the first token (the first root) and drafts from p_len - 1.
            t, end = p_len - 1, len(seq) - 1
            while t < end:
                a = accept(seq, cand, lp, t, end)  # this call commits seq[t+1] and a drafts
                calls += 1
                adv += 1 + a
                hist[a] += 1
                t += 1 + a
        return adv / calls, hist[:].tolist()

    res = {"ss_full": [], "ss_best_first": [], "draft": []}
    for g in gammas:
        for k in ks:
            tpc, hist = walk(lambda seq, c, lp, t, end: _accept_full(c, seq, t, g, k, end))
            res["ss_full"].append({"gamma": g, "k": k, "nodes": 1 + sum(k ** i for i in range(1, g + 1)),
                                   "tokens_per_call": tpc, "accept_depth_hist": hist[:g + 1]})
        for cap in caps:
            tpc, hist = walk(lambda seq, c, lp, t, end: _accept_best_first(c, lp, seq, t, g, kmax, cap, end))
            res["ss_best_first"].append({"gamma": g, "k": kmax, "nodes": cap, "tokens_per_call": tpc,
                                         "accept_depth_hist": hist[:g + 1]})
    if drafter is not None:
        dls = [drafter(torch.as_tensor([seq]), want_streams=False, want_prune=False)["logits"][0]
               .argmax(-1).numpy() for _, seq in seqs]
        for la in lookaheads:
            calls, adv = 0, 0
            for (p_len, seq), dl in zip(seqs, dls):
                t, end = p_len - 1, len(seq) - 1
                while t < end:
                    # The drafter continues greedily from the committed prefix; its token at
                    # t + 1 + i equals its argmax there while all earlier drafts matched.
                    a = 0
                    while a < la and t + 2 + a <= end and dl[t + 1 + a] == seq[t + 2 + a]:
                        a += 1
                    calls += 1
                    adv += 1 + a
                    t += 1 + a
            res["draft"].append({"lookahead": la, "tokens_per_call": adv / calls})
    return res, [s for _, s in seqs]
