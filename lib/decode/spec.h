/* spec.h: the speculation object's internals, shared by spec.c (lifecycle, prompt feeding,
 * steps, statistics) and the strategies spec_draft.c and spec_stream.c. */
#ifndef ES_DECODE_SPEC_H
#define ES_DECODE_SPEC_H

#include "backend.h"
#include "spec_tune.h"
#include "tree.h"
#include "verify.h"

struct es_spec {
    es_spec_params p;
    es_context *ctx;           /* the target                                                      */
    es_context *dctx;          /* the drafter (ES_SPEC_DRAFT) or NULL                             */
    const es_model *model;
    const es_allocator *alloc;
    es__err err;
    int32_t n_vocab;
    es__verifier ver;
    es__tree tree;             /* what the next step verifies: the pending root and its draft     */
    int32_t *hist;             /* [hist_cap] the sequence: fed and emitted tokens; when has_root, the
                                  last one is the pending root (decided, not yet in the KV cache)  */
    size_t n_hist, hist_cap;
    bool has_root;
    uint64_t n_steps;
    es_spec_stats st;
    int32_t depth;             /* draft levels: γ or lookahead                                    */
    int32_t k;                 /* candidates per level                                            */
    /* Draft candidates per level, twice: buffer `cur` belongs to s->tree, the other one is filled
     * for the next tree while the current one may still be needed (a failed step is retried). */
    int32_t cur;
    int32_t *cand_tok;         /* [2][depth][k]                                                   */
    float *cand_lp;            /* [2][depth][k] draft log-probabilities                           */
    float *cand_cal;           /* [2][depth][k] calibrated log-probabilities of acceptance        */
    float *node_lp;            /* [tree cap] each node's own draft log-probability                */
    es__tuner tune;
    bool plain_next;           /* drafting did not pay: the next call is a plain forward, without
                                  the stream hooks (until the next exploration)                  */
    double *cand_q;            /* [2][depth][n_vocab] rejection mode: the levels' draft dists     */
    uint8_t *logit_flags;      /* [n_batch] all ones: every tree node wants logits                */
    uint8_t *zeros;            /* [max n_batch] no logits (prefill)                               */
    uint8_t *skip;             /* [tree cap] pruned nodes of the tree being verified              */
    /* ES_SPEC_DRAFT: tokens the drafter has not consumed yet, before the root (an accepted last
     * draft token, whose successor it never computed). */
    int32_t dpend[1];
    int32_t n_dpend;
};

/* Tree node data for the verifier: the target context's logits, the levels' draft distributions,
 * and end-of-generation stops. */
typedef struct es__spec_src {
    es_spec *s;
} es__spec_src;

es_status es__spec_src_logits(void *user, int32_t node, const float **logits);
es_status es__spec_src_draft(void *user, int32_t node, const double **q);
bool es__spec_src_stop(void *user, int32_t token);

/* The room a tree may use in the target: min(max_nodes, n_batch, n_ctx - n_past). */
int32_t es__spec_tree_room(const es_spec *s);

/* Verifies s->tree (already forwarded in s->ctx), writes the emitted tokens and appends them to
 * the history; *last is the last accepted node, path/n_path the nodes to keep. */
es_status es__spec_verify(es_spec *s, size_t cap, int32_t *tokens, size_t *n_tokens, int32_t *path,
                          int32_t *n_path);

/* Fills lv->logp with the calibrated acceptance of candidate buffer `buf` and the cost model. */
void es__spec_calibrate(es_spec *s, int32_t buf, es__levels *lv);

/* Appends emitted tokens to the history; the last one becomes the pending root. */
void es__spec_advance(es_spec *s, const int32_t *tokens, size_t n);

/* The strategies' steps and their feed hooks (the drafter's prefill). */
es_status es__spec_draft_step(es_spec *s, int32_t *tokens, size_t cap, size_t *n_tokens);
es_status es__spec_draft_feed(es_spec *s, const int32_t *chain, int32_t n_chain);
es_status es__spec_stream_step(es_spec *s, int32_t *tokens, size_t cap, size_t *n_tokens);

/* Forwards chain[0..n) as committed tokens of ctx in chunks of n_batch, without logits; on
 * failure ctx is truncated back to where it was. */
es_status es__spec_prefill(es_context *ctx, const uint8_t *no_logits, const int32_t *chain, int32_t n, es__err *err);

#endif /* ES_DECODE_SPEC_H */
