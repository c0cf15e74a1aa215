/* kern_lq.h: the CPU loaders of the low-bit types, Q2_K and Q3_K (256-element super-blocks of
 * sixteen 16-element sub-blocks), IQ4_NL (32-element blocks on a 16-value grid) and IQ4_XS (eight
 * such blocks under one f16 scale with 6-bit integer scales), included by
 * kern_impl.c once per level (it supplies vf, VL, INLINE, vfma, load_bytes, widen_bytes...).
 * Layouts: lib/core/quant_k.c, lib/core/quant_iq4.c. Every weight is the scalar dequantiser's
 * value bit for bit: Q3_K's (d (s - 32)) q, IQ4_NL's d v and IQ4_XS's (d (ls - 32)) v are exact
 * products, Q2_K's (d sc) q - dmin m one rounding of two exact products (a fused multiply-add or
 * not), so the one-token path and the panel path agree and results stay batch-invariant. */
#ifndef ES_CPU_KERN_LQ_H
#define ES_CPU_KERN_LQ_H

#define IS_LQ(t) ((t) == ES__DTYPE_Q2_K || (t) == ES__DTYPE_Q3_K)
#define LQ_BYTES(t) ((t) == ES__DTYPE_Q2_K ? 84 : 110)
#define IS_IQ4(t) ((t) == ES__DTYPE_IQ4_NL || (t) == ES__DTYPE_IQ4_XS)

/* VL 2-bit fields (a[i] >> sa) & 3, plus 4 where bit sb of b[i] is set (b NULL: none), minus off. */
#if KERN_X86
INLINE vf lq_field(const uint8_t *a, int sa, const uint8_t *b, int sb, int off) {
    __m128i v = _mm_and_si128(_mm_srli_epi16(load_bytes(a), sa), _mm_set1_epi8(3));
    if (b) v = _mm_or_si128(v, _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(load_bytes(b), sb), _mm_set1_epi8(1)), 2));
    if (off) v = _mm_sub_epi8(v, _mm_set1_epi8((char)off));
    return widen_bytes(v);
}
/* VL grid values of nibbles (the high ones with high): one byte shuffle looks all of them up. */
INLINE vf iq4_to_vf(const uint8_t *p, int high) {
    __m128i b = load_bytes(p);
    if (high) b = _mm_srli_epi16(b, 4);
    const __m128i grid = _mm_loadu_si128((const __m128i *)(const void *)es__iq4nl_values);
    return widen_bytes(_mm_shuffle_epi8(grid, _mm_and_si128(b, _mm_set1_epi8(15))));
}
#else
INLINE vf lq_field(const uint8_t *a, int sa, const uint8_t *b, int sb, int off) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = (float)(((a[i] >> sa) & 3) + (b ? 4 * ((b[i] >> sb) & 1) : 0) - off);
    return v;
}
INLINE vf iq4_to_vf(const uint8_t *p, int high) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = (float)es__iq4nl_values[high ? p[i] >> 4 : p[i] & 15];
    return v;
}
#endif

/* A super-block's sixteen sub-block scales: Q2_K ds = d sc, ndm = -(dmin m); Q3_K ds = d (s - 32). */
INLINE void lq_scales(es__dtype type, const uint8_t *x, float *ds, float *ndm) {
    uint16_t h[2];
#if KERN_NEON
    /* sixteen scales per vector, not one a step: clang's one-token Q3_K call spent an eighth of
     * its instructions in the scalar loop below */
    vf f[4];
    if (type == ES__DTYPE_Q2_K) {
        memcpy(h, x + 80, 4);
        const uint8x16_t sm = vld1q_u8(x);
        widen16(vreinterpretq_s8_u8(vandq_u8(sm, vdupq_n_u8(15))), f);
        for (int k = 0; k < 4; k++) vst1q_f32(ds + 4 * k, vmulq_n_f32((float32x4_t)f[k], f16_scalar(h[0])));
        widen16(vreinterpretq_s8_u8(vshrq_n_u8(sm, 4)), f);
        for (int k = 0; k < 4; k++)
            vst1q_f32(ndm + 4 * k, vnegq_f32(vmulq_n_f32((float32x4_t)f[k], f16_scalar(h[1]))));
        return;
    }
    memcpy(h, x + 108, 2);
    uint32_t hw; /* the high bits' bytes s[8..11] */
    memcpy(&hw, x + 104, 4);
    const uint8x8_t s8 = vld1_u8(x + 96);
    const uint8x16_t lo = vcombine_u8(vand_u8(s8, vdup_n_u8(15)), vshr_n_u8(s8, 4));
    /* scale i takes its high bits from s[8 + i % 4], shifted down 2 (i / 4) */
    const uint8x16_t pick = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    const int8x16_t shift = {0, 0, 0, 0, -2, -2, -2, -2, -4, -4, -4, -4, -6, -6, -6, -6};
    const uint8x16_t hb = vqtbl1q_u8(vreinterpretq_u8_u32(vdupq_n_u32(hw)), pick);
    const uint8x16_t hi = vandq_u8(vshlq_u8(hb, shift), vdupq_n_u8(3));
    widen16(vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32)), f);
    for (int k = 0; k < 4; k++) vst1q_f32(ds + 4 * k, vmulq_n_f32((float32x4_t)f[k], f16_scalar(h[0])));
    (void)ndm;
