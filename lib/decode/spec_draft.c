/* spec_draft.c: draft-model speculative decoding (Leviathan et al. 2023; Chen et al. 2023) on the
 * shared tree, verification and commit code: a smaller model with the same vocabulary drafts a
 * chain of `lookahead` tokens, one forward call each, and the target verifies the chain in one
 * call. Both models talk only through the forward API (forward_api.h). The drafter's context
 * holds a prefix of the target's committed tokens; what it lacks of them it reads with its next
 * call (after a step whose every draft was accepted, the last draft, whose successor it never
 * computed; after a rewind, nothing: it is cut back too).
 * Deliberately not here: tree drafts from the drafter (a chain is the classic baseline). */
#include "spec.h"

#include <math.h>
#include <string.h>

typedef struct draft_state {
    es_context *d; /* the drafter (es_spec_params.draft_ctx), not owned */
} draft_state;

static es_status draft_create(es_spec *s, void **state) {
    const es_spec_params *p = &s->p;
    es_context *d = p->draft_ctx;
    ES_RETURN_IF(!d || d == s->ctx, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: draft-model decoding needs draft_ctx, a second context (of the draft model)");
    ES_RETURN_IF(p->lookahead < 0 || p->lookahead > ES_SPEC_MAX_DEPTH, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: lookahead %d outside [0, %d] (0 = 4)", p->lookahead, ES_SPEC_MAX_DEPTH);
    es__caps dc;
    es__context_caps(d, &dc);
    ES_RETURN_IF(dc.n_ctx < s->caps.n_ctx || dc.n_batch < 3, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: the draft context needs n_ctx >= %d (the target's) and n_batch >= 3, has %d and %d",
                 s->caps.n_ctx, dc.n_ctx, dc.n_batch);
    ES_TRY(es__spec_same_vocab(s, s->model, es_context_model(d)));
    s->depth = p->lookahead;
    s->k = 1;
    draft_state *ds = es__calloc(s->alloc, 1, sizeof *ds);
    ES_RETURN_IF(!ds, &s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    ds->d = d;
    *state = ds;
    return ES_OK;
}

static void draft_free(es_spec *s, void *state) {
    es__free(s->alloc, state);
}

/* Committed target tokens the drafter has not read: s->hist[its n_past .. the target's). */
static int32_t missing(const es_spec *s, const draft_state *ds) {
    return es_context_n_past(s->ctx) - es_context_n_past(ds->d);
}

/* The drafter takes what the target committed (a prompt, a later turn) right away. */
static es_status draft_feed(es_spec *s, void *state, const int32_t *chain, int32_t n_chain) {
    (void)chain;
    (void)n_chain;
    draft_state *ds = state;
    const int32_t n = missing(s, ds);
    return es__spec_prefill(s, ds->d, s->hist + es_context_n_past(ds->d), n);
}

static void draft_rewind(es_spec *s, void *state, int32_t n_past) {
    draft_state *ds = state;
    (void)s;
    if (es_context_n_past(ds->d) > n_past) es_truncate(ds->d, n_past);
}

/* One drafter call on toks[0..n) (committed), returning the last token's logits. */
static es_status draft_call(es_spec *s, es_context *d, const int32_t *toks, int32_t n, const float **logits) {
    es_batch b = {n, toks, NULL, NULL, NULL, NULL};
    const double t0 = es__time_now();
    es_status st = es_forward(d, &b);
    if (st == ES_OK) st = es_logits(d, n - 1, logits);
    if (st == ES_OK) st = es_commit(d, NULL, 0);
    s->st.n_draft_calls++;
    if (st != ES_OK) return es__spec_fail_ctx(s, d, st, "draft model");
    es__tuner_observe_draft_call(&s->tune, (es__time_now() - t0) * 1e3);
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

/* Drafts up to K tokens after the root into candidate buffer s->cur; returns how many. The first
 * call reads the committed tokens the drafter lacks (at most one after a step) and the root. The
 * drafter's history for its sampler is the sequence plus the drafted tokens (written past the end
 * of s->hist, which has room for ES_SPEC_MAX_DEPTH more). */
static es_status draft_chain(es_spec *s, es_context *d, int32_t K, int32_t *n_drafted) {
    const int32_t V = s->caps.n_vocab;
    const int64_t root_pos = es_context_n_past(s->ctx);
    const int32_t *feed = s->hist + es_context_n_past(d);
    int32_t n_feed = (int32_t)s->n_hist - es_context_n_past(d);
    *n_drafted = 0;
    double p_path = 1.0, expect = 1.0;
    for (int32_t g = 0; g < K; g++) {
        const float *logits = NULL;
        ES_TRY(draft_call(s, d, feed, n_feed, &logits));
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
        const double p_last = exp((double)es__tuner_accept(&s->tune, g + 1, 0, s->cand_lp[at]));
        p_path *= p_last;
        expect += p_path;
        if (!draft_more(s, g + 1, p_path, p_last, expect)) break;
        feed = s->hist + s->n_hist + (size_t)g;
        n_feed = 1;
    }
    return ES_OK;
}

/* The target verifies the chain root, drafts[0..n_drafted) in one call and keeps the accepted
 * path. */
static es_status verify_chain(es_spec *s, int32_t root, int32_t n_drafted, size_t cap, int32_t *tokens,
                              size_t *n_tokens, int32_t *path, int32_t *n_path) {
    es__tree *t = &s->tree;
    es__levels lv;
    memset(&lv, 0, sizeof lv);
    lv.n_levels = n_drafted;
    for (int32_t g = 0; g < n_drafted; g++) {
        const size_t at = (size_t)s->cur * (size_t)s->depth + (size_t)g;
        lv.k[g] = 1;
        lv.tokens[g] = s->cand_tok + at;
        lv.logp[g] = s->cand_lp + at;
    }
    ES_TRY(es__tree_build(t, root, &lv, n_drafted + 1, es_context_n_past(s->ctx), s->alloc, &s->err));
    const double t0 = es__time_now();
    es_batch b = {t->n, t->token, t->pos, t->dfs_start, t->dfs_end, s->logit_flags};
    es_status st = es_forward(s->ctx, &b);
    if (st != ES_OK) es__spec_fail_ctx(s, s->ctx, st, NULL);
    if (st == ES_OK) st = es__spec_verify(s, cap, tokens, n_tokens, path, n_path);
    if (st == ES_OK) {
        st = es_commit(s->ctx, path, *n_path);
        if (st != ES_OK) es__spec_fail_ctx(s, s->ctx, st, NULL);
    }
    const double ms = (es__time_now() - t0) * 1e3;
    s->st.target_ms += ms;
    if (st == ES_OK) es__tuner_observe_call(&s->tune, t->n, ms, t->n == 1);
    return st;
}

static es_status draft_step(es_spec *s, void *state, int32_t *tokens, size_t cap, size_t *n_tokens) {
    draft_state *ds = state;
    es_context *d = ds->d;
    const int32_t n_past = es_context_n_past(s->ctx), d_past0 = es_context_n_past(d);
    const int32_t root = s->hist[s->n_hist - 1];
    /* 1. the drafter catches up (after a rewind it may lack more than one token) and drafts K
     *    tokens: a chain of K + 1 nodes must fit the target, and more than cap - 1 drafts cannot be
     *    emitted */
    int32_t K = ES__MIN(ES__MIN(s->depth, es__spec_tree_room(s) - 1), (int32_t)ES__MIN(cap - 1, (size_t)INT32_MAX));
    K = ES__MIN(K, es__tuner_room(&s->tune) - 1);
    /* where a draft does not pay (measured costs, the acceptance seen), or the tuner's probe times
     * a plain call, the step is a plain call and the drafter waits: it catches up in one prefill
     * when drafting pays again */
    if (!es__tuner_draft_pays(&s->tune)) K = 0;
    es__tuner_chose(&s->tune, K > 0 ? 1 : 0);
    int32_t n_drafted = 0;
    const double t_draft = es__time_now();
    es_status st = K > 0 && missing(s, ds) > 1 ? es__spec_prefill(s, d, s->hist + d_past0, missing(s, ds) - 1) : ES_OK;
    if (st == ES_OK && K > 0) st = draft_chain(s, d, K, &n_drafted);
    s->st.draft_ms += (es__time_now() - t_draft) * 1e3;
    /* 2. the target verifies the chain in one call */
    int32_t path[ES_SPEC_MAX_DEPTH + 1], n_path = 0;
    if (st == ES_OK) st = verify_chain(s, root, n_drafted, cap, tokens, n_tokens, path, &n_path);
    if (st != ES_OK) {
        /* as before the step: the drafter forgets what it read and drafted */
        es_truncate(d, d_past0);
        es__tree_root(&s->tree, root, n_past);
        return st;
    }
    /* 3. the drafter keeps the root and the accepted drafts: it read drafts 1..n_drafted-1, so a
     *    rejected draft goes; an accepted last one it reads with its next call */
    const int32_t m = n_path - 1;
    if (n_drafted > 0 && m < n_drafted) es_truncate(d, n_past + 1 + m);
    es__spec_advance(s, tokens, *n_tokens);
    es__tree_root(&s->tree, s->hist[s->n_hist - 1], es_context_n_past(s->ctx));
    return ES_OK;
}

const es__strategy es__strategy_draft = {"draft model", draft_create, draft_feed, draft_step, draft_rewind, draft_free, NULL, NULL};
