/* sampler.h: the sampler's internal view for decoding strategies. es_sample() is "build the
 * filtered distribution, then draw with es_sampler_uniform(seed, pos)"; verifiers of speculative
 * strategies need the distribution itself (rejection sampling compares draft and target
 * probabilities), so both halves are exposed here. Never installed. */
#ifndef ES_CORE_SAMPLER_H
#define ES_CORE_SAMPLER_H

#include "common.h"

/* The distribution es_sample draws from at one position: n candidates with positive weights,
 * ids in ascending order. P(ids[i]) = w[i] / total. Views into the sampler's scratch, valid until
 * its next call. Greedy sampling gives one candidate with weight 1. */
typedef struct es__dist {
    int32_t n;
    const int32_t *ids;  /* [n] ascending          */
    const double *w;     /* [n] unnormalised, > 0  */
    double total;        /* sum of w               */
} es__dist;

/* Applies the filter chain (documented at es_sample in edgespec.h) to logits[n_vocab]. */
es_status es__sampler_dist(es_sampler *s, const float *logits, const int32_t *history, size_t n_history,
                           es__dist *out);

/* The token a uniform draw u in [0, 1) selects: walks the candidates in ascending id order and
 * returns the first whose cumulative weight exceeds u * total. */
int32_t es__dist_draw(const es__dist *d, double u);

/* Checks params; fills err (may be NULL) on failure. */
es_status es__sampler_params_check(const es_sampler_params *p, es__err *err);

#endif /* ES_CORE_SAMPLER_H */
