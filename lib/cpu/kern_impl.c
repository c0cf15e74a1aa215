/* kern_impl.c: the CPU inner loops (kern.h), compiled once per instruction-set level with
 * -DES_KERN_LEVEL=0 (generic), 3 (x86-64-v3) or 4 (x86-64-v4) and the matching -march, or 8
 * (AArch64 NEON, which every AArch64 CPU has). Portable C with GCC/Clang vector extensions;
 * intrinsics only where the extensions fall short (fused multiply-add, half-precision and int8
 * widening), so the arithmetic is spelled out and never left to the compiler's contraction.
 * On AArch64 the generic level also uses the NEON fused multiply-add: with the same vector width
 * and order, generic and neon compute bit-identical results there (test_cpu_ops checks it), and
 * neon differs only in how it loads (native f16 conversion, int8 widening) and in its tile shape.
 *
 * Reduction order (why results are batch-invariant): an output element y[t][r] has one
 * accumulator of VL lanes; lane l accumulates w[k] * x[k] for k = l, l + VL, l + 2 VL, ... in
 * increasing k with one fused multiply-add each (w converted to f32 exactly: a Q8_0/Q4_0 weight
 * d * q fits f32's significand, a K-quant's (d sc) q - (dmin m) is one rounding of exact products,
 * the same in every path); the lanes are then summed pairwise (hsum). A decode token or a small
 * batch streams the weights in place, two rows at a time, each weight vector converted once and
 * used for every token of its tile; larger batches convert a few rows to f32 once (the panel) and
 * run them through register tiles: the same arithmetic per element, so streams, tiles and panels
 * only decide which elements are computed together, never how.
 * The K-quants Q4_K, Q5_K and Q6_K are the exceptions to the per-weight order: they sum q x per
 * sub-block and scale the sum, at every batch size alike (kern_ksum.h says how).
 * Not here: threading, which rows a thread takes. */
#include "kern.h"

#include <math.h>
#include <string.h>

#if !defined(ES_KERN_LEVEL)
#error "ES_KERN_LEVEL must be defined"
#endif

#define KERN_X86 (ES_KERN_LEVEL == 3 || ES_KERN_LEVEL == 4)
#define KERN_NEON (ES_KERN_LEVEL == 8)

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
#elif KERN_NEON
#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "ES_KERN_LEVEL=8 is the AArch64 NEON level"
#endif
#include <arm_neon.h>
/* 32 vector registers: a 4 x 6 tile keeps 24 accumulators, 6 activations and a weight vector */
#define VL 4
#define R_TILE 4
#define T_TILE 6
#define KERN_NAME "neon"
#define KERN_FN es__kern_neon_impl
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
/* ggml's plain 32-element blocks: a scale (and maybe a min) per block, no grid (IQ4_NL) */
#define IS_Q5(t) ((t) == ES__DTYPE_Q4_1 || (t) == ES__DTYPE_Q5_0 || (t) == ES__DTYPE_Q5_1)
#define IS_B32(t) ((t) == ES__DTYPE_Q8_0 || (t) == ES__DTYPE_Q4_0 || IS_Q5(t))
#define B32_MIN(t) ((t) == ES__DTYPE_Q4_1 || (t) == ES__DTYPE_Q5_1) /* x = d q + m */
#define B32_BYTES(t)                                                                                   \
    ((t) == ES__DTYPE_Q8_0 ? 34 : (t) == ES__DTYPE_Q4_0 ? 18 : (t) == ES__DTYPE_Q4_1 ? 20 : (t) == ES__DTYPE_Q5_0 ? 22 : 24)
#define NV (QK / VL)   /* vectors per block              */
#define TOK_BLOCK 64   /* tokens whose activations stay in cache while a row tile is reused */
#define PF_TILES 1     /* row tiles ahead whose weights the tile path prefetches */
/* Calls of up to this many tokens stream the stored rows (each weight loaded and converted once
 * per token tile of T_TILE, the rows kept in L1 across tiles); larger ones use the register tiles
 * on f32 panels. Measured (bench_cpu_kern, one thread, rows of 384): past the L3, streaming took
 * 0.4-0.8x the tiles' time for 2-16 f32 tokens on x86-64-v4 and v3, and alike in L2; 32 tokens ran
 * 5% faster in the tiles. A converted type pays its conversion once per token tile, so with small
 * tiles (x86-64-v3's 3 tokens) Q8_0 lost 1.4x at 12-16 tokens: at most three tiles stream. */
#define STREAM_TOK ES__MIN(16, 3 * T_TILE)
/* The streaming path asks for its weights this many bytes ahead of each stream, into L2, a line
 * at a time as it goes (bench_cpu_kern, f32 rows of 384 past the L3, one thread: 2 tokens 1.0x and
 * 5 tokens 1.2x one token's time with it, 1.4x and 1.9x without; 8 and 16 KB ahead did alike,
 * 2 KB too little, a burst of whole rows ahead nothing). The hardware prefetchers alone keep up
 * with one token's arithmetic but not with several tokens', so a single token goes without (the
 * prefetches cost the one-token K-quant and Q4_0 kernels about 5%: bench_kquant, past the L3). */
#define PF_AHEAD 8192
/* The same for f32, f16 and bf16 rows, whose several tokens' arithmetic is all a weight line
 * costs: whole calls on the long model (f32 rows of 384 and 1024, 2 threads; bench_spec_call with
 * EDGESPEC_BENCH_PAIRED, a 5-node call over a one-token call, medians of 4 alternated runs on the
 * loaded machine) took 1.17-1.35x with 4 KB ahead, 1.33-1.51x with 8 KB, 1.64x with 16 and 32 KB,
 * 1.52x with 2 KB and 1.72x with none (those three prefetching to each stream's end); into L1
 * instead of L2, 1.70x. The other types keep PF_AHEAD (not measured here). */
#define PF_AHEAD_F 4096
#define IS_FLOATW(t) ((t) == ES__DTYPE_F32 || (t) == ES__DTYPE_F16 || (t) == ES__DTYPE_BF16)

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
#elif KERN_NEON
    return (vf)vdupq_n_f32(a);
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

/* hsum of VL vectors at once: lane g of the result is hsum(v[g]), by the same pairwise additions
 * (each level pairs two vectors' halves with shuffles instead of halving one vector). */
