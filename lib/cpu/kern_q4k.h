/* kern_q4k.h: Q4_K's matrix products at every level and batch size, included by kern_impl.c.
 *
 * The arithmetic (the same sequence for an output element whatever the batch, the rows beside it
 * or the token tile: DESIGN.md's batch invariance). A super-block's sub-block j (32 weights
 * (d sc_j) q - (dmin m_j)) keeps its quants in the 32 bytes at 16 + 32 (j / 2), low nibbles for
 * even j, high for odd. Eight lanes: lane l takes the sub-block's weights 4l .. 4l + 3, the
 * nibbles of the l-th 32-bit word of those bytes (byte c of the word holds weight 4l + c), and
 *     S_l = q_0 x_0, then S_l = fma(q_c, x_c, S_l) for c = 1, 2, 3,
 *     acc_l = fma(d sc_j, S_l, acc_l)                            for j = 0 .. 7,
 *     acc_l = fma(-(dmin m_l), X_l, acc_l)                       once per super-block,
 * X_l being sub-block l's activation sum, and y = the pairwise lane sum of acc. So a weight costs
 * one conversion and one fused multiply-add, where the weight itself ((d sc) q - dmin m, then
 * times x) cost two: the scale is applied per 32 weights and the minimum per 256, and the
 * activation sums X are computed once per token for every row.
 * q_c is taken with one integer operation: the word masked to byte c's nibble, q 2^8c (low
 * nibbles) or q 2^(8c + 4) (high), exactly a float, or for the top nibble the word shifted down
 * by 28; the activations are stored times the inverse power of two (q4k_prep, once per token), so
 * the product is q x (exactly, unless the scaled x falls below the normal range). Which lane and
 * which order take an element thus follow the bytes, not k: the activations are prepared in that
 * order. (x86-64-v4, bench_kquant, one thread: 0.325 ms for 2048 x 4096 in L3 where the lookup
 * kernel this replaced took 0.465; docs/perf.md, "Q4_K by sub-block sums".) */

/* 32-byte vectors pass through the inline helpers below at the generic level too, where the
 * compilers warn that a non-inlined call would pass them differently */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define Q4K_XP 264 /* prepared floats per super-block and token: 8 x 32 activations, 8 sums   */
#define Q4K_TOK 16 /* tokens prepared at once, into the panel                                 */
/* Tokens per streaming tile of a small batch (at most 4): two rows' partial sums and accumulators
 * for each token in registers (bench_cpu_kern, x86-64-v4, 2048 x 512: 40 us a token with 2, 51
 * with 4, 49 with 1). Batches of more than Q4K_STREAM tokens convert Q4K_PR rows' quants to
 * floats once (the panel) and run tiles of Q4K_PR rows x Q4K_PT tokens over them. */
#define Q4K_T 2
#define Q4K_STREAM 4
#if VL == 16
#define Q4K_PR 4
#define Q4K_PT 3
#else
#define Q4K_PR 2
#define Q4K_PT 2
#endif
/* panel rows (of n_in floats): the prepared tokens, 16 x 264 per 256 columns, then up to four
 * converted rows, 256 quants and 16 scales per 256 columns */
#define Q4K_PANEL_ROWS ((Q4K_TOK * Q4K_XP + 4 * (ES__QK_K + 16) + ES__QK_K - 1) / ES__QK_K)
/* one token's rows ask for their next super-blocks this far ahead (x86-64-v4, bench_kquant past
 * the L3: about 8% faster than none; 576 to 1728 alike within the noise) */
#define PF_Q4K 1152

typedef float f8v __attribute__((vector_size(32)));
typedef int32_t i8v __attribute__((vector_size(32)));
typedef uint32_t u8v __attribute__((vector_size(32)));
typedef float f4v __attribute__((vector_size(16)));

