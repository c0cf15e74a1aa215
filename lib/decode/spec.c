/* spec.c: the speculation object (es_spec): parameters, lifecycle, prompt feeding, the step
 * driver, verification of a forwarded tree and statistics. The strategies that draft and forward
 * the trees live in spec_stream.c (Speculative Streaming) and spec_draft.c (draft model).
 * The object owns no context; it keeps the sequence so that samplers see the same history as
 * plain decoding (es_generate), which is what makes seeded sampling token-exact.
 * Deliberately not here: text, chat templates, stop strings. */
#include "spec.h"

#include "adapter.h"
#include "sampler.h"

#include <string.h>

es_spec_params es_spec_default_params(void) {
    es_spec_params p;
    memset(&p, 0, sizeof p);
    p.strategy = ES_SPEC_STREAM;
    p.sampling = es_sampler_default_params();
    return p;
}

const char *es_spec_errmsg(const es_spec *s) {
    return s ? s->err.msg : "speculation object is NULL";
}

void es_spec_free(es_spec *s) {
    if (!s) return;
    const es_allocator *a = s->alloc;
    es__verifier_free(&s->ver);
    es__tree_free(&s->tree, a);
    es__free(a, s->hist);
    es__free(a, s->cand_tok);
    es__free(a, s->cand_lp);
    es__free(a, s->cand_cal);
    es__free(a, s->node_lp);
    es__free(a, s->cand_q);
    es__free(a, s->logit_flags);
    es__free(a, s->skip);
    es__free(a, s->zeros);
    es__free(a, s);
}

/* Same vocabulary: sizes, and the text of a spread of tokens. */
static es_status check_same_vocab(es_spec *s, const es_model *a, const es_model *b) {
    ES_RETURN_IF(a->hp.n_vocab != b->hp.n_vocab, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: the draft model '%s' has %d tokens, the target '%s' %d: they must share a vocabulary",
                 b->path, b->hp.n_vocab, a->path, a->hp.n_vocab);
    for (int32_t i = 0; i < 64; i++) {
        int32_t t = (int32_t)(((int64_t)a->hp.n_vocab - 1) * i / 63);
        char pa[64], pb[64];
        size_t la = 0, lb = 0;
        es_status sa = es_token_to_piece(a, t, true, pa, sizeof pa, &la);
        es_status sb = es_token_to_piece(b, t, true, pb, sizeof pb, &lb);
        ES_RETURN_IF(sa != sb || (sa == ES_OK && (la != lb || memcmp(pa, pb, la) != 0)), &s->err,
                     ES_ERR_INVALID_ARGUMENT, "es_spec_create: token %d differs between the target '%s' and the draft '%s'",
                     t, a->path, b->path);
    }
    return ES_OK;
}

