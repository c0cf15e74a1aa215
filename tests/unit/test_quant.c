/* test_quant.c: half/bfloat16 conversions and the Q8_0/Q4_0 quantisers against independently
 * computed expectations: exhaustive over all 16-bit patterns where that is possible, a
 * nearest-value search in double precision for rounding, hand-computed blocks for the quantisers
 * (ties, clamping, nibble order, sign of the scale) and error bounds on random data. */
#include "gguf.h"

#include "../test.h"

#include <float.h>
#include <stdint.h>

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- half precision, from the definition */

static double half_value(uint16_t h) { /* finite h only */
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

/* The f16 nearest to x (ties to even mantissa), found by binary search over the ordered positive
 * f16 values; values at or past 65520 (the midpoint between 65504 and 2^16) become infinity. */
static uint16_t ref_f32_to_f16(float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (isnan(x)) return 0xffff; /* caller checks NaN separately */
    if (a >= 65520.0) return sign | 0x7c00;
    unsigned lo = 0, hi = 0x7bff; /* largest h with value <= a */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (half_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    double vlo = half_value((uint16_t)lo);
    if (vlo == a) return (uint16_t)(sign | lo);
    double vhi = lo == 0x7bff ? 65536.0 : half_value((uint16_t)(lo + 1));
    double dlo = a - vlo, dhi = vhi - a;
    unsigned r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | r);
}

static void check_f16_one(float x) {
    uint16_t got = es__f32_to_f16(x), want = ref_f32_to_f16(x);
    CHECKF(got == want, "f32_to_f16(%a) = 0x%04x, expected 0x%04x", (double)x, got, want);
}

static void test_f16(void) {
    /* every half to float, against the definition */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = es__f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        bool ok;
        if (e == 0x1f && m == 0)
            ok = isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0);
        else if (e == 0x1f)
            ok = isnan(f) && (fbits(f) & 0x7fffff) == (uint32_t)m << 13; /* payload kept */
        else
            ok = (double)f == half_value((uint16_t)h) && (signbit(f) != 0) == ((h & 0x8000) != 0);
        if (!ok && bad++ < 5) CHECKF(ok, "f16_to_f32(0x%04x) = %a", h, (double)f);
        /* and back: every non-NaN half survives the round trip */
        if (!(e == 0x1f && m)) {
            uint16_t back = es__f32_to_f16(f);
            if (back != h && bad++ < 5) CHECKF(back == h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        } else {
            uint16_t back = es__f32_to_f16(f);
            bool nan_ok = (back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0 && (back & 0x8000) == (h & 0x8000);
            if (!nan_ok && bad++ < 5) CHECKF(nan_ok, "NaN 0x%04x -> 0x%04x", h, back);
        }
    }
    CHECK(bad == 0);

    /* rounding at every midpoint between neighbouring halves, and one float ulp either side */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double mid = (half_value((uint16_t)h) + half_value((uint16_t)(h + 1))) / 2;
        float m = (float)mid; /* exact: a midpoint needs 12 significant bits */
        CHECK((double)m == mid);
        float xs[6] = {m, nextafterf(m, 0), nextafterf(m, INFINITY), -m, -nextafterf(m, 0), -nextafterf(m, INFINITY)};
        for (int k = 0; k < 6; k++) {
            uint16_t got = es__f32_to_f16(xs[k]), want = ref_f32_to_f16(xs[k]);
            if (got != want && bad++ < 10) CHECKF(got == want, "f32_to_f16(%a) = 0x%04x, expected 0x%04x",
                                                  (double)xs[k], got, want);
        }
    }
    CHECK(bad == 0);

    /* hand-checked edges */
    CHECK(es__f32_to_f16(0.0f) == 0x0000);
    CHECK(es__f32_to_f16(-0.0f) == 0x8000);
    CHECK(es__f32_to_f16(1.0f) == 0x3c00);
    CHECK(es__f32_to_f16(65504.0f) == 0x7bff);
    CHECK(es__f32_to_f16(65519.99f) == 0x7bff);
    CHECK(es__f32_to_f16(65520.0f) == 0x7c00); /* tie between 65504 (odd) and 2^16: to even = inf */
    CHECK(es__f32_to_f16(FLT_MAX) == 0x7c00);
    CHECK(es__f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(es__f32_to_f16(0x1p-24f) == 0x0001);  /* smallest subnormal */
    CHECK(es__f32_to_f16(0x1p-25f) == 0x0000);  /* exactly half of it: ties to even (0) */
    CHECK(es__f32_to_f16(nextafterf(0x1p-25f, 1)) == 0x0001);
    CHECK(es__f32_to_f16(0x1.8p-24f) == 0x0002); /* 1.5 units: tie to even (2) */
    CHECK(es__f32_to_f16(0x1.ff8p-15f) == 0x03ff); /* largest subnormal */
    CHECK(es__f32_to_f16(0x1.ffcp-15f) == 0x0400); /* tie above it rounds up out of the subnormals */
    CHECK(es__f32_to_f16(1e-45f) == 0x0000);     /* f32 subnormal */
    CHECK(es__f32_to_f16(1.0f + 0x1p-11f) == 0x3c00); /* tie, even stays */
    CHECK(es__f32_to_f16(1.0f + 0x1.8p-10f) == 0x3c02); /* tie, odd rounds up */
    uint16_t qn = es__f32_to_f16(NAN);
    CHECK((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0);
    uint16_t sn = es__f32_to_f16(bitsf(0x7f800001u)); /* signalling NaN with a low payload stays NaN */
    CHECK((sn & 0x7c00) == 0x7c00 && (sn & 0x200) != 0);

    /* random bit patterns */
    test_rng r = {7};
    for (int i = 0; i < 200000; i++) {
        float x = bitsf((uint32_t)test_rng_u64(&r));
        if (isnan(x)) continue;
        uint16_t got = es__f32_to_f16(x), want = ref_f32_to_f16(x);
        if (got != want && bad++ < 10) check_f16_one(x);
    }
    /* random values in the half range, where rounding matters most */
    for (int i = 0; i < 200000; i++) {
        float x = ldexpf(test_rng_uniform(&r), (int)(test_rng_u64(&r) % 44) - 28);
        uint16_t got = es__f32_to_f16(x), want = ref_f32_to_f16(x);
        if (got != want && bad++ < 10) check_f16_one(x);
    }
    CHECK(bad == 0);
}

/* ---- bfloat16 */

static double bf16_mag(uint32_t b) { /* b = magnitude bits, 0..0x7f80 (0x7f80 stands for 2^128) */
    return b == 0x7f80 ? ldexp(1.0, 128) : (double)bitsf(b << 16);
}

static uint16_t ref_f32_to_bf16(float x) {
    uint32_t u = fbits(x), sign = (u >> 16) & 0x8000, lo = (u >> 16) & 0x7fff;
    double a = fabs((double)x);
    if (isinf(x)) return (uint16_t)(sign | 0x7f80);
    double vlo = bf16_mag(lo);
    if (vlo == a) return (uint16_t)(sign | lo);
    double vhi = bf16_mag(lo + 1);
    double dlo = a - vlo, dhi = vhi - a;
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | r);
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = es__bf16_to_f32((uint16_t)h);
        if (fbits(f) != h << 16 && bad++ < 5) CHECKF(0, "bf16_to_f32(0x%04x)", h);
        bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        uint16_t back = es__f32_to_bf16(f);
        if (!is_nan && back != h && bad++ < 5) CHECKF(0, "bf16 0x%04x -> 0x%04x", h, back);
        if (is_nan && !((back & 0x7f80) == 0x7f80 && (back & 0x40)) && bad++ < 5) CHECKF(0, "bf16 NaN 0x%04x", h);
    }
    test_rng r = {11};
    for (int i = 0; i < 400000; i++) {
        float x = bitsf((uint32_t)test_rng_u64(&r));
        if (isnan(x)) continue;
        uint16_t got = es__f32_to_bf16(x), want = ref_f32_to_bf16(x);
        if (got != want && bad++ < 10) CHECKF(0, "f32_to_bf16(%a) = 0x%04x, expected 0x%04x", (double)x, got, want);
    }
    CHECK(bad == 0);
    CHECK(es__f32_to_bf16(1.0f) == 0x3f80);
    CHECK(es__f32_to_bf16(bitsf(0x3f808000u)) == 0x3f80); /* tie, even stays */
    CHECK(es__f32_to_bf16(bitsf(0x3f818000u)) == 0x3f82); /* tie, odd rounds up */
    CHECK(es__f32_to_bf16(bitsf(0x3f808001u)) == 0x3f81);
    CHECK(es__f32_to_bf16(FLT_MAX) == 0x7f80);             /* rounds to infinity */
    CHECK(es__f32_to_bf16(bitsf(0x00000001u)) == 0x0000);  /* tiny subnormal */
    CHECK(es__f32_to_bf16(bitsf(0x00008000u)) == 0x0000);  /* subnormal tie, even */
    CHECK(es__f32_to_bf16(bitsf(0x00018000u)) == 0x0002);  /* subnormal tie, odd rounds up: no flush */
    CHECK(es__f32_to_bf16(-INFINITY) == 0xff80);
    uint16_t n = es__f32_to_bf16(bitsf(0x7f800001u)); /* NaN whose payload is all in the low half */
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
}

