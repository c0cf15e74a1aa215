/* quant_k.c: ggml's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): 256-element super-blocks, scalar
 * reference dequantisation and the importance-free quantisers of ggml's reference (make_qkx2 for
 * the scale+min types, make_qx for Q6_K, make_q3 for Q3_K), written from the format's public
 * description.
 * Deliberately not here: the fast kernels (lib/cpu/kern_impl.c), importance-matrix quantisation.
 *
 * Layouts (little-endian, ggml's block structs):
 *   Q4_K (144 bytes) = { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }
 *     eight sub-blocks of 32 with 6-bit scale sc_j and min m_j packed in scales[] (get_sm below);
 *     element 64c + l (l < 32) is the low nibble of qs[32c + l] (sub-block 2c), element
 *     64c + 32 + l its high nibble (sub-block 2c + 1); x = (d sc_j) q - (dmin m_j).
 *   Q5_K (176 bytes) = { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
 *     as Q4_K plus a fifth bit: bit 2c of qh[l] for element 64c + l, bit 2c + 1 for 64c + 32 + l.
 *   Q6_K (210 bytes) = { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }
 *     for half h (128 elements) and l < 32: quant g (elements 128h + 32g + l, g < 4) takes its
 *     low 4 bits from ql[64h + l + 32 (g & 1)] (low nibble for g < 2, high for g >= 2) and its
 *     top 2 bits from bits 2g..2g+1 of qh[32h + l]; x = d scales[e / 16] (q - 32).
 *   Q2_K (84 bytes) = { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }
 *     sixteen sub-blocks of 16, scales[i] = sc_i | m_i << 4; element 128h + 32g + l (g < 4,
 *     l < 32) is bits 2g..2g+1 of qs[32h + l]; x = (d sc_i) q - (dmin m_i), i = e / 16.
 *   Q3_K (110 bytes) = { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }
 *     element e = 128h + 32g + l takes its low 2 bits as Q2_K does and its third bit from bit
 *     e / 32 of hmask[l]; q = low | third << 2, x = d (s_i - 32) (q - 4) with the 6-bit s_i of
 *     sub-block i = e / 16: low nibble of scales[i] (i < 8) or high nibble of scales[i - 8],
 *     top two bits from bits 2 (i / 4).. of scales[8 + i % 4].
 * Every dequantised value is a product exact in f32 (at most 11 + 6 + 6 significant bits) or, for
 * the min types, that exact product minus another exact product, rounded once: so any evaluation
 * order (with or without a fused multiply-add) gives the same float, which the kernels rely on. */
#include "gguf.h"

#include <math.h>
#include <string.h>

/* The reference rounds and compares in separate steps; keep contraction off as in quant.c. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QKK ES__QK_K
#define GROUP_EPS 1e-15f /* below this a group's largest magnitude counts as all zero */

bool es__is_k_quant(uint32_t type) {
    return type == ES__DTYPE_Q2_K || type == ES__DTYPE_Q3_K || type == ES__DTYPE_Q4_K || type == ES__DTYPE_Q5_K ||
           type == ES__DTYPE_Q6_K;
}

static float ld_f16(const uint8_t *p) {
    return es__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}
