/* kern_ksum.h: the matrix products of the K-quants Q4_K, Q5_K and Q6_K by sub-block sums, at every
 * level and batch size, included by kern_impl.c.
 *
 * The arithmetic (the same sequence for an output element whatever the batch, the rows beside it
 * or the token tile: DESIGN.md's batch invariance). A super-block's sub-block j holds 32 weights
 * s_g q - o_g, where q is a small unsigned integer, s_g a scale and o_g an offset per group of
 * weights (Q4_K, Q5_K: one group of 32, s = d sc_j, o = dmin m_j, q four or five bits; Q6_K: two
 * groups of 16, s = d scales_g, o = 32 s, q six bits). Eight lanes: lane l takes the sub-block's weights
 * 4l .. 4l + 3, whose quants ksum_words puts in the four bytes of a 32-bit word (byte c holds
 * weight 4l + c), and
 *     S_l = q_0 x_0, then S_l = fma(q_c, x_c, S_l) for c = 1, 2, 3,
 *     acc_l = fma(s_l, S_l, acc_l)                               for j = 0 .. 7,
 *     acc_l = fma(-o, X, acc_l)  over the groups' offsets          once per super-block,
 * X being the groups' activation sums, and y = the pairwise lane sum of acc. So a weight costs
 * one conversion and one fused multiply-add, where the weight itself (s q - o, then times x)
 * cost two: the scale is applied per sub-block and the offsets per super-block, and the
 * activation sums X are computed once per token for every row.
 * q_c is taken with one integer operation: the word masked to byte c's field, q 2^8c (Q4_K's high
 * nibbles q 2^(8c + 4)), exactly a float, or for the top byte the word shifted down; the
 * activations are stored times the inverse power of two (ksum_prep, once per token), so the
 * product is q x (exactly, unless the scaled x falls below the normal range). Which lane and
 * which order take an element thus follow the bytes, not k: the activations are prepared in that
 * order. (x86-64-v4, one thread, 2048 x 4096 in L3: Q4_K 0.325 ms where the lookup kernel this
 * replaced took 0.465; Q5_K 0.50 ms and Q6_K 0.51 ms where their per-weight loops took 0.73 and
 * 0.86; docs/perf.md, "Q4_K by sub-block sums", "Q5_K and Q6_K by sub-block sums".) */

/* 32-byte vectors pass through the inline helpers below at the generic level too, where the
 * compilers warn that a non-inlined call would pass them differently */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif


#define KS_TOK 16 /* tokens prepared at once, into the panel                                  */
/* Tokens per streaming tile of a small batch (KS_TILE): two rows' partial sums and accumulators
 * for each token in registers. Q4_K: 2 (bench_cpu_kern, x86-64-v4, 2048 x 512: 40 us a token with
 * 2, 51 with 4, 49 with 1). Q5_K and Q6_K build their quants' words anew in every tile, so on
 * x86-64-v4 (32 vector registers) they take tiles of four with two sub-blocks' chains at once
 * (ksum_dot), and stream up to eight tokens (Q6_K 1024 x 4096, one thread: 3, 4 and 5 tokens in
 * 0.48, 0.64 and 0.91 ms, against 0.56, 0.82 and 1.0 in tiles of two, and 1.0 for five in one
 * tile of six or through the panel). Batches of more than KS_STREAM(K) tokens convert KS_PR rows'
 * quants to floats once (the panel) and run tiles of KS_PR rows x KS_PT tokens over them. */
#if VL == 16
/* the accumulators' capacity and row stride in a tile: 4 (the largest tile) made gcc's Q4_K tiles
 * of two tokens 1.3x slower */