/* ---- Q8_0 */

static uint16_t blk_d(const uint8_t *b) {
    return (uint16_t)(b[0] | (b[1] << 8));
}

static void test_q8_0(void) {
    uint8_t blk[2 * 34];
    float x[64], y[64];

    /* amax 127: d = 1, q = round-half-away-from-zero(x) */
    float in1[32] = {127, -127, 2.5f, -2.5f, 0.5f, -0.5f, 0.49999997f, 1.5f, 100.25f, -100.75f, 0, -0.0f, 3.4f};
    int8_t want1[32] = {127, -127, 3, -3, 1, -1, 0, 2, 100, -101, 0, 0, 3};
    /* amax 254: d = 2, q = round(x / 2) */
    float in2[32] = {254, 3, -1, 1, -3, 5.5f, -254, 253};
    int8_t want2[32] = {127, 2, -1, 1, -2, 3, -127, 127};
    memcpy(x, in1, sizeof in1);
    memcpy(x + 32, in2, sizeof in2);
    memset(blk, 0xa5, sizeof blk);
    CHECK(es__quantize_row(ES__DTYPE_Q8_0, x, blk, 64));
    CHECK(blk_d(blk) == 0x3c00);
    CHECK(blk_d(blk + 34) == 0x4000);
    for (int j = 0; j < 32; j++) {
        CHECKF((int8_t)blk[2 + j] == want1[j], "q8_0 block 0 q[%d] = %d, expected %d", j, (int8_t)blk[2 + j], want1[j]);
        CHECKF((int8_t)blk[36 + j] == want2[j], "q8_0 block 1 q[%d] = %d, expected %d", j, (int8_t)blk[36 + j],
               want2[j]);
    }
    for (int i = 0; i < 64; i++) y[i] = NAN;
    CHECK(es__dequantize_row(ES__DTYPE_Q8_0, blk, y, 64));
    for (int j = 0; j < 32; j++) {
        CHECK(y[j] == (float)want1[j]);
        CHECK(y[32 + j] == 2.0f * (float)want2[j]);
    }

    /* all-zero block: d = 0, q = 0 */
    memset(x, 0, sizeof x);
    memset(blk, 0xa5, sizeof blk);
    CHECK(es__quantize_row(ES__DTYPE_Q8_0, x, blk, 32));
    CHECK(blk_d(blk) == 0);
    for (int j = 0; j < 32; j++) CHECK(blk[2 + j] == 0);

    /* hand-made bytes decode as d * q */
    uint8_t raw[34] = {0x00, 0x38}; /* d = 0.5 */
    raw[2] = 1;
    raw[3] = 0xff;
    raw[4] = 127;
    raw[5] = 0x80;
    CHECK(es__dequantize_row(ES__DTYPE_Q8_0, raw, y, 32));
    CHECK(y[0] == 0.5f && y[1] == -0.5f && y[2] == 63.5f && y[3] == -64.0f && y[4] == 0.0f);

    /* random blocks: the scale is f16(amax / 127), the largest element maps to +-127, every
     * element to the integer nearest x / d, and dequantised values are within d/2 */
    test_rng r = {3};
    int bad = 0;
    for (int it = 0; it < 2000; it++) {
        float scale = ldexpf(1.0f, (int)(test_rng_u64(&r) % 20) - 10);
        int jmax = 0;
        for (int j = 0; j < 32; j++) {
            x[j] = test_rng_uniform(&r) * scale;
            if (fabsf(x[j]) > fabsf(x[jmax])) jmax = j;
        }
        CHECK(es__quantize_row(ES__DTYPE_Q8_0, x, blk, 32));
        double d = (double)fabsf(x[jmax]) / 127.0;
        bool ok = blk_d(blk) == es__f32_to_f16((float)d) && (int8_t)blk[2 + jmax] == (x[jmax] > 0 ? 127 : -127);
        es__dequantize_row(ES__DTYPE_Q8_0, blk, y, 32);
        float dh = es__f16_to_f32(blk_d(blk));
        for (int j = 0; j < 32; j++) {
            double t = (double)x[j] / d, q = (int8_t)blk[2 + j];
            ok = ok && fabs(t - q) <= 0.5 + 1e-5 && y[j] == (float)q * dh;
        }
        if (!ok && bad++ < 5) CHECKF(ok, "random q8_0 block %d", it);
    }
    CHECK(bad == 0);
}

