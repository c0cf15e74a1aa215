/* quant.c: scalar reference conversions between f32 and the stored weight types: IEEE half and
 * bfloat16 (round to nearest even, NaN kept quiet, infinities and subnormals exact), and ggml's
 * Q8_0 and Q4_0 blocks.
 *
 * The quantisers reproduce ggml's reference quantisers bit for bit, so files we write match files
 * llama.cpp writes from the same floats. Where ggml's reference has undefined behaviour (a block so
 * tiny that 1/d overflows, or non-finite inputs, make it convert inf/NaN to an integer) we store 0,
 * which is what x86 builds of ggml store there.
 * Deliberately not here: fast kernels (lib/cpu), the K-quants (quant_k.c), IQ4_NL and IQ4_XS (quant_iq4.c),
 * Q4_1/Q5_0/Q5_1 (quant_q5.c), other ggml block types.
 *
 * Block layouts (ggml): Q8_0 = { f16 d; int8 q[32]; } with x[j] = d * q[j].
 * Q4_0 = { f16 d; uint8 qs[16]; } with x[j] = d * ((qs[j] & 15) - 8) and
 * x[j + 16] = d * ((qs[j] >> 4) - 8) for j < 16.
 */
#include "gguf.h"

#include <math.h>
#include <string.h>

/* ggml computes x * id and the + 8.5f of Q4_0 as separate roundings; a fused multiply-add would
 * change results on targets with FMA, so contraction stays off in this file. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QK 32

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float es__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf, NaN (payload kept) */
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    /* subnormal: mant * 2^-24 is exact in f32 */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
}

/* Rounds m >> s to nearest, ties to even (0 < s < 32). */
static uint32_t shift_rne(uint32_t m, int s) {
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t es__f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xff, mant = u & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
    int e = (int)exp - 127;
    if (e >= 16) return (uint16_t)(sign | 0x7c00);
    if (e >= -14) /* normal range; a carry out of the mantissa bumps the exponent, up to inf */
        return (uint16_t)(sign | shift_rne(((uint32_t)(e + 15) << 23) | mant, 13));
    if (e >= -25) /* subnormal (or rounds up to the smallest normal): value = m * 2^(e - 23) */
        return (uint16_t)(sign | shift_rne(mant | 0x800000u, -e - 1));
    return sign; /* below half the smallest subnormal (f32 subnormals included) */
}

float es__bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t es__f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN: keep it quiet */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ---- Q8_0 and Q4_0 */

/* A scaled value to an integer as ggml's reference does, with 0 where the C conversion would be
 * undefined (see the file comment). */
static int to_int_round(float v) {
    return isfinite(v) && fabsf(v) < 1e9f ? (int)roundf(v) : 0;
}
static int to_int_trunc(float v) {
    return isfinite(v) && fabsf(v) < 1e9f ? (int)v : 0;
}

static void quantize_q8_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK, y += 2 + QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) {
            float a = fabsf(x[j]);
            amax = amax > a ? amax : a; /* ggml's MAX(amax, a): a NaN is taken only when it is a */
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = es__f32_to_f16(d);
        y[0] = (uint8_t)(dh & 0xff);
        y[1] = (uint8_t)(dh >> 8);
        for (int j = 0; j < QK; j++) y[2 + j] = (uint8_t)(int8_t)to_int_round(x[j] * id);
    }
}

static void quantize_q4_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK, y += 2 + QK / 2) {
        float amax = 0.0f, max = 0.0f; /* the signed value of largest magnitude, first one wins */
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = es__f32_to_f16(d);
        y[0] = (uint8_t)(dh & 0xff);
        y[1] = (uint8_t)(dh >> 8);
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[j + QK / 2] * id;
            int lo = to_int_trunc(x0 + 8.5f), hi = to_int_trunc(x1 + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            y[2 + j] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
        }
    }
}