#if VL == 16
INLINE vf hsum_keys(const vf *v) {
    vf w[8], x[4], y[2];
    for (int i = 0; i < 8; i++)
        w[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(v[2 * i], v[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30,
                                       31);
    for (int i = 0; i < 4; i++)
        x[i] = __builtin_shufflevector(w[2 * i], w[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(w[2 * i], w[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    for (int i = 0; i < 2; i++)
        y[i] = __builtin_shufflevector(x[2 * i], x[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               __builtin_shufflevector(x[2 * i], x[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    return __builtin_shufflevector(y[0], y[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(y[0], y[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
#elif VL == 8
INLINE vf hsum_keys(const vf *v) {
    vf w[4], x[2];
    for (int i = 0; i < 4; i++)
        w[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
               __builtin_shufflevector(v[2 * i], v[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15);
    for (int i = 0; i < 2; i++)
        x[i] = __builtin_shufflevector(w[2 * i], w[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
               __builtin_shufflevector(w[2 * i], w[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15);
    return __builtin_shufflevector(x[0], x[1], 0, 2, 4, 6, 8, 10, 12, 14) +
           __builtin_shufflevector(x[0], x[1], 1, 3, 5, 7, 9, 11, 13, 15);
}
#endif

/* out[g] = hsum(v[g]) for g < n, bit for bit: VL vectors at a time through hsum_keys (a row tile's
 * lane sums in a third of the shuffles and adds of one hsum each), the rest zero-padded. */
INLINE void hsum_many(const vf *v, const int n, float *out) {
#if VL >= 8
    for (int g0 = 0; g0 < n; g0 += VL) {
        vf b[VL];
        for (int g = 0; g < VL; g++) b[g] = g0 + g < n ? v[g0 + g] : vzero();
        storeu(out + g0, hsum_keys(b));
    }
#else
    for (int g = 0; g < n; g++) out[g] = hsum(v[g]);
#endif
}

/* ---- element conversions (all exact) */

INLINE vf f16_to_vf(const uint16_t *p) {
#if ES_KERN_LEVEL == 4
    return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
#elif ES_KERN_LEVEL == 3
    return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
#elif KERN_NEON
    /* FCVTL: exact for every f16, subnormals included (Linux runs AArch64 without flush-to-zero) */
    return (vf)vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
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
#if KERN_NEON
    /* SHLL by 16: gcc widened the generic form a lane at a time (2.6x f16's instructions a call) */
    return (vf)vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
#else
    vh h;
    memcpy(&h, p, sizeof h);
    return (vf)(__builtin_convertvector(h, vu) << 16);
#endif
}

INLINE float f16_scalar(uint16_t h) {
#if KERN_X86
    return _cvtsh_ss(h);
#elif KERN_NEON
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
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
#if KERN_X86
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
#elif !KERN_NEON /* neon widens whole blocks (load_block) */
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
#if KERN_NEON
/* 16 signed bytes to four vectors of floats, in order: widened through 16 and 32 bits in
 * registers (the generic loaders go one byte at a time). */
INLINE void widen16(int8x16_t b, vf *out) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
    out[0] = (vf)vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    out[1] = (vf)vcvtq_f32_s32(vmovl_high_s16(lo));
    out[2] = (vf)vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    out[3] = (vf)vcvtq_f32_s32(vmovl_high_s16(hi));
}
#endif

/* The 32-element types whose quants are not a byte or nibble apiece (Q5_0, Q5_1) or that carry a
 * min (Q4_1, Q5_1), layouts in lib/core/quant_q5.c: the block's quants as signed bytes (nibbles,
 * bit j of qh as 16 in byte j, Q5_0's offset 16 taken off), widened as Q8_0's. Returns d; *m the
 * block's min (0 for Q5_0), added to each d q with one rounding. */
#if KERN_X86
/* Sixteen bits of qh as bytes of 0 or 16: byte j takes bit j (bytes 0-7 from the low byte). */
INLINE __m128i q5_high_bytes(uint32_t bits16) {
#if VL == 16 /* AVX-512BW: the bits are a byte mask as they stand */
    return _mm_maskz_mov_epi8((__mmask16)bits16, _mm_set1_epi8(16));
#else
    const __m128i spread = _mm_set_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0); /* byte j: bits of byte j / 8 */
    const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)bits16), spread);
    const __m128i bit = _mm_set_epi8(-128, 64, 32, 16, 8, 4, 2, 1, -128, 64, 32, 16, 8, 4, 2, 1);
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(b, bit), bit), _mm_set1_epi8(16));
#endif
}
#endif

INLINE float load_block_q5(es__dtype type, const uint8_t *blk, vf *wq, float *m) {
#if KERN_X86 || KERN_NEON
    const bool has_min = type != ES__DTYPE_Q5_0, five = type != ES__DTYPE_Q4_1;
    uint16_t h[2];
    memcpy(h, blk, 4);
    *m = has_min ? f16_scalar(h[1]) : 0.0f;
    const uint8_t *qs = blk + 2 + 2 * has_min + 4 * five;
    uint32_t qh = 0;
    if (five) memcpy(&qh, blk + 2 + 2 * has_min, 4);
#if KERN_X86
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)qs), nib = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(raw, nib), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), nib);
    if (five) lo = _mm_or_si128(lo, q5_high_bytes(qh & 0xffffu)), hi = _mm_or_si128(hi, q5_high_bytes(qh >> 16));
    if (type == ES__DTYPE_Q5_0) lo = _mm_sub_epi8(lo, _mm_set1_epi8(16)), hi = _mm_sub_epi8(hi, _mm_set1_epi8(16));
#if VL == 16
    wq[0] = widen_bytes(lo);
    wq[1] = widen_bytes(hi);
#else
    wq[0] = widen_bytes(lo);
    wq[1] = widen_bytes(_mm_srli_si128(lo, 8));
    wq[2] = widen_bytes(hi);
    wq[3] = widen_bytes(_mm_srli_si128(hi, 8));
#endif
#else
    const uint8x16_t raw = vld1q_u8(qs), bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t lo = vandq_u8(raw, vdupq_n_u8(15)), hi = vshrq_n_u8(raw, 4);
    if (five) {
        const uint8x16_t b0 = vcombine_u8(vdup_n_u8((uint8_t)qh), vdup_n_u8((uint8_t)(qh >> 8)));
        const uint8x16_t b1 = vcombine_u8(vdup_n_u8((uint8_t)(qh >> 16)), vdup_n_u8((uint8_t)(qh >> 24)));
        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(b0, bit), vdupq_n_u8(16)));
        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(b1, bit), vdupq_n_u8(16)));
    }
    const int8x16_t off = vdupq_n_s8(type == ES__DTYPE_Q5_0 ? 16 : 0);
    widen16(vsubq_s8(vreinterpretq_s8_u8(lo), off), wq);
    widen16(vsubq_s8(vreinterpretq_s8_u8(hi), off), wq + 4);
#endif
    return f16_scalar(h[0]);
#else
    int8_t q[QK];
    const float d = es__q5_unpack(type, blk, q, m);
    for (int v = 0; v < NV; v++) wq[v] = q8_to_vf((const uint8_t *)q + v * VL);
    return d;
#endif
}

INLINE float load_block(es__dtype type, const uint8_t *blk, vf *wq) {
    uint16_t d16;
    memcpy(&d16, blk, 2);
    const uint8_t *q = blk + 2;
#if KERN_NEON
    if (type == ES__DTYPE_Q8_0) {
        widen16(vld1q_s8((const int8_t *)(const void *)q), wq);
        widen16(vld1q_s8((const int8_t *)(const void *)q + 16), wq + 4);
    } else {
        const uint8x16_t b = vld1q_u8(q);
        const int8x16_t eight = vdupq_n_s8(8);
        widen16(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(15))), eight), wq);
        widen16(vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(b, 4)), eight), wq + 4);
    }
#else
    if (type == ES__DTYPE_Q8_0) {
        for (int v = 0; v < NV; v++) wq[v] = q8_to_vf(q + v * VL);
    } else {
        for (int v = 0; v < NV; v++) wq[v] = q4_to_vf(q + (v * VL) % 16, v * VL >= 16);
    }
#endif
    return f16_scalar(d16);
}

/* ---- K-quant super-blocks (lib/core/quant_k.c gives the layouts): 256 weights at a time.
 * VL quants ((a[i] >> sa) & ma) | (((b[i] >> sb) & mb) << 4), minus off, as floats; b NULL = no
 * high part. */
#define IS_KQ(t) ((t) == ES__DTYPE_Q4_K || (t) == ES__DTYPE_Q5_K || (t) == ES__DTYPE_Q6_K)
#define KQ_BYTES(t) ((t) == ES__DTYPE_Q4_K ? 144 : (t) == ES__DTYPE_Q5_K ? 176 : 210)
#if KERN_X86
INLINE vf quant_field(const uint8_t *a, int sa, int ma, const uint8_t *b, int sb, int mb, int off) {
    __m128i v = _mm_and_si128(_mm_srli_epi16(load_bytes(a), sa), _mm_set1_epi8((char)ma));
    if (b) v = _mm_or_si128(v, _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(load_bytes(b), sb), _mm_set1_epi8((char)mb)), 4));
    if (off) v = _mm_sub_epi8(v, _mm_set1_epi8((char)off));
    return widen_bytes(v);
}
#else
INLINE vf quant_field(const uint8_t *a, int sa, int ma, const uint8_t *b, int sb, int mb, int off) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = (float)((((a[i] >> sa) & ma) | (b ? ((b[i] >> sb) & mb) << 4 : 0)) - off);
    return v;
}
#endif

