/* kern_impl.c: the CPU inner loops (kern.h), compiled once per instruction-set level with
 * -DES_KERN_LEVEL=0 (generic), 3 (x86-64-v3) or 4 (x86-64-v4) and the matching -march. Portable C
 * with GCC/Clang vector extensions; the only intrinsics are the fused multiply-add and the
 * half-precision conversion, so the arithmetic is spelled out and never left to contraction.
 *
 * Reduction order (why results are batch-invariant): an output element y[t][r] has one
 * accumulator of VL lanes; lane l accumulates k = l, l + VL, l + 2 VL, ... in increasing k (block
 * types: one partial per 32-element block, scaled and added in block order); the lanes are then
 * summed pairwise (hsum). Tiles only decide which elements are computed together, never how.
 * Weights are read in place (no repacking). Not here: threading, which rows a thread takes. */
#include "kern.h"

#include <string.h>

#if !defined(ES_KERN_LEVEL)
#error "ES_KERN_LEVEL must be defined"
#endif

#if ES_KERN_LEVEL == 4
#include <immintrin.h>
#define VL 16
#define R_TILE 4
#define T_TILE 6
#define KERN_NAME "x86-64-v4"
#define KERN_FN es__kern_x86_v4_impl
#elif ES_KERN_LEVEL == 3
#include <immintrin.h>
#define VL 8
#define R_TILE 4
#define T_TILE 3
#define KERN_NAME "x86-64-v3"
#define KERN_FN es__kern_x86_v3_impl
#else
#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif
#define VL 4
#define R_TILE 4
#define T_TILE 2
#define KERN_NAME "generic"
#define KERN_FN es__kern_generic_impl
#endif

#define QK 32          /* elements per Q8_0 / Q4_0 block */
#define NV (QK / VL)   /* vectors per block              */
#define TOK_BLOCK 64   /* tokens whose activations stay in cache while a row tile is reused */

#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(VL * 4)));
typedef uint32_t vu __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));
typedef uint16_t vh __attribute__((vector_size(VL * 2)));

const es__kern *KERN_FN(void);

INLINE vf vzero(void) {
    vf z = {0};
    return z;
}
INLINE vf vsplat(float a) {
#if ES_KERN_LEVEL == 4
    return (vf)_mm512_set1_ps(a);
#elif ES_KERN_LEVEL == 3
    return (vf)_mm256_set1_ps(a);
#else
    vf v;
    for (int i = 0; i < VL; i++) v[i] = a;
    return v;
#endif
}
INLINE vf loadu(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE void storeu(float *p, vf v) {
    memcpy(p, &v, sizeof v);
}

/* a * b + c, rounded once where the level has FMA, else twice (generic builds use
 * -ffp-contract=off so this is exactly a multiply and an add). */
INLINE vf vfma(vf a, vf b, vf c) {
#if ES_KERN_LEVEL == 4
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif ES_KERN_LEVEL == 3
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif defined(__ARM_NEON) && defined(__aarch64__)
    return (vf)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b);
#else
    return a * b + c;
#endif
}

/* Pairwise lane sum in a fixed order: lane i of the lower half plus lane i of the upper half, then
 * the same on the halved vector, down to one lane. */
#if VL == 16
typedef float vf8 __attribute__((vector_size(32)));
#endif
#if VL >= 8
typedef float vf4 __attribute__((vector_size(16)));
#endif
typedef float vf2 __attribute__((vector_size(8)));

INLINE float hsum(vf v) {
#if VL == 16
    vf8 h8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    vf4 h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
#elif VL == 8
    vf4 h4 = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
#else
    vf h4 = v;
#endif
    vf2 h2 = __builtin_shufflevector(h4, h4, 0, 1) + __builtin_shufflevector(h4, h4, 2, 3);
    return h2[0] + h2[1];
}

/* ---- element conversions (all exact) */

INLINE vf f16_to_vf(const uint16_t *p) {
#if ES_KERN_LEVEL == 4
    return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
#elif ES_KERN_LEVEL == 3
    return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
#else
    vh h;
    memcpy(&h, p, sizeof h);
    vu x = __builtin_convertvector(h, vu);
    vu sign = (x & 0x8000u) << 16;
    vu em = x & 0x7fffu;
    /* normal and subnormal halves: shift into a float's fields and rescale by 2^112 */
    vu scaled = (vu)((vf)(em << 13) * 0x1p112f);
    vu special = (vu)(em >= 0x7c00u); /* inf and NaN keep their payload */
    vu bits = (scaled & ~special) | (((em << 13) | 0x7f800000u) & special);
    return (vf)(bits | sign);
#endif
}

