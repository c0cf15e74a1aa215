/* spec_draft.c: draft-model speculative decoding (Leviathan et al. 2023; Chen et al. 2023) on the
 * shared tree, verification and commit code: a smaller model with the same vocabulary drafts a
 * chain of `lookahead` tokens, one forward call each, and the target verifies the chain in one
 * call. Both models talk only through the public forward API (es_forward, es_logits, es_commit,
 * es_truncate). The drafter's context mirrors the target's committed tokens, except for at most
 * a few tokens it has not consumed yet (s->dpend), which it reads with its next call.
 * Deliberately not here: tree drafts from the drafter (a chain is the classic baseline). */
#include "spec.h"

#include <math.h>
#include <string.h>

/* The drafter takes the chain the target just committed (plus what it had not consumed). */
es_status es__spec_draft_feed(es_spec *s, const int32_t *chain, int32_t n_chain) {
    es_context *d = s->dctx;
    const int32_t n_past0 = d->n_past;
    if (s->n_dpend > 0) {
        ES_TRY(es__spec_prefill(d, s->zeros, s->dpend, s->n_dpend, &s->err));
    }
    es_status st = es__spec_prefill(d, s->zeros, chain, n_chain, &s->err);
    if (st != ES_OK) {
        es_truncate(d, n_past0);
        return st;
    }
    s->n_dpend = 0;
    return ES_OK;
}

/* One drafter call on tokens[0..n) (committed), returning the last token's logits. */
static es_status draft_call(es_spec *s, const int32_t *toks, int32_t n, const float **logits) {
    es_context *d = s->dctx;
    es_batch b = {n, toks, NULL, NULL, NULL, NULL};
    const double t0 = es__time_now();
    es_status st = es_forward(d, &b);
    if (st == ES_OK) st = es_logits(d, n - 1, logits);
    if (st == ES_OK) st = es_commit(d, NULL, 0);
    s->st.n_draft_calls++;
    if (st == ES_OK) es__tuner_observe_draft_call(&s->tune, (es__time_now() - t0) * 1e3);
    if (st != ES_OK) return es__fail(&s->err, st, "draft model: %s", d->err.msg);
    return ES_OK;
}

/* Whether drafting one more token pays (spec_tune.h): its chance of acceptance, taken as the path's
 * so far times the last draft's, per the cost of a draft call and a verified node, against the
 * expected tokens per unit of cost of the chain so far. */
static bool draft_more(const es_spec *s, int32_t n_drafted, double p_path, double p_last, double expect) {
    double a, b;
    if (!es__tuner_cost(&s->tune, &a, &b) || !(s->tune.draft_ms > 0.0)) return true;
    const double cost = a + b * (double)(n_drafted + 1) + s->tune.draft_ms * (double)n_drafted;
    return p_path * p_last * cost > expect * (s->tune.draft_ms + b);
}

/* Drafts up to K tokens after the root into candidate buffer s->cur; returns how many. The
 * drafter's history for its sampler is the sequence plus the drafted tokens (written past the end
 * of s->hist, which has room for ES_SPEC_MAX_DEPTH more). */
static es_status draft_chain(es_spec *s, int32_t K, int32_t *n_drafted) {
    const int32_t V = s->n_vocab;
    const int64_t root_pos = s->ctx->n_past;
    int32_t feed[ES_SPEC_MAX_DEPTH + 3], n_feed = 0;
    for (int32_t i = 0; i < s->n_dpend; i++) feed[n_feed++] = s->dpend[i];
    feed[n_feed++] = s->hist[s->n_hist - 1];
    *n_drafted = 0;
    double p_path = 1.0, expect = 1.0;
    for (int32_t g = 0; g < K; g++) {
        const float *logits = NULL;
        ES_TRY(draft_call(s, feed, n_feed, &logits));
        const size_t at = (size_t)s->cur * (size_t)s->depth + (size_t)g;
        int32_t got = 0;
        ES_TRY(es__draft_candidates(&s->ver, logits, s->hist, s->n_hist + (size_t)g, root_pos + 1 + g,
                                    (s->n_steps << 6) | (uint64_t)g, 1, s->cand_tok + at, s->cand_lp + at,
                                    s->cand_q ? s->cand_q + at * (size_t)V : NULL, &got, &s->err));
        if (got == 0) break;
        const int32_t tok = s->cand_tok[at];
        s->hist[s->n_hist + (size_t)g] = tok;
        *n_drafted = g + 1;
        if (!s->p.ignore_eog && es_token_is_eog(s->model, tok)) break; /* nothing follows it */
        const double p_last = exp((double)es__tuner_accept(&s->tune, g + 1, s->cand_lp[at]));
        p_path *= p_last;
        expect += p_path;
        if (!draft_more(s, g + 1, p_path, p_last, expect)) break;
        feed[0] = tok;
        n_feed = 1;
    }
    return ES_OK;
}