#define KS_TMAX 6
#define KS_PR 4
#define KS_PT 3
#else
#define KS_TMAX 2
#define KS_PR 2
#define KS_PT 2
#endif
#define KS_TILE(K) ((K) == ES__DTYPE_Q4_K || VL != 16 ? 2 : 4)
#define KS_STREAM(K) ((K) == ES__DTYPE_Q4_K || VL != 16 ? 4 : 8)
#define KS_BYTES(K) ((K) == ES__DTYPE_Q4_K ? 144 : (K) == ES__DTYPE_Q5_K ? 176 : 210)
/* Q4_K and Q5_K: a group per sub-block (scale d sc_j, offset dmin m_j); Q6_K: two */
#define KS_ONE_GROUP(K) ((K) != ES__DTYPE_Q6_K)
/* prepared floats per super-block and token: 8 x 32 activations, then the groups' sums (8, 16) */
#define KS_XP(K) (KS_ONE_GROUP(K) ? 264 : 272)
/* a super-block's scales as ksum_scales writes them: Q4_K, Q5_K the eight d sc_j, then the eight
 * -(dmin m_j); Q6_K per sub-block the lanes' eight scales, then the sixteen -32 d scales_g */
#define KS_SC(K) (KS_ONE_GROUP(K) ? 16 : 80)
/* panel rows (of n_in floats): the prepared tokens, then up to four converted rows (their
 * quants and scales), per 256 columns; the larger of the two types */
#define KS_PANEL_ROWS ((KS_TOK * 272 + 4 * (ES__QK_K + 80) + ES__QK_K - 1) / ES__QK_K)
/* one token's rows ask for their next super-blocks this far ahead (x86-64-v4, bench_kquant past
 * the L3: Q4_K about 8% faster than none; 576 to 1728 alike within the noise) */
#define PF_KS 1152

typedef float f8v __attribute__((vector_size(32)));
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

/* The sums' vectors (ksum_dot and the panel's tiles): the eight lanes in one vector, or, on
 * AArch64, in KH = 2 halves of KL = 4 lanes, each half taking the same operations on its lanes.
 * NEON's vectors hold four floats: gcc kept eight-lane vectors in memory between operations (a
 * one-token Q4_K call of 512 x 64: 124k guest instructions against 89k in halves), and clang
 * split them into pairs of registers less well than the halves do (83k against 52k; a 32-token
 * call 1.10M against 0.81M). */
#if defined(__aarch64__)
#define KL 4
#else
#define KL 8
#endif
#define KH (8 / KL)
typedef float kf __attribute__((vector_size(4 * KL)));
typedef int32_t ki __attribute__((vector_size(4 * KL)));
typedef uint32_t ku __attribute__((vector_size(4 * KL)));

INLINE kf loadk(const float *p) {
    kf v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE kf splatk(float a) {
#if KL == 8
    return splat8(a);
#else
    const kf v = {a, a, a, a};
    return v;
#endif
}

INLINE kf fmak(kf a, kf b, kf c) {
#if KL == 8
    return fma8(a, b, c);
#else /* as fma8's NEON halves */
    return (kf)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b);
#endif
}

/* An accumulator's KH halves summed as hsum8 sums its eight lanes. */
INLINE float hsumk(const kf *a) {
#if KL == 8
    return hsum8(a[0]);
#else
    const f4v h4 = a[0] + a[1];
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
#endif
}


/* One token's activations in the lanes' order: per super-block and sub-block j, for c = 0..3 the
 * eight x[32 j + 4 l + c] times the inverse of the power of two that byte c's field carries in
 * the word (ksum_q), then the groups' sums: Q4_K the eight sub-blocks', Q6_K the sixteen halves'. */
