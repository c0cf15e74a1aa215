/* kern.h: the CPU backend's inner loops, compiled once per instruction-set level (kern_impl.c:
 * generic, x86-64-v3 with AVX2/FMA/F16C, x86-64-v4 with AVX-512, AArch64 NEON) and chosen at run time for the
 * running CPU. Each level fixes its vector width and reduction order, so on one machine a given
 * output element is always computed by the same sequence of operations, whatever the batch, the
 * tile it falls in or the thread that computes it (DESIGN.md: batch invariance).
 * Only arithmetic lives here: no threads, no model knowledge. */
#ifndef ES_CPU_KERN_H
#define ES_CPU_KERN_H

#include "common.h"
#include "gguf.h"

#define ES__ATTN_TILE 64      /* keys per attention tile (attend, attend_spec), aligned to positions */
#define ES__MAX_HEAD_DIM 1024 /* the model loader's bound on the head dimension */
#define ES__ATTN_MULTI 32     /* most queries per attend_multi call */

/* One query of attend_multi: what attend takes for one query. */
typedef struct es__attn_q {
    const float *q, *kb, *vb; /* the query; its kv head's keys and values from its first slot on */
    const int32_t *vis;
    int32_t n_past, n_vis;
    const float *kx, *vx;     /* n_x keys and values from outside the cache, ldx floats apart */
    int64_t ldx;
    int32_t n_x;
    float *out;
} es__attn_q;

typedef struct es__kern {
    const char *name; /* "generic", "x86-64-v3", "x86-64-v4", "neon" */
    int panel_rows;   /* matmul's panel holds panel_rows * n_in floats */
    /* y[t * ldy + (r - r0)] = sum_k W[r][k] * x[t * ldx + k] for rows r in [r0, r1) and tokens
     * t in [0, n_tok). W: rows of n_in elements of type, row r at w + r * row_bytes. n_in is a
     * multiple of 32 for Q8_0/Q4_0, of 256 for the K-quants. panel: scratch of panel_rows * n_in floats, needed when
     * type is Q4_K (which prepares the activations there) or n_tok > 1 and type is not F32 (else it may be NULL). */
    void (*matmul)(es__dtype type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1,
                   const float *x, int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *panel);
    /* sum_k a[k] * b[k] in the level's fixed order. */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* y[k] += a * x[k]. */
    void (*axpy)(float *y, float a, const float *x, int64_t n);
    /* One row of n elements of type to f32 (exact for every supported type). */
    void (*to_f32)(es__dtype type, const void *row, float *out, int64_t n);
    /* out[i] = silu(g[i]) * u[i] with the level's vector exp; out may alias g or u. */
    void (*silu_mul)(const float *g, const float *u, int64_t n, float *out);
    /* Attention of one query q[hd] over one kv head's keys kb and values vb, both (n_ctx, hd): the
     * slots 0..n_past-1, then n_past + vis[i] for i < n_vis, then n_x keys and values from outside
     * the cache (rows kx + i ldx, vx + i ldx; a speculative stream's own), in that order.
     * out[hd] = softmax(s) weighted sum of v, with s = scale * q.k, or softcap tanh(s / softcap)
     * when softcap > 0 (gemma2's soft-capping). Keys are reduced in tiles of ES__ATTN_TILE
     * positions folded in position order (online softmax). */
    void (*attend)(const float *q, const float *kb, const float *vb, int64_t hd, int32_t n_past, const int32_t *vis,
                   int32_t n_vis, const float *kx, const float *vx, int64_t ldx, int32_t n_x, float scale,
                   float softcap, float *out);
    /* attend for nq <= ES__ATTN_MULTI queries, tile by tile: each tile of keys serves every query
     * that reaches it while it is in the core's cache, so queries that share a kv head (a tree's
     * nodes, grouped heads) read its keys and values from memory once. Every output has attend's
     * bits: each query's tiles are reduced and folded as attend does (attend is the one-query
     * case), only interleaved with the other queries'. */
    void (*attend_multi)(int nq, const es__attn_q *qs, int64_t hd, float scale, float softcap);
    /* Speculative attention of one query over the keys in slots 0..n-1 (ALSpec, Algorithm 3): spec[hd]
     * = the attention over the keys [0, s1) and [s2, n) alone (s1 <= s2 <= n, multiples of
     * ES__ATTN_TILE), computed first; out[hd] = attend's result over all n keys, bit for bit, reusing
     * the speculation's tile partials. part: ((s1 + n - s2) / ES__ATTN_TILE + 1) * (hd + 2) floats.
     * passes (ES__SPEC_PASS_*) runs the two halves together or apart: the exact pass alone reads the
     * partials a speculation pass left in part, so a caller can ship spec before the middle keys. */
    void (*attend_spec)(const float *q, const float *kb, const float *vb, int64_t hd, int32_t n, int32_t s1,
                        int32_t s2, float scale, int passes, float *part, float *spec, float *out);
} es__kern;

enum { ES__SPEC_PASS_SPEC = 1, ES__SPEC_PASS_EXACT = 2, ES__SPEC_PASS_BOTH = 3 };

/* The levels built into this library, best first; each entry usable on this CPU or NULL. */
const es__kern *es__kern_generic(void);
const es__kern *es__kern_x86_v3(void); /* NULL when not built or not supported by the CPU */
const es__kern *es__kern_x86_v4(void);
const es__kern *es__kern_neon(void);   /* AArch64 builds only, else NULL */

/* The best level for the running CPU. The debug switch EDGESPEC_CPU_KERNELS (edgespec.h; "generic",
 * "x86-64-v3", "x86-64-v4") caps the choice, for tests of the fallbacks; on AArch64 "generic"
 * keeps the backend off the neon level. */
const es__kern *es__kern_best(void);

/* Bytes of one row of n elements of type, 0 for an unsupported type or a bad n. */
size_t es__kern_row_bytes(es__dtype type, int64_t n);

#endif /* ES_CPU_KERN_H */