/* A super-block's scales as floats: Q4_K/Q5_K ds[j] = d sc_j and ndm[j] = -(dmin m_j) for the
 * eight sub-blocks of 32; Q6_K ds[i] = d scales[i] for the sixteen groups of 16. */
INLINE void kq_scales(es__dtype type, const uint8_t *x, float *ds, float *ndm) {
    uint16_t h[2];
    if (type == ES__DTYPE_Q6_K) {
        memcpy(h, x + 208, 2);
        const float d = f16_scalar(h[0]);
        for (int i = 0; i < 16; i++) ds[i] = d * (float)(int8_t)x[192 + i];
        return;
    }
    memcpy(h, x, 4);
    const float d = f16_scalar(h[0]), dmin = f16_scalar(h[1]);
    /* the 12 packed bytes, four per word: sub-blocks 0-3 keep scale and min in the low six bits of
     * bytes j and j + 4; 4-7 take a nibble of byte j + 4 and the top two bits of bytes j - 4 / j */
    uint32_t a, b, c;
    memcpy(&a, x + 4, 4);
    memcpy(&b, x + 8, 4);
    memcpy(&c, x + 12, 4);
    const uint32_t w[4] = {a & 0x3f3f3f3fu, (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u), b & 0x3f3f3f3fu,
                           ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)};
#if KERN_X86
    /* the same products, eight lanes at a time */
    const __m128i sm = _mm_loadu_si128((const __m128i *)(const void *)w);
    const __m256 sc8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
    const __m256 m8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
    _mm256_storeu_ps(ds, _mm256_mul_ps(_mm256_set1_ps(d), sc8));
    _mm256_storeu_ps(ndm, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), m8), _mm256_set1_ps(-0.0f)));
#else
    for (int j = 0; j < 8; j++) {
        ds[j] = d * (float)((w[j / 4] >> (8 * (j % 4))) & 255);
        ndm[j] = -(dmin * (float)((w[2 + j / 4] >> (8 * (j % 4))) & 255));
    }
#endif
}

/* Weights 32 j + VL v .. + VL - 1 of a super-block (j < 8, v < 32 / VL): (d sc) q - (dmin m) as one
 * fused multiply-add, or (d sc) q. Each product is exact, so the value is the scalar reference's
 * whatever the vector width or the fusing, in every path that calls this. */
INLINE vf kq_weights(es__dtype type, const uint8_t *x, const float *ds, const float *ndm, int j, int v) {
    if (type == ES__DTYPE_Q6_K) {
        const int hf = j / 4, g = j % 4;
        const vf q = quant_field(x + 64 * hf + 32 * (g & 1) + v * VL, g < 2 ? 0 : 4, 15, x + 128 + 32 * hf + v * VL,
                                 2 * g, 3, 32);
        return vsplat(ds[(32 * j + v * VL) / 16]) * q;
    }
    const bool five = type == ES__DTYPE_Q5_K;
    const vf q = quant_field(x + (five ? 48 : 16) + 32 * (j / 2) + v * VL, 4 * (j % 2), 15, five ? x + 16 + v * VL : NULL,
                             j, 1, 0);
    return vfma(vsplat(ds[j]), q, vsplat(ndm[j]));
}

/* One super-block to 256 floats (the panel path). */
INLINE void kq_block(es__dtype type, const uint8_t *x, float *out) {
    float ds[16], ndm[8];
    kq_scales(type, x, ds, ndm);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
#pragma GCC unroll 8
        for (int v = 0; v < 32 / VL; v++) storeu(out + 32 * j + v * VL, kq_weights(type, x, ds, ndm, j, v));
}

/* Keeps v in a register: without it gcc folds the loads of the activations (or of the weights)
 * into every multiply-add that uses them, reloading each vector NR (or T) times, and the loads,
 * not the multiply-adds, bound the loop. No instruction is emitted. */
