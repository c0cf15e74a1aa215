/* spec.c: the speculation object (es_spec): its parameters and their defaults, lifecycle, prompt
 * feeding, the step driver, rewinding and statistics. It drives one strategy through its table
 * (spec.h): Speculative Streaming (spec_stream.c), a draft model (spec_draft.c) or DSI
 * (lib/multi/dsi.c).
 * The object owns no context; it keeps the sequence so that samplers see the same history as
 * plain decoding (es_generate), which is what makes seeded sampling token-exact.
 * Deliberately not here: drafting (the strategies), text and stopping rules (spec_generate.c). */
#include "spec.h"

#include <string.h>

/* The strategies, by es_spec_strategy. */
static const es__strategy *const strategies[] = {
    [ES_SPEC_STREAM] = &es__strategy_stream,
    [ES_SPEC_DRAFT] = &es__strategy_draft,
    [ES_SPEC_DSI] = &es__strategy_dsi,
};

es_spec_params es_spec_default_params(void) {
    es_spec_params p;
    memset(&p, 0, sizeof p); /* every zero is a default: resolve_params says which */
    return p;
}

/* Every default of es_spec_params, in one place: what 0 means for each field. */
static es_spec_params resolve_params(const es_spec_params *in, const es__caps *caps) {
    es_spec_params p = *in;
    if (p.n_streams == 0) p.n_streams = caps->n_streams; /* the adapter's γ */
    if (p.top_k == 0) p.top_k = 2;
    if (p.max_nodes == 0) p.max_nodes = 32;
    if (p.lookahead == 0) p.lookahead = 4;
    es__dsi_resolve(&p.dsi, caps); /* lib/multi/dsi.c: dsi.n_targets 0 is measured at the first feed */
    return p;
}

const char *es_spec_errmsg(const es_spec *s) {
    return s ? s->err.msg : "speculation object is NULL";
}

void es_spec_free(es_spec *s) {
    if (!s) return;
    const es_allocator *a = s->alloc;
    if (s->strategy && s->strategy->free) s->strategy->free(s, s->state);
    es__verifier_free(&s->ver);
    es__tree_free(&s->tree, a);
    void *bufs[] = {s->hist, s->cand_tok, s->cand_lp, s->cand_cal, s->node_lp, s->cand_q, s->logit_flags, s->skip,
                    s->exit_p, s->zeros};
    for (size_t i = 0; i < ES__ARRAY_LEN(bufs); i++) es__free(a, bufs[i]);
    es__free(a, s);
}