static void ksum_prep(es__dtype K, const float *x, int64_t n_in, float *xp) {
    for (int64_t b = 0; b < n_in / ES__QK_K; b++, x += ES__QK_K, xp += KS_XP(K))
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
            /* Q4_K: low nibbles q 2^8c, high nibbles q 2^(8c + 4), the last shifted down to q;
             * Q5_K, Q6_K: q 2^8c, the last shifted down */
            static const float scale[3][4] = {{1.0f, 0x1p-8f, 0x1p-16f, 0x1p-24f},
                                              {0x1p-4f, 0x1p-12f, 0x1p-20f, 1.0f},
                                              {1.0f, 0x1p-8f, 0x1p-16f, 1.0f}};
            const int row = K == ES__DTYPE_Q4_K ? j % 2 : 2;
            for (int c = 0; c < 4; c++) {
                const f8v v = p[c] * splat8(scale[row][c]);
                memcpy(xp + 32 * j + 8 * c, &v, sizeof v);
            }
            const f8v sum = (p[0] + p[1]) + (p[2] + p[3]); /* lane l: x[32 j + 4 l .. + 3] */
            if (KS_ONE_GROUP(K)) {
                xp[256 + j] = hsum8(sum);
            } else { /* lanes 0-3 hold the first group of 16, lanes 4-7 the second */
                xp[256 + 2 * j] = (sum[0] + sum[2]) + (sum[1] + sum[3]);
                xp[256 + 2 * j + 1] = (sum[4] + sum[6]) + (sum[5] + sum[7]);
            }
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


/* Q6_K's scales (the same products as kq_scales): per sub-block j the lanes' eight, lanes 0-3
 * d scales_2j and lanes 4-7 d scales_(2j + 1) (s[8 j ..]), then -32 d scales_g for the sixteen
 * groups (s[64 ..]). On x86 the sixteen are converted at once: element by element (as gcc
 * compiles a vector conversion of bytes) the unpack cost a Q6_K row about what its quants did. */
INLINE void q6k_scales(const uint8_t *x, float *s) {
    uint16_t h;
    memcpy(&h, x + 208, 2);
    const float d = f16_scalar(h);
#if ES_KERN_LEVEL == 4
    const __m512 g = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                          _mm_loadu_si128((const __m128i *)(const void *)(x + 192)))));
    for (int k = 0; k < 4; k++) { /* groups 4k .. 4k + 3, each four times */
        const __m512i idx = _mm512_setr_epi32(4 * k, 4 * k, 4 * k, 4 * k, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1,
                                              4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3);
        _mm512_storeu_ps(s + 16 * k, _mm512_permutexvar_ps(idx, g));
    }
    _mm512_storeu_ps(s + 64, _mm512_mul_ps(g, _mm512_set1_ps(-32.0f)));
#elif ES_KERN_LEVEL == 3
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)(x + 192));
    const __m256 g[2] = {_mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw))),
                         _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8))))};
    for (int k = 0; k < 8; k++) /* groups 2k and 2k + 1, each four times */
        _mm256_storeu_ps(s + 8 * k, _mm256_permutevar8x32_ps(g[k / 4], _mm256_setr_epi32(2 * (k % 4), 2 * (k % 4), 2 * (k % 4),
                                                                                        2 * (k % 4), 2 * (k % 4) + 1, 2 * (k % 4) + 1,
                                                                                        2 * (k % 4) + 1, 2 * (k % 4) + 1)));
    _mm256_storeu_ps(s + 64, _mm256_mul_ps(g[0], _mm256_set1_ps(-32.0f)));
    _mm256_storeu_ps(s + 72, _mm256_mul_ps(g[1], _mm256_set1_ps(-32.0f)));
#else
    for (int i = 0; i < 16; i++) {
        const float g = d * (float)(int8_t)x[192 + i];
        for (int l = 0; l < 4; l++) s[4 * i + l] = g;
        s[64 + i] = -32.0f * g;
    }
#endif
}

/* A super-block's scales and offsets (KS_SC(K) floats; Q5_K's header is Q4_K's). */
INLINE void ksum_scales(es__dtype K, const uint8_t *x, float *s) {
    if (KS_ONE_GROUP(K)) q4k_scales(x, s);
    else q6k_scales(x, s);
}

/* Sub-block j's quants of one super-block, four to a 32-bit word (ksum_q takes byte c's field),
 * the words of lanes KL hf .. KL hf + KL - 1.
 * Q4_K: the 32 bytes at 16 + 32 (j / 2), nibbles in place. Q5_K: the nibbles of the 32 bytes
 * at 48 + 32 (j / 2) (the high ones for odd j) and bit j of each byte of qh (at 16), put together
 * as q = nibble | bit << 4 in each byte. Q6_K: sub-block 4 h + g takes the nibbles of 32 bytes of
 * ql (at 64 h + 32 (g % 2), the high ones for g >= 2) and two bits of each byte of qh (at
 * 128 + 32 h, bits 2g), as q = nibble | bits << 4. */
