/* quant_iq4.c: ggml's IQ4_NL: blocks of 32 elements on a fixed non-uniform 4-bit grid, its scalar
 * dequantisation and the importance-free quantiser of ggml's reference, written from the
 * format's public description.
 *
 * Layout (18 bytes, little-endian) = { f16 d; u8 qs[16]; }: element l < 16 is the low nibble of
 * qs[l], element l + 16 its high nibble; x = d * values[nibble]. The grid values are at most 7
 * significant bits, so d * value is exact in f32 and every evaluation order agrees. */
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

static void quantize_block(const float *x, uint8_t *y) {
    float amax = 0, mx = 0;
    for (int j = 0; j < QB; j++) {
        const float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            mx = x[j];
        }
    }
    memset(y, 0, 18);
    if (amax < GROUP_EPS) return;
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
    const uint16_t h = es__f32_to_f16(d);
    y[0] = (uint8_t)(h & 0xff);
    y[1] = (uint8_t)(h >> 8);
    /* the levels against the fitted scale before its rounding to f16, as the reference does */
    const float id = d != 0 ? 1 / d : 0.0f;
    for (int j = 0; j < QB / 2; j++)
        y[2 + j] = (uint8_t)(nearest_index(id * x[j]) | nearest_index(id * x[j + QB / 2]) << 4);
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
