/* spec.h: what a speculative strategy sees of the speculation object. es_spec (spec.c) owns the
 * sequence, the draft tree, the verifier, the adaptive tuner and the statistics, and drives one
 * strategy through a small table of functions (es__strategy); the pieces every strategy composes
 * its step from (verification, calibration, prefill) are in spec_steps.c. A new strategy is a new
 * file with its own state behind that table and one line in spec.c's registry; it talks to
 * contexts only through forward_api.h. */
#ifndef ES_DECODE_SPEC_H
#define ES_DECODE_SPEC_H

#include "forward_api.h"
#include "spec_tune.h"
#include "verify.h"

/* A strategy. Its state is its own (void *), made by create and freed by free. */
typedef struct es__strategy {
    const char *name;
    /* Checks the resolved params that are the strategy's against the target (s->ctx) and what
     * else it drives, sets s->depth (draft levels) and s->k (candidates per level), and makes
     * its state. s's buffers are not made yet. */
    es_status (*create)(es_spec *s, void **state);
    /* The target just committed chain[0..n) (a prompt or a later turn, the previous pending
     * root first): whatever else the strategy drives catches up. May be NULL. */
    es_status (*feed)(es_spec *s, void *state, const int32_t *chain, int32_t n);
    /* One step: one target call that verifies s->tree, commits the accepted path, writes the
     * decided tokens (1..cap, es__spec_verify) and leaves s->tree holding the next root with
     * the next draft. On failure everything is as before the step. */
    es_status (*step)(es_spec *s, void *state, int32_t *tokens, size_t cap, size_t *n_tokens);
    /* The sequence changed from its token n_past on: cut back (the target holds the first n_past
     * tokens of s->hist, the next one is the pending root) or shifted (the tokens after n_past
     * moved down; the target re-rotated its own), so whatever the strategy holds beyond the first
     * n_past tokens is stale. s->tree is the pending root alone. May be NULL. */
    void (*rewind)(es_spec *s, void *state, int32_t n_past);
    void (*free)(es_spec *s, void *state);
    /* For a strategy whose work goes on between steps (DSI's worker threads): stops it and
     * leaves s->ctx holding exactly the first n_hist - 1 tokens of s->hist (0 before the first
     * feed), the state every other call here expects; the next step starts it again. Called
     * before a feed, a rewind and at the end of es_spec_generate. May be NULL (nothing runs
     * between steps, and the invariant holds after every step). */
    es_status (*quiesce)(es_spec *s, void *state);
    /* For a strategy whose other contexts decide tokens (DSI's target servers): a context shift
     * is about to drop s->hist[n_keep..n_keep + n_discard) (after a quiesce; s->ctx not shifted
     * yet). Their caches must end up as the target's shifted cache, which no forward of the
     * shifted sequence gives back. Called instead of rewind; on failure the sequence stays as it
     * was. May be NULL (rewind then tells the strategy the sequence changed past n_keep). */
    es_status (*shift)(es_spec *s, void *state, int32_t n_keep, int32_t n_discard);
} es__strategy;

extern const es__strategy es__strategy_stream; /* spec_stream.c */
extern const es__strategy es__strategy_draft;  /* spec_draft.c  */
extern const es__strategy es__strategy_dsi;    /* lib/multi/dsi.c */

/* The zeros of es_dsi_params that do not wait for measurements (lib/multi/dsi.c). */
void es__dsi_resolve(es_dsi_params *p, const es__caps *target);