/* ---- Q4_0 */

static int nib(const uint8_t *blk, int j) { /* element j's 4-bit code */
    return j < 16 ? blk[2 + j] & 0xf : blk[2 + j - 16] >> 4;
}

static void test_q4_0(void) {
    uint8_t blk[18];
    float x[32], y[32];

    /* largest magnitude -8: d = 1, q = min(15, trunc(x + 8.5)) */
    float in[32] = {-8, 7.5f, 7.49f, 0, -0.5f, -0.51f, 3, -3, 6.5f, 1.0f, -7.9f};
    int want[32] = {0, 15, 15, 8, 8, 7, 11, 5, 15, 9, 0};
    for (int j = 11; j < 32; j++) {
        in[j] = (float)(j % 8) - 4.0f; /* -4..3 */
        want[j] = (int)floorf(in[j] + 8.5f);
    }
    memcpy(x, in, sizeof x);
    memset(blk, 0xa5, sizeof blk);
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, blk, 32));
    CHECK(blk_d(blk) == 0x3c00);
    for (int j = 0; j < 32; j++) CHECKF(nib(blk, j) == want[j], "q4_0 q[%d] = %d, expected %d", j, nib(blk, j), want[j]);
    /* nibble order: element 0 low nibble of byte 0, element 16 its high nibble */
    CHECK(blk[2] == (uint8_t)(want[0] | (want[16] << 4)));
    for (int j = 0; j < 32; j++) y[j] = NAN;
    CHECK(es__dequantize_row(ES__DTYPE_Q4_0, blk, y, 32));
    for (int j = 0; j < 32; j++) CHECK(y[j] == (float)(want[j] - 8));

    /* largest magnitude +8: d = -1, so +8 -> 0 and -8 -> 16 clamped to 15 */
    memset(x, 0, sizeof x);
    x[0] = 8;
    x[1] = -8;
    x[2] = 2;
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, blk, 32));
    CHECK(blk_d(blk) == 0xbc00);
    CHECK(nib(blk, 0) == 0 && nib(blk, 1) == 15 && nib(blk, 2) == 6 && nib(blk, 3) == 8);

    /* equal magnitudes: the first one sets the sign of d */
    memset(x, 0, sizeof x);
    x[5] = 4;
    x[20] = -4;
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, blk, 32));
    CHECK(blk_d(blk) == 0xb800); /* d = 4 / -8 = -0.5 */
    x[5] = -4;
    x[20] = 4;
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, blk, 32));
    CHECK(blk_d(blk) == 0x3800);

    /* zero block: d = 0 / -8 = -0 (stored 0x8000, as ggml stores it), every code 8 */
    memset(x, 0, sizeof x);
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, blk, 32));
    CHECK(blk_d(blk) == 0x8000);
    for (int j = 0; j < 16; j++) CHECK(blk[2 + j] == 0x88);

    /* hand-made bytes */
    uint8_t raw[18] = {0x00, 0x40, 0x1f}; /* d = 2; byte 0 = codes 15 (elem 0) and 1 (elem 16) */
    CHECK(es__dequantize_row(ES__DTYPE_Q4_0, raw, y, 32));
    CHECK(y[0] == 14.0f && y[16] == -14.0f && y[1] == -16.0f);

    /* random blocks: |d| = amax / 8 and each code is the truncation of x / d + 8.5, clamped */
    test_rng r = {5};
    int bad = 0;
    for (int it = 0; it < 2000; it++) {
        float scale = ldexpf(1.0f, (int)(test_rng_u64(&r) % 20) - 10);
        int jmax = 0;
        for (int j = 0; j < 32; j++) {
            x[j] = test_rng_uniform(&r) * scale;
            if (fabsf(x[j]) > fabsf(x[jmax])) jmax = j;
        }
        CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, blk, 32));
        double d = (double)x[jmax] / -8.0;
        bool ok = blk_d(blk) == es__f32_to_f16((float)d) && nib(blk, jmax) == 0;
        es__dequantize_row(ES__DTYPE_Q4_0, blk, y, 32);
        float dh = es__f16_to_f32(blk_d(blk));
        for (int j = 0; j < 32; j++) {
            double t = (double)x[j] / d + 8.5;
            int q = nib(blk, j);
            int want_q = t >= 15.0 ? 15 : (int)t;
            /* a value within float rounding of an integer boundary may land on either side */
            ok = ok && (q == want_q || fabs(t - floor(t + 0.5)) < 1e-4) && y[j] == (float)(q - 8) * dh;
        }
        if (!ok && bad++ < 5) CHECKF(ok, "random q4_0 block %d", it);
    }
    CHECK(bad == 0);
}

