/* test_kquant.c: the K-quants (Q4_K, Q5_K, Q6_K, Q2_K, Q3_K), IQ4_NL, Q4_1, Q5_0, Q5_1 and IQ4_XS in C: the library's dequantiser against an
 * element-by-element decoder written here from the format description, on random super-blocks
 * with ordinary, subnormal, zero, huge, infinite and NaN scales; quantise -> dequantise error
 * bounds and the quantiser's invariants (levels in range, scales that reproduce the input's
 * amplitude, zero blocks); and every CPU kernel level's matmul (one token and tiles) against
 * double precision, batch invariance and exact to_f32, and levels that promise the same arithmetic
 * against each other. The numpy side is tests/gguf/test_kquant.py. */
#include "cpu/kern.h"

#include "../test.h"

#include <stdint.h>

static test_rng rng = {20261126};

/* IQ4_NL, Q4_1, Q5_0 and Q5_1 (32-element blocks) are handled 256 elements, eight blocks, at a
 * time like the others */
#define NT 10
static const es__dtype ktypes[NT] = {ES__DTYPE_Q4_K, ES__DTYPE_Q5_K, ES__DTYPE_Q6_K, ES__DTYPE_Q2_K, ES__DTYPE_Q3_K,
                                     ES__DTYPE_IQ4_NL, ES__DTYPE_Q4_1, ES__DTYPE_Q5_0, ES__DTYPE_Q5_1, ES__DTYPE_IQ4_XS};
static const char *const knames[NT] = {"q4_K", "q5_K", "q6_K", "q2_K", "q3_K", "iq4_nl", "q4_1", "q5_0", "q5_1", "iq4_xs"};
static const size_t kbytes[NT] = {144, 176, 210, 84, 110, 144, 160, 176, 192, 136}; /* per 256 elements */
static const size_t b32bytes[NT] = {0, 0, 0, 0, 0, 18, 20, 22, 24, 0};               /* per 32-element block */
static const int iq4_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float f16f(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024.0 + m, e - 25);
    return (float)(s ? -v : v);
}