INLINE f8v load8(const float *p) {
    f8v v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE f8v splat8(float a) {
    const f8v v = {a, a, a, a, a, a, a, a};
    return v;
}

/* a * b + c rounded once where the level has FMA (as vfma; generic x86 rounds twice) */
INLINE f8v fma8(f8v a, f8v b, f8v c) {
#if KERN_X86
    return (f8v)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif defined(__ARM_NEON) && defined(__aarch64__)
    const f4v lo = (f4v)vfmaq_f32((float32x4_t)__builtin_shufflevector(c, c, 0, 1, 2, 3),
                                  (float32x4_t)__builtin_shufflevector(a, a, 0, 1, 2, 3),
                                  (float32x4_t)__builtin_shufflevector(b, b, 0, 1, 2, 3));
    const f4v hi = (f4v)vfmaq_f32((float32x4_t)__builtin_shufflevector(c, c, 4, 5, 6, 7),
                                  (float32x4_t)__builtin_shufflevector(a, a, 4, 5, 6, 7),
                                  (float32x4_t)__builtin_shufflevector(b, b, 4, 5, 6, 7));
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
#else
    return a * b + c;
#endif
}

INLINE float hsum8(f8v v) {
    const f4v h4 = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

/* One token's activations in the lanes' order: per super-block and sub-block j, for c = 0..3 the
 * eight x[32 j + 4 l + c] 2^-8c (l = 0..7), then the eight sub-blocks' sums. */
static void q4k_prep(const float *x, int64_t n_in, float *xp) {
    for (int64_t b = 0; b < n_in / ES__QK_K; b++, x += ES__QK_K, xp += Q4K_XP)
        for (int j = 0; j < 8; j++) {
            const float *s = x + 32 * j;
            const f8v a0 = load8(s), a1 = load8(s + 8), a2 = load8(s + 16), a3 = load8(s + 24);
            /* a 4 x 8 transpose: (x0 x4 x8 x12 x1 x5 x9 x13), (x2 x6 .. x15), and the same of a2, a3 */
            const f8v e01 = __builtin_shufflevector(a0, a1, 0, 4, 8, 12, 1, 5, 9, 13);
            const f8v o01 = __builtin_shufflevector(a0, a1, 2, 6, 10, 14, 3, 7, 11, 15);
            const f8v e23 = __builtin_shufflevector(a2, a3, 0, 4, 8, 12, 1, 5, 9, 13);
            const f8v o23 = __builtin_shufflevector(a2, a3, 2, 6, 10, 14, 3, 7, 11, 15);
            const f8v p[4] = {__builtin_shufflevector(e01, e23, 0, 1, 2, 3, 8, 9, 10, 11),
                              __builtin_shufflevector(e01, e23, 4, 5, 6, 7, 12, 13, 14, 15),
                              __builtin_shufflevector(o01, o23, 0, 1, 2, 3, 8, 9, 10, 11),
                              __builtin_shufflevector(o01, o23, 4, 5, 6, 7, 12, 13, 14, 15)};
            /* the quants' scales: low nibbles q 2^8c; high nibbles q 2^(8c + 4), the last shifted down to q */
            static const float scale[2][4] = {{1.0f, 0x1p-8f, 0x1p-16f, 0x1p-24f}, {0x1p-4f, 0x1p-12f, 0x1p-20f, 1.0f}};
            for (int c = 0; c < 4; c++) {
                const f8v v = p[c] * splat8(scale[j % 2][c]);
                memcpy(xp + 32 * j + 8 * c, &v, sizeof v);
            }
            xp[256 + j] = hsum8((p[0] + p[1]) + (p[2] + p[3]));
        }
}

/* A super-block's scales as kq_scales computes them (the same bits): s[j] = d sc_j, s[8 + j] =
 * -(dmin m_j). On x86-64-v4 (and v3, eight lanes at a time) the six-bit fields are unpacked in a
 * vector register and converted sixteen lanes at once: the scalar unpack as gcc vectorised it (mask-register shifts,
 * general-to-vector moves) cost a fifth of the one-token loop's time (bench_kquant in L3: 0.38
 * ms, 0.30 without any unpack, 0.34 with this one). */
INLINE void q4k_scales(const uint8_t *x, float *s) {
#if ES_KERN_LEVEL == 4
    const __m128i hx = _mm_loadu_si128((const __m128i *)(const void *)x); /* the words h, a, b, c */
    /* [a, c, b, c >> 4] masked to the low six or four bits, then the top two bits of each byte
     * of a and b moved over c's nibbles (bits 4-5): the bytes sc_0..7, m_0..7 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(hx, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i sm = _mm_ternarylogic_epi32(lo, _mm_srli_epi32(_mm_shuffle_epi32(hx, _MM_SHUFFLE(2, 2, 1, 1)), 2),
                                              _mm_setr_epi32(0, 0x30303030, 0, 0x30303030), 0xf8); /* lo | (b & c) */
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
    /* (d, -dmin) as f16, converted, spread over the two halves */
    const __m128 dd = _mm_cvtph_ps(_mm_xor_si128(hx, _mm_setr_epi32((int)0x80000000u, 0, 0, 0)));
    const __m512 d16 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                             _mm512_castps128_ps512(dd));
    _mm512_storeu_ps(s, _mm512_mul_ps(d16, q));
#elif ES_KERN_LEVEL == 3
    /* the same unpack in AVX2 (no ternary logic: or of and), converted eight lanes at a time */
    const __m128i hx = _mm_loadu_si128((const __m128i *)(const void *)x);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(hx, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(hx, _MM_SHUFFLE(2, 2, 1, 1)), 2),
                                      _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    const __m128i sm = _mm_or_si128(lo, top);
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
    const __m128 dd = _mm_cvtph_ps(_mm_xor_si128(hx, _mm_setr_epi32((int)0x80000000u, 0, 0, 0)));
    _mm256_storeu_ps(s, _mm256_mul_ps(_mm256_broadcastss_ps(dd), sc));
    _mm256_storeu_ps(s + 8, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), m));