INLINE ku ksum_words(es__dtype K, const uint8_t *blk, int j, int hf) {
    ku w;
    blk += 4 * KL * hf;
    if (K == ES__DTYPE_Q4_K) {
        memcpy(&w, blk + 16 + 32 * (j / 2), sizeof w);
        return w;
    }
    if (K == ES__DTYPE_Q5_K) {
        ku qs, qh;
        memcpy(&qs, blk + 48 + 32 * (j / 2), sizeof qs);
        memcpy(&qh, blk + 16, sizeof qh);
        const ku hi = j <= 4 ? qh << (4 - j) : qh >> (j - 4);
        return ((j % 2 ? qs >> 4 : qs) & 0x0f0f0f0fu) | (hi & 0x10101010u);
    }
    const int h = j / 4, g = j % 4;
    ku ql, qh;
    memcpy(&ql, blk + 64 * h + 32 * (g % 2), sizeof ql);
    memcpy(&qh, blk + 128 + 32 * h, sizeof qh);
    const ku lo = (g < 2 ? ql : ql >> 4) & 0x0f0f0f0fu;
    const ku hi = (g == 0 ? qh << 4 : g == 1 ? qh << 2 : g == 2 ? qh : qh >> 2) & 0x30303030u;
    return lo | hi;
}

/* Byte c's field of sub-block j's words as an exact float: q 2^8c (Q4_K's high nibbles q 2^(8c + 4)),
 * the top byte's shifted down to q (Q5_K's fields are five bits, Q6_K's six). */
INLINE kf ksum_q(es__dtype K, ku w, int j, int c) {
    ku m;
    if (K == ES__DTYPE_Q4_K)
        m = j % 2 ? (c == 3 ? w >> 28 : w & (0xf0u << (8 * c))) : w & (0xfu << (8 * c));
    else
        m = c == 3 ? w >> 24 : w & (0x3fu << (8 * c));
    return __builtin_convertvector((ki)m, kf);
}

/* Sub-block j's scale for lanes KL hf .. KL hf + KL - 1. */
INLINE kf ksum_lane_scale(es__dtype K, const float *sc, int j, int hf) {
    return KS_ONE_GROUP(K) ? splatk(sc[j]) : loadk(sc + 8 * j + KL * hf);
}

/* The super-block's offsets: acc += -o . X over its groups (the prepared sums at xb + 256), in
 * the lanes of half hf. */
INLINE kf ksum_offsets(es__dtype K, const float *sc, const float *xb, kf acc, int hf) {
    sc += KL * hf, xb += KL * hf;
    acc = fmak(loadk(sc + (KS_ONE_GROUP(K) ? 8 : 64)), loadk(xb + 256), acc);
    if (!KS_ONE_GROUP(K)) acc = fmak(loadk(sc + 72), loadk(xb + 264), acc);
    return acc;
}

/* Sub-blocks 2 i and 2 i + 1 of super-block b (its scales sc, its prepared activations xb) into
 * ksum_dot's accumulators. */
INLINE void ksum_pair(es__dtype K, const uint8_t *const *row, const int NR, const float *xb, size_t ldxp, const int T,
                      int64_t b, int i, float (*sc)[KS_SC(ES__DTYPE_Q6_K)], kf *acc, const int AS) {
    const size_t bb = KS_BYTES(K);
    for (int hf = 0; hf < KH; hf++) {
        /* one token: both sub-blocks at once, eight independent chains to hide the
         * multiply-adds' latency (a batch has NR x T already) */
        const int HS = T == 1 || (VL == 16 && K != ES__DTYPE_Q4_K && NR * T <= 8) ? 2 : 1;
#pragma GCC unroll 2
        for (int h0 = 0; h0 < 2; h0 += HS) {
            kf s[2][4][KS_TMAX];
            if (K == ES__DTYPE_Q4_K) { /* one word vector serves a row's two sub-blocks */
                ku w[4];
                for (int r = 0; r < NR; r++) w[r] = ksum_words(K, row[r] + (size_t)b * bb, 2 * i, hf);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    for (int h = h0; h < h0 + HS; h++) {
                        kf xv[KS_TMAX];
                        for (int t = 0; t < T; t++)
                            xv[t] = loadk(xb + (size_t)t * ldxp + 32 * (2 * i + h) + 8 * c + KL * hf);
                        for (int r = 0; r < NR; r++) {
                            const kf q = ksum_q(K, w[r], 2 * i + h, c);
                            for (int t = 0; t < T; t++)
                                s[h - h0][r][t] = c ? fmak(q, xv[t], s[h - h0][r][t]) : q * xv[t];
                        }
                    }
            } else { /* Q5_K and Q6_K build a word vector per row and sub-block: one at a
                      * time, each taken through its four fields (all eight at once spilled
                      * registers) */
                for (int h = h0; h < h0 + HS; h++)
                    for (int r = 0; r < NR; r++) {
                        const ku w = ksum_words(K, row[r] + (size_t)b * bb, 2 * i + h, hf);
#pragma GCC unroll 4
                        for (int c = 0; c < 4; c++) {
                            const kf q = ksum_q(K, w, 2 * i + h, c);
                            for (int t = 0; t < T; t++) {
                                const kf xv = loadk(xb + (size_t)t * ldxp + 32 * (2 * i + h) + 8 * c + KL * hf);
                                s[h - h0][r][t] = c ? fmak(q, xv, s[h - h0][r][t]) : q * xv;
                            }
                        }
                    }
            }
            for (int h = h0; h < h0 + HS; h++)
                for (int r = 0; r < NR; r++) {
                    const kf d = ksum_lane_scale(K, sc[r], 2 * i + h, hf);
                    for (int t = 0; t < T; t++) {
                        kf *a = &acc[(r * AS + t) * KH + hf];
                        *a = fmak(d, s[h - h0][r][t], *a);
                    }
                }
        }
    }
}