/* Element e of one super-block (IQ4_NL: of eight blocks), straight from the layout. */
static float ref_elem(int ti, const uint8_t *b, int e) {
    if (ti == 9) { /* IQ4_XS: sub-block j's 6-bit scale from scales_l (byte 4 + j / 2) and scales_h */
        const int j = e / 32, l = e % 32, sh = b[2] | b[3] << 8;
        const int ls = (b[4 + j / 2] >> 4 * (j % 2)) % 16 + 16 * ((sh >> 2 * j) & 3);
        const int nib = l < 16 ? b[8 + 16 * j + l] % 16 : b[8 + 16 * j + l - 16] / 16;
        const float dl = f16f((uint16_t)(b[0] | b[1] << 8)) * (float)(ls - 32);
        return dl * (float)iq4_grid[nib];
    }
    if (ti >= 6) { /* Q4_1 {d, m, qs}, Q5_0 {d, qh, qs}, Q5_1 {d, m, qh, qs}: x = d q + m */
        const uint8_t *blk = b + b32bytes[ti] * (size_t)(e / 32);
        const int l = e % 32, has_min = ti != 7, five = ti != 6;
        const uint8_t *qs = blk + 2 + 2 * has_min + 4 * five;
        int q = l < 16 ? qs[l] % 16 : qs[l - 16] / 16;
        if (five) q += 16 * ((blk[2 + 2 * has_min + l / 8] >> (l % 8)) & 1);
        const float d = f16f((uint16_t)(blk[0] | blk[1] << 8));
        if (!has_min) return d * (float)(q - 16);
        return d * (float)q + f16f((uint16_t)(blk[2] | blk[3] << 8));
    }
    if (ti == 5) {
        const uint8_t *blk = b + 18 * (e / 32);
        const int l = e % 32, nib = l < 16 ? blk[2 + l] % 16 : blk[2 + l - 16] / 16;
        return f16f((uint16_t)(blk[0] | blk[1] << 8)) * (float)iq4_grid[nib];
    }
    if (ti == 3 || ti == 4) {
        const int i = e / 16, h = e / 128, g = (e % 128) / 32, l = e % 32;
        const int lo = (b[(ti == 3 ? 16 : 32) + 32 * h + l] >> (2 * g)) & 3;
        if (ti == 3) {
            const float d = f16f((uint16_t)(b[80] | b[81] << 8)), dmin = f16f((uint16_t)(b[82] | b[83] << 8));
            const float ds = d * (float)(b[i] % 16), dm = dmin * (float)(b[i] / 16);
            return ds * (float)lo - dm;
        }
        const int s = (i < 8 ? b[96 + i] % 16 : b[96 + i - 8] / 16) + 16 * ((b[104 + i % 4] >> (2 * (i / 4))) & 3);
        const int q = lo + ((b[l] >> (e / 32)) & 1 ? 0 : -4);
        const float ds = f16f((uint16_t)(b[108] | b[109] << 8)) * (float)(s - 32);
        return ds * (float)q;
    }
    if (ti == 2) {
        const int h = e / 128, g = (e % 128) / 32, l = e % 32;
        const int lo = (b[64 * h + l + 32 * (g % 2)] >> (4 * (g / 2))) & 15, hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
        const float d = f16f((uint16_t)(b[208] | b[209] << 8));
        const float ds = d * (float)(int8_t)b[192 + e / 16];
        return ds * (float)(lo + 16 * hi - 32);
    }
    const int j = e / 32, c = e / 64, l = e % 32;
    const uint8_t *s = b + 4;
    int sc, m;
    if (j < 4)
        sc = s[j] % 64, m = s[j + 4] % 64;
    else
        sc = s[j + 4] % 16 + 16 * (s[j - 4] / 64), m = s[j + 4] / 16 + 16 * (s[j] / 64);
    const uint8_t *qs = b + (ti == 1 ? 48 : 16);
    int q = j % 2 ? qs[32 * c + l] / 16 : qs[32 * c + l] % 16;
    if (ti == 1) q += 16 * ((b[16 + l] >> j) & 1);
    const float d = f16f((uint16_t)(b[0] | b[1] << 8)), dmin = f16f((uint16_t)(b[2] | b[3] << 8));
    const float ds = d * (float)sc, dm = dmin * (float)m;
    return ds * (float)q - dm;
}

static bool same_float(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0;
}

/* Random super-blocks; scale halves drawn from class: 0 ordinary, 1 any bits (subnormal, zero,
 * huge, inf, NaN included), 2 zero. */
static void rand_blocks(int ti, uint8_t *w, int nb, int cls) {
    for (size_t i = 0; i < kbytes[ti] * (size_t)nb; i++) w[i] = (uint8_t)test_rng_u64(&rng);
    for (int b = 0; b < nb; b++) {
        uint8_t *blk = w + kbytes[ti] * (size_t)b;
        /* the f16 scales' offsets and count: Q6_K d; Q2_K d, dmin; Q3_K d; IQ4_NL one per 18 bytes */
        static const int first[NT] = {0, 0, 208, 80, 108, 0, 0, 0, 0, 0}, count[NT] = {2, 2, 1, 2, 1, 8, 16, 8, 16, 1},
                         step[NT] = {2, 2, 2, 2, 2, 18, 0, 22, 0, 2};
        for (int k = 0; k < count[ti]; k++) {
            /* Q4_1 and Q5_1: d and m at the start of each block */
            uint8_t *dp = blk + (step[ti] ? first[ti] + step[ti] * k : (int)b32bytes[ti] * (k / 2) + 2 * (k % 2));
            uint16_t h = (uint16_t)test_rng_u64(&rng);
            if (cls == 0) h = (uint16_t)((h & 0x83ff) | (uint16_t)(5 + test_rng_u64(&rng) % 8) << 10);
            if (cls == 2) h = 0;
            dp[0] = (uint8_t)h, dp[1] = (uint8_t)(h >> 8);
        }
    }
}