es_status es__spec_draft_step(es_spec *s, int32_t *tokens, size_t cap, size_t *n_tokens) {
    es_context *ctx = s->ctx, *d = s->dctx;
    const int32_t n_past = ctx->n_past, d_past0 = d->n_past, n_dpend0 = s->n_dpend;
    const int32_t root = s->hist[s->n_hist - 1];
    /* a chain of K + 1 nodes must fit the target, and more than cap - 1 drafts cannot be emitted */
    int32_t K = ES__MIN(ES__MIN(s->depth, es__spec_tree_room(s) - 1), (int32_t)ES__MIN(cap - 1, (size_t)INT32_MAX));
    K = ES__MIN(K, es__tuner_room(&s->tune) - 1);
    es__tree *t = &s->tree;
    int32_t n_drafted = 0;
    es_status st = ES_OK;
    const double t_draft = es__time_now();
    if (K > 0) st = draft_chain(s, K, &n_drafted);
    else st = es__spec_draft_feed(s, &root, 1); /* nothing to draft: the drafter just keeps up */
    s->st.draft_ms += (es__time_now() - t_draft) * 1e3;
    if (st == ES_OK) {
        es__levels lv;
        memset(&lv, 0, sizeof lv);
        lv.n_levels = n_drafted;
        for (int32_t g = 0; g < n_drafted; g++) {
            const size_t at = (size_t)s->cur * (size_t)s->depth + (size_t)g;
            lv.k[g] = 1;
            lv.tokens[g] = s->cand_tok + at;
            lv.logp[g] = s->cand_lp + at;
        }
        st = es__tree_build(t, root, &lv, n_drafted + 1, n_past, s->alloc, &s->err);
    }
    int32_t path[ES_SPEC_MAX_DEPTH + 1], n_path = 0;
    if (st == ES_OK) {
        const double t0 = es__time_now();
        es_batch b = {t->n, t->token, t->pos, t->dfs_start, t->dfs_end, s->logit_flags};
        st = es_forward(ctx, &b);
        if (st != ES_OK) es__fail(&s->err, st, "%s", ctx->err.msg);
        if (st == ES_OK) st = es__spec_verify(s, cap, tokens, n_tokens, path, &n_path);
        if (st == ES_OK) {
            st = es_commit(ctx, path, n_path);
            if (st != ES_OK) es__fail(&s->err, st, "%s", ctx->err.msg);
        }
        const double ms = (es__time_now() - t0) * 1e3;
        s->st.target_ms += ms;
        if (st == ES_OK) es__tuner_observe_call(&s->tune, t->n, ms);
    }
    if (st != ES_OK) {
        /* as before the step: the drafter forgets what it drafted */
        es_truncate(d, d_past0);
        s->n_dpend = n_dpend0;
        es__tree_root(t, root, n_past);
        return st;
    }
    /* The drafter committed dpend, the root and drafts 1..K'-1 (K' = n_drafted): it keeps the root
     * and the accepted drafts, and reads an accepted last draft with its next call. */
    const int32_t m = n_path - 1;
    if (n_drafted == 0) {
        s->n_dpend = 0; /* the drafter read the root above */
    } else if (m < n_drafted) {
        es_truncate(d, n_past + 1 + m);
        s->n_dpend = 0;
    } else {
        s->dpend[0] = t->token[path[m]];
        s->n_dpend = 1;
    }
    es__spec_advance(s, tokens, *n_tokens);
    es__tree_root(t, s->hist[s->n_hist - 1], ctx->n_past);
    return ES_OK;
}
