/* spec_stream.c: the Speculative Streaming strategy (Bhendawade et al. 2024, 3.2.2 and A.1). One
 * forward call per step verifies the previous step's draft tree and, through the γ speculative
 * streams that ride along the tree in the top Ns layers, drafts the next one: the streams of the
 * last accepted node give the candidates for the depths below the correction token, the new
 * root. Tree pruning (3.2.3) happens inside the forward call. Only the accepted path's KV is kept.
 * Deliberately not here: the multi-stream attention itself (the backends, behind forward_api.h). */
#include "spec.h"

#include <string.h>

typedef struct stream_state {
    bool plain_next; /* drafting did not pay: the next call is a plain forward, without streams
                        (until the tuner explores again)                                       */
    bool rest;       /* the streams' drafts did not pay (a tree of the root alone) for the
                        second step in a row, or the plain call's timing is stale: the next
                        call is plain, the one after it drafts again. Without streams it
                        times a plain call, which drafting steps never do (the tuner's unit
                        of cost was a cold probe's until then on lavapipe: 5.3 ms against
                        2.8), and a stretch the streams cannot draft costs every other step
                        a plain call's time, not a call with streams and a pass. A single
                        miss keeps the streams: a rest is a step without a draft, and on the
                        long model (CPU) single misses came every fourth step where its
                        replies loop, about 8% of a reply's time */
} stream_state;