/* NR rows (at most 4) times T tokens: acc[(r * AS + t) * KH + hf] += row r . token t over nb
 * super-blocks, in the order above (hf: which KL lanes of the eight). Each quant vector is
 * converted once for the T tokens; each activation vector is loaded once for the NR rows. pf:
 * prefetch distance in bytes, 0 for none; end (NULL: none): where row r's stream ends, past which
 * its prefetches move on by jump bytes.
 * AS >= T: the accumulators' row stride (a constant, so they stay in registers: the one-token
 * loop's four rows with a stride of six ran 7% slower). */
INLINE void ksum_dot(es__dtype K, const uint8_t *const *row, const int NR, const float *xp, size_t ldxp, const int T,
                     int64_t nb, size_t pf, const uint8_t *const *end, size_t jump, kf *acc, const int AS) {
    const size_t bb = KS_BYTES(K);
    for (int64_t b = 0; b < nb; b++) {
        float sc[4][KS_SC(ES__DTYPE_Q6_K)]; /* ksum_scales */
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = row[r] + (size_t)b * bb;
            if (pf) {
                const uint8_t *p = blk + pf;
                if (end && p >= end[r]) p += jump;
                for (size_t o = 0; o < bb; o += 64) __builtin_prefetch(p + o, 0, 0);
            }
            ksum_scales(K, blk, sc[r]);
        }
#if KERN_X86
        /* read the scales back from memory: gcc would broadcast them from registers, a shuffle or
         * two each (the shuffle ports the conversions share), where a broadcast load is free */
        __asm__ volatile("" : : "r"(sc) : "memory");
#endif
        const float *xb = xp + b * KS_XP(K);
        /* gcc on AArch64 spilled the one-token Q4_K loop's registers with the pairs unrolled
         * (89k guest instructions a 512 x 64 call, 56k rolled); Q5_K and Q6_K need i constant
         * for their words' shifts (66k and 70k unrolled, 76k and 96k rolled) */
#if defined(__aarch64__) && !defined(__clang__)
        if (K == ES__DTYPE_Q4_K) {
#pragma GCC unroll 1
            for (int i = 0; i < 4; i++) ksum_pair(K, row, NR, xb, ldxp, T, b, i, sc, acc, AS);
        } else
#endif
        {
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) ksum_pair(K, row, NR, xb, ldxp, T, b, i, sc, acc, AS);
        }
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < T; t++)
                for (int hf = 0; hf < KH; hf++) {
                    kf *a = &acc[(r * AS + t) * KH + hf];
                    *a = ksum_offsets(K, sc[r], xb + (size_t)t * ldxp, *a, hf);
                }
    }
}