static es_status check_params(es_spec *s, es_context *ctx, const es_spec_params *p) {
    const es_model *m = ctx->model;
    if (es__sampler_params_check(&p->sampling, NULL) != ES_OK)
        return es__fail(&s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_create: %s", es_last_error());
    ES_RETURN_IF(p->max_nodes < 0, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_create: max_nodes %d < 0", p->max_nodes);
    if (p->strategy == ES_SPEC_STREAM) {
        const es__ss_adapter *ss = m->ss;
        ES_RETURN_IF(!ss, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: Speculative Streaming needs an adapter on model '%s' (es_model_load_adapter)",
                     m->path);
        ES_RETURN_IF(p->n_streams < 0 || p->n_streams > ss->n_streams, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: n_streams %d outside [0, %d] (0 = the adapter's)", p->n_streams, ss->n_streams);
        ES_RETURN_IF(p->top_k < 0 || p->top_k > 64, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: top_k %d outside [0, 64] (0 = 2)", p->top_k);
        ES_RETURN_IF(!(p->prune_threshold >= 0.0f && p->prune_threshold <= 1.0f), &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: prune_threshold %g outside [0, 1]", (double)p->prune_threshold);
        ES_RETURN_IF(p->prune_threshold > 0.0f && ss->prune_rank == 0, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: pruning asked, but the adapter of '%s' has no pruning tensors", m->path);
        ES_RETURN_IF(!ctx->backend->vt->stream_logits, &s->err, ES_ERR_UNSUPPORTED,
                     "es_spec_create: the %s backend has no multi-stream attention (Speculative Streaming)",
                     ctx->backend->vt->name);
    } else if (p->strategy == ES_SPEC_DRAFT) {
        const es_context *d = p->draft_ctx;
        ES_RETURN_IF(!d || d == ctx, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: draft-model decoding needs draft_ctx, a second context (of the draft model)");
        ES_RETURN_IF(p->lookahead < 0 || p->lookahead > ES_SPEC_MAX_DEPTH, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: lookahead %d outside [0, %d] (0 = 4)", p->lookahead, ES_SPEC_MAX_DEPTH);
        ES_RETURN_IF(d->n_ctx < ctx->n_ctx || d->n_batch < 3, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_create: the draft context needs n_ctx >= %d (the target's) and n_batch >= 3, has %d and %d",
                     ctx->n_ctx, d->n_ctx, d->n_batch);
        ES_TRY(check_same_vocab(s, m, d->model));
    } else {
        return es__fail(&s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_create: unknown strategy %d", (int)p->strategy);
    }
    return ES_OK;
}

static es_status setup(es_spec *s, es_context *ctx, const es_spec_params *p) {
    ES_TRY(check_params(s, ctx, p));
    const es_model *m = ctx->model;
    s->p = *p;
    s->ctx = ctx;
    s->model = m;
    s->n_vocab = m->hp.n_vocab;
    if (p->strategy == ES_SPEC_STREAM) {
        s->depth = p->n_streams > 0 ? p->n_streams : m->ss->n_streams;
        s->k = p->top_k > 0 ? p->top_k : 2;
    } else {
        s->dctx = p->draft_ctx;
        s->depth = p->lookahead > 0 ? p->lookahead : 4;
        s->k = 1;
    }
    s->p.n_streams = p->strategy == ES_SPEC_STREAM ? s->depth : 0;
    s->p.top_k = s->k;
    s->p.lookahead = p->strategy == ES_SPEC_DRAFT ? s->depth : 0;
    s->p.max_nodes = p->max_nodes > 0 ? p->max_nodes : 32;
    const int32_t tree_cap = ES__MIN(s->p.max_nodes, ctx->n_batch);
    const size_t V = (size_t)s->n_vocab, levels = (size_t)s->depth;
    ES_TRY(es__verifier_init(&s->ver, s->n_vocab, &p->sampling, p->rejection_sampling, s->alloc, &s->err));
    ES_TRY(es__tree_init(&s->tree, tree_cap, s->alloc, &s->err));
    s->hist_cap = (size_t)ctx->n_ctx + ES_SPEC_MAX_DEPTH + 2;
    s->hist = es__calloc(s->alloc, s->hist_cap, sizeof(int32_t));
    s->cand_tok = es__calloc(s->alloc, 2 * levels * (size_t)s->k, sizeof(int32_t));
    s->cand_lp = es__calloc(s->alloc, 2 * levels * (size_t)s->k, sizeof(float));
    s->cand_cal = es__calloc(s->alloc, 2 * levels * (size_t)s->k, sizeof(float));
    s->node_lp = es__calloc(s->alloc, (size_t)tree_cap, sizeof(float));
    es__tuner_init(&s->tune, !p->fixed_tree);
    s->cand_q = s->ver.mode == ES__VERIFY_REJECTION ? es__calloc(s->alloc, 2 * levels * V, sizeof(double)) : NULL;
    s->logit_flags = es__malloc(s->alloc, (size_t)ctx->n_batch);
    s->skip = es__calloc(s->alloc, (size_t)tree_cap, 1);
    s->zeros = es__calloc(s->alloc, (size_t)ES__MAX(ctx->n_batch, s->dctx ? s->dctx->n_batch : 0), 1);
    ES_RETURN_IF(!s->hist || !s->cand_tok || !s->cand_lp || !s->cand_cal || !s->node_lp || !s->logit_flags ||
                     !s->skip || !s->zeros ||
                     (s->ver.mode == ES__VERIFY_REJECTION && !s->cand_q),
                 &s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    memset(s->logit_flags, 1, (size_t)ctx->n_batch);
    /* a new sequence: both contexts start empty */
    es_truncate(ctx, 0);
    if (s->dctx) es_truncate(s->dctx, 0);
    return ES_OK;
}

es_status es_spec_create(es_context *ctx, const es_spec_params *params, es_spec **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_create: out is NULL");
    *out = NULL;
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_create: ctx is NULL");
    es_spec_params p = params ? *params : es_spec_default_params();
    es_spec *s = es__calloc(ctx->alloc, 1, sizeof *s);
    if (!s) return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    s->alloc = ctx->alloc;
    es_status st = setup(s, ctx, &p);
    if (st != ES_OK) {
        char msg[ES__ERRMSG_SIZE];
        memcpy(msg, s->err.msg, sizeof msg);
        es_spec_free(s);
        return es__fail(NULL, st, "%s", msg);
    }
    *out = s;
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

/* ---- feeding */

es_status es__spec_prefill(es_context *ctx, const uint8_t *no_logits, const int32_t *chain, int32_t n, es__err *err) {
    const int32_t n_past0 = ctx->n_past;
    for (int32_t off = 0; off < n;) {
        es_batch b = {ES__MIN(ctx->n_batch, n - off), chain + off, NULL, NULL, NULL, no_logits};
        es_status st = es_forward(ctx, &b);
        if (st == ES_OK) st = es_commit(ctx, NULL, 0);
        if (st != ES_OK) {
            es__fail(err, st, "%s", ctx->err.msg);
            es_truncate(ctx, n_past0);
            return st;
        }
        off += b.n_tokens;
    }
    return ES_OK;
}

es_status es_spec_feed(es_spec *s, const int32_t *tokens, size_t n_tokens) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_feed: spec is NULL");
    ES_RETURN_IF(!tokens || n_tokens == 0, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_feed: no tokens");
    for (size_t i = 0; i < n_tokens; i++)
        ES_RETURN_IF(tokens[i] < 0 || tokens[i] >= s->n_vocab, &s->err, ES_ERR_INVALID_ARGUMENT,
                     "es_spec_feed: token %zu: id %d outside [0, %d)", i, tokens[i], s->n_vocab);
    es_context *ctx = s->ctx;
    /* the pending root and all but the last new token get committed; the last becomes the root */
    const uint64_t n_chain = n_tokens - 1 + (s->has_root ? 1 : 0);
    ES_RETURN_IF((uint64_t)ctx->n_past + n_chain + 1 > (uint64_t)ctx->n_ctx, &s->err, ES_ERR_CONTEXT_FULL,
                 "es_spec_feed: %zu tokens after %d in the context exceed n_ctx %d", n_tokens,
                 ctx->n_past + (s->has_root ? 1 : 0), ctx->n_ctx);
    const double t0 = es__time_now();
    /* the history holds the chain already (pending root) or takes it now (tokens) */
    const size_t hist0 = s->n_hist;
    memcpy(s->hist + s->n_hist, tokens, sizeof(int32_t) * n_tokens);
    const int32_t *chain = s->hist + s->n_hist - (s->has_root ? 1 : 0);
    const int32_t n_past0 = ctx->n_past;
    es_status st = es__spec_prefill(ctx, s->zeros, chain, (int32_t)n_chain, &s->err);
    if (st == ES_OK && s->dctx) {
        st = es__spec_draft_feed(s, chain, (int32_t)n_chain);
        if (st != ES_OK) es_truncate(ctx, n_past0);
    }
    if (st != ES_OK) {
        s->n_hist = hist0;
        return st;
    }
    s->n_hist += n_tokens;
    s->has_root = true;
    es__tree_root(&s->tree, tokens[n_tokens - 1], ctx->n_past);
    s->st.n_prompt += (int64_t)n_tokens;
    s->st.prompt_ms += (es__time_now() - t0) * 1e3;
    return ES_OK;
}

/* ---- steps */

int32_t es__spec_tree_room(const es_spec *s) {
    const es_context *ctx = s->ctx;
    return ES__MIN(ES__MIN(s->p.max_nodes, s->tree.cap), ctx->n_ctx - ctx->n_past);
}

es_status es__spec_src_logits(void *user, int32_t node, const float **logits) {
    es_spec *s = ((es__spec_src *)user)->s;
    es_status st = es_logits(s->ctx, node, logits);
    if (st != ES_OK) return es__fail(&s->err, st, "%s", s->ctx->err.msg);
    return ES_OK;
}

es_status es__spec_src_draft(void *user, int32_t node, const double **q) {
    es_spec *s = ((es__spec_src *)user)->s;
    ES_RETURN_IF(!s->cand_q, &s->err, ES_ERR_INVALID_ARGUMENT, "verify: no draft distributions kept");
    *q = s->cand_q + ((size_t)s->cur * (size_t)s->depth + (size_t)s->tree.depth[node]) * (size_t)s->n_vocab;
    return ES_OK;
}

bool es__spec_src_stop(void *user, int32_t token) {
    es_spec *s = ((es__spec_src *)user)->s;
    return es_token_is_eog(s->model, token);
}

es_status es__spec_verify(es_spec *s, size_t cap, int32_t *tokens, size_t *n_tokens, int32_t *path,
                          int32_t *n_path) {
    es__spec_src src = {s};
    es__verify_src vs = {&src, es__spec_src_logits, es__spec_src_draft, s->p.ignore_eog ? NULL : es__spec_src_stop};
    es__verify_out out;
    const int32_t max_emit = (int32_t)ES__MIN(cap, (size_t)ES_SPEC_MAX_DEPTH + 1);
    ES_TRY(es__verify(&s->ver, &s->tree, &vs, s->hist, s->n_hist, max_emit, &out, &s->err));
    size_t n = 0;
    for (int32_t i = 1; i < out.n_path; i++) tokens[n++] = s->tree.token[out.path[i]];
    tokens[n++] = out.next;
    *n_tokens = n;
    memcpy(path, out.path, sizeof(int32_t) * (size_t)out.n_path);
    *n_path = out.n_path;
    /* statistics: how deep the tree reached (after pruning) and what was accepted */
    int32_t reach = 0, pruned = 0;
    for (int32_t i = 0; i < s->tree.n; i++) {
        if (s->tree.skip && s->tree.skip[i]) pruned++;
        else reach = ES__MAX(reach, s->tree.depth[i]);
    }
    for (int32_t d = 0; d < reach && d < ES_SPEC_MAX_DEPTH; d++) s->st.drafted[d]++;
    for (int32_t d = 0; d < out.n_path - 1; d++) s->st.accepted[d]++;
    /* calibration: every tested draft, each node's own draft probability from its level */
    const es__tree *t = &s->tree;
    for (int32_t i = 1; i < t->n; i++)
        s->node_lp[i] = s->cand_lp[((size_t)s->cur * (size_t)s->depth + (size_t)(t->depth[i] - 1)) * (size_t)s->k +
                                   (size_t)t->rank[i]];
    es__tuner_observe_tree(&s->tune, t, out.path, out.n_path, out.next_child, s->node_lp);
    s->st.n_tree_nodes += s->tree.n;
    s->st.n_pruned += pruned;
    return ES_OK;
}

void es__spec_calibrate(es_spec *s, int32_t buf, es__levels *lv) {
    for (int32_t g = 0; g < lv->n_levels; g++) {
        const size_t at = ((size_t)buf * (size_t)s->depth + (size_t)g) * (size_t)s->k;
        for (int32_t r = 0; r < lv->k[g]; r++) s->cand_cal[at + (size_t)r] = es__tuner_accept(&s->tune, g + 1, s->cand_lp[at + (size_t)r]);
        lv->logp[g] = s->cand_cal + at;
    }
    double a, b;
    if (es__tuner_cost(&s->tune, &a, &b)) {
        lv->cost_a = a;
        lv->cost_b = b;
    }
}

/* Appends the emitted tokens to the history; the last becomes the pending root. */
void es__spec_advance(es_spec *s, const int32_t *tokens, size_t n) {
    memcpy(s->hist + s->n_hist, tokens, sizeof(int32_t) * n);
    s->n_hist += n;
}

es_status es_spec_step(es_spec *s, int32_t *tokens, size_t cap, size_t *n_tokens) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_step: spec is NULL");
    ES_RETURN_IF(!tokens || !n_tokens || cap == 0, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_step: tokens, n_tokens and cap >= 1 are needed");
    *n_tokens = 0;
    ES_RETURN_IF(!s->has_root, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_step: feed a prompt first (es_spec_feed)");
    ES_RETURN_IF(s->ctx->n_past >= s->ctx->n_ctx, &s->err, ES_ERR_CONTEXT_FULL,
                 "es_spec_step: the context is full (%d of %d tokens)", s->ctx->n_past, s->ctx->n_ctx);
    const double t0 = es__time_now();
    es_status st = s->p.strategy == ES_SPEC_STREAM ? es__spec_stream_step(s, tokens, cap, n_tokens)
                                                    : es__spec_draft_step(s, tokens, cap, n_tokens);
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
