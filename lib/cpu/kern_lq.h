/* kern_lq.h: the CPU loaders of the low-bit types, Q2_K and Q3_K (256-element super-blocks of
 * sixteen 16-element sub-blocks) and IQ4_NL (32-element blocks on a 16-value grid), included by
 * kern_impl.c once per level (it supplies vf, VL, INLINE, vfma, load_bytes, widen_bytes...).
 * Layouts: lib/core/quant_k.c, lib/core/quant_iq4.c. Every weight is the scalar dequantiser's
 * value bit for bit: Q3_K's (d (s - 32)) q and IQ4_NL's d v are exact products, Q2_K's
 * (d sc) q - dmin m one rounding of two exact products (a fused multiply-add or not), so the one-
 * token path and the panel path agree and results stay batch-invariant. */
#ifndef ES_CPU_KERN_LQ_H
#define ES_CPU_KERN_LQ_H

#define IS_LQ(t) ((t) == ES__DTYPE_Q2_K || (t) == ES__DTYPE_Q3_K)
#define LQ_BYTES(t) ((t) == ES__DTYPE_Q2_K ? 84 : 110)

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

/* One IQ4_NL block: NV vectors of grid values and the block's scale. */
INLINE float iq4_block(const uint8_t *blk, vf *wq) {
    uint16_t d16;
    memcpy(&d16, blk, 2);
    for (int v = 0; v < NV; v++) wq[v] = iq4_to_vf(blk + 2 + (v * VL) % 16, v * VL >= 16);
    return f16_scalar(d16);
}

/* rows_dot's loop for these types: acc[r][t] += the NR rows' weights times token t's x, in k order
 * (pf: rows_dot's prefetch distance). */
INLINE void lq_rows_dot(es__dtype type, const uint8_t *const *row, const int NR, const float *x, int64_t ldx,
                        const int T, int64_t n_in, size_t pf, vf (*acc)[T_TILE]) {
    if (type == ES__DTYPE_IQ4_NL) {
        for (int64_t b = 0; b < n_in / QK; b++)
            for (int r = 0; r < NR; r++) {
                vf wq[NV];
                pf_span(row[r] + (size_t)b * 18, 1, pf);
                const vf dv = vsplat(iq4_block(row[r] + (size_t)b * 18, wq));
                for (int v = 0; v < NV; v++) {
                    const vf wv = wq[v] * dv;
                    for (int t = 0; t < T; t++) acc[r][t] = vfma(wv, loadu(x + t * ldx + b * QK + v * VL), acc[r][t]);
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
        if (VL == 16 ? type == ES__DTYPE_Q3_K : type == ES__DTYPE_Q2_K) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) LQ_ROWS_BODY
        } else {
            for (int j = 0; j < 8; j++) LQ_ROWS_BODY
        }
#undef LQ_ROWS_BODY
    }
}

/* One row of n elements to f32 (the panel path). */
INLINE void lq_to_f32(es__dtype type, const uint8_t *p, float *out, int64_t n) {
    if (type == ES__DTYPE_IQ4_NL) {
        for (int64_t b = 0; b < n / QK; b++) {
            vf wq[NV];
            const vf dv = vsplat(iq4_block(p + (size_t)b * 18, wq));
            for (int v = 0; v < NV; v++) storeu(out + b * QK + v * VL, wq[v] * dv);
        }
        return;
    }
    for (int64_t b = 0; b < n / ES__QK_K; b++) {
        const uint8_t *x = p + (size_t)b * LQ_BYTES(type);
        float ds[16], ndm[16];
        lq_scales(type, x, ds, ndm);
        for (int j = 0; j < 8; j++)
            for (int v = 0; v < 32 / VL; v++)
                storeu(out + b * ES__QK_K + 32 * j + v * VL, lq_weights(type, x, ds, ndm, j, v));
    }
}

#endif /* ES_CPU_KERN_LQ_H */
