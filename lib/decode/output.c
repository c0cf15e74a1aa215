/* output.c: the gate every generated token passes (output.h). */
#include "output.h"

es_status es__output_init(es__output *o, const es_model *m, const es_allocator *a, const es_generate_params *p,
                          int32_t *tokens_out, size_t cap, es__err *err) {
    *o = (es__output){m, a, p, tokens_out, cap, 0, NULL, 0};
    o->piece_cap = 256;
    o->piece = es__malloc(a, o->piece_cap);
    ES_RETURN_IF(!o->piece, err, ES_ERR_OUT_OF_MEMORY, "generate: out of memory");
    return ES_OK;
}

void es__output_free(es__output *o) {
    es__free(o->alloc, o->piece);
    o->piece = NULL;
}

/* on_token with the token's text as es_token_to_piece renders it (no special rendering). */
static es_status hand_out(es__output *o, int32_t token, bool *go_on, es__err *err) {
    *go_on = true;
    if (!o->p->on_token) return ES_OK;
    size_t len = 0;
    es_status s = es_token_to_piece(o->model, token, false, o->piece, o->piece_cap, &len);
    if (s == ES_ERR_BUFFER_TOO_SMALL) {
        char *grown = es__realloc(o->alloc, o->piece, len);
        ES_RETURN_IF(!grown, err, ES_ERR_OUT_OF_MEMORY, "generate: out of memory for a %zu-byte piece", len);
        o->piece = grown;
        o->piece_cap = len;
        s = es_token_to_piece(o->model, token, false, o->piece, o->piece_cap, &len);
    }
    if (s != ES_OK) return es__fail(err, s, "generate: token %d: %s", token, es_last_error());
    *go_on = o->p->on_token(token, o->piece, len, o->p->user);
    return ES_OK;
}

es_status es__output_take(es__output *o, int32_t token, es__take *what, es__err *err) {
    *what = ES__TAKE_END;
    if (!o->p->ignore_eog && es_token_is_eog(o->model, token)) return ES_OK;
    if (o->tokens_out && (size_t)o->n_generated < o->cap) o->tokens_out[o->n_generated] = token;
    o->n_generated++;
    bool go_on;
    ES_TRY(hand_out(o, token, &go_on, err));
    const bool enough = o->p->n_predict > 0 && o->n_generated >= o->p->n_predict;
    *what = !go_on ? ES__TAKE_STOP : enough ? ES__TAKE_LAST : ES__TAKE_MORE;
    return ES_OK;
}
