/* output.h: what generation hands to the caller, shared by es_generate (autoregressive.c) and
 * es_spec_generate (spec_generate.c), so plain and speculative runs stop by the same rules and
 * print the same text: each decided token passes one gate that ends generation at an
 * end-of-generation token (not handed out unless ignore_eog), records it in tokens_out, hands
 * its text to on_token (held back while it could begin a stop string; a stop string ends
 * generation and is never handed out) and reports whether the caller asked to stop, a stop string
 * or the time budget ended it, or n_predict is reached. */
#ifndef ES_DECODE_OUTPUT_H
#define ES_DECODE_OUTPUT_H

#include "forward_api.h"

typedef struct es__output {
    const es_model *model;
    const es_allocator *alloc;
    const es_generate_params *p;
    int32_t *tokens_out;     /* [cap] or NULL                                          */
    size_t cap;
    int32_t n_generated;     /* tokens handed out                                      */
    char *piece;             /* [piece_cap] text of the current token                  */
    size_t piece_cap;
    char *held;              /* [held_cap] text not handed out yet: it may begin a stop string */
    size_t n_held, held_cap;
    double t0;               /* when generation started (the time budget)              */
} es__output;

/* What became of a token at the gate. */
typedef enum es__take {
    ES__TAKE_END,  /* an end-of-generation token: not handed out, generation ends          */
    ES__TAKE_STOP, /* handed out, and generation ends with it: on_token asked to stop, its text
                      completed a stop string, or the time budget is spent                    */
    ES__TAKE_LAST, /* handed out, and it was the n_predict-th                                 */
    ES__TAKE_MORE, /* handed out, generation goes on                                       */
} es__take;

es_status es__output_init(es__output *o, const es_model *m, const es_allocator *a, const es_generate_params *p,
                          int32_t *tokens_out, size_t cap, es__err *err);
void es__output_free(es__output *o);
es_status es__output_take(es__output *o, int32_t token, es__take *what, es__err *err);
/* At the end of generation: the text still held back goes to on_token with token -1. */
void es__output_finish(es__output *o);

#endif /* ES_DECODE_OUTPUT_H */