static void test_dequant(void) {
    enum { NB = 64 };
    static uint8_t w[210 * NB];
    static float y[256 * NB];
    for (int ti = 0; ti < NT; ti++)
        for (int cls = 0; cls < 3; cls++) {
            rand_blocks(ti, w, NB, cls);
            CHECK(es__dequantize_row(ktypes[ti], w, y, 256 * NB));
            int bad = 0;
            for (int b = 0; b < NB; b++)
                for (int e = 0; e < 256; e++) {
                    const float r = ref_elem(ti, w + kbytes[ti] * (size_t)b, e);
                    if (!same_float(y[256 * b + e], r) && bad++ < 3)
                        CHECKF(false, "%s dequant block %d elem %d: %g, expected %g (scale class %d)", knames[ti], b, e,
                               y[256 * b + e], r, cls);
                }
            CHECKF(bad == 0, "%s dequant: %d elements differ", knames[ti], bad);
        }
    /* sizes and refusals */
    float x[256] = {0};
    uint8_t buf[256];
    for (int ti = 0; ti < NT; ti++) {
        es__dtype_traits tr;
        uint64_t nb;
        const bool iq4 = b32bytes[ti] > 0; /* a 32-element block */
        CHECK(es__dtype_info(ktypes[ti], &tr) && tr.block_elems == (iq4 ? 32u : 256u) &&
              tr.block_bytes == (iq4 ? b32bytes[ti] : kbytes[ti]));
        CHECK(strcmp(tr.name, knames[ti]) == 0);
        CHECK(es__dtype_row_bytes(ktypes[ti], 512, &nb) && nb == 2 * kbytes[ti]);
        CHECK(!es__dtype_row_bytes(ktypes[ti], iq4 ? 48 : 288, &nb));
        CHECK(!es__quantize_row(ktypes[ti], x, buf, iq4 ? 40 : 128));
        CHECK(!es__dequantize_row(ktypes[ti], buf, x, iq4 ? 16 : 32));
        CHECK(es__kern_row_bytes(ktypes[ti], iq4 ? 48 : 288) == 0);
    }
}

static void test_quantize(void) {
    enum { N = 256 * 16 };
    static float x[N], y[N];
    static uint8_t q[210 * 16];
    /* bounds: the worst |x - deq| relative to its super-block's largest magnitude (about half a
     * level of the widest sub-block plus the rounding of its scale; heavy tails are clipped a
     * little by the least-squares fits), and the RMS error relative to the RMS of x (observed
     * values printed; the bounds leave ~1.5x) */
    const double bound_max[NT] = {0.12, 0.12, 0.09, 0.5, 0.35, 0.17, 0.12, 0.08, 0.06, 0.2},
                 bound_rms[NT] = {0.11, 0.065, 0.038, 0.5, 0.2, 0.11, 0.11, 0.06, 0.05, 0.13};
    for (int ti = 0; ti < NT; ti++) {
        for (int dist = 0; dist < 4; dist++) {
            for (int i = 0; i < N; i++) {
                float u = test_rng_uniform(&rng);
                x[i] = dist == 0 ? u : dist == 1 ? u + 0.75f : dist == 2 ? u * u * u * 1e-3f : u * (float)(1 + (i / 32) % 8);
            }
            if (dist == 3) memset(x + 512, 0, 256 * sizeof(float)); /* one all-zero super-block */
            CHECK(es__quantize_row(ktypes[ti], x, q, N));
            CHECK(es__dequantize_row(ktypes[ti], q, y, N));
            double worst = 0, se = 0, sx = 0;
            for (int b = 0; b < N / 256; b++) {
                double amax = 0;
                /* not fmax: aarch64 gcc 12 -O3 fails vectorising that reduction (internal error) */
                for (int i = 0; i < 256; i++) {
                    const double a = fabs(x[256 * b + i]);
                    if (!(a <= amax)) amax = a;
                }
                for (int i = 0; i < 256; i++) {
                    const double d = (double)y[256 * b + i] - x[256 * b + i], e = fabs(d) / (amax > 0 ? amax : 1);
                    if (!(e <= worst)) worst = e;
                    se += d * d;
                    sx += (double)x[256 * b + i] * x[256 * b + i];
                }
            }
            const double rms = sqrt(se / sx);
            printf("%s quantise, distribution %d: worst |error| / block amax %.4f, rms error / rms %.4f\n", knames[ti],
                   dist, worst, rms);
            CHECKF(worst <= bound_max[ti], "%s quantise distribution %d: max error %g > %g", knames[ti], dist, worst,
                   bound_max[ti]);
            CHECKF(rms <= bound_rms[ti], "%s quantise distribution %d: rms error %g > %g", knames[ti], dist, rms,
                   bound_rms[ti]);
            if (dist == 3)
                for (int i = 512; i < 768; i++) CHECKF(y[i] == 0, "%s: a zero block dequantises to %g", knames[ti], y[i]);
        }
        /* the quantiser is a pure function of its input */
        static uint8_t q2[210 * 16];
        CHECK(es__quantize_row(ktypes[ti], x, q2, N));
        CHECK(memcmp(q, q2, kbytes[ti] * 16) == 0);
    }
    /* Q6_K: a constant block is reproduced closely (scale -128 of the largest) */
    for (int i = 0; i < 256; i++) x[i] = 3.0f;
    CHECK(es__quantize_row(ES__DTYPE_Q6_K, x, q, 256));
    CHECK(es__dequantize_row(ES__DTYPE_Q6_K, q, y, 256));
    for (int i = 0; i < 256; i++) CHECKF(fabsf(y[i] - 3.0f) < 3.0f / 64, "q6_K constant block: %g", y[i]);
    /* non-finite input stores finite blocks */
    for (int i = 0; i < 256; i++) x[i] = test_rng_uniform(&rng);
    x[7] = NAN;
    x[100] = INFINITY;
    for (int ti = 0; ti < NT; ti++) CHECK(es__quantize_row(ktypes[ti], x, q, 256));
}