static void test_rows_and_edges(void) {
    float x[64], y[64];
    uint8_t buf[256];
    test_rng r = {9};
    for (int i = 0; i < 64; i++) x[i] = test_rng_uniform(&r) * 3.0f;
    /* float types: f32 exact, f16/bf16 equal to the scalar conversions */
    CHECK(es__quantize_row(ES__DTYPE_F32, x, buf, 64));
    CHECK(es__dequantize_row(ES__DTYPE_F32, buf, y, 64));
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK(es__quantize_row(ES__DTYPE_F16, x, buf, 64));
    CHECK(es__dequantize_row(ES__DTYPE_F16, buf, y, 64));
    for (int i = 0; i < 64; i++) CHECK(y[i] == es__f16_to_f32(es__f32_to_f16(x[i])));
    CHECK(buf[0] == (es__f32_to_f16(x[0]) & 0xff) && buf[1] == es__f32_to_f16(x[0]) >> 8); /* little-endian */
    CHECK(es__quantize_row(ES__DTYPE_BF16, x, buf, 64));
    CHECK(es__dequantize_row(ES__DTYPE_BF16, buf, y, 64));
    for (int i = 0; i < 64; i++) CHECK(y[i] == es__bf16_to_f32(es__f32_to_bf16(x[i])));

    /* block types need whole blocks; unknown types are refused */
    CHECK(!es__quantize_row(ES__DTYPE_Q8_0, x, buf, 33));
    CHECK(!es__quantize_row(ES__DTYPE_Q4_0, x, buf, 16));
    CHECK(!es__dequantize_row(ES__DTYPE_Q8_0, buf, y, 31));
    CHECK(!es__quantize_row(12, x, buf, 32));
    CHECK(!es__dequantize_row(12, buf, y, 32));
    CHECK(!es__quantize_row(ES__DTYPE_F32, x, buf, -1));

    /* blocks where ggml's 1/d overflows or inputs are not finite: defined results, no traps */
    for (int i = 0; i < 32; i++) x[i] = i % 2 ? 1e-40f : -1e-40f;
    CHECK(es__quantize_row(ES__DTYPE_Q8_0, x, buf, 32));
    CHECK(blk_d(buf) == 0);
    for (int j = 0; j < 32; j++) CHECK(buf[2 + j] == 0);
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, buf, 32));
    CHECK(blk_d(buf) == 0);
    x[3] = INFINITY;
    x[4] = NAN;
    CHECK(es__quantize_row(ES__DTYPE_Q8_0, x, buf, 32));
    CHECK(es__quantize_row(ES__DTYPE_Q4_0, x, buf, 32));

    /* element type table */
    es__dtype_traits t;
    CHECK(es__dtype_info(ES__DTYPE_Q8_0, &t) && t.block_elems == 32 && t.block_bytes == 34 && !strcmp(t.name, "q8_0"));
    CHECK(es__dtype_info(ES__DTYPE_Q4_0, &t) && t.block_elems == 32 && t.block_bytes == 18);
    CHECK(es__dtype_info(ES__DTYPE_BF16, &t) && t.block_bytes == 2 && !strcmp(t.name, "bf16"));
    CHECK(!es__dtype_info(9, &t) && !es__dtype_info(21, &t) && !es__dtype_info(1000, &t)); /* q8_1, iq3_s: not read */
    CHECK(es__dtype_info(ES__DTYPE_Q5_0, &t) && t.block_elems == 32 && t.block_bytes == 22 && !strcmp(t.name, "q5_0"));
    uint64_t nb;
    CHECK(es__dtype_row_bytes(ES__DTYPE_Q4_0, 64, &nb) && nb == 36);
    CHECK(es__dtype_row_bytes(ES__DTYPE_F16, 7, &nb) && nb == 14);
    CHECK(!es__dtype_row_bytes(ES__DTYPE_Q8_0, 40, &nb));
    CHECK(!es__dtype_row_bytes(ES__DTYPE_F32, UINT64_MAX / 2, &nb));
}

int main(void) {
    test_f16();
    test_bf16();
    test_q8_0();
    test_q4_0();
    test_rows_and_edges();
    TEST_MAIN_END();
}
