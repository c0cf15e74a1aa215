/* rope.h: the angles and magnitudes RoPE turns each pair of a head by, for every scaling a GGUF
 * file can ask for (docs/formats.md, "RoPE"): plain, linear, YaRN, llama 3's per-pair divisors
 * and phi3's LongRoPE. One place computes the (cos, sin) tables every backend reads, so the CPU
 * and Vulkan forward, context shifts and the stream layers agree bit for bit.
 * Not here: reading the keys (model.c), applying the rotation (the backends). */
#ifndef ES_CORE_ROPE_H
#define ES_CORE_ROPE_H

#include "common.h"

struct es__hparams;

/* What a context rotates by: the model's scaling resolved for its context size. */
typedef struct es__rope {
    int32_t n_rot;          /* rotated dims per head (even)                                   */
    double freq_base;       /* θ base                                                          */
    double freq_scale;      /* interpolation: positions times this (1 = none)                  */
    const float *freq_div;  /* [n_rot / 2] divisors of each pair's frequency, or NULL          */
    double ext_factor;      /* YaRN: weight of the extrapolated angle in the ramp (0 = off)    */
    double corr_lo, corr_hi;/* YaRN: the ramp runs over pairs corr_lo..corr_hi                 */
    double mscale;          /* cos and sin are multiplied by it (YaRN's and LongRoPE's factor) */
    bool identity;          /* no rotation: every angle 0, magnitude 1 (layers without RoPE)    */
} es__rope;

/* Plain RoPE (no divisors, no YaRN, magnitude 1): for ops tests and the stream layers' tests. */
es__rope es__rope_plain(int32_t n_rot, float freq_base, float freq_scale);

/* The model's RoPE in a context of n_ctx positions (LongRoPE picks its long factors when n_ctx
 * is beyond the original training context, as llama.cpp does). */
es__rope es__rope_for(const struct es__hparams *hp, int32_t n_ctx);

/* The RoPE tables a context keeps per token, and which one each layer turns q and k by: the
 * model's (table 0, es__rope_for); gemma3's sliding layers' own (their base, unscaled, no
 * divisors, magnitude 1); and for layers without RoPE (smollm3's every fourth) the identity
 * (cos 1, sin 0: rotating by it changes no bit), so every layer reads a table and the kernels
 * need no case for them. */
int32_t es__rope_tables(const struct es__hparams *hp);
int32_t es__rope_table_of(const struct es__hparams *hp, int32_t il);
/* Table t's RoPE in a context of n_ctx positions. */
es__rope es__rope_table(const struct es__hparams *hp, int32_t n_ctx, int32_t t);

/* cos/sin of pairs [i0, i1) at position pos: cs[2 (i - i0)], cs[2 (i - i0) + 1]; evaluated in
 * double and rounded once. unit: magnitude 1 (a context shift turns keys that already carry
 * the magnitude). */
void es__rope_cs(const es__rope *r, int64_t pos, int64_t i0, int64_t i1, bool unit, float *cs);

#endif /* ES_CORE_ROPE_H */
