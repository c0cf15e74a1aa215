/* autoregressive.c: es_generate, plain autoregressive decoding: the prompt in chunks of n_batch,
 * then one forward call per generated token, each token committed, sampled at its absolute
 * position so that speculative strategies can reproduce the output token for token.
 * It talks to the model only through the public forward API (es_forward, es_logits, es_commit,
 * es_truncate); it reads the context's fields only for n_batch, the error record and the
 * allocator. Deliberately not here: chat templates, stop strings, speculation.
 */
#include "backend.h"
#include "sampler.h"

#include <string.h>

es_generate_params es_generate_default_params(void) {
    es_generate_params p;
    memset(&p, 0, sizeof p); /* every zero is read as "none": no limit, greedy, no callback */
    return p;
}

/* Everything one es_generate call owns; released by gen_release whatever happened. */
typedef struct gen_state {
    es_context *ctx;
    es_sampler *sampler;
    int32_t *history;  /* [hist_cap] prompt, then generated tokens (repetition penalty) */
    size_t n_history, hist_cap;
    uint8_t *no_logits; /* [n_batch] zeros: intermediate prompt chunks need no logits  */
    char *piece;        /* [piece_cap] text of the current token                        */
    size_t piece_cap;
} gen_state;

static void gen_release(gen_state *g) {
    es_sampler_free(g->sampler);
    es__free(g->ctx->alloc, g->history);
    es__free(g->ctx->alloc, g->no_logits);
    es__free(g->ctx->alloc, g->piece);
}