static void st_f16(uint8_t *p, float f) {
    uint16_t h = es__f32_to_f16(f);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* Round to nearest, ties to even, as ggml's nearest_int does in its valid range (|v| < 2^22);
 * outside it (and for NaN) ggml's result is meaningless, so we saturate (NaN gives 0) and let the
 * caller's clamp decide. */
static int nearest(float v) {
    if (!(v == v)) return 0;
    if (v > 4194303.0f) return 4194303;
    if (v < -4194303.0f) return -4194303;
    return (int)rintf(v);
}

/* Sub-block j's 6-bit scale and min from the 12 packed bytes: j < 4 keep them in the low six
 * bits of bytes j and j + 4; j >= 4 split them into a nibble of byte j + 4 and the top two bits
 * of bytes j - 4 (scale) and j (min). */
static void get_sm(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void put_sm(uint8_t *s, int j, int sc, int m) {
    if (j < 4) {
        s[j] = (uint8_t)sc;
        s[j + 4] = (uint8_t)m;
    } else {
        s[j + 4] = (uint8_t)((sc & 15) | ((m & 15) << 4));
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((m >> 4) << 6);
    }
}

/* ---- quantisation helpers (ggml's reference algorithms) */

/* Scale and min for n values with levels 0..nmax under weights w: start from the min/max grid,
 * then try nstep + 1 rescaled grids and keep the weighted least-squares fit with the smallest
 * weighted squared error (absolute error with mad, as Q2_K's reference judges). L receives the
 * levels; returns the scale, *neg_min = -min >= 0. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                           float rdelta, int nstep, bool mad) {
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0) mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *neg_min = -mn;
        return 0.0f;
    }
    float iscale = nmax / (mx - mn), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest(iscale * (x[i] - mn));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + mn - x[i];
        best += w[i] * (mad ? fabsf(diff) : diff * diff);
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (mx - mn);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest(iscale * (x[i] - mn));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            aux[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        const float D = sum_w * sl2 - sl * sl;
        if (!(D > 0)) continue;
        float s = (sum_w * sxl - sum_x * sl) / D, m = (sl2 * sum_x - sl * sxl) / D;
        if (m > 0) {
            m = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * aux[i] + m - x[i];
            err += w[i] * (mad ? fabsf(diff) : diff * diff);
        }
        if (err < best) {
            memcpy(L, aux, (size_t)n);
            best = err;
            scale = s;
            mn = m;
        }
    }
    *neg_min = -mn;
    return scale;
}

/* The value of largest magnitude among n (the first of equals), and that magnitude in *amax: the
 * symmetric fits scale from its sign as well as its size. */
static float largest_magnitude(int n, const float *x, float *amax) {
    float mx = 0;
    *amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > *amax) {
            *amax = ax;
            mx = x[i];
        }
    }
    return mx;
}

/* Symmetric scale for n values with levels -nmax..nmax-1 (stored + nmax in L), weights x^2: the
 * least-squares scale on the amax grid and on 18 nearby grids, keeping the best fit. */