/* out[r * KS_TMAX + t] for NR rows and T tokens. */
INLINE void ksum_run(es__dtype K, const uint8_t *const *row, const int NR, const float *xp, size_t ldxp, const int T,
                     int64_t nb, size_t pf, float *out) {
    kf acc[4 * KS_TMAX * KH];
    for (int i = 0; i < NR * KS_TMAX * KH; i++) acc[i] = splatk(0.0f);
    ksum_dot(K, row, NR, xp, ldxp, T, nb, pf, NULL, 0, acc, KS_TMAX);
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < T; t++) out[r * KS_TMAX + t] = hsumk(&acc[(r * KS_TMAX + t) * KH]);
}

/* NR (1 or 2) rows times nt <= KS_TMAX tokens; one specialisation per count keeps the
 * accumulators in registers. */
INLINE void ksum_tile(es__dtype K, const uint8_t *const *row, int NR, const float *xp, size_t ldxp, int nt, int64_t nb,
                      size_t pf, float *out) {
    if (nt > KS_TMAX || nt < 1) __builtin_unreachable();
#define KS_CASES(NRC)                                                                      \
    switch (nt) {                                                                          \
    case 1: ksum_run(K, row, NRC, xp, ldxp, 1, nb, pf, out); break;                        \
    case 2: ksum_run(K, row, NRC, xp, ldxp, 2 <= KS_TMAX ? 2 : 1, nb, pf, out); break;     \
    case 3: ksum_run(K, row, NRC, xp, ldxp, 3 <= KS_TMAX ? 3 : 1, nb, pf, out); break;     \
    case 4: ksum_run(K, row, NRC, xp, ldxp, 4 <= KS_TMAX ? 4 : 1, nb, pf, out); break;     \
    case 5: ksum_run(K, row, NRC, xp, ldxp, 5 <= KS_TMAX ? 5 : 1, nb, pf, out); break;     \
    default: ksum_run(K, row, NRC, xp, ldxp, 6 <= KS_TMAX ? 6 : 1, nb, pf, out); break;    \
    }
    if (NR == 2) {
        KS_CASES(2)
    } else {
        KS_CASES(1)
    }
#undef KS_CASES
}

/* One token (prepared at xp): four rows at once, a quarter of the range apart (four sequential
 * streams and four independent chains; each activation load serves four rows), the rest alone.
 * Near its end a stream's prefetches run on, past the range, into the same quarter of the next
 * range of as many rows: the chunk its thread most likely computes next (pool.h: a thread's own
 * range first, in equal chunks), whose four streams then start on cached lines instead of on
 * demand misses (134m Q4_K decode, 2 threads: about 1.1x; docs/perf.md). A wrong guess costs a
 * few wasted prefetches, never a result. */
INLINE void ksum_rows1(es__dtype K, const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int64_t n,
                       const float *xp, float *y) {
    const int64_t q = n / 4;
    const uint8_t *end[4];
    for (int r = 0; r < 4; r++) end[r] = w + (size_t)(r0 + (r + 1) * q) * row_bytes;
    for (int64_t i = 0; i < q; i++) {
        const uint8_t *rows[4];
        for (int r = 0; r < 4; r++) rows[r] = w + (size_t)(r0 + r * q + i) * row_bytes;
        kf acc[4 * KH];
        for (int k = 0; k < 4 * KH; k++) acc[k] = splatk(0.0f);
        ksum_dot(K, rows, 4, xp, 0, 1, nb, PF_KS, end, (size_t)(3 * q) * row_bytes, acc, 1);
        for (int r = 0; r < 4; r++) y[r * q + i] = hsumk(&acc[r * KH]);
    }
    float out[4 * KS_TMAX];
    for (int64_t i = 4 * q; i < n; i++) {
        const uint8_t *rows[1] = {w + (size_t)(r0 + i) * row_bytes};
        ksum_run(K, rows, 1, xp, 0, 1, nb, 0, out);
        y[i] = out[0];
    }
}

/* One row's quants as the floats ksum_dot converts them, in its order (qp: 256 per super-block),
 * and its scales (sp: KS_SC(K) per super-block, as ksum_scales). */