#else
    kq_scales(ES__DTYPE_Q4_K, x, s, s + 8);
#endif
}

/* NR rows (at most 4) times T tokens: acc[r * Q4K_T + t] += row r . token t over nb
 * super-blocks, in the order above. Each quant vector is converted once for the T tokens; each
 * activation vector is loaded once for the NR rows. pf: prefetch distance in bytes, 0 for none;
 * end (NULL: none): where row r's stream ends, past which its prefetches move on by jump bytes. */
INLINE void q4k_dot(const uint8_t *const *row, const int NR, const float *xp, size_t ldxp, const int T, int64_t nb,
                    size_t pf, const uint8_t *const *end, size_t jump, f8v *acc) {
    for (int64_t b = 0; b < nb; b++) {
        float sc[4][16]; /* d sc_j, then -(dmin m_j) */
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = row[r] + (size_t)b * 144;
            if (pf) {
                const uint8_t *p = blk + pf;
                if (end && p >= end[r]) p += jump;
                for (int o = 0; o < 144; o += 64) __builtin_prefetch(p + o, 0, 0);
            }
            q4k_scales(blk, sc[r]);
        }
#if KERN_X86
        /* read the scales back from memory: gcc would broadcast them from registers, a shuffle or
         * two each (the shuffle ports the conversions share), where a broadcast load is free */
        __asm__ volatile("" : : "r"(sc) : "memory");
#endif
        const float *xb = xp + b * Q4K_XP;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            u8v w[4];
            for (int r = 0; r < NR; r++) memcpy(&w[r], row[r] + (size_t)b * 144 + 16 + 32 * i, sizeof w[r]);
            /* one token: both sub-blocks at once, eight independent chains to hide the
             * multiply-adds' latency (a batch has NR x T already) */
            const int HS = T == 1 ? 2 : 1;
#pragma GCC unroll 2
            for (int h0 = 0; h0 < 2; h0 += HS) {
                f8v s[2][4][Q4K_T];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    for (int h = h0; h < h0 + HS; h++) {
                        f8v xv[Q4K_T];
                        for (int t = 0; t < T; t++) xv[t] = load8(xb + (size_t)t * ldxp + 32 * (2 * i + h) + 8 * c);
                        for (int r = 0; r < NR; r++) {
                            const u8v m = h ? (c == 3 ? w[r] >> 28 : w[r] & (0xf0u << (8 * c))) : w[r] & (0xfu << (8 * c));
                            const f8v q = __builtin_convertvector((i8v)m, f8v);
                            for (int t = 0; t < T; t++)
                                s[h - h0][r][t] = c ? fma8(q, xv[t], s[h - h0][r][t]) : q * xv[t];
                        }
                    }
                for (int h = h0; h < h0 + HS; h++)
                    for (int r = 0; r < NR; r++) {
                        const f8v d = splat8(sc[r][2 * i + h]);
                        for (int t = 0; t < T; t++) acc[r * Q4K_T + t] = fma8(d, s[h - h0][r][t], acc[r * Q4K_T + t]);
                    }
            }
        }
        for (int r = 0; r < NR; r++) {
            const f8v m = load8(sc[r] + 8);
            for (int t = 0; t < T; t++)
                acc[r * Q4K_T + t] = fma8(m, load8(xb + (size_t)t * ldxp + 256), acc[r * Q4K_T + t]);
        }
    }
}

