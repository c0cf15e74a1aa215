/* spec_stream.c: the Speculative Streaming strategy (Bhendawade et al. 2024, 3.2.2 and A.1). One
 * forward call per step verifies the previous step's draft tree and, through the γ speculative
 * streams that ride along every tree node in the top Ns layers, drafts the next one: the streams of
 * the last accepted node give the candidates for the depths below the correction token, the new
 * root. Tree pruning (3.2.3) happens inside the forward call. Only the accepted path's KV is kept.
 * Deliberately not here: the multi-stream attention itself (backends, through ssfwd.h). */
#include "spec.h"

#include "forward_api.h"

#include <string.h>

/* Candidates for the next tree from the streams of node `last` (which sits at position pos):
 * stream g + 1 predicts the token at pos + 2 + g, a child of level g's nodes (3.2.2). They go to
 * the candidate buffer that is not s->cur. */
static es_status draft_from_streams(es_spec *s, int32_t last, bool hooks, es__levels *lv) {
    memset(lv, 0, sizeof *lv);
    /* how many streams pay for themselves now (all of them when drafting is not adaptive); a
     * plain forward kept nothing for them */
    const int32_t n_lv = hooks ? es__tuner_streams(&s->tune, s->depth, s->k, ES__MIN(s->p.max_nodes, s->tree.cap)) : 0;
    s->plain_next = n_lv == 0 && s->tune.adaptive && !es__tuner_explores_next(&s->tune);
    if (n_lv == 0) return ES_OK; /* a plain step next */
    const float *sl = NULL;
    const double t0 = es__time_now();
    es_status st = es__stream_logits(s->ctx, last, n_lv, &sl);
    if (st != ES_OK) return es__fail(&s->err, st, "%s", s->ctx->err.msg);
    es__tuner_observe_streams(&s->tune, n_lv, (es__time_now() - t0) * 1e3);
    const int32_t nxt = 1 - s->cur, k = s->k, V = s->n_vocab;
    const int64_t pos = s->tree.pos[last];
    lv->n_levels = n_lv;
    for (int32_t g = 0; g < n_lv; g++) {
        const size_t at = ((size_t)nxt * (size_t)s->depth + (size_t)g);
        int32_t got = 0;
        ES_TRY(es__draft_candidates(&s->ver, sl + (size_t)g * (size_t)V, s->hist, s->n_hist, pos + 2 + g,
                                    (s->n_steps << 6) | (uint64_t)g, k, s->cand_tok + at * (size_t)k,
                                    s->cand_lp + at * (size_t)k, s->cand_q ? s->cand_q + at * (size_t)V : NULL, &got,
                                    &s->err));
        lv->k[g] = got;
        lv->tokens[g] = s->cand_tok + at * (size_t)k;
    }
    es__spec_calibrate(s, nxt, lv); /* best-first by calibrated acceptance, sized to the cost */
    return ES_OK;
}

es_status es__spec_stream_step(es_spec *s, int32_t *tokens, size_t cap, size_t *n_tokens) {
    es_context *ctx = s->ctx;
    es__tree *t = &s->tree;
    const double t0 = es__time_now();
    es_batch b = {t->n, t->token, t->pos, t->dfs_start, t->dfs_end, s->logit_flags};
    const bool hooks = !s->plain_next || t->n > 1;
    const es__call call = {s->depth, s->p.prune_threshold};
    es_status st = es__forward(ctx, &b, hooks ? &call : NULL);
    if (st != ES_OK) return es__fail(&s->err, st, "%s", ctx->err.msg);
    const double fwd_ms = (es__time_now() - t0) * 1e3;
    for (int32_t i = 0; i < t->n; i++) s->skip[i] = es__pruned(ctx, i);
    t->skip = s->skip;
    int32_t path[ES_SPEC_MAX_DEPTH + 1], n_path = 0;
    st = es__spec_verify(s, cap, tokens, n_tokens, path, &n_path);
    es__levels lv;
    if (st == ES_OK) st = draft_from_streams(s, path[n_path - 1], hooks, &lv);
    const double ms = (es__time_now() - t0) * 1e3;
    s->st.target_ms += ms;
    if (st == ES_OK) es__tuner_observe_call(&s->tune, t->n, fwd_ms);
    if (st == ES_OK) {
        st = es_commit(ctx, path, n_path);
        if (st != ES_OK) es__fail(&s->err, st, "%s", ctx->err.msg);
    }
    if (st != ES_OK) {
        t->skip = NULL; /* the tree is verified again by a retry */
        return st;
    }
    es__spec_advance(s, tokens, *n_tokens);
    s->cur = 1 - s->cur;
    /* the next tree: the new root (the target's own token) and the streams' candidates below it */
    const int32_t room = ES__MIN(es__spec_tree_room(s), es__tuner_room(&s->tune));
    const int32_t root = s->hist[s->n_hist - 1];
    if (room < 2 || es__tree_build(t, root, &lv, room, ctx->n_past, s->alloc, &s->err) != ES_OK) {
        /* no room (or no memory) for a draft: the next step verifies the root alone */
        es__tree_root(t, root, ctx->n_past);
    }
    return ES_OK;
}
