/* alspec_run.c: `edgespec run --spec alspec`: ALSpec's decoder (es_alspec) instead of
 * es_generate: the prompt read exactly, every decoded token's layers attending through the
 * speculative flash decode, a layer going on with its speculation when it is within --lambda of
 * the exact attention. Text on stdout; on stderr the hit rates (over all layer checks, per layer,
 * per token) and wall time. With --lambda 0 the text is es_generate's; with --lambda > 0 it is an
 * approximation by design. A --device list of two runs Algorithm 2: the second device runs each
 * layer's post-attention ops on the speculation ahead of the first's check. Deliberately not
 * here: option parsing (spec_opts.h, args.c). */
#include "spec_opts.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct token_hits {
    int64_t all, none;          /* speculated tokens whose every / no layer hit             */
    int64_t mid_tokens, mid_checks, mid_hits; /* tokens with 3 chunks of keys or more: their
                                   speculation leaves keys out (below, it reads every key) */
} token_hits;

static void report(const cli_spec_args *a, const es_alspec_stats *st, const token_hits *th, const char *where,
                   const char *second) {
    const double rate = st->n_checks ? 100.0 * (double)st->n_hits / (double)st->n_checks : 0.0;
    fprintf(stderr,
            "edgespec %s: alspec, chunk %d, lambda %g: %lld tokens decoded, %lld with a speculation (>= 2 chunks of "
            "keys); layer hits %lld of %lld (%.1f%%); tokens with every layer hit %lld, none %lld; decode %.1f ms, "
            "backend %s%s%s\n",
            a->cmd, a->chunk ? a->chunk : 256, (double)a->lambda, (long long)st->n_tokens, (long long)st->n_spec_tokens,
            (long long)st->n_hits, (long long)st->n_checks, rate, (long long)th->all, (long long)th->none, st->decode_ms,
            where, second ? "; Algorithm 2 with the second device " : "", second ? second : "");
    if (th->mid_checks)
        fprintf(stderr, "edgespec %s: alspec on the %lld tokens with keys left out (>= 3 chunks): layer hits %lld of %lld "
                "(%.1f%%)\n", a->cmd, (long long)th->mid_tokens, (long long)th->mid_hits, (long long)th->mid_checks,
                100.0 * (double)th->mid_hits / (double)th->mid_checks);
    if (!st->n_spec_tokens) return;
    fprintf(stderr, "edgespec %s: alspec hit rate per layer:", a->cmd);
    for (int32_t l = 0; l < st->n_layer && l < ES_ALSPEC_MAX_LAYERS; l++)
        fprintf(stderr, " %d:%.1f%%", l, 100.0 * (double)st->layer_hits[l] / (double)st->n_spec_tokens);
    fputc('\n', stderr);
}

/* The context of the second device: the first's sizes. */
static int second_context(const cli_spec_args *a, const es_model *model, es_context *ctx, es_backend *b,
                          es_context **out) {
    es_context_params cp = es_context_default_params();
    cp.backend = b;
    cp.n_ctx = es_context_n_ctx(ctx);
    const es_status s = es_context_create(model, &cp, out);
    return s == ES_OK ? CLI_EXIT_OK : cli_fail_status(a->cmd, s, "cannot create the second device's context");
}

int cli_alspec_run(const cli_spec_args *a, const es_sampler_params *sp, const es_model *model, es_context *ctx,
                   const cli_devices *more, const int32_t *prompt, size_t n_prompt, int32_t n_predict, bool ignore_eos,
                   const char *where) {
    if (more->n > 1)
        return cli_fail(a->cmd, "--spec alspec runs on one or two devices; --device lists %d", (int)more->n + 1);
    es_context *ctx2 = NULL;
    if (more->n == 1 && second_context(a, model, ctx, more->b[0], &ctx2) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    es_alspec_params p;
    memset(&p, 0, sizeof p);
    p.chunk = a->chunk;
    p.lambda = a->lambda;
    p.sampling = *sp;
    es_alspec *al = NULL;
    es_status s = ctx2 ? es_alspec_create_pair(ctx, ctx2, &p, &al) : es_alspec_create(ctx, &p, &al);
    if (s != ES_OK) {
        es_context_free(ctx2);
        return cli_fail_status(a->cmd, s, "cannot set up ALSpec");
    }
    s = es_alspec_feed(al, prompt, n_prompt);
    token_hits th = {0, 0, 0, 0, 0};
    es_alspec_stats st;
    memset(&st, 0, sizeof st);
    const int32_t room = es_context_n_ctx(ctx) - (int32_t)n_prompt;
    /* the first step samples from the prompt's logits without a forward: room + 1 steps fit */
    const int32_t n = n_predict > 0 && n_predict <= room ? n_predict : room + 1;
    for (int32_t i = 0; s == ES_OK && i < n; i++) {
        int32_t tok = 0;
        const int64_t before = st.n_spec_tokens;
        s = es_alspec_step(al, &tok);
        if (s == ES_OK) s = es_alspec_get_stats(al, &st);
        if (s != ES_OK) break;
        if (st.n_spec_tokens > before) {
            th.all += st.last_hits == st.n_layer;
            th.none += st.last_hits == 0;
            if (es_context_n_past(ctx) >= 3 * (a->chunk ? a->chunk : 256)) {
                th.mid_tokens++;
                th.mid_checks += st.n_layer;
                th.mid_hits += st.last_hits;
            }
        }
        if (!ignore_eos && es_token_is_eog(model, tok)) break;
        char piece[256];
        size_t len = 0;
        if (es_token_to_piece(model, tok, false, piece, sizeof piece, &len) == ES_OK) fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
    if (isatty(STDOUT_FILENO)) fputc('\n', stderr); /* keep the stats off the text's line */
    int rc = CLI_EXIT_OK;
    if (s != ES_OK)
        rc = cli_fail(a->cmd, "generation failed: %s (%s)", es_alspec_errmsg(al), es_status_str(s));
    else
        report(a, &st, &th, where, ctx2 ? es_backend_name(more->b[0]) : NULL);
    es_alspec_free(al);
    es_context_free(ctx2);
    return rc;
}
