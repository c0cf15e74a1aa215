/* spec_attn.h: what ALSpec's speculative attention computes, shared by the backends that run it
 * and the strategy that reads its verdict (../shared/papers/alspec-attention-level-speculation.txt,
 * section 4.1 and Algorithm 3). Only the definitions live here: which keys form the speculation,
 * and the verdict's layout. The kernels are in lib/cpu (kern_impl.c) and shaders/attn_spec.comp. */
#ifndef ES_CORE_SPEC_ATTN_H
#define ES_CORE_SPEC_ATTN_H

#include "common.h"

/* The speculation keys of a token that attends to n keys, chunk S: the cache is split into chunks
 * of S positions from position 0 (figure 5); the speculation reads the first chunk [0, S) and the
 * chunks that hold the last S keys, [*s2, n) with *s2 = (n - S) rounded down to a multiple of S
 * (section 3.1's "first and last S tokens", on chunk boundaries). Each backend takes chunks that
 * are whole tiles of its plain attention (CPU: 64 positions, Vulkan: 256), so the speculation's
 * partials are exactly partials the plain attention computes too: nothing is computed twice.
 * Below 2S keys the chunks would overlap: false, exact attention only. */
static inline bool es__spec_window(int32_t n, int32_t S, int32_t *s2) {
    if (S <= 0 || n < 2 * S) return false;
    *s2 = (n - S) / S * S;
    return true;
}

/* The verification of one token (section 3.2): hit iff ||spec - A||_2 < lambda ||A||_2, both
 * norms over every head of the token's attention output. lambda = 0 never hits. */
typedef struct es__spec_verdict {
    bool valid;   /* the token had at least 2S keys: a speculation exists     */
    bool hit;     /* valid and the speculation is within lambda              */
    double err2;  /* sum over heads and dims of (spec - A)^2                 */
    double norm2; /* sum over heads and dims of A^2                          */
} es__spec_verdict;

static inline bool es__spec_accept(double err2, double norm2, float lambda) {
    return err2 < (double)lambda * (double)lambda * norm2;
}

#endif /* ES_CORE_SPEC_ATTN_H */