INLINE void ksum_convert(es__dtype K, const uint8_t *row, int64_t nb, float *qp, float *sp) {
    for (int64_t b = 0; b < nb; b++, row += KS_BYTES(K), qp += ES__QK_K) {
        ksum_scales(K, row, sp + KS_SC(K) * b);
        for (int j = 0; j < 8; j++)
            for (int hf = 0; hf < KH; hf++) {
                const ku w = ksum_words(K, row, j, hf);
                for (int c = 0; c < 4; c++) {
                    const kf q = ksum_q(K, w, j, c);
                    memcpy(qp + 32 * j + 8 * c + KL * hf, &q, sizeof q);
                }
            }
    }
}

/* KS_PR converted rows (qp + r * ldq, scales sp + r * lds) times T prepared tokens: ksum_dot's
 * operations in its order, the quants loaded instead of converted. out[r * KS_PT + t]. */
INLINE void ksum_ptile(es__dtype K, const float *qp, size_t ldq, const float *sp, size_t lds, const float *xp,
                       size_t ldxp, const int T, int64_t nb, float *out) {
    kf acc[KS_PR][KS_PT][KH];
    for (int r = 0; r < KS_PR; r++)
        for (int t = 0; t < T; t++)
            for (int hf = 0; hf < KH; hf++) acc[r][t][hf] = splatk(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = xp + b * KS_XP(K), *qb = qp + b * ES__QK_K;
        for (int j = 0; j < 8; j++)
            for (int hf = 0; hf < KH; hf++) {
                kf s[KS_PR][KS_PT];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    kf xv[KS_PT];
                    for (int t = 0; t < T; t++) xv[t] = loadk(xb + (size_t)t * ldxp + 32 * j + 8 * c + KL * hf);
                    for (int r = 0; r < KS_PR; r++) {
                        const kf q = loadk(qb + (size_t)r * ldq + 32 * j + 8 * c + KL * hf);
                        for (int t = 0; t < T; t++) s[r][t] = c ? fmak(q, xv[t], s[r][t]) : q * xv[t];
                    }
                }
                for (int r = 0; r < KS_PR; r++) {
                    const kf d = ksum_lane_scale(K, sp + (size_t)r * lds + KS_SC(K) * b, j, hf);
                    for (int t = 0; t < T; t++) acc[r][t][hf] = fmak(d, s[r][t], acc[r][t][hf]);
                }
            }
        for (int r = 0; r < KS_PR; r++)
            for (int t = 0; t < T; t++)
                for (int hf = 0; hf < KH; hf++)
                    acc[r][t][hf] = ksum_offsets(K, sp + (size_t)r * lds + KS_SC(K) * b, xb + (size_t)t * ldxp,
                                                 acc[r][t][hf], hf);
    }
    for (int r = 0; r < KS_PR; r++)
        for (int t = 0; t < T; t++) out[r * KS_PT + t] = hsumk(acc[r][t]);
}

/* Large batches: KS_PR rows at a time converted into the panel after the prepared tokens, then
 * tiles of KS_PT tokens; rows past r1 repeat the last row, their results dropped. */
INLINE void ksum_rows_panel(es__dtype K, const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int64_t r1,
                            const float *xp, size_t ldxp, int64_t nt, float *y, int64_t ldy, float *qp) {
    const size_t ldq = (size_t)nb * ES__QK_K, lds = (size_t)nb * KS_SC(K);
    float *sp = qp + KS_PR * ldq;
    for (int64_t r = r0; r < r1; r += KS_PR) {
        const int nr = (int)ES__MIN(KS_PR, r1 - r);
        for (int i = 0; i < KS_PR; i++)
            if (i < nr) ksum_convert(K, w + (size_t)(r + i) * row_bytes, nb, qp + i * ldq, sp + i * lds);
            else {
                memcpy(qp + i * ldq, qp + (nr - 1) * ldq, sizeof(float) * ldq);
                memcpy(sp + i * lds, sp + (nr - 1) * lds, sizeof(float) * lds);
            }
        for (int64_t t = 0; t < nt; t += KS_PT) {
            const int k = (int)ES__MIN(KS_PT, nt - t);
            float out[KS_PR * KS_PT];
            if (k > KS_PT || k < 1) __builtin_unreachable();
            switch (k) {
            case 1: ksum_ptile(K, qp, ldq, sp, lds, xp + (size_t)t * ldxp, ldxp, 1, nb, out); break;
            case 2: ksum_ptile(K, qp, ldq, sp, lds, xp + (size_t)t * ldxp, ldxp, 2 <= KS_PT ? 2 : 1, nb, out); break;
            default: ksum_ptile(K, qp, ldq, sp, lds, xp + (size_t)t * ldxp, ldxp, 3 <= KS_PT ? 3 : 1, nb, out); break;
            }
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < k; j++) y[(t + j) * ldy + (r - r0 + i)] = out[i * KS_PT + j];
        }
    }
}