INLINE void keep_in_reg(vf *v) {
#if KERN_X86
    __asm__("" : "+v"(*v));
#else
    (void)v;
#endif
}

/* Prefetches into L2 the n bytes at p + pf (pf 0: none), a line at a time. */
INLINE void pf_span(const uint8_t *p, size_t n, size_t pf) {
    if (pf)
        for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + pf + o, 0, 1);
}

#include "kern_lq.h"  /* Q2_K, Q3_K, IQ4_NL, IQ4_XS */
#include "kern_ksum.h" /* Q4_K, Q5_K, Q6_K */


/* ---- streaming (decode and small batches): acc = fma(w, x, acc) over VL-wide chunks in k order,
 * straight from the stored rows; a block's weights are d * q, which is exact in f32 (11-bit by
 * 8-bit significands), so this equals the panel path. */

/* NR rows (1 or 2) times T tokens at once: out[r * T_TILE + t]. One accumulator per element, so
 * each element's result is what it is alone; each weight vector is loaded (and converted) once
 * and used for all T tokens. pf: prefetch distance in bytes (pf_span), 0 for none. */
INLINE void rows_dot(es__dtype type, const uint8_t *const *row, const int NR, const float *x, int64_t ldx, const int T,
                     int64_t n_in, size_t pf, float *out) {
    vf acc[2][T_TILE];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < T; t++) acc[r][t] = vzero();
    if (IS_LQ(type) || IS_IQ4(type)) {
        lq_rows_dot(type, row, NR, x, ldx, T, n_in, pf, acc);
    } else if (IS_B32(type)) {
        const size_t bb = B32_BYTES(type);
        for (int64_t b = 0; b < n_in / QK; b++) {
#if KERN_NEON
#pragma GCC unroll 2
#endif
            for (int r = 0; r < NR; r++) {
                vf wq[NV];
                float m = 0.0f;
                const uint8_t *blk = row[r] + (size_t)b * bb;
                pf_span(blk, 1, pf);
                const vf dv = vsplat(IS_Q5(type) ? load_block_q5(type, blk, wq, &m) : load_block(type, blk, wq));
                const vf mv = vsplat(m);
                for (int v = 0; v < NV; v++) {
                    const vf wv = B32_MIN(type) ? vfma(wq[v], dv, mv) : wq[v] * dv; /* d q exact: as the panel's */
                    for (int t = 0; t < T; t++) acc[r][t] = vfma(wv, loadu(x + t * ldx + b * QK + v * VL), acc[r][t]);
                }
            }
        }
    } else {
        const size_t esz = type == ES__DTYPE_F32 ? 4 : 2;
        int64_t k = 0;
        for (; k + VL <= n_in; k += VL) {
            vf xv[T_TILE];
            for (int t = 0; t < T; t++) xv[t] = loadu(x + t * ldx + k);
            for (int t = 0; t < T; t++) keep_in_reg(&xv[t]);
            for (int r = 0; r < NR; r++) {
                pf_span(row[r] + (size_t)k * esz, 1, pf);
                vf wv = load_wf(type, row[r], k);
                keep_in_reg(&wv);
                for (int t = 0; t < T; t++) acc[r][t] = vfma(wv, xv[t], acc[r][t]);
            }
        }
        if (k < n_in) {
            vf xv[T_TILE];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) xv[t] = load_x_tail(x + t * ldx + k, n_in - k);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                const vf wv = load_wf_tail(type, row[r], k, n_in - k);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = vfma(wv, xv[t], acc[r][t]);
            }
        }
    }
    if (NR * T < 4) { /* a decode token's two sums: zero-padding them to VL cost it 4-6% in L2 */
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < T; t++) out[r * T_TILE + t] = hsum(acc[r][t]);
        return;
    }
    vf flat[2 * T_TILE];
    float res[2 * T_TILE + VL];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < T; t++) flat[r * T + t] = acc[r][t];
    hsum_many(flat, NR * T, res);
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < T; t++) out[r * T_TILE + t] = res[r * T + t];
}

/* Two rows for every token, in token tiles of at most T_TILE with the rows still in L1:
 * y[t * ldy + c[r]] for row r. The tiles are balanced (8 tokens as 4 + 4, not 6 + 2: each tile
 * pays its rows' loads and lane sums, and a short tile has few multiply-adds to hide them).
 * One specialisation per tile size keeps the accumulators in registers. */
INLINE void rows_tokens(es__dtype type, const uint8_t *const *row, const float *x, int64_t ldx, int64_t n_tok,
                        int64_t n_in, size_t pf0, float *y, int64_t ldy, const int64_t *c) {
    const int64_t n_tiles = (n_tok + T_TILE - 1) / T_TILE;
    for (int64_t i = 0, t0 = 0; i < n_tiles; i++) {
        /* tile i takes tokens [t0, t0 + nt): the first n_tok % n_tiles tiles one more */
        const int nt = (int)(n_tok / n_tiles + (i < n_tok % n_tiles));
        const float *xt = x + t0 * ldx;
        const size_t pf = i == 0 ? pf0 : 0; /* the first tile's pass brings the rows in */
        float out[2 * T_TILE] = {0}; /* gcc cannot tell that the cases past T_TILE never run */
        if (nt > T_TILE) __builtin_unreachable();
        switch (nt) {
        case 1: rows_dot(type, row, 2, xt, ldx, 1, n_in, pf, out); break;
        case 2: rows_dot(type, row, 2, xt, ldx, 2 <= T_TILE ? 2 : 1, n_in, pf, out); break;
        case 3: rows_dot(type, row, 2, xt, ldx, 3 <= T_TILE ? 3 : 1, n_in, pf, out); break;
        case 4: rows_dot(type, row, 2, xt, ldx, 4 <= T_TILE ? 4 : 1, n_in, pf, out); break;
        case 5: rows_dot(type, row, 2, xt, ldx, 5 <= T_TILE ? 5 : 1, n_in, pf, out); break;
        default: rows_dot(type, row, 2, xt, ldx, 6 <= T_TILE ? 6 : 1, n_in, pf, out); break;
        }
        for (int t = 0; t < nt; t++) {
            y[(t0 + t) * ldy + c[0]] = out[t];
            y[(t0 + t) * ldy + c[1]] = out[T_TILE + t];
        }
        t0 += nt;
    }
}