bool es__quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    if (n < 0) return false;
    switch (type) {
    case ES__DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return true;
    case ES__DTYPE_F16:
    case ES__DTYPE_BF16: {
        uint8_t *y = dst;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = type == ES__DTYPE_F16 ? es__f32_to_f16(src[i]) : es__f32_to_bf16(src[i]);
            y[2 * i] = (uint8_t)(h & 0xff);
            y[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return true;
    }
    case ES__DTYPE_Q8_0:
        if (n % QK) return false;
        quantize_q8_0(src, dst, n / QK);
        return true;
    case ES__DTYPE_Q4_0:
        if (n % QK) return false;
        quantize_q4_0(src, dst, n / QK);
        return true;
    case ES__DTYPE_Q2_K:
    case ES__DTYPE_Q3_K:
    case ES__DTYPE_Q4_K:
    case ES__DTYPE_Q5_K:
    case ES__DTYPE_Q6_K:
        if (n % ES__QK_K) return false;
        es__quantize_k(type, src, dst, n / ES__QK_K);
        return true;
    case ES__DTYPE_IQ4_NL:
        if (n % ES__QK_IQ4) return false;
        es__quantize_iq4_nl(src, dst, n / ES__QK_IQ4);
        return true;
    case ES__DTYPE_IQ4_XS:
        if (n % ES__QK_K) return false;
        es__quantize_iq4_xs(src, dst, n / ES__QK_K);
        return true;
    case ES__DTYPE_Q4_1:
    case ES__DTYPE_Q5_0:
    case ES__DTYPE_Q5_1:
        if (n % ES__QK_Q5) return false;
        es__quantize_q5(type, src, dst, n / ES__QK_Q5);
        return true;
    }
    return false;
}

static float ld_f16(const uint8_t *p) {
    return es__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

bool es__dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *x = src;
    if (n < 0) return false;
    switch (type) {
    case ES__DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return true;
    case ES__DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = ld_f16(x + 2 * i);
        return true;
    case ES__DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = es__bf16_to_f32((uint16_t)(x[2 * i] | (x[2 * i + 1] << 8)));
        return true;
    case ES__DTYPE_Q8_0:
        if (n % QK) return false;
        for (int64_t b = 0; b < n / QK; b++, x += 2 + QK, dst += QK) {
            const float d = ld_f16(x);
            for (int j = 0; j < QK; j++) dst[j] = (float)(int8_t)x[2 + j] * d;
        }
        return true;
    case ES__DTYPE_Q4_0:
        if (n % QK) return false;
        for (int64_t b = 0; b < n / QK; b++, x += 2 + QK / 2, dst += QK) {
            const float d = ld_f16(x);
            for (int j = 0; j < QK / 2; j++) {
                dst[j] = (float)((x[2 + j] & 0xf) - 8) * d;
                dst[j + QK / 2] = (float)((x[2 + j] >> 4) - 8) * d;
            }
        }
        return true;
    case ES__DTYPE_Q2_K:
    case ES__DTYPE_Q3_K:
    case ES__DTYPE_Q4_K:
    case ES__DTYPE_Q5_K:
    case ES__DTYPE_Q6_K:
        if (n % ES__QK_K) return false;
        es__dequantize_k(type, x, dst, n / ES__QK_K);
        return true;
    case ES__DTYPE_IQ4_NL:
        if (n % ES__QK_IQ4) return false;
        es__dequantize_iq4_nl(x, dst, n / ES__QK_IQ4);
        return true;
    case ES__DTYPE_IQ4_XS:
        if (n % ES__QK_K) return false;
        es__dequantize_iq4_xs(x, dst, n / ES__QK_K);
        return true;
    case ES__DTYPE_Q4_1:
    case ES__DTYPE_Q5_0:
    case ES__DTYPE_Q5_1:
        if (n % ES__QK_Q5) return false;
        es__dequantize_q5(type, x, dst, n / ES__QK_Q5);
        return true;
    }
    return false;
}