#else
    if (type == ES__DTYPE_Q2_K) {
        memcpy(h, x + 80, 4);
        const float d = f16_scalar(h[0]), dmin = f16_scalar(h[1]);
        for (int i = 0; i < 16; i++) {
            ds[i] = d * (float)(x[i] & 15);
            ndm[i] = -(dmin * (float)(x[i] >> 4));
        }
        return;
    }
    memcpy(h, x + 108, 2);
    const float d = f16_scalar(h[0]);
    const uint8_t *s = x + 96;
    for (int i = 0; i < 16; i++) {
        const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
        ds[i] = d * (float)((lo | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32);
    }
#endif
}

/* Weights 32 j + VL v .. + VL - 1 of a super-block (j < 8, v < 32 / VL; VL divides 16, so they
 * share one sub-block). Element 128 h + 32 g + l keeps its two low bits at bit 2g of
 * qs[32 h + l] and Q3_K's third bit at bit 4h + g of hmask[l]. */
INLINE vf lq_weights(es__dtype type, const uint8_t *x, const float *ds, const float *ndm, int j, int v) {
    const int sub = (32 * j + v * VL) / 16;
    if (type == ES__DTYPE_Q2_K)
        return vfma(vsplat(ds[sub]), lq_field(x + 16 + 32 * (j / 4) + v * VL, 2 * (j % 4), NULL, 0, 0), vsplat(ndm[sub]));
    return vsplat(ds[sub]) * lq_field(x + 32 + 32 * (j / 4) + v * VL, 2 * (j % 4), x + v * VL, j, 4);
}

#if KERN_NEON
/* Q2_K's or Q3_K's weights 32 j .. 32 j + 31 (sub-blocks 2 j and 2 j + 1) as NV vectors: lq_weights'
 * values, sixteen fields at a time (one lane at a time, as lq_field goes, Q2_K took 5.2 times and
 * Q3_K 8.6 times Q4_0's instructions per one-token call). */
INLINE void lq_block(es__dtype type, const uint8_t *x, const float *ds, const float *ndm, int j, vf *w) {
    const uint8_t *qs = x + (type == ES__DTYPE_Q2_K ? 16 : 32) + 32 * (j / 4);
#pragma GCC unroll 2 /* clang left this loop rolled: 112k -> 90k for a one-token Q2_K call */
    for (int h = 0; h < 2; h++) {
        uint8x16_t q = vandq_u8(vshlq_u8(vld1q_u8(qs + 16 * h), vdupq_n_s8((int8_t)(-2 * (j % 4)))), vdupq_n_u8(3));
        if (type == ES__DTYPE_Q3_K) { /* the third bit from hmask, then the offset 4 */
            const uint8x16_t hm = vandq_u8(vshlq_u8(vld1q_u8(x + 16 * h), vdupq_n_s8((int8_t)-j)), vdupq_n_u8(1));
            q = vsubq_u8(vorrq_u8(q, vshlq_n_u8(hm, 2)), vdupq_n_u8(4));
        }
        vf f[4];
        widen16(vreinterpretq_s8_u8(q), f);
        const int sub = 2 * j + h;
        for (int k = 0; k < 4; k++)
            w[4 * h + k] =
                type == ES__DTYPE_Q2_K ? vfma(vsplat(ds[sub]), f[k], vsplat(ndm[sub])) : vsplat(ds[sub]) * f[k];
    }
}
#endif

/* The scales of blocks b0 .. b0 + IQ4_RUN(type) - 1 of an IQ4_NL or IQ4_XS row (IQ4_XS: a
 * super-block's eight d (ls - 32), as es__iq4_xs_scale; on x86 and NEON unpacked in vector lanes.
 * Unpacked one sub-block at a time, a 134m IQ4_XS model decoded at 276 tokens/s against 320-333
 * (2 threads). */