/* out[r * Q4K_T + t] for NR rows and T tokens. */
INLINE void q4k_run(const uint8_t *const *row, const int NR, const float *xp, size_t ldxp, const int T, int64_t nb,
                    size_t pf, float *out) {
    f8v acc[4 * Q4K_T];
    for (int i = 0; i < NR * Q4K_T; i++) acc[i] = splat8(0.0f);
    q4k_dot(row, NR, xp, ldxp, T, nb, pf, NULL, 0, acc);
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < T; t++) out[r * Q4K_T + t] = hsum8(acc[r * Q4K_T + t]);
}

/* NR (1 or 2) rows times nt <= Q4K_T tokens; one specialisation per count keeps the
 * accumulators in registers. */
static void q4k_tile(const uint8_t *const *row, int NR, const float *xp, size_t ldxp, int nt, int64_t nb, size_t pf,
                     float *out) {
    if (nt > Q4K_T || nt < 1) __builtin_unreachable();
#define Q4K_CASES(NRC)                                                                  \
    switch (nt) {                                                                       \
    case 1: q4k_run(row, NRC, xp, ldxp, 1, nb, pf, out); break;                         \
    case 2: q4k_run(row, NRC, xp, ldxp, 2 <= Q4K_T ? 2 : 1, nb, pf, out); break;       \
    case 3: q4k_run(row, NRC, xp, ldxp, 3 <= Q4K_T ? 3 : 1, nb, pf, out); break;       \
    default: q4k_run(row, NRC, xp, ldxp, 4 <= Q4K_T ? 4 : 1, nb, pf, out); break;      \
    }
    if (NR == 2) {
        Q4K_CASES(2)
    } else {
        Q4K_CASES(1)
    }
#undef Q4K_CASES
}

/* One token (prepared at xp): four rows at once, a quarter of the range apart (four sequential
 * streams and four independent chains; each activation load serves four rows), the rest alone.
 * Near its end a stream's prefetches run on, past the range, into the same quarter of the next
 * range of as many rows: the chunk its thread most likely computes next (pool.h: a thread's own
 * range first, in equal chunks), whose four streams then start on cached lines instead of on
 * demand misses (134m Q4_K decode, 2 threads: about 1.1x; docs/perf.md). A wrong guess costs a
 * few wasted prefetches, never a result. */
static void q4k_rows1(const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int64_t n, const float *xp,
                      float *y) {
    const int64_t q = n / 4;
    const uint8_t *end[4];
    for (int r = 0; r < 4; r++) end[r] = w + (size_t)(r0 + (r + 1) * q) * row_bytes;
    for (int64_t i = 0; i < q; i++) {
        const uint8_t *rows[4];
        for (int r = 0; r < 4; r++) rows[r] = w + (size_t)(r0 + r * q + i) * row_bytes;
        f8v acc[4 * Q4K_T];
        for (int k = 0; k < 4 * Q4K_T; k++) acc[k] = splat8(0.0f);
        q4k_dot(rows, 4, xp, 0, 1, nb, PF_Q4K, end, (size_t)(3 * q) * row_bytes, acc);
        for (int r = 0; r < 4; r++) y[r * q + i] = hsum8(acc[r * Q4K_T]);
    }
    float out[4 * Q4K_T];
    for (int64_t i = 4 * q; i < n; i++) {
        const uint8_t *rows[1] = {w + (size_t)(r0 + i) * row_bytes};
        q4k_run(rows, 1, xp, 0, 1, nb, 0, out);
        y[i] = out[0];
    }
}

