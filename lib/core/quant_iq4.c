/* quant_iq4.c: ggml's two types on the fixed non-uniform 4-bit grid, IQ4_NL (blocks of 32) and
 * IQ4_XS (super-blocks of 256: eight such blocks sharing one f16 scale through 6-bit integer
 * scales), their scalar dequantisation and the importance-free quantisers of ggml's reference,
 * written from the formats' public description.
 *
 * IQ4_NL (18 bytes, little-endian) = { f16 d; u8 qs[16]; }: element l < 16 is the low nibble of
 * qs[l], element l + 16 its high nibble; x = d * values[nibble]. The grid values are at most 7
 * significant bits, so d * value is exact in f32 and every evaluation order agrees.
 * IQ4_XS (136 bytes) = { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: sub-block j (32
 * elements) has the 6-bit scale ls_j = (nibble j % 2 of scales_l[j / 2]) | (bits 2j, 2j + 1 of
 * scales_h) << 4 and its nibbles in qs[16 j .. 16 j + 15] as IQ4_NL's; x = (d (ls_j - 32)) *
 * values[nibble]. d (ls - 32) has at most 17 significant bits and a value 7, so both products
 * are exact in f32 too. */
#include "gguf.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QB ES__QK_IQ4
#define GROUP_EPS 1e-15f
#define NTRY 7 /* the reference's scale search: grids -NTRY..NTRY around the amax grid */

const int8_t es__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The grid index nearest v (ties to the lower value), by bisection of the sorted grid. */
static int nearest_index(float v) {
    const int8_t *g = es__iq4nl_values;
    if (!(v > g[0])) return 0; /* NaN too */
    if (v >= g[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < g[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - g[hi - 1] < g[hi] - v ? hi - 1 : hi;
}

/* The weighted least-squares fit sum w x q / sum w q^2 of x on the grid scaled by 1 / id, with
 * weights x^2: *sqx and *sq2 receive the two sums. */
static void fit(const float *x, float id, float *sqx, float *sq2) {
    float a = 0, b = 0;
    for (int j = 0; j < QB; j++) {
        const float q = es__iq4nl_values[nearest_index(id * x[j])], w = x[j] * x[j];
        a += w * q * x[j];
        b += w * q * q;
    }
    *sqx = a;
    *sq2 = b;
}

/* A block of 32's fitted scale (*d), or false when the block is all but zero. */
static bool block_scale(const float *x, float *d_out) {
    float amax = 0, mx = 0;
    for (int j = 0; j < QB; j++) {
        const float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            mx = x[j];
        }
    }
    if (amax < GROUP_EPS) return false;
    /* the largest magnitude at 127 (the grid's top, 113, takes it), then the best of 2 NTRY + 1
     * grids that put it near the grid's bottom, -127 */
    float sqx, sq2;
    fit(x, 1 / (mx / 127.0f), &sqx, &sq2);
    float d = sqx / sq2, best = d * sqx;
    for (int t = -NTRY; t <= NTRY; t++) {
        fit(x, (t - 127.0f) / mx, &sqx, &sq2);
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    *d_out = d;
    return true;
}

/* A block's 16 bytes of nibbles: the grid levels of x / d (id = 1 / d, 0 for none). */
static void put_levels(const float *x, float id, uint8_t *qs) {
    for (int j = 0; j < QB / 2; j++)
        qs[j] = (uint8_t)(nearest_index(id * x[j]) | nearest_index(id * x[j + QB / 2]) << 4);
}

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = es__f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static void quantize_block(const float *x, uint8_t *y) {
    float d;
    memset(y, 0, 18);
    if (!block_scale(x, &d)) return;
    put_f16(y, d);
    /* the levels against the fitted scale before its rounding to f16, as the reference does */
    put_levels(x, d != 0 ? 1 / d : 0.0f, y + 2);
}

/* ggml's nearest_int in its range (round to nearest, ties to even); saturated outside it and 0
 * for NaN (a non-finite input's scale), where ggml's is meaningless and the caller clamps. */
static int nearest_int(float v) {
    if (!(v == v)) return 0;
    return v > 4194303.0f ? 4194303 : v < -4194303.0f ? -4194303 : (int)rintf(v);
}

/* IQ4_XS: each block of 32 fitted as IQ4_NL's, then the super-block scale d = -s / 32 for the
 * fitted scale s of largest magnitude (so it takes the integer scale -32, the bottom of the
 * range), each block's integer scale the nearest to its own (clamped to -32..31), and the levels
 * against d times it (both before rounding d to f16, as the reference does). */
static void quantize_super(const float *x, uint8_t *y) {
    float sc[ES__QK_K / QB], smax = 0, amax = 0;
    for (int j = 0; j < ES__QK_K / QB; j++) {
        if (!block_scale(x + QB * j, &sc[j])) sc[j] = 0;
        if (fabsf(sc[j]) > amax) {
            amax = fabsf(sc[j]);
            smax = sc[j];
        }
    }
    const float d = -smax / 32, id = d != 0 ? 1 / d : 0.0f;
    memset(y, 0, ES__IQ4XS_BYTES);
    put_f16(y, d);
    uint16_t sh = 0;
    for (int j = 0; j < ES__QK_K / QB; j++) {
        int l = nearest_int(id * sc[j]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        const float dl = d * (float)l;
        put_levels(x + QB * j, dl != 0 ? 1 / dl : 0.0f, y + 8 + 16 * j);
        l += 32;
        y[4 + j / 2] |= (uint8_t)((l & 15) << 4 * (j % 2));
        sh |= (uint16_t)((l >> 4) << 2 * j);
    }
    y[2] = (uint8_t)(sh & 0xff);
    y[3] = (uint8_t)(sh >> 8);
}

float es__iq4_xs_scale(const uint8_t *x, int j) {
    const int ls = ((x[4 + j / 2] >> 4 * (j % 2)) & 15) | ((((x[2] | x[3] << 8) >> 2 * j) & 3) << 4);
    return es__f16_to_f32((uint16_t)(x[0] | x[1] << 8)) * (float)(ls - 32);
}

void es__quantize_iq4_xs(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) quantize_super(x + ES__QK_K * b, y + ES__IQ4XS_BYTES * b);
}

void es__dequantize_iq4_xs(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += ES__IQ4XS_BYTES)
        for (int j = 0; j < ES__QK_K / QB; j++, y += QB) {
            const float dl = es__iq4_xs_scale(x, j);
            const uint8_t *qs = x + 8 + 16 * j;
            for (int l = 0; l < QB / 2; l++) {
                y[l] = dl * es__iq4nl_values[qs[l] & 15];
                y[l + QB / 2] = dl * es__iq4nl_values[qs[l] >> 4];
            }
        }
}

void es__quantize_iq4_nl(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) quantize_block(x + QB * b, y + 18 * b);
}

void es__dequantize_iq4_nl(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 18, y += QB) {
        const float d = es__f16_to_f32((uint16_t)(x[0] | x[1] << 8));
        for (int j = 0; j < QB / 2; j++) {
            y[j] = d * es__iq4nl_values[x[2 + j] & 15];
            y[j + QB / 2] = d * es__iq4nl_values[x[2 + j] >> 4];
        }
    }
}
