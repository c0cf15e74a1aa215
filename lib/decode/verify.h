/* verify.h: drafting candidates from a distribution and verifying a draft tree against the target
 * model, shared by every speculative strategy. Three modes:
 *   greedy     temperature 0: hard matching (Speculative Streaming A.1): follow the child whose
 *              token is the target's argmax; the first miss gives the correction token.
 *   seeded     temperature > 0: the target token at position p is es_sample(logits, p, history),
 *              drawn with es_sampler_uniform(seed, p), so the emitted tokens are exactly those of
 *              plain sampling with the same seed; drafts only decide how many calls it takes.
 *   rejection  temperature > 0: multi-candidate speculative sampling (SpecInfer's multi-step
 *              speculative sampling, with candidates drawn without replacement): lossless in
 *              distribution, not token for token.
 * Deliberately no model or forward pass here: logits arrive through callbacks. */
#ifndef ES_DECODE_VERIFY_H
#define ES_DECODE_VERIFY_H

#include "forward_api.h"

typedef enum es__verify_mode {
    ES__VERIFY_GREEDY = 0,
    ES__VERIFY_SEEDED = 1,
    ES__VERIFY_REJECTION = 2,
} es__verify_mode;

typedef struct es__verifier {
    es__verify_mode mode;
    int32_t n_vocab;
    uint64_t seed;
    es_sampler *sampler; /* the target's sampler (all modes: greedy applies the repetition penalty) */
    double *p;           /* [n_vocab] residual target distribution (rejection)                    */
    double *q;           /* [n_vocab] current draft distribution (rejection)                      */
    double *key;         /* [n_vocab] candidate scores                                            */
    int32_t *idx;        /* [n_vocab] candidate ids                                               */
    const es_allocator *alloc;
} es__verifier;

es_status es__verifier_init(es__verifier *v, int32_t n_vocab, const es_sampler_params *sp, bool rejection,
                            const es_allocator *a, es__err *err);
void es__verifier_free(es__verifier *v);

/* Draft candidates for the token at absolute position pos from one row of draft logits: up to k
 * distinct tokens, most preferred first, with their draft log-probabilities.
 *   greedy:    the top k logits (ties to the lower id), log-softmax scores.
 *   seeded:    first the token the sampler's draw at pos would pick from the draft distribution
 *              (the target draws with the same uniform, so agreeing distributions agree on it),
 *              then the most probable others.
 *   rejection: k draws without replacement from the draft distribution (Gumbel-top-k keyed by
 *              (seed, draw_key, token)), in draw order; q (n_vocab doubles, may be NULL in other
 *              modes) receives the normalised draft distribution the verifier needs.
 * history feeds the sampler's repetition penalty (may be NULL). Writes *n <= k. */
es_status es__draft_candidates(es__verifier *v, const float *logits, const int32_t *history, size_t n_history,
                               int64_t pos, uint64_t draw_key, int32_t k, int32_t *tokens, float *logp,
                               double *q, int32_t *n, es__err *err);

/* Per-node data for es__verify. */
typedef struct es__verify_src {
    void *user;
    /* The target's logits (n_vocab) at tree node `node`. */
    es_status (*logits)(void *user, int32_t node, const float **logits);
    /* Rejection mode: the normalised draft distribution (n_vocab) node's children were drawn from. */
    es_status (*draft)(void *user, int32_t node, const double **q);
    /* Optional: true when token ends generation (the walk stops after emitting it). */
    bool (*stop)(void *user, int32_t token);
} es__verify_src;

typedef struct es__verify_out {
    int32_t n_path;                         /* accepted path length, root included (>= 1) */
    int32_t path[ES_SPEC_MAX_DEPTH + 1];    /* tree nodes, root first                      */
    int32_t next;                           /* the target's token after path's last node   */
    int32_t next_child;                     /* the child of that node carrying `next` (the
                                               walk stopped there for the cap or an
                                               end-of-generation token), or -1           */
} es__verify_out;

/* Walks tree t from its root, deciding the target token after each node; emits at most
 * max_emit >= 1 tokens (accepted draft tokens plus `next`). history[0..n_history) are the tokens
 * before the root's successor, ending with the root token; the walk appends accepted tokens there
 * temporarily, so history needs room for t->max_depth more. */
es_status es__verify(es__verifier *v, const es__tree *t, const es__verify_src *src, int32_t *history,
                     size_t n_history, int32_t max_emit, es__verify_out *out, es__err *err);

/* A uniform draw in [0, 1) keyed by (seed, domain, a, b): the random stream of the rejection
 * mode, independent of es_sampler_uniform's. */
double es__spec_uniform(uint64_t seed, uint64_t domain, int64_t a, int64_t b);

#endif /* ES_DECODE_VERIFY_H */