/* One row's quants as the floats q4k_dot converts them, in its order (qp: 256 per super-block),
 * and its scales (sp: 16 per super-block, as q4k_scales). */
static void q4k_convert(const uint8_t *row, int64_t nb, float *qp, float *sp) {
    for (int64_t b = 0; b < nb; b++, row += 144, qp += ES__QK_K) {
        q4k_scales(row, sp + 16 * b);
        for (int i = 0; i < 4; i++) {
            u8v w;
            memcpy(&w, row + 16 + 32 * i, sizeof w);
            for (int h = 0; h < 2; h++)
                for (int c = 0; c < 4; c++) {
                    const u8v m = h ? (c == 3 ? w >> 28 : w & (0xf0u << (8 * c))) : w & (0xfu << (8 * c));
                    const f8v q = __builtin_convertvector((i8v)m, f8v);
                    memcpy(qp + 32 * (2 * i + h) + 8 * c, &q, sizeof q);
                }
        }
    }
}

/* Q4K_PR converted rows (qp + r * ldq, scales sp + r * lds) times T prepared tokens: q4k_dot's
 * operations in its order, the quants loaded instead of converted. out[r * Q4K_PT + t]. */
INLINE void q4k_ptile(const float *qp, size_t ldq, const float *sp, size_t lds, const float *xp, size_t ldxp,
                      const int T, int64_t nb, float *out) {
    f8v acc[Q4K_PR][Q4K_PT];
    for (int r = 0; r < Q4K_PR; r++)
        for (int t = 0; t < T; t++) acc[r][t] = splat8(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = xp + b * Q4K_XP, *qb = qp + b * ES__QK_K;
        for (int j = 0; j < 8; j++) {
            f8v s[Q4K_PR][Q4K_PT];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                f8v xv[Q4K_PT];
                for (int t = 0; t < T; t++) xv[t] = load8(xb + (size_t)t * ldxp + 32 * j + 8 * c);
                for (int r = 0; r < Q4K_PR; r++) {
                    const f8v q = load8(qb + (size_t)r * ldq + 32 * j + 8 * c);
                    for (int t = 0; t < T; t++) s[r][t] = c ? fma8(q, xv[t], s[r][t]) : q * xv[t];
                }
            }
            for (int r = 0; r < Q4K_PR; r++) {
                const f8v d = splat8(sp[(size_t)r * lds + 16 * b + j]);
                for (int t = 0; t < T; t++) acc[r][t] = fma8(d, s[r][t], acc[r][t]);
            }
        }
        for (int r = 0; r < Q4K_PR; r++) {
            const f8v m = load8(sp + (size_t)r * lds + 16 * b + 8);
            for (int t = 0; t < T; t++) acc[r][t] = fma8(m, load8(xb + (size_t)t * ldxp + 256), acc[r][t]);
        }
    }
    for (int r = 0; r < Q4K_PR; r++)
        for (int t = 0; t < T; t++) out[r * Q4K_PT + t] = hsum8(acc[r][t]);
}

/* Large batches: Q4K_PR rows at a time converted into the panel after the prepared tokens, then
 * tiles of Q4K_PT tokens; rows past r1 repeat the last row, their results dropped. */