INLINE vf bf16_to_vf(const uint16_t *p) {
    vh h;
    memcpy(&h, p, sizeof h);
    return (vf)(__builtin_convertvector(h, vu) << 16);
}

INLINE float f16_scalar(uint16_t h) {
#if ES_KERN_LEVEL >= 3
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, bits;
    if (em >= 0x7c00u) {
        bits = (em << 13) | 0x7f800000u;
    } else {
        float f;
        em <<= 13;
        memcpy(&f, &em, 4);
        f *= 0x1p112f;
        memcpy(&bits, &f, 4);
    }
    bits |= sign;
    float r;
    memcpy(&r, &bits, 4);
    return r;
#endif
}

/* VL signed bytes to floats. On x86 the widening is spelled with intrinsics: GCC 12 turns
 * __builtin_convertvector from int8 lanes into one scalar conversion per lane. */
#if ES_KERN_LEVEL >= 3
INLINE __m128i load_bytes(const uint8_t *p) {
#if VL == 16
    return _mm_loadu_si128((const __m128i *)(const void *)p);
#else
    return _mm_loadl_epi64((const __m128i *)(const void *)p);
#endif
}
INLINE vf widen_bytes(__m128i b) {
#if VL == 16
    return (vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
#else
    return (vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
#endif
}
INLINE vf q8_to_vf(const uint8_t *p) {
    return widen_bytes(load_bytes(p));
}
/* Nibbles (low or high half of each byte) minus 8. */
INLINE vf q4_to_vf(const uint8_t *p, int high) {
    __m128i b = load_bytes(p);
    if (high) b = _mm_srli_epi16(b, 4);
    b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    return widen_bytes(b);
}
#else
INLINE vf q8_to_vf(const uint8_t *p) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = (float)(int8_t)p[i];
    return v;
}
INLINE vf q4_to_vf(const uint8_t *p, int high) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = (float)((high ? p[i] >> 4 : p[i] & 15) - 8);
    return v;
}
#endif

/* Loads VL weights of a float-type row at element k. */
INLINE vf load_wf(es__dtype type, const uint8_t *row, int64_t k) {
    if (type == ES__DTYPE_F32) return loadu((const float *)(const void *)row + k);
    if (type == ES__DTYPE_F16) return f16_to_vf((const uint16_t *)(const void *)row + k);
    return bf16_to_vf((const uint16_t *)(const void *)row + k);
}

/* The same for the m < VL elements left at k, zero-filled. */
INLINE vf load_wf_tail(es__dtype type, const uint8_t *row, int64_t k, int64_t m) {
    size_t esz = type == ES__DTYPE_F32 ? 4 : 2;
    uint8_t buf[VL * 4];
    memset(buf, 0, sizeof buf);
    memcpy(buf, row + (size_t)k * esz, (size_t)m * esz);
    return load_wf(type, buf, 0);
}

INLINE vf load_x_tail(const float *x, int64_t m) {
    float buf[VL];
    memset(buf, 0, sizeof buf);
    memcpy(buf, x, (size_t)m * sizeof(float));
    return loadu(buf);
}

/* One 32-element block of a quantised row as NV vectors of integers (not yet scaled) and its scale.
 * Q8_0: {f16 d; int8 q[32]}. Q4_0: {f16 d; uint8 q[16]}, element i < 16 is the low nibble of q[i]
 * and element i + 16 its high nibble, both offset by 8. */
INLINE float load_block(es__dtype type, const uint8_t *blk, vf *wq) {
    uint16_t d16;
    memcpy(&d16, blk, 2);
    const uint8_t *q = blk + 2;
    if (type == ES__DTYPE_Q8_0) {
        for (int v = 0; v < NV; v++) wq[v] = q8_to_vf(q + v * VL);
    } else {
        for (int v = 0; v < NV; v++) wq[v] = q4_to_vf(q + (v * VL) % 16, v * VL >= 16);
    }
    return f16_scalar(d16);
}

/* ---- tiles: R rows x T tokens, out[r * T_TILE + t] */

