/* alspec.c: the ALSpec decoder (papers/alspec-attention-level-speculation.txt): Algorithm 1 on one
 * context. Prompts go through exact forward calls; each decoded token goes through
 * es__forward_alspec, in which every layer's attention is the speculative flash decode and the
 * layer goes on with the speculation when the check of section 3.2 accepts it. Here: the sequence,
 * sampling, and the per-layer and per-token hit statistics. With a second context
 * (es_alspec_create_pair) each decoded token goes through Algorithm 2 instead (alspec_pair.c):
 * the receiver runs the post-attention ops on the speculation while the sender finishes the
 * exact attention. Not here: the kernels (the backends; lib/core/spec_attn.h says what they
 * compute). */
#include "alspec_pair.h"

#include <math.h>
#include <string.h>

struct es_alspec {
    es_context *ctx;
    es_alspec_params p;
    es__caps caps;
    es_sampler *sampler;
    int32_t *hist;    /* [cap_hist] the sequence, for the sampler's repetition penalty */
    size_t n_hist, cap_hist;
    bool fresh;       /* logits are the sequence's last token's                            */
    bool pending;     /* the last emitted token is not in the cache yet                    */
    float *logits;    /* [n_vocab] the last forwarded token's, kept past the commit        */
    es__spec_verdict *verdicts; /* [n_layer] */
    es__alspec_pair *pair;      /* Algorithm 2's second context, or NULL                   */
    es_alspec_stats st;
    es__err err;
};

static es_status hist_push(es_alspec *a, const int32_t *t, size_t n) {
    if (a->n_hist + n > a->cap_hist) {
        size_t cap = a->cap_hist ? a->cap_hist : 256;
        while (cap < a->n_hist + n) cap *= 2;
        int32_t *h = es__realloc(a->caps.alloc, a->hist, sizeof(int32_t) * cap);
        ES_RETURN_IF(!h, &a->err, ES_ERR_OUT_OF_MEMORY, "alspec: out of memory for the sequence");
        a->hist = h;
        a->cap_hist = cap;
    }
    memcpy(a->hist + a->n_hist, t, sizeof(int32_t) * n);
    a->n_hist += n;
    return ES_OK;
}