/* ---- kernels */

static void test_kernels(const es__kern *k) {
    printf("kernel level %s\n", k->name);
    /* small batches stream the stored rows T_TILE tokens at a time up to a level's limit (6, 9 or 16
     * tokens), more run the panels' register tiles: these sizes cross every tile size and limit */
    const int64_t shapes[][3] = {{256, 5, 1}, {256, 9, 7}, {512, 13, 3}, {768, 6, 2}, {256, 11, 70},
                                 {256, 7, 4}, {256, 5, 5}, {256, 3, 6}, {256, 6, 8}, {256, 5, 9},
                                 {256, 3, 16}, {256, 3, 17}};
    for (int ti = 0; ti < NT; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_tok = shapes[si][2];
            const size_t rb = kbytes[ti] * (size_t)(n_in / 256);
            CHECK(es__kern_row_bytes(ktypes[ti], n_in) == rb);
            uint8_t *w = malloc(rb * (size_t)n_out);
            rand_blocks(ti, w, (int)(n_in / 256 * n_out), 0);
            float *wr = malloc(sizeof(float) * (size_t)(n_in * n_out));
            for (int64_t r = 0; r < n_out; r++)
                for (int64_t e = 0; e < n_in; e++) wr[r * n_in + e] = ref_elem(ti, w + rb * (size_t)r + (size_t)(e / 256) * kbytes[ti], (int)(e % 256));
            float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok)), *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
            for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = test_rng_uniform(&rng);
            for (int64_t i = 0; i < n_out * n_tok; i++) y[i] = NAN;
            float *panel = malloc(sizeof(float) * (size_t)(k->panel_rows * n_in));
            k->matmul(ktypes[ti], w, rb, n_in, 0, n_out, x, n_in, n_tok, y, n_out, panel);
            double worst = 0;
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < n_out; r++) {
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        ref += (double)wr[r * n_in + i] * x[t * n_in + i];
                        mag += fabs((double)wr[r * n_in + i] * x[t * n_in + i]);
                    }
                    const double e = fabs(y[t * n_out + r] - ref) / (mag + 1e-30);
                    if (!(e <= worst)) worst = e;
                }
            CHECKF(worst < 1e-5, "%s matmul %s %lldx%lld x %lld: rel err %g", k->name, knames[ti], (long long)n_out,
                   (long long)n_in, (long long)n_tok, worst);
            /* a token alone through odd row ranges, and through the whole range (where a level may
             * walk several rows at once), gives the batch's bits */
            float *y1 = malloc(sizeof(float) * (size_t)n_out);
            bool same = true;
            for (int64_t t = 0; t < n_tok; t++) {
                for (int64_t i = 0; i < n_out; i++) y1[i] = NAN;
                for (int64_t r0 = 0; r0 < n_out; r0 += 3)
                    k->matmul(ktypes[ti], w, rb, n_in, r0, ES__MIN(n_out, r0 + 3), x + t * n_in, n_in, 1, y1 + r0, n_out, panel);
                same = same && memcmp(y1, y + t * n_out, sizeof(float) * (size_t)n_out) == 0;
                for (int64_t i = 0; i < n_out; i++) y1[i] = NAN;
                k->matmul(ktypes[ti], w, rb, n_in, 0, n_out, x + t * n_in, n_in, 1, y1, n_out, panel);
                same = same && memcmp(y1, y + t * n_out, sizeof(float) * (size_t)n_out) == 0;
            }
            CHECKF(same, "%s matmul %s: a token alone differs from the batch", k->name, knames[ti]);
            /* to_f32 equals the decoder bit for bit */
            bool exact = true;
            float *row = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t r = 0; r < n_out; r++) {
                k->to_f32(ktypes[ti], w + rb * (size_t)r, row, n_in);
                exact = exact && memcmp(row, wr + r * n_in, sizeof(float) * (size_t)n_in) == 0;
            }
            CHECKF(exact, "%s to_f32 %s not exact", k->name, knames[ti]);
            free(row), free(y1), free(panel), free(x), free(y), free(wr), free(w);
        }
}