struct es_spec {
    es_spec_params p;          /* resolved: no zero that means a default is left               */
    const es__strategy *strategy;
    void *state;               /* the strategy's                                                */
    es_context *ctx;           /* the target                                                    */
    const es_model *model;
    es__caps caps;             /* the target context's                                          */
    const es_allocator *alloc;
    es__err err;
    es__verifier ver;
    es__tree tree;             /* what the next step verifies: the pending root and its draft   */
    int32_t *hist;             /* [hist_cap] the sequence: fed and emitted tokens; when has_root,
                                  the last one is the pending root (decided, not yet in the KV)  */
    size_t n_hist, hist_cap;
    bool has_root;
    uint64_t n_steps;
    es_spec_stats st;
    int32_t depth;             /* draft levels: γ or lookahead                                  */
    int32_t k;                 /* candidates per level                                          */
    /* Draft candidates per level, twice: buffer `cur` belongs to s->tree, the other one is filled
     * for the next tree while the current one may still be needed (a failed step is retried). */
    int32_t cur;
    int32_t *cand_tok;         /* [2][depth][k]                                                 */
    float *cand_lp;            /* [2][depth][k] draft log-probabilities                         */
    float *cand_cal;           /* [2][depth][k] calibrated log-probabilities of acceptance      */
    float *node_lp;            /* [tree cap] each node's own draft log-probability              */
    double *cand_q;            /* [2][depth][n_vocab] rejection mode: the levels' draft dists   */
    es__tuner tune;
    uint8_t *logit_flags;      /* [n_batch] all ones: every tree node wants logits              */
    uint8_t *zeros;            /* [n_batch] no logits (prefill)                                 */
    uint8_t *skip;             /* [tree cap] pruned nodes of the tree being verified            */
    float *exit_p;             /* [tree cap] their early-exit probabilities (tuned pruning)      */
};

/* Cuts the sequence back to its first n_keep (>= 1) tokens, the last of them the pending root
 * again: the target's KV and the strategy follow (spec.c). */
es_status es__spec_rewind(es_spec *s, size_t n_keep);
/* es_context_shift for the sequence: the target's cache, s->hist and the strategy (spec.c);
 * arguments already checked. */
es_status es__spec_shift(es_spec *s, int32_t n_keep, int32_t n_discard);

/* The strategy's quiesce, where it has one (spec.c). */
es_status es__spec_quiesce(es_spec *s);

/* ---- the pieces of a step (spec_steps.c) */

/* The room a tree may use in the target: min(max_nodes, tree capacity, n_ctx - n_past). */
int32_t es__spec_tree_room(const es_spec *s);

/* Verifies s->tree (already forwarded in s->ctx, s->tree.skip marking pruned nodes): writes the
 * emitted tokens (the accepted drafts, then the target's own next token; at most cap) and the
 * accepted path's nodes (root first) to keep, and records acceptance for the statistics and the
 * tuner. */
es_status es__spec_verify(es_spec *s, size_t cap, int32_t *tokens, size_t *n_tokens, int32_t *path,
                          int32_t *n_path);

/* Where es__spec_verify_rows reads the target's logits of each tree node and (rejection mode) the
 * draft distribution its children were drawn from, for a strategy whose target rows are not the
 * last forward call of s->ctx (DSI: rows a target server computed). A NULL member is s's own:
 * es_logits of s->ctx, the candidate buffer s->cand_q. */
typedef struct es__spec_rows {
    void *user;
    es_status (*logits)(void *user, int32_t node, const float **logits);
    es_status (*draft)(void *user, int32_t node, const double **q);
} es__spec_rows;

/* es__spec_verify with the rows from elsewhere (rows NULL: es__spec_verify). */
es_status es__spec_verify_rows(es_spec *s, const es__spec_rows *rows, size_t cap, int32_t *tokens,
                               size_t *n_tokens, int32_t *path, int32_t *n_path);

/* Fills lv->logp with the calibrated acceptance of candidate buffer `buf` and the cost model. */
void es__spec_calibrate(es_spec *s, int32_t buf, es__levels *lv);

/* Appends emitted tokens to the history; the last one becomes the pending root. */
void es__spec_advance(es_spec *s, const int32_t *tokens, size_t n);

/* Forwards chain[0..n) as committed tokens of ctx in chunks of its n_batch, without logits; on
 * failure ctx is truncated back to where it was and s->err says why. */
es_status es__spec_prefill(es_spec *s, es_context *ctx, const int32_t *chain, int32_t n);

/* Checks that draft model b shares target a's vocabulary: sizes, and the text of a spread of
 * tokens (es_spec_create's message otherwise). */
es_status es__spec_same_vocab(es_spec *s, const es_model *a, const es_model *b);

/* Records the context's last error as s's, with a prefix; returns its status. */
es_status es__spec_fail_ctx(es_spec *s, es_context *ctx, es_status st, const char *what);

#endif /* ES_DECODE_SPEC_H */
