/* autoregressive.c: es_generate, plain autoregressive decoding: the prompt in chunks of n_batch,
 * then one forward call per generated token, each token committed, sampled at its absolute
 * position so that speculative strategies can reproduce the output token for token.
 * It talks to the model only through the forward API (forward_api.h); what it hands out and when
 * it stops is output.c's, shared with es_spec_generate.
 * Deliberately not here: chat templates, stop strings, speculation. */
#include "output.h"

#include <string.h>

es_generate_params es_generate_default_params(void) {
    es_generate_params p;
    memset(&p, 0, sizeof p); /* every zero is read as "none": no limit, greedy, no callback */
    return p;
}

/* Everything one es_generate call owns; released by gen_release whatever happened. */
typedef struct gen_state {
    es_context *ctx;
    es__caps caps;
    es__err *err;       /* the context's error record */
    es_sampler *sampler;
    int32_t *history;   /* [hist_cap] prompt, then generated tokens (repetition penalty) */
    size_t n_history, hist_cap;
    uint8_t *no_logits; /* [n_batch] zeros: intermediate prompt chunks need no logits  */
    es__output out;
} gen_state;

static void gen_release(gen_state *g) {
    es_sampler_free(g->sampler);
    es__free(g->caps.alloc, g->history);
    es__free(g->caps.alloc, g->no_logits);
    es__output_free(&g->out);
}

static es_status check_args(gen_state *g, const int32_t *prompt, size_t n_prompt, const es_generate_params *p) {
    const int32_t n_past = es_context_n_past(g->ctx);
    ES_RETURN_IF(!prompt || n_prompt == 0, g->err, ES_ERR_INVALID_ARGUMENT,
                 "es_generate: the prompt is empty; at least one token is needed to predict from");
    ES_RETURN_IF(p->n_predict < 0, g->err, ES_ERR_INVALID_ARGUMENT,
                 "es_generate: n_predict %d < 0 (0 = until end of generation or n_ctx)", p->n_predict);
    for (size_t i = 0; i < n_prompt; i++)
        ES_RETURN_IF(prompt[i] < 0 || prompt[i] >= g->caps.n_vocab, g->err, ES_ERR_INVALID_ARGUMENT,
                     "es_generate: prompt token %zu: id %d outside [0, %d)", i, prompt[i], g->caps.n_vocab);
    ES_RETURN_IF((uint64_t)n_past + n_prompt > (uint64_t)g->caps.n_ctx, g->err, ES_ERR_CONTEXT_FULL,
                 "es_generate: prompt of %zu tokens after %d committed exceeds n_ctx %d", n_prompt, n_past,
                 g->caps.n_ctx);
    if (es__sampler_params_check(&p->sampling, NULL) != ES_OK)
        return es__fail(g->err, ES_ERR_INVALID_ARGUMENT, "es_generate: %s", es_last_error());
    return ES_OK;
}

static es_status gen_setup(gen_state *g, const es_generate_params *p, int32_t *tokens_out, size_t cap) {
    /* the prompt and at most one generated token per remaining free slot, plus one sampled from
     * the logits of the last slot: n_ctx - n_past + 1 in all (check_args bounded the prompt) */
    const es_allocator *a = g->caps.alloc;
    g->hist_cap = (size_t)(g->caps.n_ctx - es_context_n_past(g->ctx)) + 1;
    g->history = es__calloc(a, g->hist_cap, sizeof *g->history);
    g->no_logits = es__calloc(a, (size_t)g->caps.n_batch, 1);
    ES_RETURN_IF(!g->history || !g->no_logits, g->err, ES_ERR_OUT_OF_MEMORY, "es_generate: out of memory");
    ES_TRY(es__output_init(&g->out, es_context_model(g->ctx), a, p, tokens_out, cap, g->err));
    es_status s = es_sampler_create(g->caps.n_vocab, &p->sampling, a, &g->sampler);
    if (s != ES_OK) return es__fail(g->err, s, "es_generate: %s", es_last_error());
    return ES_OK;
}

/* Prefill: chunks of n_batch committed one after another; only the last token asks for logits. */
static es_status feed_prompt(gen_state *g, const int32_t *prompt, size_t n_prompt, const float **logits) {
    es_context *ctx = g->ctx;
    for (size_t off = 0; off < n_prompt;) {
        int32_t n = (int32_t)ES__MIN((size_t)g->caps.n_batch, n_prompt - off);
        bool last = off + (size_t)n == n_prompt;
        es_batch b = {n, prompt + off, NULL, NULL, NULL, last ? NULL : g->no_logits};
        ES_TRY(es_forward(ctx, &b));
        if (last) ES_TRY(es_logits(ctx, n - 1, logits));
        ES_TRY(es_commit(ctx, NULL, 0));
        off += (size_t)n;
    }
    return ES_OK;
}