/* What every strategy shares: sizes, the verifier, the tree, the sequence, the candidates. */
static es_status make_buffers(es_spec *s) {
    const int32_t tree_cap = ES__MIN(s->p.max_nodes, s->caps.n_batch), nb = s->caps.n_batch;
    const size_t V = (size_t)s->caps.n_vocab, cands = 2 * (size_t)s->depth * (size_t)s->k;
    ES_TRY(es__verifier_init(&s->ver, s->caps.n_vocab, &s->p.sampling, s->p.rejection_sampling, s->alloc, &s->err));
    ES_TRY(es__tree_init(&s->tree, tree_cap, s->alloc, &s->err));
    es__tuner_init(&s->tune, !s->p.fixed_tree);
    s->hist_cap = (size_t)s->caps.n_ctx + ES_SPEC_MAX_DEPTH + 2;
    s->hist = es__calloc(s->alloc, s->hist_cap, sizeof(int32_t));
    s->cand_tok = es__calloc(s->alloc, cands, sizeof(int32_t));
    s->cand_lp = es__calloc(s->alloc, cands, sizeof(float));
    s->cand_cal = es__calloc(s->alloc, cands, sizeof(float));
    s->node_lp = es__calloc(s->alloc, (size_t)tree_cap, sizeof(float));
    const bool rejection = s->ver.mode == ES__VERIFY_REJECTION;
    s->cand_q = rejection ? es__calloc(s->alloc, 2 * (size_t)s->depth * V, sizeof(double)) : NULL;
    s->logit_flags = es__malloc(s->alloc, (size_t)nb);
    s->skip = es__calloc(s->alloc, (size_t)tree_cap, 1);
    s->exit_p = es__calloc(s->alloc, (size_t)tree_cap, sizeof(float));
    s->zeros = es__calloc(s->alloc, (size_t)nb, 1);
    ES_RETURN_IF(!s->hist || !s->cand_tok || !s->cand_lp || !s->cand_cal || !s->node_lp || !s->logit_flags ||
                     !s->skip || !s->exit_p || !s->zeros || (rejection && !s->cand_q),
                 &s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    memset(s->logit_flags, 1, (size_t)nb);
    return ES_OK;
}

static es_status setup(es_spec *s, es_context *ctx, const es_spec_params *params) {
    s->ctx = ctx;
    s->model = es_context_model(ctx);
    s->p = resolve_params(params, &s->caps);
    if (es__sampler_params_check(&s->p.sampling, NULL) != ES_OK)
        return es__fail(&s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_create: %s", es_last_error());
    ES_RETURN_IF(s->p.max_nodes < 0, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_create: max_nodes %d < 0",
                 s->p.max_nodes);
    const int kind = (int)s->p.strategy;
    ES_RETURN_IF(kind < 0 || kind >= (int)ES__ARRAY_LEN(strategies) || !strategies[kind], &s->err,
                 ES_ERR_INVALID_ARGUMENT, "es_spec_create: unknown strategy %d", kind);
    s->strategy = strategies[kind];
    ES_TRY(s->strategy->create(s, &s->state));
    ES_TRY(make_buffers(s));
    /* a new sequence: the contexts start empty */
    es_truncate(ctx, 0);
    if (s->strategy->rewind) s->strategy->rewind(s, s->state, 0);
    /* DSI measures its own latencies; the other strategies size their drafts from costs that
     * their first steps measure while they decode (es__tuner_probe) */
    if (s->strategy == &es__strategy_stream || s->strategy == &es__strategy_draft) es__tuner_probe(&s->tune);
    /* no threshold given: adaptive trees choose one from measured costs, where the adapter prunes */
    if (s->strategy == &es__strategy_stream && s->p.prune_threshold == 0.0f && s->caps.can_prune)
        es__tuner_prune_auto(&s->tune);
    return ES_OK;
}

es_status es_spec_create(es_context *ctx, const es_spec_params *params, es_spec **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_create: out is NULL");
    *out = NULL;
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_create: ctx is NULL");
    if (params) {
        ES_TRY(ES__CHECK_RESERVED(params, "es_spec_params", NULL));
        ES_TRY(ES__CHECK_RESERVED(&params->dsi, "es_spec_params.dsi", NULL));
    }
    es__caps caps;
    es__context_caps(ctx, &caps);
    es_spec *s = es__calloc(caps.alloc, 1, sizeof *s);
    if (!s) return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    s->alloc = caps.alloc;
    s->caps = caps;
    const es_spec_params zero = {0};
    es_status st = setup(s, ctx, params ? params : &zero);
    if (st != ES_OK) {
        char msg[ES__ERRMSG_SIZE];
        memcpy(msg, s->err.msg, sizeof msg);
        es_spec_free(s);
        return es__fail(NULL, st, "%s", msg);
    }
    *out = s;
    return ES_OK;
}

es_status es_spec_get_params(const es_spec *s, es_spec_params *out) {
    if (!s || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_get_params: NULL argument");
    *out = s->p;
    return ES_OK;
}

es_status es_spec_get_stats(const es_spec *s, es_spec_stats *out) {
    if (!s || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_get_stats: NULL argument");
    *out = s->st;
    const double calls = (double)s->st.n_target_calls;
    out->tokens_per_call = calls > 0 ? (double)s->st.n_generated / calls : 0.0;
    out->mean_tree_size = calls > 0 ? (double)s->st.n_tree_nodes / calls : 0.0;
    return ES_OK;
}

es_status es_spec_get_costs(const es_spec *s, es_spec_costs *out) {
    if (!s || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_get_costs: NULL argument");
    memset(out, 0, sizeof *out);
    const es__tuner_costs *c = &s->tune.probe;
    out->calib_plain_ms = c->plain_ms;
    out->calib_one_ms = c->one_ms;
    out->calib_n_hi = c->n_hi;
    out->calib_hi_ms = c->hi_ms;
    out->calib_g_hi = c->g_hi;
    out->calib_pass_hi_ms = c->pass_hi_ms;
    out->calib_draft_ms = c->draft_ms;
    out->adaptive = s->tune.adaptive;
    out->call_ms = s->tune.plain_ms;
    out->fitted = es__tuner_units(&s->tune, &out->node, &out->stream_pass_1, &out->stream_pass_max, &out->draft_call);
    out->max_streams = s->tune.max_g;
    out->explore_every = s->tune.adaptive ? s->tune.explore_every : 0;
    out->prune_threshold = s->tune.prune_auto ? s->tune.prune_last
                           : s->strategy == &es__strategy_stream && s->p.prune_threshold > 0.0f ? s->p.prune_threshold
                                                                                                : 0.0f;
    double o, u, a, b;
    if (es__tuner_prune_costs(&s->tune, &o, &u) && es__tuner_cost(&s->tune, &a, &b) && s->tune.plain_ms > 0.0) {
        const double unit = ES__MIN(s->tune.plain_ms, a + b);
        out->prune_call = o / unit;
        out->prune_node = u / unit;
    }
    return ES_OK;
}

/* ---- feeding */

es_status es_spec_feed(es_spec *s, const int32_t *tokens, size_t n_tokens) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_feed: spec is NULL");
    ES_RETURN_IF(!tokens || n_tokens == 0, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_feed: no tokens");
    for (size_t i = 0; i < n_tokens; i++)
        ES_RETURN_IF(tokens[i] < 0 || tokens[i] >= s->caps.n_vocab, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_feed: token %zu: id %d outside [0, %d)", i, tokens[i], s->caps.n_vocab);
    ES_TRY(es__spec_quiesce(s));
    es_context *ctx = s->ctx;
    const int32_t n_past0 = es_context_n_past(ctx);
    /* the pending root and all but the last new token get committed; the last becomes the root */
    const uint64_t n_chain = n_tokens - 1 + (s->has_root ? 1 : 0);
    ES_RETURN_IF((uint64_t)n_past0 + n_chain + 1 > (uint64_t)s->caps.n_ctx, &s->err, ES_ERR_CONTEXT_FULL,
                 "es_spec_feed: %zu tokens after %d in the context exceed n_ctx %d", n_tokens,
                 n_past0 + (s->has_root ? 1 : 0), s->caps.n_ctx);
    const double t0 = es__time_now();
    /* the history holds the chain already (pending root) or takes it now (tokens) */
    memcpy(s->hist + s->n_hist, tokens, sizeof(int32_t) * n_tokens);
    const int32_t *chain = s->hist + s->n_hist - (s->has_root ? 1 : 0);
    es_status st = es__spec_prefill(s, ctx, chain, (int32_t)n_chain);
    if (st == ES_OK && s->strategy->feed) {
        st = s->strategy->feed(s, s->state, chain, (int32_t)n_chain);
        if (st != ES_OK) es_truncate(ctx, n_past0);
    }
    if (st != ES_OK) return st;
    s->n_hist += n_tokens;
    s->has_root = true;
    es__tree_root(&s->tree, tokens[n_tokens - 1], es_context_n_past(ctx));
    s->st.n_prompt += (int64_t)n_tokens;
    s->st.prompt_ms += (es__time_now() - t0) * 1e3;
    return ES_OK;
}

/* ---- steps */

es_status es_spec_step(es_spec *s, int32_t *tokens, size_t cap, size_t *n_tokens) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_step: spec is NULL");
    ES_RETURN_IF(!tokens || !n_tokens || cap == 0, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_step: tokens, n_tokens and cap >= 1 are needed");
    *n_tokens = 0;
    ES_RETURN_IF(!s->has_root, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_step: feed a prompt first (es_spec_feed)");
    /* the committed tokens, as the sequence says: s->ctx may be in a worker's hands (quiesce) */
    const int32_t n_past = (int32_t)s->n_hist - 1;
    ES_RETURN_IF(n_past >= s->caps.n_ctx, &s->err, ES_ERR_CONTEXT_FULL, "es_spec_step: the context is full (%d of %d tokens)",
                 n_past, s->caps.n_ctx);
    const double t0 = es__time_now();
    const es_status st = s->strategy->step(s, s->state, tokens, cap, n_tokens);
    if (st != ES_OK) {
        *n_tokens = 0;
        return st;
    }
    s->n_steps++;
    s->st.n_target_calls++;
    s->st.n_generated += (int64_t)*n_tokens;
    s->st.decode_ms += (es__time_now() - t0) * 1e3;
    return ES_OK;
}

es_status es__spec_rewind(es_spec *s, size_t n_keep) {
    ES_RETURN_IF(!s->has_root || n_keep < 1 || n_keep > s->n_hist, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "rewind: keep %zu of the sequence's %zu tokens", n_keep, s->n_hist);
    if (n_keep == s->n_hist) return ES_OK;
    ES_TRY(es__spec_quiesce(s));
    /* the target holds all but the pending root: the kept sequence's last token becomes it */
    const int32_t n_past = (int32_t)n_keep - 1;
    const es_status st = es_truncate(s->ctx, n_past);
    if (st != ES_OK) return es__spec_fail_ctx(s, s->ctx, st, "rewind");
    s->n_hist = n_keep;
    es__tree_root(&s->tree, s->hist[n_keep - 1], n_past);
    if (s->strategy->rewind) s->strategy->rewind(s, s->state, n_past);
    return ES_OK;
}

/* ---- editing the sequence */

size_t es_spec_n_tokens(const es_spec *s) {
    return s ? s->n_hist : 0;
}

es_status es_spec_truncate(es_spec *s, size_t n_tokens) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_truncate: spec is NULL");
    ES_RETURN_IF(n_tokens > s->n_hist, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_truncate: keep %zu tokens of a sequence of %zu", n_tokens, s->n_hist);
    if (n_tokens > 0) return es__spec_rewind(s, n_tokens);
    ES_TRY(es__spec_quiesce(s));
    const es_status st = es_truncate(s->ctx, 0);
    if (st != ES_OK) return es__spec_fail_ctx(s, s->ctx, st, "truncate");
    s->n_hist = 0;
    s->has_root = false;
    if (s->strategy->rewind) s->strategy->rewind(s, s->state, 0);
    return ES_OK;
}

es_status es_spec_resume(es_spec *s, const int32_t *tokens, size_t n_tokens) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_resume: spec is NULL");
    ES_RETURN_IF(!tokens || n_tokens == 0, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_resume: no tokens");
    const int32_t n_past = es_context_n_past(s->ctx);
    ES_RETURN_IF((size_t)n_past + 1 != n_tokens, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_resume: a sequence of %zu tokens needs the target to hold %zu of them; it holds %d", n_tokens,
                 n_tokens - 1, n_past);
    for (size_t i = 0; i < n_tokens; i++)
        ES_RETURN_IF(tokens[i] < 0 || tokens[i] >= s->caps.n_vocab, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_resume: token %zu: id %d outside [0, %d)", i, tokens[i], s->caps.n_vocab);
    memcpy(s->hist, tokens, sizeof(int32_t) * n_tokens);
    s->n_hist = n_tokens;
    s->has_root = true;
    es__tree_root(&s->tree, tokens[n_tokens - 1], n_past);
    /* nothing else the strategy holds belongs to this sequence */
    if (s->strategy->rewind) s->strategy->rewind(s, s->state, 0);
    return ES_OK;
}

es_status es__spec_shift(es_spec *s, int32_t n_keep, int32_t n_discard) {
    ES_TRY(es__spec_quiesce(s));
    if (s->strategy->shift) ES_TRY(s->strategy->shift(s, s->state, n_keep, n_discard));
    const int32_t n_past = es_context_n_past(s->ctx);
    const es_status st = es_context_shift(s->ctx, n_keep, n_discard);
    if (st != ES_OK && es_context_n_past(s->ctx) != n_past) {
        /* a backend failure: the target kept its first n_keep tokens only, the sequence follows */
        const int32_t held = es_context_n_past(s->ctx);
        s->n_hist = ES__MIN(s->n_hist, (size_t)held);
        s->has_root = false;
        if (s->strategy->rewind) s->strategy->rewind(s, s->state, held);
        return es__spec_fail_ctx(s, s->ctx, st, "shift");
    }
    if (st != ES_OK) return es__spec_fail_ctx(s, s->ctx, st, "shift");
    memmove(s->hist + n_keep, s->hist + n_keep + n_discard, sizeof(int32_t) * (s->n_hist - (size_t)(n_keep + n_discard)));
    s->n_hist -= (size_t)n_discard;
    if (s->has_root) es__tree_root(&s->tree, s->hist[s->n_hist - 1], es_context_n_past(s->ctx));
    /* what a strategy holds past the kept start sits at the old positions */
    if (!s->strategy->shift && s->strategy->rewind) s->strategy->rewind(s, s->state, n_keep);
    return ES_OK;
}

es_status es_spec_shift(es_spec *s, int32_t n_keep, int32_t n_discard) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_shift: spec is NULL");
    const int32_t n_past = s->has_root ? (int32_t)s->n_hist - 1 : 0;
    ES_RETURN_IF(n_keep < 0 || n_discard < 1 || (int64_t)n_keep + n_discard > n_past, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_shift: keep %d and drop %d of the %d tokens in the target's cache", n_keep, n_discard, n_past);
    return es__spec_shift(s, n_keep, n_discard);
}

es_status es__spec_quiesce(es_spec *s) {
    return s->strategy->quiesce ? s->strategy->quiesce(s, s->state) : ES_OK;
}
