/* spec_generate.c: es_spec_generate, es_generate's loop over speculation steps: the same gate
 * for every decided token (output.c: end of generation, on_token's text, n_predict), so a
 * speculative run hands the caller exactly what a plain run hands it. Tokens a step decided
 * after the one generation stopped at are taken back out of the sequence (es__spec_rewind), so
 * the sequence ends with the last token the caller saw. */
#include "output.h"
#include "spec.h"

#include <string.h>

/* Passes one step's tokens through the gate; *done when generation ends within them, the
 * sequence then cut back to end where the caller stopped seeing tokens. */
static es_status take_step(es_spec *s, es__output *o, const int32_t *tokens, size_t n, bool *done) {
    const size_t first = s->n_hist - n; /* where the step's tokens start in the sequence */
    *done = false;
    for (size_t i = 0; i < n; i++) {
        es__take what;
        ES_TRY(es__output_take(o, tokens[i], &what, &s->err));
        if (what == ES__TAKE_MORE) continue;
        *done = true;
        /* an end token goes; a token handed out stays, as the pending root */
        return es__spec_rewind(s, first + i + (what == ES__TAKE_END ? 0 : 1));
    }
    return ES_OK;
}

/* A full context makes room as es_generate's does, at the same moment (the target's cache full,
 * the next token decided) and by the same amount, so the two stay token for token alike. */
static es_status shift(es_spec *s, int32_t n_keep) {
    const int32_t n_past = (int32_t)s->n_hist - 1; /* s->ctx may be in a worker's hands */
    ES_RETURN_IF(n_keep < 0 || n_keep >= n_past - 1, &s->err, ES_ERR_CONTEXT_FULL,
                 "es_spec_generate: the context is full (%d tokens) and n_keep %d leaves nothing to drop", n_past,
                 n_keep);
    return es__spec_shift(s, n_keep, (n_past - n_keep) / 2);
}

static es_status generate(es_spec *s, const int32_t *prompt, size_t n_prompt, es__output *o, es_generate_stats *st) {
    const double t0 = es__time_now();
    ES_TRY(es_spec_feed(s, prompt, n_prompt));
    st->n_prompt = (int32_t)n_prompt;
    const double t1 = es__time_now();
    st->prompt_ms = (t1 - t0) * 1e3;
    es_status rc = ES_OK;
    int32_t buf[ES_SPEC_MAX_DEPTH + 1];
    for (bool done = false; !done;) {
        size_t cap = ES_SPEC_MAX_DEPTH + 1, got = 0;
        if (o->p->n_predict > 0) cap = ES__MIN(cap, (size_t)(o->p->n_predict - o->n_generated));
        rc = es_spec_step(s, buf, cap, &got);
        if (rc == ES_ERR_CONTEXT_FULL && o->p->shift_context) {
            if ((rc = shift(s, o->p->n_keep)) != ES_OK) break;
            continue;
        }
        if (rc == ES_ERR_CONTEXT_FULL) rc = ES_OK; /* es_generate stops there too */
        if (rc != ES_OK || got == 0) break;
        st->n_forward_calls++;
        rc = take_step(s, o, buf, got, &done);
        if (rc != ES_OK) break;
    }
    st->n_generated = o->n_generated;
    st->decode_ms = (es__time_now() - t1) * 1e3;
    return rc;
}

es_status es_spec_generate(es_spec *s, const int32_t *prompt, size_t n_prompt, const es_generate_params *params,
                           int32_t *tokens_out, size_t cap, es_generate_stats *stats) {
    if (!s) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_spec_generate: spec is NULL");
    const es_generate_params p = params ? *params : es_generate_default_params();
    es_generate_stats st = {0};
    if (stats) *stats = st;
    ES_TRY(ES__CHECK_RESERVED(&p, "es_generate_params", &s->err));
    ES_RETURN_IF(p.n_predict < 0, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_generate: n_predict %d < 0 (0 = until end of generation or n_ctx)", p.n_predict);
    /* the speculation object decides the sampling: what the gate needs of params is the rest */
    es_generate_params gate = p;
    gate.ignore_eog = s->p.ignore_eog;
    es__output o;
    ES_TRY(es__output_init(&o, s->model, s->alloc, &gate, tokens_out, cap, &s->err));
    es_status rc = generate(s, prompt, n_prompt, &o, &st);
    /* nothing keeps running after the call (DSI's workers stop) */
    const es_status qs = es__spec_quiesce(s);
    if (rc == ES_OK) rc = qs;
    if (rc == ES_OK) es__output_finish(&o);
    es__output_free(&o);
    if (stats) *stats = st;
    return rc;
}