static float fit_scale_sym(int n, int nmax, const float *x, uint8_t *L) {
    float amax;
    const float mx = largest_magnitude(n, x, &amax);
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / mx, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (uint8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / mx;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest(iscale * x[i]);
                L[i] = (uint8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---- Q4_K and Q5_K: shared scale/min search, then levels against the stored (rounded) scales */

/* One super-block of x into d, dmin, the packed scales and levels L[256] in 0..nmax. */
static void scale_min_block(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *dm4,
                            uint8_t *scales, uint8_t *L) {
    float sc[8], mn[8], w[32], max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(xs[l]);
        sc[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mn[j], rmin, rdelta, nstep, false);
        if (sc[j] > max_sc) max_sc = sc[j];
        if (mn[j] > max_mn) max_mn = mn[j];
    }
    const float inv_sc = max_sc > 0 ? 63.f / max_sc : 0.f, inv_mn = max_mn > 0 ? 63.f / max_mn : 0.f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest(inv_sc * sc[j]), lm = (uint8_t)nearest(inv_mn * mn[j]);
        put_sm(scales, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    st_f16(dm4, max_sc / 63.f);
    st_f16(dm4 + 2, max_mn / 63.f);
    const float d = ld_f16(dm4), dmin = ld_f16(dm4 + 2);
    for (int j = 0; j < 8; j++) {
        int s, m;
        get_sm(scales, j, &s, &m);
        const float ds = d * s;
        if (ds == 0) continue; /* keeps the levels of the search */
        const float dm = dmin * m;
        for (int i = 0; i < 32; i++) {
            int l = nearest((x[32 * j + i] + dm) / ds);
            L[32 * j + i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        }
    }
}

static void quantize_q4_k(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QKK, y += 144) {
        uint8_t L[QKK];
        scale_min_block(x, 15, -1.0f, 0.1f, 20, y, y + 4, L);
        uint8_t *q = y + 16;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) q[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void quantize_q5_k(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QKK, y += 176) {
        uint8_t L[QKK];
        scale_min_block(x, 31, -0.5f, 0.1f, 15, y, y + 4, L);
        uint8_t *qh = y + 16, *q = y + 48;
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
                q[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            }
    }
}

static void quantize_q6_k(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QKK, y += 210) {
        uint8_t L[QKK];
        float sc[16], max_abs = 0, max_sc = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_scale_sym(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(sc[j]) > max_abs) {
                max_abs = fabsf(sc[j]);
                max_sc = sc[j];
            }
        }
        memset(y, 0, 210);
        if (max_abs < GROUP_EPS) continue;
        int8_t *scales = (int8_t *)(y + 192);
        const float iscale = -128.f / max_sc;
        st_f16(y + 208, 1 / iscale);
        for (int j = 0; j < 16; j++) {
            const int l = nearest(iscale * sc[j]);
            scales[j] = (int8_t)(l < 127 ? l : 127);
        }
        const float d = ld_f16(y + 208);
        for (int j = 0; j < 16; j++) {
            const float ds = d * scales[j];
            if (ds == 0) continue;
            for (int i = 0; i < 16; i++) {
                int l = nearest(x[16 * j + i] / ds);
                L[16 * j + i] = (uint8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y + 64 * h, *qh = y + 128 + 32 * h;
            const uint8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 15) | ((Lh[l + 64] & 15) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 15) | ((Lh[l + 96] & 15) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---- Q2_K and Q3_K: sixteen sub-blocks of 16 */

/* Levels L[256] in 0..3 into qs[64]: element 128h + 32g + l in bits 2g of qs[32h + l]. */
static void pack2(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *Lh = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(Lh[0] | Lh[32] << 2 | Lh[64] << 4 | Lh[96] << 6);
        }
}

static void quantize_q2_k(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QKK, y += 84) {
        uint8_t L[QKK];
        float sc[16], mn[16], w[16], max_sc = 0, max_mn = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            sc[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mn[j], -0.5f, 0.1f, 15, true);
            if (sc[j] > max_sc) max_sc = sc[j];
            if (mn[j] > max_mn) max_mn = mn[j];
        }
        uint8_t *scales = y;
        const float isc = max_sc > 0 ? 15.f / max_sc : 0.f, imn = max_mn > 0 ? 15.f / max_mn : 0.f;
        for (int j = 0; j < 16; j++) {
            /* the reference stores these unclamped; a fit's scale cannot exceed the largest, but a
             * negative one (never seen) must not spill into the min's nibble */
            const int ls = nearest(isc * sc[j]), lm = nearest(imn * mn[j]);
            scales[j] = (uint8_t)((ls < 0 ? 0 : ls > 15 ? 15 : ls) | (lm < 0 ? 0 : lm > 15 ? 15 : lm) << 4);
        }
        st_f16(y + 80, max_sc / 15.f);
        st_f16(y + 82, max_mn / 15.f);
        const float d = ld_f16(y + 80), dmin = ld_f16(y + 82);
        for (int j = 0; j < 16; j++) {
            const float ds = d * (scales[j] & 15);
            if (ds == 0) continue; /* keeps the levels of the search */
            const float dm = dmin * (scales[j] >> 4);
            for (int i = 0; i < 16; i++) {
                const int l = nearest((x[16 * j + i] + dm) / ds);
                L[16 * j + i] = (uint8_t)(l < 0 ? 0 : l > 3 ? 3 : l);
            }
        }
        pack2(L, y + 16);
    }
}

/* Symmetric levels -nmax..nmax-1 for n values (stored + nmax in L), weights x^2: the amax grid,
 * then up to five passes that move single levels while that raises the fit (sum w x l)^2 /
 * sum w l^2; returns the least-squares scale (ggml's make_q3_quants with rmse). */
static float fit_scale_q3(int n, int nmax, const float *x, uint8_t *L) {
    float amax;
    const float mx = largest_magnitude(n, x, &amax);
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / mx;
    int lv[32];
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest(iscale * x[i]);
        lv[i] = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * lv[i];
        suml2 += w * lv[i] * lv[i];
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * lv[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * lv[i] * lv[i];
            int l = nearest(x[i] * sl2 / slx);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            if (l == lv[i]) continue;
            slx += w * x[i] * l;
            sl2 += w * l * l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                lv[i] = l;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(lv[i] + nmax);
    return sumlx / suml2;
}

/* Sub-block i's 6-bit Q3_K scale (0..63, stored + 32) from the 12 packed bytes. */
static int q3_scale(const uint8_t *s, int i) {
    const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    return lo | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4;
}

static void quantize_q3_k(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QKK, y += 110) {
        uint8_t L[QKK];
        float sc[16], amax = 0, max_sc = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max_sc = sc[j];
            }
        }
        uint8_t *hmask = y, *qs = y + 32, *scales = y + 96;
        memset(scales, 0, 12);
        if (max_sc != 0) {
            const float iscale = -32.f / max_sc;
            for (int j = 0; j < 16; j++) {
                int l = nearest(iscale * sc[j]);
                l = (l < -32 ? -32 : l > 31 ? 31 : l) + 32;
                scales[j < 8 ? j : j - 8] |= (uint8_t)((l & 15) << (j < 8 ? 0 : 4));
                scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            st_f16(y + 108, 1 / iscale);
        } else {
            st_f16(y + 108, 0.0f);
        }
        const float d = ld_f16(y + 108);
        for (int j = 0; j < 16; j++) {
            const float ds = d * (q3_scale(scales, j) - 32);
            if (ds == 0) continue;
            for (int i = 0; i < 16; i++) {
                const int l = nearest(x[16 * j + i] / ds);
                L[16 * j + i] = (uint8_t)((l < -4 ? -4 : l > 3 ? 3 : l) + 4);
            }
        }
        memset(hmask, 0, 32);
        for (int e = 0; e < QKK; e++)
            if (L[e] > 3) {
                hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                L[e] -= 4;
            }
        pack2(L, qs);
    }
}

void es__quantize_k(uint32_t type, const float *x, uint8_t *y, int64_t nb) {
    switch (type) {
    case ES__DTYPE_Q2_K: quantize_q2_k(x, y, nb); break;
    case ES__DTYPE_Q3_K: quantize_q3_k(x, y, nb); break;
    case ES__DTYPE_Q4_K: quantize_q4_k(x, y, nb); break;
    case ES__DTYPE_Q5_K: quantize_q5_k(x, y, nb); break;
    case ES__DTYPE_Q6_K: quantize_q6_k(x, y, nb); break;
    }
}

/* ---- dequantisation */

static void dequant_q4_q5(const uint8_t *x, float *y, bool five) {
    const float d = ld_f16(x), dmin = ld_f16(x + 2);
    const uint8_t *scales = x + 4, *qh = x + 16, *q = x + (five ? 48 : 16);
    for (int c = 0; c < 4; c++) {
        for (int half = 0; half < 2; half++) {
            int s, m;
            get_sm(scales, 2 * c + half, &s, &m);
            const float ds = d * s, dm = dmin * m;
            for (int l = 0; l < 32; l++) {
                int v = half ? q[32 * c + l] >> 4 : q[32 * c + l] & 15;
                if (five) v |= ((qh[l] >> (2 * c + half)) & 1) << 4;
                y[64 * c + 32 * half + l] = ds * v - dm;
            }
        }
    }
}

static void dequant_q6(const uint8_t *x, float *y) {
    const float d = ld_f16(x + 208);
    const int8_t *scales = (const int8_t *)(x + 192);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x + 64 * h, *qh = x + 128 + 32 * h;
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const int e = 128 * h + 32 * g + l;
                const uint8_t lo = ql[l + 32 * (g & 1)];
                const int v = ((g < 2 ? lo & 15 : lo >> 4) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
                y[e] = d * scales[e / 16] * v;
            }
    }
}

/* Q2_K / Q3_K: element e's integer quant and its sub-block's (a, b), x = a q + b. */
static void unpack16(uint32_t type, const uint8_t *x, int8_t *q, float *a, float *b) {
    if (type == ES__DTYPE_Q2_K) {
        const float d = ld_f16(x + 80), dmin = ld_f16(x + 82);
        for (int i = 0; i < 16; i++) {
            a[i] = d * (x[i] & 15);
            b[i] = -(dmin * (x[i] >> 4));
        }
        for (int e = 0; e < QKK; e++) q[e] = (int8_t)((x[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
        return;
    }
    const float d = ld_f16(x + 108);
    for (int i = 0; i < 16; i++) {
        a[i] = d * (q3_scale(x + 96, i) - 32);
        b[i] = 0.0f;
    }
    for (int e = 0; e < QKK; e++) {
        const int lo = (x[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        q[e] = (int8_t)(lo + 4 * ((x[e % 32] >> (e / 32)) & 1) - 4);
    }
}

void es__k_unpack16(uint32_t type, const uint8_t *x, int8_t *q, float *a, float *b) {
    unpack16(type, x, q, a, b);
}

void es__dequantize_k(uint32_t type, const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, y += QKK) {
        switch (type) {
        case ES__DTYPE_Q2_K:
        case ES__DTYPE_Q3_K: {
            int8_t q[QKK];
            float a[16], m[16];
            unpack16(type, x + (type == ES__DTYPE_Q2_K ? 84 : 110) * b, q, a, m);
            /* Q2_K: one rounding of (d sc) q - dmin m, both exact; Q3_K: the exact product alone
             * (adding its zero b would turn a -0 into +0) */
            if (type == ES__DTYPE_Q2_K)
                for (int e = 0; e < QKK; e++) y[e] = a[e / 16] * q[e] + m[e / 16];
            else
                for (int e = 0; e < QKK; e++) y[e] = a[e / 16] * q[e];
            break;
        }
        case ES__DTYPE_Q4_K: dequant_q4_q5(x + 144 * b, y, false); break;
        case ES__DTYPE_Q5_K: dequant_q4_q5(x + 176 * b, y, true); break;
        case ES__DTYPE_Q6_K: dequant_q6(x + 210 * b, y); break;
        }
    }
}

/* ---- for backends that repack the super-blocks (lib/vulkan/weights.c) */

void es__k_unpack(uint32_t type, const uint8_t *x, int8_t *q, float *a, float *b) {
    if (type == ES__DTYPE_Q6_K) {
        const float d = ld_f16(x + 208);
        for (int e = 0; e < QKK; e++) {
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            const uint8_t lo = x[64 * h + l + 32 * (g & 1)];
            q[e] = (int8_t)(((g < 2 ? lo & 15 : lo >> 4) | (((x[128 + 32 * h + l] >> (2 * g)) & 3) << 4)) - 32);
        }
        for (int j = 0; j < 8; j++) {
            a[j] = d * (int8_t)x[192 + 2 * j];
            b[j] = d * (int8_t)x[192 + 2 * j + 1];
        }
        return;
    }
    const bool five = type == ES__DTYPE_Q5_K;
    const float d = ld_f16(x), dmin = ld_f16(x + 2);
    const uint8_t *qh = x + 16, *qs = x + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        int s, m;
        get_sm(x + 4, j, &s, &m);
        a[j] = d * s;
        b[j] = -(dmin * m);
        for (int l = 0; l < 32; l++) {
            int v = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15;
            if (five) v |= ((qh[l] >> j) & 1) << 4;
            q[32 * j + l] = (int8_t)v;
        }
    }
}

void es__k_scale_min(const uint8_t *x, int j, int *sc, int *m) {
    get_sm(x + 4, j, sc, m);
}
