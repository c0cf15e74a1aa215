/* quant_q5.c: ggml's other 32-element block types, Q4_1, Q5_0 and Q5_1: their scalar
 * dequantisation, one block's integer quants (what the kernels and the Vulkan upload read), and
 * the reference quantisers, written from the format's public description. They matter because
 * llama.cpp falls back to them where a matrix's rows are not whole 256-element super-blocks:
 * Q4_K_M files of models whose width is not a multiple of 256 (Qwen2.5-0.5B's 896, SmolLM2's 576
 * and 960) hold most of their matrices as Q5_0, and Q5_K_M files as Q5_1.
 *
 * Layouts (little-endian), element l < 16 in the low nibble of qs[l], l + 16 in the high one, and
 * for Q5_0/Q5_1 element l's fifth bit in bit l of the 32-bit qh:
 *   Q4_1 (20 bytes) = { f16 d; f16 m; u8 qs[16]; }         x = d q + m, q in 0..15
 *   Q5_0 (22 bytes) = { f16 d; u8 qh[4]; u8 qs[16]; }      x = d (q - 16), q in 0..31
 *   Q5_1 (24 bytes) = { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } x = d q + m, q in 0..31
 * d q is exact in f32 (an 11-bit significand times 5 bits), so d q + m has one rounding whether
 * or not it is fused, and every path that forms it agrees. */
#include "gguf.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QB ES__QK_Q5

bool es__is_q5_family(uint32_t type) {
    return type == ES__DTYPE_Q4_1 || type == ES__DTYPE_Q5_0 || type == ES__DTYPE_Q5_1;
}

size_t es__q5_block_bytes(uint32_t type) {
    return type == ES__DTYPE_Q4_1 ? 20 : type == ES__DTYPE_Q5_0 ? 22 : type == ES__DTYPE_Q5_1 ? 24 : 0;
}

static float ld_f16(const uint8_t *p) {
    return es__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static void st_f16(uint8_t *p, float v) {
    const uint16_t h = es__f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

float es__q5_unpack(uint32_t type, const uint8_t *x, int8_t *q, float *m) {
    const bool five = type != ES__DTYPE_Q4_1, has_min = type != ES__DTYPE_Q5_0;
    const uint8_t *qs = x + (has_min ? 4 : 2) + (five ? 4 : 0);
    uint32_t qh = 0;
    if (five) memcpy(&qh, x + (has_min ? 4 : 2), 4); /* the layout is little-endian, as the hosts */
    const int off = type == ES__DTYPE_Q5_0 ? 16 : 0;
    for (int l = 0; l < QB / 2; l++) {
        const int hi0 = five ? (int)((qh >> l) & 1u) << 4 : 0, hi1 = five ? (int)((qh >> (l + 16)) & 1u) << 4 : 0;
        q[l] = (int8_t)(((qs[l] & 15) | hi0) - off);
        q[l + QB / 2] = (int8_t)(((qs[l] >> 4) | hi1) - off);
    }
    *m = has_min ? ld_f16(x + 2) : 0.0f;
    return ld_f16(x);
}

void es__dequantize_q5(uint32_t type, const uint8_t *x, float *y, int64_t nb) {
    const size_t bb = es__q5_block_bytes(type);
    for (int64_t b = 0; b < nb; b++, x += bb, y += QB) {
        int8_t q[QB];
        float m;
        const float d = es__q5_unpack(type, x, q, &m);
        /* no + 0 for Q5_0: d (q - 16) keeps its sign where it is zero, as ggml's does */
        if (type == ES__DTYPE_Q5_0)
            for (int l = 0; l < QB; l++) y[l] = d * (float)q[l];
        else
            for (int l = 0; l < QB; l++) y[l] = d * (float)q[l] + m;
    }
}

/* An integer from a scaled value as ggml's reference converts it (truncation), with 0 where the C
 * conversion would be undefined (quant.c's rule). */
static int trunc_int(float v) {
    return isfinite(v) && fabsf(v) < 1e9f ? (int)v : 0;
}

/* Q5_0: the signed value of largest magnitude (the first such) maps to -16. */
static void quantize_q5_0(const float *x, uint8_t *y) {
    float amax = 0.0f, max = 0.0f;
    for (int l = 0; l < QB; l++) {
        if (amax < fabsf(x[l])) {
            amax = fabsf(x[l]);
            max = x[l];
        }
    }
    const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    st_f16(y, d);
    uint32_t qh = 0;
    for (int l = 0; l < QB / 2; l++) {
        int q0 = trunc_int(x[l] * id + 16.5f), q1 = trunc_int(x[l + QB / 2] * id + 16.5f);
        q0 = q0 < 31 ? q0 : 31;
        q1 = q1 < 31 ? q1 : 31;
        y[6 + l] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << l | (uint32_t)((q1 >> 4) & 1) << (l + 16);
    }
    memcpy(y + 2, &qh, 4);
}

/* Q4_1 and Q5_1: the block's range [min, max] over 2^bits - 1 steps, quants rounded half up. */
static void quantize_min(uint32_t type, const float *x, uint8_t *y) {
    const bool five = type == ES__DTYPE_Q5_1;
    const int top = five ? 31 : 15;
    float min = FLT_MAX, max = -FLT_MAX; /* the reference's start: a block of NaNs keeps them */
    for (int l = 0; l < QB; l++) {
        min = x[l] < min ? x[l] : min;
        max = x[l] > max ? x[l] : max;
    }
    const float d = (max - min) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
    st_f16(y, d);
    st_f16(y + 2, min);
    uint8_t *qs = y + (five ? 8 : 4);
    uint32_t qh = 0;
    for (int l = 0; l < QB / 2; l++) {
        int q0 = trunc_int((x[l] - min) * id + 0.5f), q1 = trunc_int((x[l + QB / 2] - min) * id + 0.5f);
        q0 = q0 < top ? q0 : top; /* Q5_1's reference does not clamp: its quants never exceed 31 */
        q1 = q1 < top ? q1 : top;
        qs[l] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << l | (uint32_t)((q1 >> 4) & 1) << (l + 16);
    }
    if (five) memcpy(y + 4, &qh, 4);
}

void es__quantize_q5(uint32_t type, const float *x, uint8_t *y, int64_t nb) {
    const size_t bb = es__q5_block_bytes(type);
    for (int64_t b = 0; b < nb; b++, x += QB, y += bb) {
        if (type == ES__DTYPE_Q5_0) quantize_q5_0(x, y);
        else quantize_min(type, x, y);
    }
}