INLINE void tile_float(es__dtype type, const uint8_t *const *wr, const float *x, int64_t ldx, int64_t n_in,
                       const int R, const int T, float *out) {
    vf acc[R_TILE][T_TILE];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = vzero();
    int64_t k = 0;
    for (; k + VL <= n_in; k += VL) {
        vf xv[T_TILE];
        for (int t = 0; t < T; t++) xv[t] = loadu(x + t * ldx + k);
        for (int r = 0; r < R; r++) {
#ifdef PF_DIST
            __builtin_prefetch(wr[r] + k * (type == ES__DTYPE_F32 ? 4 : 2) + PF_DIST);
#endif
            vf w = load_wf(type, wr[r], k);
            for (int t = 0; t < T; t++) acc[r][t] = vfma(w, xv[t], acc[r][t]);
        }
    }
    if (k < n_in) {
        const int64_t m = n_in - k;
        vf xv[T_TILE];
        for (int t = 0; t < T; t++) xv[t] = load_x_tail(x + t * ldx + k, m);
        for (int r = 0; r < R; r++) {
            vf w = load_wf_tail(type, wr[r], k, m);
            for (int t = 0; t < T; t++) acc[r][t] = vfma(w, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) out[r * T_TILE + t] = hsum(acc[r][t]);
}

INLINE void tile_block(es__dtype type, const uint8_t *const *wr, const float *x, int64_t ldx, int64_t n_in,
                       const int R, const int T, float *out) {
    const size_t bb = type == ES__DTYPE_Q8_0 ? 34 : 18;
    vf acc[R_TILE][T_TILE];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = vzero();
    const int64_t nb = n_in / QK;
    for (int64_t b = 0; b < nb; b++) {
        vf xv[T_TILE][NV];
        for (int t = 0; t < T; t++)
            for (int v = 0; v < NV; v++) xv[t][v] = loadu(x + t * ldx + b * QK + v * VL);
        for (int r = 0; r < R; r++) {
#ifdef PF_DIST
            __builtin_prefetch(wr[r] + (size_t)b * bb + PF_DIST);
#endif
            vf wq[NV];
            const float d = load_block(type, wr[r] + (size_t)b * bb, wq);
            const vf dv = vsplat(d);
            for (int t = 0; t < T; t++) {
                vf s = wq[0] * xv[t][0];
                for (int v = 1; v < NV; v++) s = vfma(wq[v], xv[t][v], s);
                acc[r][t] = vfma(dv, s, acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) out[r * T_TILE + t] = hsum(acc[r][t]);
}

INLINE void tile(es__dtype type, const uint8_t *const *wr, const float *x, int64_t ldx, int64_t n_in, int R, int T,
                 float *out) {
    if (type == ES__DTYPE_Q8_0 || type == ES__DTYPE_Q4_0)
        tile_block(type, wr, x, ldx, n_in, R, T, out);
    else
        tile_float(type, wr, x, ldx, n_in, R, T, out);
}

/* One specialisation per (type, R, T): the compiler keeps each tile's accumulators in registers.
 * A single token (decode) goes one row at a time: one sequential stream of weights per thread is
 * what the hardware prefetchers follow best (interleaving R rows' streams halved the bandwidth). */
#define DEF_TILES(NAME, TYPE)                                                                          \
    static void NAME(const uint8_t *const *wr, const float *x, int64_t ldx, int64_t n_in, int R, int T, \
                     float *out) {                                                                     \
        if (R == 1) {                                                                                  \
            tile(TYPE, wr, x, ldx, n_in, 1, 1, out);                                                   \
            return;                                                                                    \
        }                                                                                              \
        switch (T) {                                                                                   \
        case 1: tile(TYPE, wr, x, ldx, n_in, R_TILE, 1, out); break;                                   \
        case 2: tile(TYPE, wr, x, ldx, n_in, R_TILE, 2 <= T_TILE ? 2 : 1, out); break;                 \
        case 3: tile(TYPE, wr, x, ldx, n_in, R_TILE, 3 <= T_TILE ? 3 : 1, out); break;                 \
        case 4: tile(TYPE, wr, x, ldx, n_in, R_TILE, 4 <= T_TILE ? 4 : 1, out); break;                 \
        case 5: tile(TYPE, wr, x, ldx, n_in, R_TILE, 5 <= T_TILE ? 5 : 1, out); break;                 \
        default: tile(TYPE, wr, x, ldx, n_in, R_TILE, 6 <= T_TILE ? 6 : 1, out); break;                \
        }                                                                                              \
    }
DEF_TILES(tiles_f32, ES__DTYPE_F32)
DEF_TILES(tiles_f16, ES__DTYPE_F16)
DEF_TILES(tiles_bf16, ES__DTYPE_BF16)
DEF_TILES(tiles_q8_0, ES__DTYPE_Q8_0)
DEF_TILES(tiles_q4_0, ES__DTYPE_Q4_0)

typedef void (*tiles_fn)(const uint8_t *const *wr, const float *x, int64_t ldx, int64_t n_in, int R, int T,
                         float *out);

static void k_matmul(es__dtype type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1,
                     const float *x, int64_t ldx, int64_t n_tok, float *y, int64_t ldy) {
    tiles_fn fn;
    switch (type) {
    case ES__DTYPE_F32: fn = tiles_f32; break;
    case ES__DTYPE_F16: fn = tiles_f16; break;
    case ES__DTYPE_BF16: fn = tiles_bf16; break;
    case ES__DTYPE_Q8_0: fn = tiles_q8_0; break;
    case ES__DTYPE_Q4_0: fn = tiles_q4_0; break;
    default: return;
    }
    const uint8_t *base = w;
    if (n_tok == 1) {
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr[1] = {base + (size_t)r * row_bytes};
            float out[R_TILE * T_TILE];
            fn(wr, x, ldx, n_in, 1, 1, out);
            y[r - r0] = out[0];
        }
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = ES__MIN(n_tok, t0 + TOK_BLOCK);
        for (int64_t r = r0; r < r1; r += R_TILE) {
            const uint8_t *wr[R_TILE];
            /* rows past r1 repeat the last row; their results are computed and dropped */
            for (int i = 0; i < R_TILE; i++) wr[i] = base + (size_t)ES__MIN(r + i, r1 - 1) * row_bytes;
            const int nr = (int)ES__MIN(R_TILE, r1 - r);
            for (int64_t t = t0; t < t1; t += T_TILE) {
                const int nt = (int)ES__MIN(T_TILE, t1 - t);
                float out[R_TILE * T_TILE];
                fn(wr, x + t * ldx, ldx, n_in, R_TILE, nt, out);
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nt; j++) y[(t + j) * ldy + (r - r0 + i)] = out[i * T_TILE + j];
            }
        }
    }
}

static float k_dot(const float *a, const float *b, int64_t n) {
    vf acc = vzero();
    int64_t k = 0;
    for (; k + VL <= n; k += VL) acc = vfma(loadu(a + k), loadu(b + k), acc);
    if (k < n) acc = vfma(load_x_tail(a + k, n - k), load_x_tail(b + k, n - k), acc);
    return hsum(acc);
}

static void k_axpy(float *y, float a, const float *x, int64_t n) {
    const vf av = vsplat(a);
    int64_t k = 0;
    for (; k + VL <= n; k += VL) storeu(y + k, vfma(av, loadu(x + k), loadu(y + k)));
    if (k < n) {
        float buf[VL];
        memset(buf, 0, sizeof buf);
        memcpy(buf, y + k, (size_t)(n - k) * sizeof(float));
        vf r = vfma(av, load_x_tail(x + k, n - k), loadu(buf));
        storeu(buf, r);
        memcpy(y + k, buf, (size_t)(n - k) * sizeof(float));
    }
}

static void k_to_f32(es__dtype type, const void *row, float *out, int64_t n) {
    const uint8_t *p = row;
    if (type == ES__DTYPE_Q8_0 || type == ES__DTYPE_Q4_0) {
        const size_t bb = type == ES__DTYPE_Q8_0 ? 34 : 18;
        for (int64_t b = 0; b < n / QK; b++) {
            vf wq[NV];
            const vf dv = vsplat(load_block(type, p + (size_t)b * bb, wq));
            for (int v = 0; v < NV; v++) storeu(out + b * QK + v * VL, wq[v] * dv);
        }
        return;
    }
    int64_t k = 0;
    for (; k + VL <= n; k += VL) storeu(out + k, load_wf(type, p, k));
    if (k < n) {
        float buf[VL];
        storeu(buf, load_wf_tail(type, p, k, n - k));
        memcpy(out + k, buf, (size_t)(n - k) * sizeof(float));
    }
}

const es__kern *KERN_FN(void) {
    static const es__kern k = {KERN_NAME, k_matmul, k_dot, k_axpy, k_to_f32};
    return &k;
}