es_status es_alspec_create(es_context *ctx, const es_alspec_params *params, es_alspec **out) {
    ES_RETURN_IF(!out, NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_create: out is NULL");
    *out = NULL;
    ES_RETURN_IF(!ctx, NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_create: ctx is NULL");
    es_alspec_params p;
    memset(&p, 0, sizeof p);
    if (params) p = *params;
    ES_TRY(ES__CHECK_RESERVED(&p, "es_alspec_params", NULL));
    if (p.chunk == 0) p.chunk = 256;
    es__caps caps;
    es__context_caps(ctx, &caps);
    ES_RETURN_IF(caps.alspec_tile == 0, NULL, ES_ERR_UNSUPPORTED,
                 "es_alspec_create: no speculative attention for this context: its backend has none, or its "
                 "model has sliding-window or soft-capped attention (gemma2, gemma3, a window in the file)");
    ES_RETURN_IF(p.chunk < 0 || p.chunk % caps.alspec_tile, NULL, ES_ERR_INVALID_ARGUMENT,
                 "es_alspec_create: chunk %d is not a positive multiple of the backend's attention tile %d",
                 p.chunk, caps.alspec_tile);
    ES_RETURN_IF(!(p.lambda >= 0.0f), NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_create: lambda %g (must be >= 0)",
                 (double)p.lambda);
    es_alspec *a = es__calloc(caps.alloc, 1, sizeof *a);
    es__spec_verdict *v = es__calloc(caps.alloc, (size_t)caps.n_layer, sizeof *v);
    float *l = es__malloc(caps.alloc, sizeof(float) * (size_t)caps.n_vocab);
    es_sampler *smp = NULL;
    es_status s = a && v && l ? es_sampler_create(caps.n_vocab, &p.sampling, caps.alloc, &smp) : ES_ERR_OUT_OF_MEMORY;
    if (s == ES_OK) s = es_truncate(ctx, 0);
    if (s != ES_OK) {
        es_sampler_free(smp);
        es__free(caps.alloc, l);
        es__free(caps.alloc, v);
        es__free(caps.alloc, a);
        return es__fail(NULL, s, "es_alspec_create: %s", s == ES_ERR_OUT_OF_MEMORY ? "out of memory" : es_last_error());
    }
    *a = (es_alspec){.ctx = ctx, .p = p, .caps = caps, .sampler = smp, .logits = l, .verdicts = v};
    a->st.n_layer = caps.n_layer;
    *out = a;
    return ES_OK;
}

es_status es_alspec_create_pair(es_context *ctx, es_context *ctx2, const es_alspec_params *params, es_alspec **out) {
    ES_RETURN_IF(!out, NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_create_pair: out is NULL");
    *out = NULL;
    ES_RETURN_IF(!ctx2, NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_create_pair: ctx2 is NULL");
    es_alspec *a = NULL;
    ES_TRY(es_alspec_create(ctx, params, &a));
    es_status s = es__alspec_pair_create(ctx, ctx2, a->p.chunk, false, &a->pair);
    if (s == ES_OK) s = es_truncate(ctx2, 0);
    if (s != ES_OK) {
        es_alspec_free(a);
        return es__fail(NULL, s, "%s", es_last_error());
    }
    *out = a;
    return ES_OK;
}

void es_alspec_free(es_alspec *a) {
    if (!a) return;
    const es_allocator *al = a->caps.alloc;
    es_sampler_free(a->sampler);
    es__alspec_pair_free(a->pair);
    es__free(al, a->hist);
    es__free(al, a->verdicts);
    es__free(al, a->logits);
    es__free(al, a);
}

const char *es_alspec_errmsg(const es_alspec *a) {
    return a ? a->err.msg : "es_alspec_errmsg: NULL";
}

/* Exact forward calls of tokens[0..n) on ctx, committed, in chunks of n_batch; the logits of
 * the last into logits when not NULL. */
static es_status prefill_ctx(es_alspec *a, es_context *ctx, const int32_t *tokens, size_t n, float *logits) {
    es__caps caps;
    es__context_caps(ctx, &caps);
    const size_t nb = (size_t)caps.n_batch;
    for (size_t off = 0; off < n;) {
        const int32_t m = (int32_t)(n - off < nb ? n - off : nb);
        const es_batch b = {m, tokens + off, NULL, NULL, NULL, NULL};
        const float *l = NULL;
        es_status s = es_forward(ctx, &b);
        if (s == ES_OK && logits) s = es_logits(ctx, m - 1, &l);
        if (s == ES_OK && logits) memcpy(logits, l, sizeof(float) * (size_t)a->caps.n_vocab);
        if (s == ES_OK) s = es_commit(ctx, NULL, m);
        if (s != ES_OK) return es__fail(&a->err, s, "alspec: %s", es_context_errmsg(ctx));
        off += (size_t)m;
    }
    return ES_OK;
}

/* The same on every context: Algorithm 2 replicates the KV cache. */
static es_status prefill(es_alspec *a, const int32_t *tokens, size_t n) {
    ES_TRY(prefill_ctx(a, a->ctx, tokens, n, a->logits));
    return a->pair ? prefill_ctx(a, es__alspec_pair_second(a->pair), tokens, n, NULL) : ES_OK;
}

es_status es_alspec_feed(es_alspec *a, const int32_t *tokens, size_t n_tokens) {
    ES_RETURN_IF(!a || !tokens || n_tokens == 0, a ? &a->err : NULL, ES_ERR_INVALID_ARGUMENT,
                 "es_alspec_feed: no tokens");
    /* the last emitted token goes into the cache first, exactly */
    if (a->pending) {
        ES_TRY(prefill(a, &a->hist[a->n_hist - 1], 1));
        a->pending = false;
    }
    ES_TRY(prefill(a, tokens, n_tokens));
    ES_TRY(hist_push(a, tokens, n_tokens));
    a->fresh = true;
    return ES_OK;
}

/* Adds one decoded token's verdicts to the statistics. */
static void count(es_alspec *a) {
    es_alspec_stats *st = &a->st;
    const int32_t nl = a->caps.n_layer < ES_ALSPEC_MAX_LAYERS ? a->caps.n_layer : ES_ALSPEC_MAX_LAYERS;
    st->n_tokens++;
    st->last_hits = 0;
    st->n_spec_tokens += a->verdicts[0].valid;
    for (int32_t l = 0; l < a->caps.n_layer; l++) {
        const es__spec_verdict *v = &a->verdicts[l];
        st->n_checks += v->valid;
        st->n_hits += v->hit;
        st->last_hits += v->hit;
        if (l >= nl) continue;
        st->layer_hits[l] += v->hit;
        st->last_hit[l] = v->hit;
        st->last_ratio[l] = !v->valid ? -1.0f : v->norm2 > 0.0 ? (float)sqrt(v->err2 / v->norm2) : 0.0f;
    }
}

es_status es_alspec_step(es_alspec *a, int32_t *token) {
    ES_RETURN_IF(!a || !token, a ? &a->err : NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_step: NULL argument");
    ES_RETURN_IF(!a->fresh && !a->pending, &a->err, ES_ERR_INVALID_ARGUMENT, "es_alspec_step: feed a prompt first");
    const double t0 = es__time_now();
    if (a->pending) {
        ES_RETURN_IF(es_context_n_past(a->ctx) >= a->caps.n_ctx, &a->err, ES_ERR_CONTEXT_FULL,
                     "es_alspec_step: the context's %d slots are full", a->caps.n_ctx);
        const es_batch b = {1, &a->hist[a->n_hist - 1], NULL, NULL, NULL, NULL};
        const es__alspec_call call = {a->p.chunk, a->p.lambda, NULL, a->verdicts};
        if (a->pair) {
            ES_TRY(es__alspec_pair_decode(a->pair, b.tokens[0], &call, a->logits, &a->err));
        } else {
            const float *l = NULL;
            es_status s = es__forward_alspec(a->ctx, &b, &call);
            if (s == ES_OK) s = es_logits(a->ctx, 0, &l);
            if (s == ES_OK) memcpy(a->logits, l, sizeof(float) * (size_t)a->caps.n_vocab);
            if (s == ES_OK) s = es_commit(a->ctx, NULL, 1);
            if (s != ES_OK) return es__fail(&a->err, s, "es_alspec_step: %s", es_context_errmsg(a->ctx));
        }
        count(a);
        a->pending = false;
        a->fresh = true;
    }
    const es_status s = es_sample(a->sampler, a->logits, es_context_n_past(a->ctx), a->hist, a->n_hist, token);
    if (s != ES_OK) return es__fail(&a->err, s, "es_alspec_step: %s", es_last_error());
    ES_TRY(hist_push(a, token, 1));
    a->fresh = false;
    a->pending = true;
    a->st.decode_ms += 1e3 * (es__time_now() - t0);
    return ES_OK;
}

es_status es_alspec_get_stats(const es_alspec *a, es_alspec_stats *out) {
    ES_RETURN_IF(!a || !out, NULL, ES_ERR_INVALID_ARGUMENT, "es_alspec_get_stats: NULL argument");
    *out = a->st;
    return ES_OK;
}
