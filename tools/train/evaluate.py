"""evaluate.py: held-out metrics and a speculation simulator for trained models.

Metrics on a validation split: main-stream loss and perplexity; each stream's loss, top-1 and
top-k accuracy against the text (stream j at t predicting token t+1+j); the pruning exit's loss
and top-1 accuracy; and the agreement of a drafter with a target model (the drafter's argmax
equals the target's argmax at the same position).

The simulator predicts what Speculative Streaming with greedy decoding will accept: it decodes
greedily with the main stream from prompts, runs one forward pass over each generated sequence,
and walks it as the C library's loop does (papers/speculative-streaming.txt, 3.2.2): a call at the
last accepted position t drafts, from streams 1..gamma at t, the top-k tokens per depth as a full
tree (1 + sum k^g nodes), and accepts the longest path matching the greedy continuation. A call
advances 1 + accepted tokens. Stream logits at t depend only on the main stream at positions <= t
(Eq. 2), so one pass over the final sequence gives exactly the logits each call would compute.
Deliberately not here: tree pruning's effect on tree size (it needs the tree forward the C library
implements); the simulator reports acceptance without pruning.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F


def _ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="sum").item()


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
    for wi, (w, ns) in enumerate(split.eval_windows(length)):
        if max_windows is not None and wi >= max_windows:
            break
        x = torch.as_tensor(w[None, :ns])  # positions 0..ns-1 predict tokens 1..ns
        out = model(x)
        tgt = torch.as_tensor(w[1:ns + 1])
        lg = out["logits"][0, :ns]
        main_nll += _ce(lg, tgt)
        main_n += ns
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


@torch.no_grad()
def simulate(model, prompts, n_new, gammas, ks, drafter=None, lookaheads=()):
    """Tokens advanced per target call for Speculative Streaming (each gamma <= n_streams, each k)
    and, with a drafter, for draft-model speculation with each lookahead (chain drafts: the
    drafter's greedy tokens, accepted while they equal the target's). Returns a dict of results
    and the generated sequences."""
    model.eval()
    seqs = []
    for p in prompts:
        seqs.append((len(p), greedy_generate(model, p, n_new)))
    res = {"ss": {}, "draft": {}}
    per_seq = []
    for p_len, seq in seqs:
        x = torch.as_tensor([seq])
        out = model(x, want_prune=False)
        per_seq.append((p_len, seq, out["stream_logits"][0] if "stream_logits" in out else None))
    for g in gammas:
        for k in ks:
            calls, adv, depth_hist = 0, 0, np.zeros(g + 1, dtype=np.int64)
            for p_len, seq, sl in per_seq:
                top = sl[:, :g].topk(k, dim=-1).indices.numpy()  # (T, g, k)
                # The prompt call yields the first token and the first draft (at p_len - 1).
                t = p_len - 1
                end = len(seq) - 1
                while t < end:
                    # this call commits seq[t+1] (the root, already known) and drafts from t
                    a = 0
                    while a < g and t + 2 + a <= end and seq[t + 2 + a] in top[t, a]:
                        a += 1
                    calls += 1
                    adv += 1 + a
                    depth_hist[a] += 1
                    t += 1 + a
            res["ss"]["g%d_k%d" % (g, k)] = {
                "gamma": g, "k": k, "tree_nodes": 1 + sum(k ** i for i in range(1, g + 1)),
                "tokens_per_call": adv / calls, "accept_depth_hist": depth_hist.tolist()}
    if drafter is not None:
        for la in lookaheads:
            calls, adv = 0, 0
            for p_len, seq, _ in per_seq:
                dl = drafter(torch.as_tensor([seq]), want_streams=False,
                             want_prune=False)["logits"][0].argmax(-1).numpy()
                t = p_len - 1
                end = len(seq) - 1
                while t < end:
                    # Drafts seq[t+2..]: the drafter's argmax continuation from the true prefix
                    # (the drafter runs autoregressively on its own accepted tokens, which equal
                    # the target's up to the first mismatch).
                    a = 0
                    while a < la and t + 2 + a <= end and dl[t + 1 + a] == seq[t + 2 + a]:
                        a += 1
                    calls += 1
                    adv += 1 + a
                    t += 1 + a
            res["draft"]["la%d" % la] = {"lookahead": la, "tokens_per_call": adv / calls}
    return res, [s for _, s in seqs]