/* Rows [r0, r1) for n_tok tokens: row i together with row i + half, two sequential weight streams
 * far enough apart for the prefetchers to follow both (adjacent rows interleaved ran at half the
 * bandwidth of one stream: the register tiles below, on weights past the cache; so did four
 * streams, i + k half / 2, for 5 tokens on x86-64-v4); two chains of fused multiply-adds per token
 * hide each other's latency; software prefetches run PF_AHEAD ahead of both streams. An odd last
 * row goes one token at a time (the same arithmetic). */
#define DEF_ROWS(NAME, TYPE)                                                                           \
    static void NAME(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1, const float *x, \
                     int64_t ldx, int64_t n_tok, float *y, int64_t ldy) {                              \
        const int64_t half = (r1 - r0) / 2;                                                            \
        for (int64_t i = 0; i < half; i++) {                                                           \
            const uint8_t *rows[2] = {w + (size_t)(r0 + i) * row_bytes, w + (size_t)(r0 + half + i) * row_bytes}; \
            if (n_tok == 1) { /* decode: the plain loop, no token tiles */                             \
                float out[2 * T_TILE];                                                                 \
                rows_dot(TYPE, rows, 2, x, ldx, 1, n_in, 0, out);                                      \
                y[i] = out[0];                                                                         \
                y[half + i] = out[T_TILE];                                                             \
                continue;                                                                              \
            }                                                                                          \
            const int64_t c[2] = {i, half + i};                                                        \
            /* ahead within each stream only: past its end lie rows read already or not ours */        \
            const size_t pfd = IS_FLOATW(TYPE) ? PF_AHEAD_F : PF_AHEAD;                              \
            const size_t pf = (size_t)(i + 1) * row_bytes + pfd <= (size_t)half * row_bytes ? pfd : 0; \
            rows_tokens(TYPE, rows, x, ldx, n_tok, n_in, pf, y, ldy, c);                               \
        }                                                                                              \
        if ((r1 - r0) % 2) {                                                                           \
            const uint8_t *rows[1] = {w + (size_t)(r1 - 1) * row_bytes};                               \
            for (int64_t t = 0; t < n_tok; t++) {                                                      \
                float out[2 * T_TILE];                                                                 \
                rows_dot(TYPE, rows, 1, x + t * ldx, ldx, 1, n_in, 0, out);                            \
                y[t * ldy + (r1 - 1 - r0)] = out[0];                                                   \
            }                                                                                          \
        }                                                                                              \
    }
DEF_ROWS(rows_f32, ES__DTYPE_F32)
DEF_ROWS(rows_f16, ES__DTYPE_F16)
DEF_ROWS(rows_bf16, ES__DTYPE_BF16)
DEF_ROWS(rows_q8_0, ES__DTYPE_Q8_0)
DEF_ROWS(rows_q4_0, ES__DTYPE_Q4_0)
DEF_ROWS(rows_q4_1, ES__DTYPE_Q4_1)
DEF_ROWS(rows_q5_0, ES__DTYPE_Q5_0)
DEF_ROWS(rows_q5_1, ES__DTYPE_Q5_1)
DEF_ROWS(rows_q2_k, ES__DTYPE_Q2_K)
DEF_ROWS(rows_q3_k, ES__DTYPE_Q3_K)
DEF_ROWS(rows_iq4_nl, ES__DTYPE_IQ4_NL)
DEF_ROWS(rows_iq4_xs, ES__DTYPE_IQ4_XS)


/* ---- tiles (several tokens): R_TILE rows of f32 weights x T tokens, out[r * T_TILE + t]. Same
 * per-element arithmetic as rows_dot. */