#define IQ4_RUN(t) ((t) == ES__DTYPE_IQ4_NL ? 1 : 8)
INLINE void iq4_scales(es__dtype type, const uint8_t *row, int64_t b0, float *s) {
    uint16_t d16;
    if (type == ES__DTYPE_IQ4_NL) {
        memcpy(&d16, row + (size_t)b0 * 18, 2);
        s[0] = f16_scalar(d16);
        return;
    }
    const uint8_t *sb = row + (size_t)(b0 / 8) * ES__IQ4XS_BYTES;
    memcpy(&d16, sb, 2);
#if KERN_X86
    uint32_t hl[2]; /* scales_h in the low half of the first word; scales_l the second */
    memcpy(hl, sb, 8);
    const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)hl[1]), _mm256_slli_epi32(j, 2));
    const __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32((int)(hl[0] >> 16)), _mm256_add_epi32(j, j));
    const __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(15)),
                                       _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
    _mm256_storeu_ps(s, _mm256_mul_ps(_mm256_set1_ps(f16_scalar(d16)), v));
#elif KERN_NEON
    uint32_t hl[2];
    memcpy(hl, sb, 8);
    const float d = f16_scalar(d16);
    const int32x4_t lo_shift[2] = {{0, -4, -8, -12}, {-16, -20, -24, -28}};
    const int32x4_t hi_shift[2] = {{0, -2, -4, -6}, {-8, -10, -12, -14}};
    for (int k = 0; k < 2; k++) { /* sub-blocks 4k .. 4k + 3 */
        const uint32x4_t lo = vandq_u32(vshlq_u32(vdupq_n_u32(hl[1]), lo_shift[k]), vdupq_n_u32(15));
        const uint32x4_t hi = vandq_u32(vshlq_u32(vdupq_n_u32(hl[0] >> 16), hi_shift[k]), vdupq_n_u32(3));
        const int32x4_t ls = vreinterpretq_s32_u32(vorrq_u32(lo, vshlq_n_u32(hi, 4)));
        vst1q_f32(s + 4 * k, vmulq_n_f32(vcvtq_f32_s32(vsubq_s32(ls, vdupq_n_s32(32))), d));
    }
#else
    for (int j = 0; j < 8; j++) s[j] = es__iq4_xs_scale(sb, j);
#endif
}

/* The nibbles of block b0 + j (j < IQ4_RUN(type)) of an IQ4_NL or IQ4_XS row. */
INLINE const uint8_t *iq4_nibbles(es__dtype type, const uint8_t *row, int64_t b0, int j) {
    return type == ES__DTYPE_IQ4_NL ? row + (size_t)b0 * 18 + 2 : row + (size_t)(b0 / 8) * ES__IQ4XS_BYTES + 8 + 16 * j;
}

/* A block's NV vectors of grid values from its 16 bytes of nibbles. NEON looks all 32 up with two
 * TBLs and widens them in registers (one lane at a time, as the portable loop goes, they cost
 * IQ4_NL and IQ4_XS six times Q4_0's instructions per call). */
INLINE void iq4_grid(const uint8_t *qs, vf *wq) {
#if KERN_NEON
    const int8x16_t grid = vld1q_s8(es__iq4nl_values);
    const uint8x16_t b = vld1q_u8(qs);
    widen16(vqtbl1q_s8(grid, vandq_u8(b, vdupq_n_u8(15))), wq);
    widen16(vqtbl1q_s8(grid, vshrq_n_u8(b, 4)), wq + 4);
#else
    for (int v = 0; v < NV; v++) wq[v] = iq4_to_vf(qs + (v * VL) % 16, v * VL >= 16);
#endif
}

/* rows_dot's loop for these types: acc[r][t] += the NR rows' weights times token t's x, in k order
 * (pf: rows_dot's prefetch distance). */