/* A full context makes room: the older half of what follows the kept start goes. */
static es_status shift(gen_state *g) {
    const int32_t n_keep = g->out.p->n_keep, n_past = es_context_n_past(g->ctx);
    ES_RETURN_IF(n_keep < 0 || n_keep >= n_past - 1, g->err, ES_ERR_CONTEXT_FULL,
                 "es_generate: the context is full (%d tokens) and n_keep %d leaves nothing to drop", n_past, n_keep);
    return es_context_shift(g->ctx, n_keep, (n_past - n_keep) / 2);
}

/* The decode loop: sample at the next free position, hand the token out, forward and commit it. */
static es_status decode(gen_state *g, const float *logits, es_generate_stats *st) {
    es_context *ctx = g->ctx;
    for (;;) {
        int32_t tok;
        es_status s = es_sample(g->sampler, logits, es_context_n_past(ctx), g->history, g->n_history, &tok);
        if (s != ES_OK) return es__fail(g->err, s, "es_generate: %s", es_last_error());
        es__take what;
        s = es__output_take(&g->out, tok, &what, g->err);
        st->n_generated = g->out.n_generated;
        if (s != ES_OK || what == ES__TAKE_END) return s;
        if (g->n_history == g->hist_cap) { /* only after context shifts: the sequence outgrew n_ctx */
            int32_t *grown = es__realloc(g->caps.alloc, g->history, sizeof *g->history * 2 * g->hist_cap);
            ES_RETURN_IF(!grown, g->err, ES_ERR_OUT_OF_MEMORY, "es_generate: out of memory for the history");
            g->history = grown;
            g->hist_cap *= 2;
        }
        g->history[g->n_history++] = tok;
        if (what == ES__TAKE_STOP) return ES_OK; /* cancelled: the token stays uncommitted */
        if (es_context_n_past(ctx) >= g->caps.n_ctx) { /* no slot to commit it */
            if (!g->out.p->shift_context) return ES_OK;
            ES_TRY(shift(g));
        }
        es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
        ES_TRY(es_forward(ctx, &b));
        st->n_forward_calls++;
        ES_TRY(es_logits(ctx, 0, &logits));
        ES_TRY(es_commit(ctx, NULL, 0));
        if (what == ES__TAKE_LAST) return ES_OK;
    }
}

es_status es_generate(es_context *ctx, const int32_t *prompt, size_t n_prompt, const es_generate_params *params,
                      int32_t *tokens_out, size_t cap, es_generate_stats *stats) {
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_generate: ctx is NULL");
    const es_generate_params p = params ? *params : es_generate_default_params();
    es_generate_stats st = {0};
    if (stats) *stats = st;
    ES_TRY(ES__CHECK_RESERVED(&p, "es_generate_params", es__context_err(ctx)));
    gen_state g;
    memset(&g, 0, sizeof g);
    g.ctx = ctx;
    g.err = es__context_err(ctx);
    es__context_caps(ctx, &g.caps);
    ES_TRY(check_args(&g, prompt, n_prompt, &p));

    const int32_t n_past0 = es_context_n_past(ctx);
    es_status s = gen_setup(&g, &p, tokens_out, cap);
    const float *logits = NULL;
    double t0 = es__time_now();
    if (s == ES_OK) {
        memcpy(g.history, prompt, sizeof *prompt * n_prompt);
        g.n_history = n_prompt;
        s = feed_prompt(&g, prompt, n_prompt, &logits);
    }
    double t1 = es__time_now();
    if (s == ES_OK) {
        st.n_prompt = (int32_t)n_prompt;
        s = decode(&g, logits, &st);
        if (s == ES_OK) es__output_finish(&g.out);
    }
    double t2 = es__time_now();
    st.prompt_ms = (t1 - t0) * 1e3;
    st.decode_ms = (t2 - t1) * 1e3;
    gen_release(&g);
    if (stats) *stats = st;
    if (s != ES_OK) es_truncate(ctx, n_past0); /* cannot fail: n_past0 <= n_past; keeps the message */
    return s;
}