/* Levels that promise the same arithmetic give the same bits: on AArch64 generic and neon (the
 * same lanes and fused multiply-adds) for every type here, on x86 v3 and v4 for the sub-block sums
 * of Q4_K, Q5_K and Q6_K (the same eight lanes, kern_ksum.h); one token, tiles and panels. */
static void test_levels_agree(const es__kern *a, const es__kern *b, bool ksum_only) {
    const int64_t shapes[][3] = {{256, 5, 1}, {512, 7, 3}, {256, 6, 8}, {768, 3, 17}};
    for (int ti = 0; ti < NT; ti++) {
        const es__dtype t = ktypes[ti];
        if (ksum_only && t != ES__DTYPE_Q4_K && t != ES__DTYPE_Q5_K && t != ES__DTYPE_Q6_K) continue;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_tok = shapes[si][2];
            const size_t rb = kbytes[ti] * (size_t)(n_in / 256);
            uint8_t *w = malloc(rb * (size_t)n_out);
            rand_blocks(ti, w, (int)(n_in / 256 * n_out), 0);
            float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
            float *ya = malloc(sizeof(float) * (size_t)(n_out * n_tok)), *yb = malloc(sizeof(float) * (size_t)(n_out * n_tok));
            float *panel = malloc(sizeof(float) * (size_t)(ES__MAX(a->panel_rows, b->panel_rows) * n_in));
            for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = test_rng_uniform(&rng);
            for (int64_t i = 0; i < n_out * n_tok; i++) ya[i] = yb[i] = NAN;
            a->matmul(t, w, rb, n_in, 0, n_out, x, n_in, n_tok, ya, n_out, panel);
            b->matmul(t, w, rb, n_in, 0, n_out, x, n_in, n_tok, yb, n_out, panel);
            CHECKF(memcmp(ya, yb, sizeof(float) * (size_t)(n_out * n_tok)) == 0, "%s vs %s matmul %s %lldx%lld x %lld tokens",
                   a->name, b->name, knames[ti], (long long)n_out, (long long)n_in, (long long)n_tok);
            free(panel), free(ya), free(yb), free(x), free(w);
        }
    }
}

int main(void) {
    test_dequant();
    test_quantize();
    const es__kern *levels[4] = {es__kern_generic(), es__kern_x86_v3(), es__kern_x86_v4(), es__kern_neon()};
    for (int i = 0; i < 4; i++)
        if (levels[i]) test_kernels(levels[i]);
    if (es__kern_neon()) test_levels_agree(es__kern_generic(), es__kern_neon(), false);
    if (es__kern_x86_v3() && es__kern_x86_v4()) test_levels_agree(es__kern_x86_v3(), es__kern_x86_v4(), true);
    TEST_MAIN_END();
}