INLINE void lq_rows_dot(es__dtype type, const uint8_t *const *row, const int NR, const float *x, int64_t ldx,
                        const int T, int64_t n_in, size_t pf, vf (*acc)[T_TILE]) {
    if (IS_IQ4(type)) {
        const size_t run_bytes = type == ES__DTYPE_IQ4_NL ? 18 : ES__IQ4XS_BYTES;
        for (int64_t b0 = 0; b0 < n_in / QK; b0 += IQ4_RUN(type)) {
            float sc[2][8];
            for (int r = 0; r < NR; r++) {
                pf_span(row[r] + (size_t)(b0 / IQ4_RUN(type)) * run_bytes, run_bytes, pf);
                iq4_scales(type, row[r], b0, sc[r]);
            }
            for (int j = 0; j < IQ4_RUN(type); j++)
#if KERN_NEON
#pragma GCC unroll 2
#endif
                for (int r = 0; r < NR; r++) {
                    vf wq[NV];
                    iq4_grid(iq4_nibbles(type, row[r], b0, j), wq);
                    const vf dv = vsplat(sc[r][j]);
                    for (int v = 0; v < NV; v++) {
                        const vf wv = wq[v] * dv;
                        for (int t = 0; t < T; t++)
                            acc[r][t] = vfma(wv, loadu(x + t * ldx + (b0 + j) * QK + v * VL), acc[r][t]);
                    }
                }
        }
        return;
    }
    const size_t bb = LQ_BYTES(type);
    for (int64_t b = 0; b < n_in / ES__QK_K; b++) {
        float ds[2][16], ndm[2][16];
        for (int r = 0; r < NR; r++) {
            pf_span(row[r] + (size_t)b * bb, bb, pf);
            lq_scales(type, row[r] + (size_t)b * bb, ds[r], ndm[r]);
        }
#define LQ_ROWS_BODY                                                                               \
    for (int v = 0; v < 32 / VL; v++) {                                                            \
        vf xv[T_TILE];                                                                             \
        for (int t = 0; t < T; t++) xv[t] = loadu(x + t * ldx + b * ES__QK_K + 32 * j + v * VL);   \
        for (int r = 0; r < NR; r++) {                                                             \
            const vf wv = lq_weights(type, row[r] + (size_t)b * bb, ds[r], ndm[r], j, v);          \
            for (int t = 0; t < T; t++) acc[r][t] = vfma(wv, xv[t], acc[r][t]);                    \
        }                                                                                          \
    }
        /* fully unrolled every shift is a constant, but the larger body can spill: measured
         * (bench_kquant, in L3) unrolling helped Q3_K on x86-64-v4 (1.23 -> 1.08 ms) and Q2_K on
         * x86-64-v3 (1.46 -> 1.25 ms) and hurt the other two pairs */
#if KERN_NEON
        /* unrolled, every shift is a constant: gcc's one-token Q2_K 75k -> 65k guest instructions
         * (bench_cpu_kern 512 x 64); clang's six-token tiles grew 23% that way */
#if !defined(__clang__)
#pragma GCC unroll 8
#endif
        for (int j = 0; j < 8; j++) {
            vf wv[2][NV];
#if defined(__clang__) /* it left the two rows' loop rolled, their weights in memory: Q3_K 122k -> 104k */
#pragma unroll
#endif
            for (int r = 0; r < NR; r++) lq_block(type, row[r] + (size_t)b * bb, ds[r], ndm[r], j, wv[r]);
            for (int v = 0; v < NV; v++) {
                vf xv[T_TILE];
                for (int t = 0; t < T; t++) xv[t] = loadu(x + t * ldx + b * ES__QK_K + 32 * j + v * VL);
                for (int r = 0; r < NR; r++)
                    for (int t = 0; t < T; t++) acc[r][t] = vfma(wv[r][v], xv[t], acc[r][t]);
            }
        }
#else
        if (VL == 16 ? type == ES__DTYPE_Q3_K : type == ES__DTYPE_Q2_K) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) LQ_ROWS_BODY
        } else {
            for (int j = 0; j < 8; j++) LQ_ROWS_BODY
        }
#endif
#undef LQ_ROWS_BODY
    }
}

/* One row of n elements to f32 (the panel path). */
INLINE void lq_to_f32(es__dtype type, const uint8_t *p, float *out, int64_t n) {
    if (IS_IQ4(type)) {
        float sc[8];
        for (int64_t b = 0; b < n / QK; b++) {
            vf wq[NV];
            if (b % IQ4_RUN(type) == 0) iq4_scales(type, p, b, sc);
            iq4_grid(iq4_nibbles(type, p, b - b % IQ4_RUN(type), (int)(b % IQ4_RUN(type))), wq);
            const vf dv = vsplat(sc[b % IQ4_RUN(type)]);
            for (int v = 0; v < NV; v++) storeu(out + b * QK + v * VL, wq[v] * dv);
        }
        return;
    }
    for (int64_t b = 0; b < n / ES__QK_K; b++) {
        const uint8_t *x = p + (size_t)b * LQ_BYTES(type);
        float ds[16], ndm[16];
        lq_scales(type, x, ds, ndm);
        for (int j = 0; j < 8; j++) {
#if KERN_NEON
            vf w[NV];
            lq_block(type, x, ds, ndm, j, w);
            for (int v = 0; v < NV; v++) storeu(out + b * ES__QK_K + 32 * j + v * VL, w[v]);
#else
            for (int v = 0; v < 32 / VL; v++)
                storeu(out + b * ES__QK_K + 32 * j + v * VL, lq_weights(type, x, ds, ndm, j, v));
#endif
        }
    }
}

#endif /* ES_CPU_KERN_LQ_H */
