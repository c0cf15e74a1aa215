/* output.c: the gate every generated token passes (output.h): end of generation, n_predict and
 * the time budget, and the text handed to on_token, held back while it could still begin a stop
 * string so that no part of one is ever handed out. */
#include "output.h"

#include <string.h>

es_status es__output_init(es__output *o, const es_model *m, const es_allocator *a, const es_generate_params *p,
                          int32_t *tokens_out, size_t cap, es__err *err) {
    memset(o, 0, sizeof *o);
    *o = (es__output){.model = m, .alloc = a, .p = p, .tokens_out = tokens_out, .cap = cap};
    ES_RETURN_IF(p->n_stop > 0 && !p->stop, err, ES_ERR_INVALID_ARGUMENT, "generate: n_stop %zu but stop is NULL",
                 p->n_stop);
    for (size_t i = 0; i < p->n_stop; i++)
        ES_RETURN_IF(!p->stop[i] || !p->stop[i][0], err, ES_ERR_INVALID_ARGUMENT, "generate: stop string %zu is %s",
                     i, p->stop[i] ? "empty" : "NULL");
    ES_RETURN_IF(!(p->max_ms >= 0.0), err, ES_ERR_INVALID_ARGUMENT, "generate: max_ms %g < 0 (0 = no limit)",
                 p->max_ms);
    o->piece_cap = 256;
    o->piece = es__malloc(a, o->piece_cap);
    ES_RETURN_IF(!o->piece, err, ES_ERR_OUT_OF_MEMORY, "generate: out of memory");
    o->t0 = es__time_now();
    return ES_OK;
}

void es__output_free(es__output *o) {
    es__free(o->alloc, o->piece);
    es__free(o->alloc, o->held);
    o->piece = o->held = NULL;
}

/* Grows *buf to hold need bytes. */
static es_status reserve(es__output *o, char **buf, size_t *cap, size_t need, es__err *err) {
    if (need <= *cap) return ES_OK;
    char *grown = es__realloc(o->alloc, *buf, need);
    ES_RETURN_IF(!grown, err, ES_ERR_OUT_OF_MEMORY, "generate: out of memory for %zu bytes of text", need);
    *buf = grown;
    *cap = need;
    return ES_OK;
}

/* The token's text as es_token_to_piece renders it (no special rendering), appended to held. */
static es_status append_piece(es__output *o, int32_t token, es__err *err) {
    size_t len = 0;
    es_status s = es_token_to_piece(o->model, token, false, o->piece, o->piece_cap, &len);
    if (s == ES_ERR_BUFFER_TOO_SMALL) {
        ES_TRY(reserve(o, &o->piece, &o->piece_cap, len, err));
        s = es_token_to_piece(o->model, token, false, o->piece, o->piece_cap, &len);
    }
    if (s != ES_OK) return es__fail(err, s, "generate: token %d: %s", token, es_last_error());
    ES_TRY(reserve(o, &o->held, &o->held_cap, o->n_held + len, err));
    memcpy(o->held + o->n_held, o->piece, len);
    o->n_held += len;
    return ES_OK;
}

/* Where the first stop string starts in held (n_held when none is there whole), and how many
 * bytes at its end could still begin one (*tail). */
static size_t find_stop(const es__output *o, size_t *tail) {
    size_t first = o->n_held;
    *tail = 0;
    for (size_t i = 0; i < o->p->n_stop; i++) {
        const char *st = o->p->stop[i];
        const size_t k = strlen(st);
        for (size_t at = 0; at + k <= o->n_held && at < first; at++)
            if (memcmp(o->held + at, st, k) == 0) first = at;
        for (size_t m = ES__MIN(k - 1, o->n_held); m > *tail; m--)
            if (memcmp(o->held + o->n_held - m, st, m) == 0) *tail = m;
    }
    return first;
}

/* Hands n bytes of held text to on_token with token, and drops them from held. */
static bool release(es__output *o, int32_t token, size_t n) {
    bool go_on = o->p->on_token(token, o->held, n, o->p->user);
    memmove(o->held, o->held + n, o->n_held - n);
    o->n_held -= n;
    return go_on;
}

es_status es__output_take(es__output *o, int32_t token, es__take *what, es__err *err) {
    *what = ES__TAKE_END;
    if (!o->p->ignore_eog && es_token_is_eog(o->model, token)) return ES_OK;
    if (o->tokens_out && (size_t)o->n_generated < o->cap) o->tokens_out[o->n_generated] = token;
    o->n_generated++;
    bool go_on = true, stopped = false;
    if (o->p->on_token || o->p->n_stop) {
        ES_TRY(append_piece(o, token, err));
        size_t tail = 0;
        const size_t at = find_stop(o, &tail);
        stopped = at < o->n_held;
        const size_t n = stopped ? at : o->n_held - tail;
        if (o->p->on_token) go_on = release(o, token, n);
        else o->n_held -= n, memmove(o->held, o->held + n, o->n_held);
        if (stopped) o->n_held = 0; /* the stop string and what followed it */
    }
    const bool enough = o->p->n_predict > 0 && o->n_generated >= o->p->n_predict;
    const bool late = o->p->max_ms > 0.0 && (es__time_now() - o->t0) * 1e3 >= o->p->max_ms;
    *what = !go_on || stopped || late ? ES__TAKE_STOP : enough ? ES__TAKE_LAST : ES__TAKE_MORE;
    return ES_OK;
}

void es__output_finish(es__output *o) {
    if (o->n_held > 0 && o->p->on_token) release(o, -1, o->n_held);
    o->n_held = 0;
}