INLINE void tile_f32(const float *const *wr, const float *x, int64_t ldx, int64_t n_in, const int T, float *out,
                     const uint8_t *const *pf, size_t pf_bytes) {
    vf acc[R_TILE][T_TILE];
    for (int r = 0; r < R_TILE; r++)
        for (int t = 0; t < T; t++) acc[r][t] = vzero();
    int64_t k = 0;
    for (; k + VL <= n_in; k += VL) {
        if (pf && (size_t)k * 4 < pf_bytes)
            for (int r = 0; r < R_TILE; r++) __builtin_prefetch(pf[r] + (size_t)k * 4, 0, 3);
        vf xv[T_TILE];
        for (int t = 0; t < T; t++) xv[t] = loadu(x + t * ldx + k);
        for (int r = 0; r < R_TILE; r++) {
            const vf w = loadu(wr[r] + k);
            for (int t = 0; t < T; t++) acc[r][t] = vfma(w, xv[t], acc[r][t]);
        }
    }
    if (k < n_in) {
        const int64_t m = n_in - k;
        vf xv[T_TILE];
        for (int t = 0; t < T; t++) xv[t] = load_x_tail(x + t * ldx + k, m);
        for (int r = 0; r < R_TILE; r++) {
            const vf w = load_x_tail(wr[r] + k, m);
            for (int t = 0; t < T; t++) acc[r][t] = vfma(w, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R_TILE; r++)
        for (int t = 0; t < T; t++) out[r * T_TILE + t] = hsum(acc[r][t]);
}

/* One specialisation per T: the compiler keeps each tile's accumulators in registers. */
static void tiles(const float *const *wr, const float *x, int64_t ldx, int64_t n_in, int T, float *out,
                  const uint8_t *const *pf, size_t pf_bytes) {
    /* callers pass at most T_TILE tokens; saying so spares the compiler (aarch64 gcc 12 warned of
     * out[] read uninitialised after the impossible cases) */
    if (T > T_TILE) __builtin_unreachable();
    switch (T) {
    case 1: tile_f32(wr, x, ldx, n_in, 1, out, pf, pf_bytes); break;
    case 2: tile_f32(wr, x, ldx, n_in, 2 <= T_TILE ? 2 : 1, out, pf, pf_bytes); break;
    case 3: tile_f32(wr, x, ldx, n_in, 3 <= T_TILE ? 3 : 1, out, pf, pf_bytes); break;
    case 4: tile_f32(wr, x, ldx, n_in, 4 <= T_TILE ? 4 : 1, out, pf, pf_bytes); break;
    case 5: tile_f32(wr, x, ldx, n_in, 5 <= T_TILE ? 5 : 1, out, pf, pf_bytes); break;
    default: tile_f32(wr, x, ldx, n_in, 6 <= T_TILE ? 6 : 1, out, pf, pf_bytes); break;
    }
}

static void k_to_f32(es__dtype type, const void *row, float *out, int64_t n);

/* Up to STREAM_TOK tokens stream the stored rows, two sequential streams per thread (DEF_ROWS).
 * More tokens convert R_TILE rows to f32 once (the panel) and reuse them for every token. */
static void k_matmul(es__dtype type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1,
                     const float *x, int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *panel) {
    const uint8_t *base = w;
    if (IS_KQ(type)) { /* their own arithmetic at every batch size (kern_ksum.h) */
        (type == ES__DTYPE_Q4_K ? rows_q4k : type == ES__DTYPE_Q5_K ? rows_q5k : rows_q6k)(base, row_bytes, n_in, r0, r1, x, ldx,
                                                                                        n_tok, y, ldy, panel);
        return;
    }
    if (n_tok <= STREAM_TOK) {
        switch (type) {
        case ES__DTYPE_F32: rows_f32(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_F16: rows_f16(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_BF16: rows_bf16(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q8_0: rows_q8_0(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q4_0: rows_q4_0(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q4_1: rows_q4_1(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q5_0: rows_q5_0(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q5_1: rows_q5_1(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q4_K:
        case ES__DTYPE_Q5_K:
        case ES__DTYPE_Q6_K: break; /* rows_ksum, above */
        case ES__DTYPE_Q2_K: rows_q2_k(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_Q3_K: rows_q3_k(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_IQ4_NL: rows_iq4_nl(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        case ES__DTYPE_IQ4_XS: rows_iq4_xs(base, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy); break;
        }
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = ES__MIN(n_tok, t0 + TOK_BLOCK);
        for (int64_t r = r0; r < r1; r += R_TILE) {
            const float *wr[R_TILE];
            const int nr = (int)ES__MIN(R_TILE, r1 - r);
            /* rows past r1 repeat the last row; their results are computed and dropped */
            for (int i = 0; i < R_TILE; i++) {
                const uint8_t *src = base + (size_t)ES__MIN(r + i, r1 - 1) * row_bytes;
                if (type == ES__DTYPE_F32) {
                    wr[i] = (const float *)(const void *)src;
                } else {
                    if (i < nr) k_to_f32(type, src, panel + i * n_in, n_in);
                    wr[i] = panel + ES__MIN(i, nr - 1) * n_in;
                }
            }
            /* the next tile's raw rows, fetched while this one computes (the first token tile's
             * pass), so the weights stream in while the arithmetic runs */
            const uint8_t *pf[R_TILE];
            for (int i = 0; i < R_TILE; i++) pf[i] = base + (size_t)ES__MIN(r + PF_TILES * R_TILE + i, r1 - 1) * row_bytes;
            const bool fetch = r + PF_TILES * R_TILE < r1;
            for (int64_t t = t0; t < t1; t += T_TILE) {
                const int nt = (int)ES__MIN(T_TILE, t1 - t);
                float out[R_TILE * T_TILE];
                tiles(wr, x + t * ldx, ldx, n_in, nt, out, fetch && t == t0 ? pf : NULL, row_bytes);
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nt; j++) y[(t + j) * ldy + (r - r0 + i)] = out[i * T_TILE + j];
            }
        }
    }
}

/* exp(x) lane by lane: Cody-Waite reduction by ln 2 and a degree-6 polynomial (Cephes' expf
 * coefficients), about 2 ulp. Each lane's result depends on that lane's input only. */
INLINE vf vexp(vf x) {
    const vf hi_lim = vsplat(88.3762626647949f), lo_lim = vsplat(-87.3365447504f);
    const vi over = x > hi_lim, under = x < lo_lim;
    vf xc = x;
    xc = (vf)(((vi)xc & ~over) | ((vi)hi_lim & over));
    xc = (vf)(((vi)xc & ~under) | ((vi)lo_lim & under));
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick (|x / ln 2| < 2^22) */
    const vf magic = vsplat(12582912.0f);
    const vf n = (xc * vsplat(1.44269504088896341f) + magic) - magic;
    vf r = vfma(n, vsplat(-0.693359375f), xc);
    r = vfma(n, vsplat(2.12194440e-4f), r);
    vf p = vsplat(1.9875691500e-4f);
    p = vfma(p, r, vsplat(1.3981999507e-3f));
    p = vfma(p, r, vsplat(8.3334519073e-3f));
    p = vfma(p, r, vsplat(4.1665795894e-2f));
    p = vfma(p, r, vsplat(1.6666665459e-1f));
    p = vfma(p, r, vsplat(5.0000001201e-1f));
    vf y = vfma(p * r, r, r) + vsplat(1.0f);
    const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    y = y * (vf)e;
    const vf inf = vsplat(__builtin_inff());
    y = (vf)(((vi)y & ~over) | ((vi)inf & over));
    y = (vf)((vi)y & ~under);
    return y;
}

static void k_silu_mul(const float *g, const float *u, int64_t n, float *out) {
    int64_t i = 0;
    const vf one = vsplat(1.0f);
    for (; i + VL <= n; i += VL) {
        const vf gv = loadu(g + i);
        storeu(out + i, gv / (one + vexp(-gv)) * loadu(u + i));
    }
    if (i < n) {
        float buf[VL];
        const vf gv = load_x_tail(g + i, n - i);
        storeu(buf, gv / (one + vexp(-gv)) * load_x_tail(u + i, n - i));
        memcpy(out + i, buf, sizeof(float) * (size_t)(n - i));
    }
}

/* The keys one query attends to, in order: the committed slots 0..n_past-1 of a kv head's cache
 * (kb, vb: (n_ctx, hd)), the visible batch slots n_past + vis[i] for i < n_main - n_past, then
 * rows kx + i ldx (vx alike) from outside the cache (a speculative stream's own keys). */
typedef struct keyset {
    const float *kb, *vb, *kx, *vx;
    int64_t hd, ldx;
    int32_t n_past, n_main;
    const int32_t *vis;
} keyset;

/* The key and value rows of keys j0..j1-1 (at most a tile), in three straight runs: a branch per
 * key cost plain attention 5-10%. */
INLINE void tile_rows(const keyset *s, int32_t j0, int32_t j1, const float **kr, const float **vr) {
    int32_t j = j0;
    for (; j < j1 && j < s->n_past; j++) kr[j - j0] = s->kb + (int64_t)j * s->hd, vr[j - j0] = s->vb + (int64_t)j * s->hd;
    for (; j < j1 && j < s->n_main; j++) {
        const int64_t slot = (int64_t)s->n_past + s->vis[j - s->n_past];
        kr[j - j0] = s->kb + slot * s->hd, vr[j - j0] = s->vb + slot * s->hd;
    }
    for (; j < j1; j++) kr[j - j0] = s->kx + (int64_t)(j - s->n_main) * s->ldx, vr[j - j0] = s->vx + (int64_t)(j - s->n_main) * s->ldx;
}

/* out[d0 .. d0 + NC VL) = sum_j p_j v_j[...] over the tile's m keys in order. */
INLINE void pv_chunks(const float *const *vrow, int32_t m, const float *p, int64_t d0, const int NC, float *out) {
    vf acc[4];
    for (int c = 0; c < NC; c++) acc[c] = vzero();
    for (int32_t j = 0; j < m; j++) {
        const float *vr = vrow[j] + d0;
        const vf pv = vsplat(p[j]);
        for (int c = 0; c < NC; c++) acc[c] = vfma(pv, loadu(vr + c * VL), acc[c]);
    }
    for (int c = 0; c < NC; c++) storeu(out + d0 + c * VL, acc[c]);
}

/* The partial of one tile, keys j0..j1-1 (j1 - j0 <= ES__ATTN_TILE, j0 a multiple of it): ml[0] = m,
 * the largest score; ml[1] = l = sum_j exp(s_j - m); o[hd] = sum_j exp(s_j - m) v_j, keys in order.
 * Plain and speculative attention both build every output from these partials and
 * attend_merge, so the same keys give the same bits whichever order the tiles were computed in. */
INLINE void attend_tile(const float *q, const keyset *ks, int32_t j0, int32_t j1, float scale, float softcap, float *o,
                        float *ml) {
    const int64_t hd = ks->hd;
    float sc[ES__ATTN_TILE];
    const float *krow[ES__ATTN_TILE], *vrow[ES__ATTN_TILE];
    const int32_t m = j1 - j0;
    tile_rows(ks, j0, j1, krow, vrow);
    int32_t s0 = 0;
#if VL >= 8
    /* VL keys at a time: their lane sums finish together (hsum_keys), with the same additions */
    for (; s0 + VL <= m; s0 += VL) {
        const float *const *kr = krow + s0;
        vf acc[VL];
        for (int g = 0; g < VL; g++) acc[g] = vzero();
        int64_t k = 0;
        for (; k + VL <= hd; k += VL) {
            const vf qv = loadu(q + k);
            for (int g = 0; g < VL; g++) acc[g] = vfma(qv, loadu(kr[g] + k), acc[g]);
        }
        if (k < hd) {
            const vf qv = load_x_tail(q + k, hd - k);
            for (int g = 0; g < VL; g++) acc[g] = vfma(qv, load_x_tail(kr[g] + k, hd - k), acc[g]);
        }
        storeu(sc + s0, hsum_keys(acc) * vsplat(scale));
    }
#endif
    for (int32_t s = s0; s < m; s++) {
        const float *kr = krow[s];
        vf acc = vzero();
        int64_t k = 0;
        for (; k + VL <= hd; k += VL) acc = vfma(loadu(q + k), loadu(kr + k), acc);
        if (k < hd) acc = vfma(load_x_tail(q + k, hd - k), load_x_tail(kr + k, hd - k), acc);
        sc[s] = hsum(acc) * scale;
    }
    if (softcap > 0.0f) /* gemma2's soft-capping: softcap tanh(s / softcap) */
        for (int32_t k = 0; k < m; k++) sc[k] = softcap * tanhf(sc[k] / softcap);
    /* the largest score, lanes first: max is exact, so the order changes no bit, and it spares
     * a compare-and-select chain through every key */
    vf mv = vsplat(-__builtin_inff());
    int32_t s = 0;
    for (; s + VL <= m; s += VL) {
        const vf x = loadu(sc + s);
        const vi gt = x > mv;
        mv = (vf)(((vi)x & gt) | ((vi)mv & ~gt));
    }
    float mx = -__builtin_inff(), lanes[VL];
    storeu(lanes, mv);
    for (int g = 0; g < VL; g++) mx = lanes[g] > mx ? lanes[g] : mx;
    for (; s < m; s++) mx = sc[s] > mx ? sc[s] : mx;
    const vf mxv = vsplat(mx);
    vf sumv = vzero();
    s = 0;
    for (; s + VL <= m; s += VL) {
        const vf e = vexp(loadu(sc + s) - mxv);
        storeu(sc + s, e);
        sumv = sumv + e;
    }
    float sum = hsum(sumv);
    for (; s < m; s++) {
        float buf[VL] = {sc[s] - mx};
        sc[s] = vexp(loadu(buf))[0];
        sum += sc[s];
    }
    /* several chunks of VL output dims at a time so their accumulation chains overlap */
    int64_t d0 = 0;
    for (; d0 + 4 * VL <= hd; d0 += 4 * VL) pv_chunks(vrow, m, sc, d0, 4, o);
    for (; d0 + VL <= hd; d0 += VL) pv_chunks(vrow, m, sc, d0, 1, o);
    if (d0 < hd) {
        const int64_t w = hd - d0;
        vf acc = vzero();
        for (int32_t j = 0; j < m; j++) acc = vfma(vsplat(sc[j]), load_x_tail(vrow[j] + d0, w), acc);
        float buf[VL];
        storeu(buf, acc);
        memcpy(o + d0, buf, sizeof(float) * (size_t)w);
    }
    ml[0] = mx;
    ml[1] = sum;
}

INLINE float sexp(float x) {
    float buf[VL] = {x};
    return vexp(loadu(buf))[0];
}

/* Online softmax (flash decoding's combine): folds the tile partial (ot, mlt) into the running
 * (o, ml); first: the running state is empty. exp(0) is 1 exactly, so a tile that does not raise
 * the maximum leaves the running values' scale untouched. */
INLINE void attend_merge(float *o, float *ml, const float *ot, const float *mlt, int64_t hd, bool first) {
    if (first) {
        memcpy(o, ot, sizeof(float) * (size_t)hd);
        ml[0] = mlt[0];
        ml[1] = mlt[1];
        return;
    }
    const float mn = ml[0] > mlt[0] ? ml[0] : mlt[0];
    /* the side that holds the maximum is scaled by exp(0) = 1: skipping that exp and product
     * changes no bit (x * 1 and fma(x, 1, y) are exact), and it is the common case */
    const bool keep = mn == ml[0];
    const float a = keep ? 1.0f : sexp(ml[0] - mn), b = mn == mlt[0] ? 1.0f : sexp(mlt[0] - mn);
    const vf av = vsplat(a), bv = vsplat(b);
    int64_t d = 0;
    if (keep)
        for (; d + VL <= hd; d += VL) storeu(o + d, vfma(loadu(ot + d), bv, loadu(o + d)));
    else
        for (; d + VL <= hd; d += VL) storeu(o + d, vfma(loadu(ot + d), bv, loadu(o + d) * av));
    if (d < hd) {
        float buf[VL];
        storeu(buf, vfma(load_x_tail(ot + d, hd - d), bv, load_x_tail(o + d, hd - d) * av));
        memcpy(o + d, buf, sizeof(float) * (size_t)(hd - d));
    }
    ml[0] = mn;
    ml[1] = ml[1] * a + mlt[1] * b;
}

/* out = o / l, the state's normalised output. */
static void attend_finish(float *out, const float *o, const float *ml, int64_t hd) {
    const vf inv = vsplat(1.0f / ml[1]);
    int64_t d = 0;
    for (; d + VL <= hd; d += VL) storeu(out + d, loadu(o + d) * inv);
    if (d < hd) {
        float buf[VL];
        storeu(buf, load_x_tail(o + d, hd - d) * inv);
        memcpy(out + d, buf, sizeof(float) * (size_t)(hd - d));
    }
}

/* Attention of queries over their keys of one kv head, each over m = n_past + n_vis + n_x keys:
 * slots 0..n_past-1 of kb, vb ((n_ctx, hd)), then n_past + vis[i], then the rows kx + i ldx.
 * Tiles of ES__ATTN_TILE keys aligned to positions, each reduced on its own (attend_tile) and
 * folded in position order (attend_merge): flash decoding on one core, the order speculative
 * attention reproduces. Tile by tile across the queries, so queries that share keys read each
 * tile once from memory; each query's own arithmetic is the same whatever the others. */
static void k_attend_multi(int nq, const es__attn_q *qs, int64_t hd, float scale, float softcap) {
    float ot[ES__MAX_HEAD_DIM], mlt[2], ml[ES__ATTN_MULTI][2];
    int32_t m_max = 0;
    for (int i = 0; i < nq; i++) {
        m_max = ES__MAX(m_max, qs[i].n_past + qs[i].n_vis + qs[i].n_x);
        ml[i][0] = ml[i][1] = 0.0f;
    }
    for (int32_t j0 = 0; j0 < m_max; j0 += ES__ATTN_TILE)
        for (int i = 0; i < nq; i++) {
            const es__attn_q *a = &qs[i];
            const int32_t m = a->n_past + a->n_vis + a->n_x;
            if (j0 >= m) continue;
            const keyset ks = {a->kb, a->vb, a->kx, a->vx, hd, a->ldx, a->n_past, a->n_past + a->n_vis, a->vis};
            attend_tile(a->q, &ks, j0, ES__MIN(m, j0 + ES__ATTN_TILE), scale, softcap, ot, mlt);
            attend_merge(a->out, ml[i], ot, mlt, hd, j0 == 0);
        }
    for (int i = 0; i < nq; i++) attend_finish(qs[i].out, qs[i].out, ml[i], hd);
}

static void k_attend(const float *q, const float *kb, const float *vb, int64_t hd, int32_t n_past, const int32_t *vis,
                     int32_t n_vis, const float *kx, const float *vx, int64_t ldx, int32_t n_x, float scale,
                     float softcap, float *out) {
    const es__attn_q one = {q, kb, vb, vis, n_past, n_vis, kx, vx, ldx, n_x, out};
    k_attend_multi(1, &one, hd, scale, softcap);
}

/* Speculative attention (ALSpec Algorithm 3 on one core): keys 0..n-1 in slots 0..n-1; the
 * speculation keys [0, s1) and [s2, n) (s1 <= s2, both multiples of ES__ATTN_TILE) are reduced
 * first into their own softmax (spec), then every tile is folded in position order as k_attend
 * folds them, the speculation's tiles taken from part instead of being computed again.
 * part: ((s1 + n - s2) / ES__ATTN_TILE + 1) * (hd + 2) floats. */
static void k_attend_spec(const float *q, const float *kb, const float *vb, int64_t hd, int32_t n, int32_t s1,
                          int32_t s2, float scale, int passes, float *part, float *spec, float *out) {
    const int64_t pw = hd + 2;
    const keyset ks = {kb, vb, NULL, NULL, hd, 0, n, n, NULL};
    float ml[2] = {0.0f, 0.0f}, ot[ES__MAX_HEAD_DIM], mlt[2];
    int32_t i = 0;
    if (passes & ES__SPEC_PASS_SPEC) {
        for (int32_t j0 = 0; j0 < n; j0 += ES__ATTN_TILE) {
            if (j0 >= s1 && j0 < s2) continue;
            float *pt = part + (int64_t)i * pw;
            attend_tile(q, &ks, j0, ES__MIN(n, j0 + ES__ATTN_TILE), scale, 0.0f, pt + 2, pt);
            attend_merge(spec, ml, pt + 2, pt, hd, i++ == 0);
        }
        attend_finish(spec, spec, ml, hd);
    }
    if (!(passes & ES__SPEC_PASS_EXACT)) return;
    i = 0;
    for (int32_t j0 = 0; j0 < n; j0 += ES__ATTN_TILE) {
        if (j0 >= s1 && j0 < s2) {
            attend_tile(q, &ks, j0, j0 + ES__ATTN_TILE, scale, 0.0f, ot, mlt);
            attend_merge(out, ml, ot, mlt, hd, j0 == 0);
        } else {
            const float *pt = part + (int64_t)i++ * pw;
            attend_merge(out, ml, pt + 2, pt, hd, j0 == 0);
        }
    }
    attend_finish(out, out, ml, hd);
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
    if (IS_LQ(type) || IS_IQ4(type)) {
        lq_to_f32(type, p, out, n);
        return;
    }
    if (IS_KQ(type)) {
        for (int64_t b = 0; b < n / ES__QK_K; b++) kq_block(type, p + (size_t)b * KQ_BYTES(type), out + b * ES__QK_K);
        return;
    }
    if (IS_B32(type)) {
        const size_t bb = B32_BYTES(type);
        for (int64_t b = 0; b < n / QK; b++) {
            vf wq[NV];
            float m = 0.0f;
            const uint8_t *blk = p + (size_t)b * bb;
            const vf dv = vsplat(IS_Q5(type) ? load_block_q5(type, blk, wq, &m) : load_block(type, blk, wq));
            const vf mv = vsplat(m);
            for (int v = 0; v < NV; v++) storeu(out + b * QK + v * VL, B32_MIN(type) ? vfma(wq[v], dv, mv) : wq[v] * dv);
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
    static const es__kern k = {KERN_NAME, ES__MAX(R_TILE, KS_PANEL_ROWS), k_matmul, k_dot, k_axpy, k_to_f32, k_silu_mul, k_attend, k_attend_multi, k_attend_spec};
    return &k;
}