/* Rows [r0, r1) for n_tok tokens, y[t * ldy + (r - r0)]. The tokens are prepared KS_TOK at a time
 * into xp (the panel); for each block, row i goes with row i + half (two sequential streams, as
 * DEF_ROWS) through token tiles of KS_TILE(K) while the two rows stay in L1, the first tile
 * prefetching PF_AHEAD ahead; blocks of more than KS_STREAM(K) tokens go through the panel. */
INLINE void rows_ksum(es__dtype K, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1,
                      const float *x, int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *xp) {
    const int64_t nb = n_in / ES__QK_K, n = r1 - r0, half = n / 2;
    const size_t ldxp = (size_t)nb * KS_XP(K);
    for (int64_t t0 = 0; t0 < n_tok; t0 += KS_TOK) {
        const int64_t nt = ES__MIN(KS_TOK, n_tok - t0);
        for (int64_t t = 0; t < nt; t++) ksum_prep(K, x + (t0 + t) * ldx, n_in, xp + (size_t)t * ldxp);
        float *yb = y + t0 * ldy;
        if (nt == 1) {
            ksum_rows1(K, w, row_bytes, nb, r0, n, xp, yb);
            continue;
        }
        if (nt > KS_STREAM(K)) {
            ksum_rows_panel(K, w, row_bytes, nb, r0, r1, xp, ldxp, nt, yb, ldy, xp + KS_TOK * ldxp);
            continue;
        }
        float out[4 * KS_TMAX] = {0}; /* gcc cannot tell that ksum_tile fills what is read */
        for (int64_t i = 0; i < half; i++) {
            const uint8_t *rows[2] = {w + (size_t)(r0 + i) * row_bytes, w + (size_t)(r0 + half + i) * row_bytes};
            const size_t pf = (size_t)(i + 1) * row_bytes + PF_AHEAD <= (size_t)half * row_bytes ? PF_AHEAD : 0;
            for (int64_t t = 0; t < nt; t += KS_TILE(K)) {
                const int k = (int)ES__MIN(KS_TILE(K), nt - t);
                ksum_tile(K, rows, 2, xp + (size_t)t * ldxp, ldxp, k, nb, t == 0 ? pf : 0, out);
                for (int j = 0; j < k; j++) {
                    yb[(t + j) * ldy + i] = out[j];
                    yb[(t + j) * ldy + half + i] = out[KS_TMAX + j];
                }
            }
        }
        if (n % 2) {
            const uint8_t *rows[1] = {w + (size_t)(r1 - 1) * row_bytes};
            for (int64_t t = 0; t < nt; t += KS_TILE(K)) {
                const int k = (int)ES__MIN(KS_TILE(K), nt - t);
                ksum_tile(K, rows, 1, xp + (size_t)t * ldxp, ldxp, k, nb, 0, out);
                for (int j = 0; j < k; j++) yb[(t + j) * ldy + n - 1] = out[j];
            }
        }
    }
}

/* The types' entry points: one specialisation each. */
static void rows_q4k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1, const float *x,
                     int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *xp) {
    rows_ksum(ES__DTYPE_Q4_K, w, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy, xp);
}

static void rows_q5k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1, const float *x,
                     int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *xp) {
    rows_ksum(ES__DTYPE_Q5_K, w, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy, xp);
}

static void rows_q6k(const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t r0, int64_t r1, const float *x,
                     int64_t ldx, int64_t n_tok, float *y, int64_t ldy, float *xp) {
    rows_ksum(ES__DTYPE_Q6_K, w, row_bytes, n_in, r0, r1, x, ldx, n_tok, y, ldy, xp);
}