static es_status check_args(es_context *ctx, const int32_t *prompt, size_t n_prompt, const es_generate_params *p) {
    const int32_t n_vocab = ctx->model->hp.n_vocab;
    ES_RETURN_IF(!prompt || n_prompt == 0, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_generate: the prompt is empty; at least one token is needed to predict from");
    ES_RETURN_IF(p->n_predict < 0, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_generate: n_predict %d < 0 (0 = until end of generation or n_ctx)", p->n_predict);
    for (size_t i = 0; i < n_prompt; i++)
        ES_RETURN_IF(prompt[i] < 0 || prompt[i] >= n_vocab, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                     "es_generate: prompt token %zu: id %d outside [0, %d)", i, prompt[i], n_vocab);
    ES_RETURN_IF((uint64_t)ctx->n_past + n_prompt > (uint64_t)ctx->n_ctx, &ctx->err, ES_ERR_CONTEXT_FULL,
                 "es_generate: prompt of %zu tokens after %d committed exceeds n_ctx %d", n_prompt, ctx->n_past,
                 ctx->n_ctx);
    if (es__sampler_params_check(&p->sampling, NULL) != ES_OK)
        return es__fail(&ctx->err, ES_ERR_INVALID_ARGUMENT, "es_generate: %s", es_last_error());
    return ES_OK;
}

static es_status gen_setup(gen_state *g, size_t n_prompt, const es_generate_params *p) {
    es_context *ctx = g->ctx;
    /* the prompt and at most one generated token per remaining free slot, plus one sampled from
     * the logits of the last slot: n_ctx - n_past + 1 in all (check_args bounded n_prompt) */
    (void)n_prompt;
    g->hist_cap = (size_t)(ctx->n_ctx - ctx->n_past) + 1;
    g->history = es__calloc(ctx->alloc, g->hist_cap, sizeof *g->history);
    g->no_logits = es__calloc(ctx->alloc, (size_t)ctx->n_batch, 1);
    g->piece_cap = 256;
    g->piece = es__malloc(ctx->alloc, g->piece_cap);
    ES_RETURN_IF(!g->history || !g->no_logits || !g->piece, &ctx->err, ES_ERR_OUT_OF_MEMORY,
                 "es_generate: out of memory");
    es_status s = es_sampler_create(ctx->model->hp.n_vocab, &p->sampling, ctx->alloc, &g->sampler);
    if (s != ES_OK) return es__fail(&ctx->err, s, "es_generate: %s", es_last_error());
    return ES_OK;
}

/* Prefill: chunks of n_batch committed one after another; only the last token asks for logits. */
static es_status feed_prompt(gen_state *g, const int32_t *prompt, size_t n_prompt, const float **logits) {
    es_context *ctx = g->ctx;
    for (size_t off = 0; off < n_prompt;) {
        int32_t n = (int32_t)ES__MIN((size_t)ctx->n_batch, n_prompt - off);
        bool last = off + (size_t)n == n_prompt;
        es_batch b = {n, prompt + off, NULL, NULL, NULL, last ? NULL : g->no_logits};
        ES_TRY(es_forward(ctx, &b));
        if (last) ES_TRY(es_logits(ctx, n - 1, logits));
        ES_TRY(es_commit(ctx, NULL, 0));
        off += (size_t)n;
    }
    return ES_OK;
}

static es_status emit(gen_state *g, const es_generate_params *p, int32_t token, bool *go_on) {
    *go_on = true;
    if (!p->on_token) return ES_OK;
    size_t len = 0;
    es_status s = es_token_to_piece(g->ctx->model, token, false, g->piece, g->piece_cap, &len);
    if (s == ES_ERR_BUFFER_TOO_SMALL) {
        char *grown = es__realloc(g->ctx->alloc, g->piece, len);
        ES_RETURN_IF(!grown, &g->ctx->err, ES_ERR_OUT_OF_MEMORY, "es_generate: out of memory for a %zu-byte piece",
                     len);
        g->piece = grown;
        g->piece_cap = len;
        s = es_token_to_piece(g->ctx->model, token, false, g->piece, g->piece_cap, &len);
    }
    if (s != ES_OK) return es__fail(&g->ctx->err, s, "es_generate: token %d: %s", token, es_last_error());
    *go_on = p->on_token(token, g->piece, len, p->user);
    return ES_OK;
}

/* The decode loop: sample at the next free position, hand the token out, forward and commit it. */
static es_status decode(gen_state *g, const es_generate_params *p, const float *logits, int32_t *tokens_out,
                        size_t cap, es_generate_stats *st) {
    es_context *ctx = g->ctx;
    for (;;) {
        int32_t tok;
        es_status s = es_sample(g->sampler, logits, ctx->n_past, g->history, g->n_history, &tok);
        if (s != ES_OK) return es__fail(&ctx->err, s, "es_generate: %s", es_last_error());
        if (!p->ignore_eog && es_token_is_eog(ctx->model, tok)) return ES_OK;
        ES_ASSERT(g->n_history < g->hist_cap);
        g->history[g->n_history++] = tok;
        if (tokens_out && (size_t)st->n_generated < cap) tokens_out[st->n_generated] = tok;
        st->n_generated++;
        bool go_on;
        ES_TRY(emit(g, p, tok, &go_on));
        if (!go_on || ctx->n_past >= ctx->n_ctx) return ES_OK; /* cancelled, or no slot to commit it */
        es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
        ES_TRY(es_forward(ctx, &b));
        st->n_forward_calls++;
        ES_TRY(es_logits(ctx, 0, &logits));
        ES_TRY(es_commit(ctx, NULL, 0));
        if (p->n_predict > 0 && st->n_generated >= p->n_predict) return ES_OK;
    }
}

es_status es_generate(es_context *ctx, const int32_t *prompt, size_t n_prompt, const es_generate_params *params,
                      int32_t *tokens_out, size_t cap, es_generate_stats *stats) {
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_generate: ctx is NULL");
    const es_generate_params p = params ? *params : es_generate_default_params();
    es_generate_stats st;
    memset(&st, 0, sizeof st);
    if (stats) *stats = st;
    ES_TRY(check_args(ctx, prompt, n_prompt, &p));

    const int32_t n_past0 = ctx->n_past;
    gen_state g = {ctx, NULL, NULL, 0, 0, NULL, NULL, 0};
    es_status s = gen_setup(&g, n_prompt, &p);
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
        s = decode(&g, &p, logits, tokens_out, cap, &st);
    }
    double t2 = es__time_now();
    st.prompt_ms = (t1 - t0) * 1e3;
    st.decode_ms = (t2 - t1) * 1e3;
    gen_release(&g);
    if (stats) *stats = st;
    if (s != ES_OK) es_truncate(ctx, n_past0); /* cannot fail: n_past0 <= n_past; keeps the message */
    return s;
}