static void q4k_rows_panel(const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int64_t r1, const float *xp,
                           size_t ldxp, int64_t nt, float *y, int64_t ldy, float *qp) {
    const size_t ldq = (size_t)nb * ES__QK_K, lds = (size_t)nb * 16;
    float *sp = qp + Q4K_PR * ldq;
    for (int64_t r = r0; r < r1; r += Q4K_PR) {
        const int nr = (int)ES__MIN(Q4K_PR, r1 - r);
        for (int i = 0; i < Q4K_PR; i++)
            if (i < nr) q4k_convert(w + (size_t)(r + i) * row_bytes, nb, qp + i * ldq, sp + i * lds);
            else {
                memcpy(qp + i * ldq, qp + (nr - 1) * ldq, sizeof(float) * ldq);
                memcpy(sp + i * lds, sp + (nr - 1) * lds, sizeof(float) * lds);
            }
        for (int64_t t = 0; t < nt; t += Q4K_PT) {
            const int k = (int)ES__MIN(Q4K_PT, nt - t);
            float out[Q4K_PR * Q4K_PT];
            if (k > Q4K_PT || k < 1) __builtin_unreachable();
            switch (k) {
            case 1: q4k_ptile(qp, ldq, sp, lds, xp + (size_t)t * ldxp, ldxp, 1, nb, out); break;
            case 2: q4k_ptile(qp, ldq, sp, lds, xp + (size_t)t * ldxp, ldxp, 2 <= Q4K_PT ? 2 : 1, nb, out); break;
            default: q4k_ptile(qp, ldq, sp, lds, xp + (size_t)t * ldxp, ldxp, 3 <= Q4K_PT ? 3 : 1, nb, out); break;
            }
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < k; j++) y[(t + j) * ldy + (r - r0 + i)] = out[i * Q4K_PT + j];
        }
    }
}

/* Rows [r0, r1) for n_tok tokens, y[t * ldy + (r - r0)]. The tokens are prepared Q4K_TOK at a time
 * into xp (the panel); for each block, row i goes with row i + half (two sequential streams, as
 * DEF_ROWS) through token tiles of Q4K_T while the two rows stay in L1, the first tile
 * prefetching PF_AHEAD ahead; blocks of more than Q4K_STREAM tokens go through the panel. */
static void rows_q4k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1, const float *x,
                     int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *xp) {
    const int64_t nb = n_in / ES__QK_K, n = r1 - r0, half = n / 2;
    const size_t ldxp = (size_t)nb * Q4K_XP;
    for (int64_t t0 = 0; t0 < n_tok; t0 += Q4K_TOK) {
        const int64_t nt = ES__MIN(Q4K_TOK, n_tok - t0);
        for (int64_t t = 0; t < nt; t++) q4k_prep(x + (t0 + t) * ldx, n_in, xp + (size_t)t * ldxp);
        float *yb = y + t0 * ldy;
        if (nt == 1) {
            q4k_rows1(w, row_bytes, nb, r0, n, xp, yb);
            continue;
        }
        if (nt > Q4K_STREAM) {
            q4k_rows_panel(w, row_bytes, nb, r0, r1, xp, ldxp, nt, yb, ldy, xp + Q4K_TOK * ldxp);
            continue;
        }
        float out[4 * Q4K_T] = {0}; /* gcc cannot tell that q4k_tile fills what is read */
        for (int64_t i = 0; i < half; i++) {
            const uint8_t *rows[2] = {w + (size_t)(r0 + i) * row_bytes, w + (size_t)(r0 + half + i) * row_bytes};
            const size_t pf = (size_t)(i + 1) * row_bytes + PF_AHEAD <= (size_t)half * row_bytes ? PF_AHEAD : 0;
            for (int64_t t = 0; t < nt; t += Q4K_T) {
                const int k = (int)ES__MIN(Q4K_T, nt - t);
                q4k_tile(rows, 2, xp + (size_t)t * ldxp, ldxp, k, nb, t == 0 ? pf : 0, out);
                for (int j = 0; j < k; j++) {
                    yb[(t + j) * ldy + i] = out[j];
                    yb[(t + j) * ldy + half + i] = out[Q4K_T + j];
                }
            }
        }
        if (n % 2) {
            const uint8_t *rows[1] = {w + (size_t)(r1 - 1) * row_bytes};
            for (int64_t t = 0; t < nt; t += Q4K_T) {
                const int k = (int)ES__MIN(Q4K_T, nt - t);
                q4k_tile(rows, 1, xp + (size_t)t * ldxp, ldxp, k, nb, 0, out);
                for (int j = 0; j < k; j++) yb[(t + j) * ldy + n - 1] = out[j];
            }
        }
    }
}