static es_status stream_create(es_spec *s, void **state) {
    const es_spec_params *p = &s->p;
    ES_RETURN_IF(s->caps.n_streams == 0, &s->err, s->caps.no_streams, "es_spec_create: Speculative Streaming %s",
                 s->caps.why_no_streams);
    ES_RETURN_IF(p->n_streams < 0 || p->n_streams > s->caps.n_streams, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: n_streams %d outside [0, %d] (0 = the adapter's)", p->n_streams, s->caps.n_streams);
    ES_RETURN_IF(p->top_k < 0 || p->top_k > 64, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: top_k %d outside [0, 64] (0 = 2)", p->top_k);
    ES_RETURN_IF(!(p->prune_threshold <= 1.0f), &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: prune_threshold %g above 1 (or not a number)", (double)p->prune_threshold);
    ES_RETURN_IF(p->prune_threshold > 0.0f && !s->caps.can_prune, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: pruning asked, but the target's adapter cannot prune (no pruning tensors, or its prune layer is the output)");
    s->depth = p->n_streams;
    s->k = p->top_k;
    *state = es__calloc(s->alloc, 1, sizeof(stream_state));
    ES_RETURN_IF(!*state, &s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    return ES_OK;
}

/* The threshold of the next call of the tree: the one given, or (given 0, adaptive trees) the
 * tuner's, chosen from measured costs; none when a negative one was given. */
static float prune_threshold(es_spec *s) {
    if (s->p.prune_threshold != 0.0f) return s->p.prune_threshold > 0.0f ? s->p.prune_threshold : 0.0f;
    return es__tuner_prune(&s->tune, s->tree.n);
}

/* After a call that pruned at thr, chosen by the tuner: the early exit's probabilities and the
 * verification say what every larger threshold would have kept and accepted (spec_prune.c). */
static void observe_prune(es_spec *s, float thr, const int32_t *tokens, size_t n_tokens, const int32_t *path,
                          int32_t n_path) {
    const es__tree *t = &s->tree;
    for (int32_t i = 0; i < t->n; i++) s->exit_p[i] = es__exit_prob(s->ctx, i);
    /* the target's own next token was a pruned child of the last accepted node: no pruning would
     * have accepted it (and maybe more) */
    const bool cut = (int32_t)n_tokens == n_path &&
                     es__tuner_next_child(t, path[n_path - 1], tokens[n_tokens - 1], -1) >= 0;
    es__tuner_observe_prune(&s->tune, t, s->exit_p, thr, path, n_path, cut);
}

static void stream_free(es_spec *s, void *state) {
    es__free(s->alloc, state);
}

/* Candidates for the next tree from the streams of node `last` (which sits at position pos):
 * stream g + 1 predicts the token at pos + 2 + g, a child of level g's nodes (3.2.2). They go to
 * the candidate buffer that is not s->cur. n_lv streams (0: a plain step next); tuned_prune: the
 * call pruned at the tuner's threshold, and the pass is timed as part of it. */
static es_status draft_from_streams(es_spec *s, int32_t last, int32_t n_lv, bool tuned_prune, es__levels *lv,
                                    double *pass_ms) {
    memset(lv, 0, sizeof *lv);
    *pass_ms = 0.0;
    if (n_lv == 0) return ES_OK;
    const float *sl = NULL;
    const double t0 = es__time_now();
    es_status st = es__stream_logits(s->ctx, last, n_lv, &sl);
    if (st != ES_OK) return es__spec_fail_ctx(s, s->ctx, st, NULL);
    const int32_t nxt = 1 - s->cur, k = s->k, V = s->caps.n_vocab;
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
    /* the pass's time includes the candidates it yields: both grow with the streams asked */
    *pass_ms = (es__time_now() - t0) * 1e3;
    /* after a one-node call the streams may have ridden in it (a backend that measured riding
     * cheaper for few rows: msa_fused.c), leaving the pass little to do, which a tree's step does
     * not get: such passes only seed the fit (mixed with a tree's passes they tilted its line
     * down, and one stream was priced as four) */
    if (tuned_prune) es__tuner_observe_pruned_pass(&s->tune, n_lv, *pass_ms);
    else if (s->tree.n > 1 || !(s->tune.gs > 0.0)) es__tuner_observe_streams(&s->tune, n_lv, *pass_ms);
    es__spec_calibrate(s, nxt, lv); /* best-first by calibrated acceptance, sized to the cost */
    return ES_OK;
}

/* The next tree: the new root (the target's own token) and the streams' candidates below it. */
static void next_tree(es_spec *s, const es__levels *lv) {
    int32_t room = ES__MIN(es__spec_tree_room(s), es__tuner_room(&s->tune));
    /* an exploration measures every stream's drafts, which a chain and its k - 1 siblings per
     * level do; uncut by the costs it grew to twice the largest tree (28 nodes on the long
     * model, CPU: five calls' time), and the line fitted through it priced small trees too dear */
    if (s->tune.explored) room = ES__MIN(room, 1 + s->depth * ES__MAX(s->k, 1));
    const int32_t root = s->hist[s->n_hist - 1], n_past = es_context_n_past(s->ctx);
    if (room < 2 || es__tree_build(&s->tree, root, lv, room, n_past, s->alloc, &s->err) != ES_OK)
        es__tree_root(&s->tree, root, n_past); /* no room (or no memory): the root alone */
}

static es_status stream_step(es_spec *s, void *state, int32_t *tokens, size_t cap, size_t *n_tokens) {
    stream_state *ss = state;
    es__tree *t = &s->tree;
    const double t0 = es__time_now();
    /* 1. one forward call: the tree (verification) and its streams (the next draft), pruned at
     *    the adapter's prune layer; a plain call when drafting does not pay (or the tuner's probe
     *    times one) */
    const bool streams = t->n > 1 || !(ss->plain_next || ss->rest || es__tuner_wants_plain(&s->tune));
    const float thr = streams ? prune_threshold(s) : 0.0f;
    const es__call call = {s->depth, thr};
    es_batch b = {t->n, t->token, t->pos, t->dfs_start, t->dfs_end, s->logit_flags};
    es_status st = es__forward(s->ctx, &b, streams ? &call : NULL);
    if (st != ES_OK) return es__spec_fail_ctx(s, s->ctx, st, NULL);
    const double call_ms = (es__time_now() - t0) * 1e3;
    int32_t kept = 0;
    for (int32_t i = 0; i < t->n; i++) kept += !(s->skip[i] = es__pruned(s->ctx, i));
    t->skip = s->skip;
    /* timed before the choice below, which it may inform (the probe's first tree seeds the fit);
     * the tuner's own pruning calls have a fit of their own */
    const bool tuned_prune = thr > 0.0f && s->tune.prune_auto;
    if (tuned_prune) es__tuner_observe_pruned_call(&s->tune, t->n, kept, call_ms);
    else es__tuner_observe_call(&s->tune, t->n, call_ms, !streams);
    /* 2. hard matching (A.1): the longest accepted path and the target's next token */
    int32_t path[ES_SPEC_MAX_DEPTH + 1], n_path = 0;
    st = es__spec_verify(s, cap, tokens, n_tokens, path, &n_path);
    if (st == ES_OK && tuned_prune) observe_prune(s, thr, tokens, *n_tokens, path, n_path);
    /* 3. the next draft from the streams of the last accepted node */
    es__levels lv;
    const int32_t n_lv = streams ? es__tuner_streams(&s->tune, s->depth, ES__MIN(s->p.max_nodes, t->cap)) : 0;
    if (streams) es__tuner_chose(&s->tune, n_lv);
    const bool plain_next = n_lv == 0 && s->tune.adaptive && !ss->rest && !es__tuner_explores_next(&s->tune);
    double pass_ms = 0.0;
    if (st == ES_OK) st = draft_from_streams(s, path[n_path - 1], n_lv, tuned_prune, &lv, &pass_ms);
    s->st.target_ms += (es__time_now() - t0) * 1e3;
    /* 4. keep the accepted path's KV */
    if (st == ES_OK) {
        st = es_commit(s->ctx, path, n_path);
        if (st != ES_OK) es__spec_fail_ctx(s, s->ctx, st, NULL);
    }
    if (st != ES_OK) {
        t->skip = NULL; /* the tree is verified again by a retry */
        return st;
    }
    ss->plain_next = plain_next;
    es__spec_advance(s, tokens, *n_tokens);
    s->cur = 1 - s->cur;
    const int32_t n_verified = t->n;
    next_tree(s, &lv);
    ss->rest = n_lv > 0 && t->n == 1 && s->tune.adaptive && !es__tuner_explores_next(&s->tune) &&
               (n_verified == 1 || es__tuner_plain_stale(&s->tune));
    es__tuner_observe_host(&s->tune, n_verified, (es__time_now() - t0) * 1e3 - call_ms - pass_ms);
    return ES_OK;
}

const es__strategy es__strategy_stream = {"speculative streaming", stream_create, NULL, stream_step, NULL, stream_free, NULL, NULL};
