/* test_cpu_ops.c: every op of lib/cpu/ops.h, and every kernel level built into the library,
 * against plain double-precision loops on fresh random inputs: matmul/matvec per weight type and
 * odd shapes, embedding lookup, RMSNorm, RoPE (NORM, NEOX, partial rotation, scaled), tree
 * attention (GQA, random trees, against a dense ancestor mask built here only), SwiGLU, add,
 * softmax, argmax/top-k ties. Outputs are poisoned with NaN first so an unwritten element fails.
 * Also: batch invariance (a token's result is bit-identical alone, in a batch, and under any thread
 * count) and the thread pool's barrier under stress. */
#include "cpu/kern.h"
#include "cpu/ops.h"
#include "cpu/opsi.h"
#include "cpu/pool.h"

#include "../common/test_dtype.h"
#include "../test.h"

#include <stdint.h>
#include <time.h>

static test_rng rng = {12345};

/* ---- independent scalar decoders (not the library's) */

static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

static double ref_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A random half with exponent in [lo, hi] (biased), any mantissa, random sign. */
static uint16_t rand_f16(int lo, int hi) {
    uint64_t r = test_rng_u64(&rng);
    int e = lo + (int)(r % (uint64_t)(hi - lo + 1));
    return (uint16_t)(((r >> 8) & 1) << 15 | (uint16_t)e << 10 | ((r >> 16) & 1023));
}

static size_t row_bytes(es__dtype t, int64_t n) {
    switch (t) {
    case ES__DTYPE_F32: return (size_t)n * 4;
    case ES__DTYPE_F16:
    case ES__DTYPE_BF16: return (size_t)n * 2;
    case ES__DTYPE_Q8_0: return (size_t)n / 32 * 34;
    case ES__DTYPE_Q4_0: return (size_t)n / 32 * 18;
    default: break; /* the K-quants: test_kquant.c */
    }
    return 0;
}

/* Fills a random matrix of type and returns its values decoded independently in ref[n_out][n_in]. */
static void *rand_matrix(es__dtype t, int64_t n_in, int64_t n_out, double *ref) {
    size_t rb = row_bytes(t, n_in);
    uint8_t *w = malloc(rb * (size_t)n_out + 1);
    for (int64_t r = 0; r < n_out; r++) {
        uint8_t *row = w + rb * (size_t)r;
        double *rr = ref + r * n_in;
        for (int64_t k = 0; k < n_in; k++) {
            if (t == ES__DTYPE_F32) {
                float f = test_rng_uniform(&rng);
                memcpy(row + 4 * k, &f, 4);
                rr[k] = f;
            } else if (t == ES__DTYPE_F16) {
                /* include subnormals (exponent 0) now and then */
                uint16_t h = (test_rng_u64(&rng) % 16 == 0) ? rand_f16(0, 0) : rand_f16(10, 15);
                memcpy(row + 2 * k, &h, 2);
                rr[k] = ref_f16(h);
            } else if (t == ES__DTYPE_BF16) {
                float f = test_rng_uniform(&rng);
                uint32_t u;
                memcpy(&u, &f, 4);
                uint16_t h = (uint16_t)(u >> 16);
                memcpy(row + 2 * k, &h, 2);
                rr[k] = ref_bf16(h);
            }
        }
        if (t == ES__DTYPE_Q8_0 || t == ES__DTYPE_Q4_0) {
            size_t bb = t == ES__DTYPE_Q8_0 ? 34 : 18;
            for (int64_t b = 0; b < n_in / 32; b++) {
                uint8_t *blk = row + bb * (size_t)b;
                uint16_t d = rand_f16(5, 12);
                memcpy(blk, &d, 2);
                for (size_t i = 2; i < bb; i++) blk[i] = (uint8_t)test_rng_u64(&rng);
                for (int i = 0; i < 32; i++) {
                    int q;
                    if (t == ES__DTYPE_Q8_0)
                        q = (int8_t)blk[2 + i];
                    else
                        q = (i < 16 ? (blk[2 + i] & 15) : (blk[2 + i - 16] >> 4)) - 8;
                    rr[b * 32 + i] = ref_f16(d) * q;
                }
            }
        }
    }
    return w;
}

static float *rand_vec(int64_t n, float scale) {
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = test_rng_uniform(&rng) * scale;
    return v;
}

static void poison(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = NAN;
}


/* ---- kernels, at every level built in */

static void test_kernels(const es__kern *k) {
    printf("kernel level %s\n", k->name);
    /* small batches stream the stored rows T_TILE tokens at a time, up to a level's limit (6, 9 or
     * 16 tokens), larger ones run the register tiles (kern_impl.c): the sizes below cross every
     * token-tile size of every level and every limit */
    const int64_t shapes[][3] = {{32, 5, 1}, {40, 67, 7}, {17, 3, 2}, {1, 4, 1}, {96, 9, 13}, {288, 33, 70}, {768, 6, 3},
                                 {64, 11, 4}, {40, 7, 5}, {384, 9, 6}, {96, 5, 8}, {64, 7, 9}, {40, 3, 12},
                                 {64, 5, 16}, {40, 3, 17}};
    for (size_t ti = 0; ti < ES__ARRAY_LEN(test_dtypes); ti++) {
        es__dtype t = test_dtypes[ti];
        for (size_t si = 0; si < ES__ARRAY_LEN(shapes); si++) {
            int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_tok = shapes[si][2];
            if ((t == ES__DTYPE_Q8_0 || t == ES__DTYPE_Q4_0) && n_in % 32) continue;
            double *wr = malloc(sizeof(double) * (size_t)(n_in * n_out));
            void *w = rand_matrix(t, n_in, n_out, wr);
            float *x = rand_vec(n_in * n_tok, 1.0f);
            float *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
            poison(y, n_out * n_tok);
            float *panel = malloc(sizeof(float) * (size_t)(k->panel_rows * n_in));
            k->matmul(t, w, row_bytes(t, n_in), n_in, 0, n_out, x, n_in, n_tok, y, n_out, panel);
            double worst = 0;
            for (int64_t tt = 0; tt < n_tok; tt++)
                for (int64_t r = 0; r < n_out; r++) {
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        ref += wr[r * n_in + i] * x[tt * n_in + i];
                        mag += fabs(wr[r * n_in + i] * x[tt * n_in + i]);
                    }
                    double e = fabs(y[tt * n_out + r] - ref) / (mag + 1e-30);
                    if (!(e <= worst)) worst = e; /* NaN sticks */
                }
            CHECKF(worst < 1e-5, "%s matmul %s %lldx%lld x %lld tokens: rel err %g", k->name, test_dtype_name(t),
                   (long long)n_out, (long long)n_in, (long long)n_tok, worst);
            /* each token alone, and rows in odd sub-ranges, give the same bits */
            float *y1 = malloc(sizeof(float) * (size_t)n_out);
            bool same = true;
            for (int64_t tt = 0; tt < n_tok; tt++) {
                poison(y1, n_out);
                for (int64_t r0 = 0; r0 < n_out; r0 += 3) {
                    int64_t r1 = ES__MIN(n_out, r0 + 3);
                    k->matmul(t, w, row_bytes(t, n_in), n_in, r0, r1, x + tt * n_in, n_in, 1, y1 + r0, n_out, NULL);
                }
                same = same && memcmp(y1, y + tt * n_out, sizeof(float) * (size_t)n_out) == 0;
            }
            CHECKF(same, "%s matmul %s: token alone differs from the batch", k->name, test_dtype_name(t));
            /* two tokens at a time through odd row ranges (tiles padded with repeated rows) */
            if (n_tok >= 3) {
                float *y2 = malloc(sizeof(float) * (size_t)(2 * n_out));
                poison(y2, 2 * n_out);
                for (int64_t r0 = 0; r0 < n_out; r0 += 5)
                    k->matmul(t, w, row_bytes(t, n_in), n_in, r0, ES__MIN(n_out, r0 + 5), x + n_in, n_in, 2, y2 + r0,
                              n_out, panel);
                CHECKF(memcmp(y2, y + n_out, sizeof(float) * (size_t)(2 * n_out)) == 0,
                       "%s matmul %s: a 2-token call differs from the batch (n_in %lld n_out %lld n_tok %lld)", k->name, test_dtype_name(t), (long long)n_in, (long long)n_out, (long long)n_tok);
                free(y2);
            }
            free(panel);
            /* to_f32 is exact */
            float *row = malloc(sizeof(float) * (size_t)n_in);
            bool exact = true;
            for (int64_t r = 0; r < n_out; r++) {
                poison(row, n_in);
                k->to_f32(t, (const uint8_t *)w + row_bytes(t, n_in) * (size_t)r, row, n_in);
                for (int64_t i = 0; i < n_in; i++) exact = exact && row[i] == (float)wr[r * n_in + i];
            }
            CHECKF(exact, "%s to_f32 %s n_in %lld not exact", k->name, test_dtype_name(t), (long long)n_in);
            free(row);
            free(y1);
            free(wr);
            free(w);
            free(x);
            free(y);
        }
    }
    /* f16 specials convert exactly: zeros, subnormal edge, max, inf, NaN */
    uint16_t sp[16] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00,
                       0xfc00, 0x7e00, 0x3c00, 0xbc00, 0x3555, 0x8001, 0x7bfe, 0x1234};
    float out[16];
    poison(out, 16);
    k->to_f32(ES__DTYPE_F16, sp, out, 16);
    for (int i = 0; i < 16; i++) {
        double r = ref_f16(sp[i]);
        CHECKF(isnan(r) ? isnan(out[i]) : (out[i] == (float)r && !signbit(out[i]) == !signbit(r)),
               "%s f16 0x%04x -> %g, expected %g", k->name, sp[i], out[i], r);
    }
    /* silu_mul over a wide range, extremes included: checks the level's vector exp */
    {
        int64_t n = 203;
        float *g = rand_vec(n, 30.0f), *u = rand_vec(n, 1.0f), *o = malloc(sizeof(float) * (size_t)n);
        g[0] = 100.0f, g[1] = -100.0f, g[2] = 88.5f, g[3] = -88.5f, g[4] = 0.0f, g[5] = -87.0f, g[6] = 1e-8f;
        poison(o, n);
        k->silu_mul(g, u, n, o);
        bool ok = true;
        for (int64_t i = 0; i < n; i++) {
            double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            ok = ok && fabs(o[i] - ref) <= 1e-6 * fabs(ref) + 1e-30;
            if (!(fabs(o[i] - ref) <= 1e-6 * fabs(ref) + 1e-30))
                fprintf(stderr, "  silu_mul(%g) * %g = %g, expected %g\n", g[i], u[i], o[i], ref);
        }
        CHECKF(ok, "%s silu_mul", k->name);
        free(g), free(u), free(o);
    }
    /* attend: one query over committed slots, a few in-batch ones and (a speculative stream's) keys
     * from outside the cache, against double; with and without gemma2's soft-capping of the scores
     * (cap 2 bends scores of this size visibly); the second geometry's keys cross a tile boundary
     * inside the outside keys */
    for (int64_t hd = 3, pass = 0; hd <= 40; pass ? (hd += 37, pass = 0) : (pass = 1))
        for (int geo = 0; geo < 2; geo++) {
            const float cap = pass ? 2.0f : 0.0f;
            const int32_t n_ctx = 70, n_past = geo ? 60 : 41, vis[3] = {0, 2, 5}, n_x = geo ? 3 : 0, m = n_past + 3 + n_x;
            const int64_t ldx = hd + 3;
            float *q = rand_vec(hd, 3.0f), *kb = rand_vec(n_ctx * hd, 1.0f), *vb = rand_vec(n_ctx * hd, 1.0f);
            float *kx = rand_vec(3 * ldx, 1.0f), *vx = rand_vec(3 * ldx, 1.0f);
            float ao[40];
            poison(ao, hd);
            k->attend(q, kb, vb, hd, n_past, vis, 3, kx, vx, ldx, n_x, 0.5f, cap, ao);
            double p[66], mx = -INFINITY, sum = 0;
            const float *krow[66], *vrow[66];
            for (int32_t i = 0; i < m; i++) {
                const int64_t slot = i < n_past ? i : n_past + vis[ES__MIN(i - n_past, 2)];
                krow[i] = i < n_past + 3 ? kb + slot * hd : kx + (i - n_past - 3) * ldx;
                vrow[i] = i < n_past + 3 ? vb + slot * hd : vx + (i - n_past - 3) * ldx;
                double d = 0;
                for (int64_t e = 0; e < hd; e++) d += (double)q[e] * krow[i][e];
                p[i] = cap > 0 ? cap * tanh(0.5 * d / cap) : 0.5 * d;
                mx = p[i] > mx ? p[i] : mx;
            }
            for (int32_t i = 0; i < m; i++) sum += (p[i] = exp(p[i] - mx));
            bool ok = true;
            for (int64_t e = 0; e < hd; e++) {
                double ref = 0;
                for (int32_t i = 0; i < m; i++) ref += p[i] / sum * vrow[i][e];
                ok = ok && fabs(ao[e] - ref) <= 2e-6;
            }
            CHECKF(ok, "%s attend hd %lld softcap %g, %d keys (%d from outside the cache)", k->name, (long long)hd,
                   (double)cap, m, n_x);
            free(q), free(kb), free(vb), free(kx), free(vx);
        }
    /* attend_multi: every query's output has attend's bits, whatever the others in the call; the
     * queries differ in committed keys (a window's later first slot: 130 or 67), in visible
     * batch keys (0 to 4, crossing a tile edge past 128), in keys from outside the cache (0 to 3),
     * in kv head (two, interleaved) and in soft-capping; a full call of ES__ATTN_MULTI queries is
     * among them */
    for (int64_t hd = 5; hd <= 69; hd += 64)
        for (int cap_i = 0; cap_i < 2; cap_i++) {
            const int32_t n_ctx = 140, nq = cap_i ? ES__ATTN_MULTI : 7, vis[4] = {0, 1, 3, 6};
            const float cap = cap_i ? 2.0f : 0.0f;
            float *kb = rand_vec(2 * n_ctx * hd, 1.0f), *vb = rand_vec(2 * n_ctx * hd, 1.0f);
            float *kx = rand_vec(3 * (hd + 1), 1.0f), *vx = rand_vec(3 * (hd + 1), 1.0f);
            float *q = rand_vec(nq * hd, 3.0f), *om = malloc(sizeof(float) * (size_t)(nq * hd)), o1[69];
            es__attn_q qs[ES__ATTN_MULTI];
            poison(om, nq * hd);
            for (int32_t i = 0; i < nq; i++) {
                const int32_t s0 = i % 3 == 2 ? 63 : 0, head = i % 2;
                qs[i] = (es__attn_q){.q = q + i * hd, .kb = kb + ((int64_t)head * n_ctx + s0) * hd,
                                     .vb = vb + ((int64_t)head * n_ctx + s0) * hd, .vis = vis, .n_past = 130 - s0,
                                     .n_vis = i % 5, .kx = kx, .vx = vx, .ldx = hd + 1, .n_x = i % 4, .out = om + i * hd};
            }
            k->attend_multi(nq, qs, hd, 0.3f, cap);
            bool same = true;
            for (int32_t i = 0; i < nq; i++) {
                poison(o1, hd);
                k->attend(qs[i].q, qs[i].kb, qs[i].vb, hd, qs[i].n_past, vis, qs[i].n_vis, kx, vx, hd + 1, qs[i].n_x, 0.3f,
                          cap, o1);
                same = same && memcmp(o1, qs[i].out, sizeof(float) * (size_t)hd) == 0;
            }
            CHECKF(same, "%s attend_multi hd %lld softcap %g, %d queries: not attend's bits", k->name, (long long)hd,
                   (double)cap, nq);
            free(kb), free(vb), free(kx), free(vx), free(q), free(om);
        }
    /* dot and axpy */
    for (int64_t n = 1; n < 80; n += 13) {
        float *a = rand_vec(n, 1), *b = rand_vec(n, 1), *y = rand_vec(n, 1), *y0 = malloc(sizeof(float) * (size_t)n);
        memcpy(y0, y, sizeof(float) * (size_t)n);
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) ref += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]);
        float d = k->dot(a, b, n);
        CHECKF(fabs(d - ref) <= 1e-6 * mag, "%s dot n %lld: %g vs %g", k->name, (long long)n, d, ref);
        k->axpy(y, 0.75f, a, n);
        bool ok = true;
        for (int64_t i = 0; i < n; i++) ok = ok && fabs(y[i] - (y0[i] + 0.75 * a[i])) <= 1e-6 * (fabs(y0[i]) + 1);
        CHECKF(ok, "%s axpy n %lld", k->name, (long long)n);
        free(a), free(b), free(y), free(y0);
    }
}

/* Two levels that promise the same arithmetic (on AArch64: generic and neon, same vector width,
 * fused multiply-adds and lane order) give the same bits for every kernel, on fresh random inputs:
 * what makes the neon level's outputs, and so every losslessness check above it, those of the
 * portable code. */
static void test_levels_agree(const es__kern *a, const es__kern *b) {
    printf("levels %s and %s: same bits\n", a->name, b->name);
    const int64_t shapes[][3] = {{64, 13, 1}, {96, 9, 7}, {288, 33, 13}, {40, 5, 3}, {17, 6, 2}};
    for (size_t ti = 0; ti < ES__ARRAY_LEN(test_dtypes); ti++) {
        es__dtype t = test_dtypes[ti];
        for (size_t si = 0; si < ES__ARRAY_LEN(shapes); si++) {
            int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_tok = shapes[si][2];
            if ((t == ES__DTYPE_Q8_0 || t == ES__DTYPE_Q4_0) && n_in % 32) continue;
            double *wr = malloc(sizeof(double) * (size_t)(n_in * n_out));
            void *w = rand_matrix(t, n_in, n_out, wr);
            float *x = rand_vec(n_in * n_tok, 1.0f);
            float *ya = malloc(sizeof(float) * (size_t)(n_out * n_tok)), *yb = malloc(sizeof(float) * (size_t)(n_out * n_tok));
            float *panel = malloc(sizeof(float) * (size_t)(ES__MAX(a->panel_rows, b->panel_rows) * n_in));
            poison(ya, n_out * n_tok), poison(yb, n_out * n_tok);
            a->matmul(t, w, row_bytes(t, n_in), n_in, 0, n_out, x, n_in, n_tok, ya, n_out, panel);
            b->matmul(t, w, row_bytes(t, n_in), n_in, 0, n_out, x, n_in, n_tok, yb, n_out, panel);
            CHECKF(memcmp(ya, yb, sizeof(float) * (size_t)(n_out * n_tok)) == 0, "%s vs %s matmul %s %lldx%lld x %lld tokens",
                   a->name, b->name, test_dtype_name(t), (long long)n_out, (long long)n_in, (long long)n_tok);
            bool same = true;
            float *ra = malloc(sizeof(float) * (size_t)n_in), *rb = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t r = 0; r < n_out; r++) {
                const uint8_t *row = (const uint8_t *)w + row_bytes(t, n_in) * (size_t)r;
                poison(ra, n_in), poison(rb, n_in);
                a->to_f32(t, row, ra, n_in), b->to_f32(t, row, rb, n_in);
                same = same && memcmp(ra, rb, sizeof(float) * (size_t)n_in) == 0;
            }
            CHECKF(same, "%s vs %s to_f32 %s n_in %lld", a->name, b->name, test_dtype_name(t), (long long)n_in);
            free(wr), free(w), free(x), free(ya), free(yb), free(ra), free(rb), free(panel);
        }
    }
    for (int64_t n = 1; n < 300; n += 37) {
        float *u = rand_vec(n, 1), *v = rand_vec(n, 1), *g = rand_vec(n, 30), *ya = rand_vec(n, 1);
        float *yb = malloc(sizeof(float) * (size_t)n), *oa = malloc(sizeof(float) * (size_t)n), *ob = malloc(sizeof(float) * (size_t)n);
        memcpy(yb, ya, sizeof(float) * (size_t)n);
        const float da = a->dot(u, v, n), db = b->dot(u, v, n);
        CHECKF(memcmp(&da, &db, sizeof da) == 0, "%s vs %s dot n %lld: %a vs %a", a->name, b->name, (long long)n, da, db);
        a->axpy(ya, -0.3f, u, n), b->axpy(yb, -0.3f, u, n);
        CHECKF(memcmp(ya, yb, sizeof(float) * (size_t)n) == 0, "%s vs %s axpy n %lld", a->name, b->name, (long long)n);
        poison(oa, n), poison(ob, n);
        a->silu_mul(g, v, n, oa), b->silu_mul(g, v, n, ob);
        CHECKF(memcmp(oa, ob, sizeof(float) * (size_t)n) == 0, "%s vs %s silu_mul n %lld", a->name, b->name, (long long)n);
        free(u), free(v), free(g), free(ya), free(yb), free(oa), free(ob);
    }
    for (int64_t hd = 5; hd <= 72; hd += 67) {
        const int32_t n_ctx = 60, n_past = 47, vis[4] = {0, 1, 4, 9};
        float *q = rand_vec(hd, 3.0f), *kb = rand_vec(n_ctx * hd, 1.0f), *vb = rand_vec(n_ctx * hd, 1.0f);
        float oa[72], ob[72];
        poison(oa, hd), poison(ob, hd);
        /* the outside keys: the last two cache rows, read with a row stride of hd */
        const float *kx = kb + (n_ctx - 2) * hd, *vx = vb + (n_ctx - 2) * hd;
        a->attend(q, kb, vb, hd, n_past, vis, 4, kx, vx, hd, 2, 0.3f, 0.0f, oa);
        b->attend(q, kb, vb, hd, n_past, vis, 4, kx, vx, hd, 2, 0.3f, 0.0f, ob);
        CHECKF(memcmp(oa, ob, sizeof(float) * (size_t)hd) == 0, "%s vs %s attend hd %lld", a->name, b->name, (long long)hd);
        free(q), free(kb), free(vb);
    }
}

/* ---- whole ops */

static void test_matmul_threads(void) {
    es__pool *pools[3] = {NULL, NULL, NULL};
    es__err err;
    for (int i = 0; i < 3; i++) CHECK_OK(es__pool_create(NULL, i + 1, -1, &err, &pools[i]));
    for (size_t ti = 0; ti < ES__ARRAY_LEN(test_dtypes); ti++) {
        es__dtype t = test_dtypes[ti];
        int64_t n_in = 96, n_out = 101, n_tok = 9;
        double *wr = malloc(sizeof(double) * (size_t)(n_in * n_out));
        void *w = rand_matrix(t, n_in, n_out, wr);
        float *x = rand_vec(n_in * n_tok, 2.0f);
        float *y[4];
        for (int i = 0; i < 4; i++) {
            y[i] = malloc(sizeof(float) * (size_t)(n_out * n_tok));
            poison(y[i], n_out * n_tok);
        }
        CHECK_OK(es__cpu_matmul(NULL, t, w, n_in, n_out, x, n_tok, y[0], &err));
        for (int i = 0; i < 3; i++) CHECK_OK(es__cpu_matmul(pools[i], t, w, n_in, n_out, x, n_tok, y[i + 1], &err));
        for (int i = 1; i < 4; i++)
            CHECKF(memcmp(y[0], y[i], sizeof(float) * (size_t)(n_out * n_tok)) == 0, "matmul %s: %d threads differ",
                   test_dtype_name(t), i);
        float *yv = malloc(sizeof(float) * (size_t)n_out);
        poison(yv, n_out);
        CHECK_OK(es__cpu_matvec(pools[1], t, w, n_in, n_out, x + 4 * n_in, yv, &err));
        CHECKF(memcmp(yv, y[0] + 4 * n_out, sizeof(float) * (size_t)n_out) == 0, "matvec %s differs from matmul row",
               test_dtype_name(t));
        for (int i = 0; i < 4; i++) free(y[i]);
        free(yv), free(wr), free(w), free(x);
    }
    float dummy[64];
    CHECK_FAILS(es__cpu_matmul(NULL, ES__DTYPE_Q8_0, dummy, 40, 1, dummy, 1, dummy, &err), ES_ERR_INVALID_ARGUMENT,
                "multiple of 32");
    for (int i = 0; i < 3; i++) es__pool_destroy(pools[i]);
}

static void test_get_rows(void) {
    es__err err;
    for (size_t ti = 0; ti < ES__ARRAY_LEN(test_dtypes); ti++) {
        es__dtype t = test_dtypes[ti];
        int64_t n_in = 64, n_rows = 11;
        double *wr = malloc(sizeof(double) * (size_t)(n_in * n_rows));
        void *w = rand_matrix(t, n_in, n_rows, wr);
        int32_t ids[5] = {3, 0, 10, 3, 7};
        float out[5 * 64];
        poison(out, 5 * 64);
        CHECK_OK(es__cpu_get_rows(t, w, n_in, n_rows, ids, 5, out, &err));
        bool exact = true;
        for (int i = 0; i < 5; i++)
            for (int64_t k = 0; k < n_in; k++) exact = exact && out[i * n_in + k] == (float)wr[ids[i] * n_in + k];
        CHECKF(exact, "get_rows %s", test_dtype_name(t));
        int32_t bad = 11;
        CHECK_FAILS(es__cpu_get_rows(t, w, n_in, n_rows, &bad, 1, out, &err), ES_ERR_INVALID_ARGUMENT, "outside [0, 11)");
        free(wr), free(w);
    }
}

static void test_rmsnorm(void) {
    int64_t n = 40, n_tok = 3;
    float *x = rand_vec(n * n_tok, 3), *w = rand_vec(n, 1), *y = malloc(sizeof(float) * (size_t)(n * n_tok));
    poison(y, n * n_tok);
    es__cpu_rmsnorm(x, w, n, n_tok, 1e-5f, y);
    double worst = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
        double sc = 1.0 / sqrt(ss / n + 1e-5);
        for (int64_t i = 0; i < n; i++) {
            double ref = x[t * n + i] * sc * w[i];
            double e = fabs(y[t * n + i] - ref) / (fabs(ref) + 1e-3);
            if (!(e <= worst)) worst = e;
        }
    }
    CHECKF(worst < 1e-6, "rmsnorm rel err %g", worst);
    /* in place */
    float *z = malloc(sizeof(float) * (size_t)(n * n_tok));
    memcpy(z, x, sizeof(float) * (size_t)(n * n_tok));
    es__cpu_rmsnorm(z, w, n, n_tok, 1e-5f, z);
    CHECK(memcmp(z, y, sizeof(float) * (size_t)(n * n_tok)) == 0);
    free(x), free(w), free(y), free(z);
}

static void test_rope(void) {
    const struct {
        int64_t head_dim, n_rot;
        es_rope_type type;
        float base, scale;
    } cases[] = {{10, 10, ES_ROPE_NORM, 10000.f, 1.f}, {10, 10, ES_ROPE_NEOX, 10000.f, 1.f},
                 {16, 8, ES_ROPE_NORM, 500000.f, 0.25f}, {16, 6, ES_ROPE_NEOX, 10000.f, 1.f},
                 {64, 64, ES_ROPE_NEOX, 1e6f, 0.5f}};
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        int64_t hd = cases[c].head_dim, nr = cases[c].n_rot, nh = 3, n_tok = 4;
        int32_t pos[4] = {0, 1, 37, 2047};
        float *x = rand_vec(n_tok * nh * hd, 1), *y = malloc(sizeof(float) * (size_t)(n_tok * nh * hd));
        memcpy(y, x, sizeof(float) * (size_t)(n_tok * nh * hd));
        es__cpu_rope(y, n_tok, nh, hd, nr, pos, cases[c].base, cases[c].scale, cases[c].type);
        double worst = 0;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t h = 0; h < nh; h++) {
                const float *xi = x + (t * nh + h) * hd;
                const float *yo = y + (t * nh + h) * hd;
                for (int64_t d = 0; d < hd; d++) {
                    double ref;
                    if (d >= nr) {
                        ref = xi[d];
                    } else {
                        int64_t i, a, b;
                        if (cases[c].type == ES_ROPE_NORM)
                            i = d / 2, a = 2 * i, b = 2 * i + 1;
                        else
                            i = d % (nr / 2), a = i, b = i + nr / 2;
                        double th = pos[t] * (double)cases[c].scale * pow(cases[c].base, -2.0 * i / nr);
                        ref = d == a ? xi[a] * cos(th) - xi[b] * sin(th) : xi[a] * sin(th) + xi[b] * cos(th);
                    }
                    double e = fabs(yo[d] - ref);
                    if (!(e <= worst)) worst = e;
                }
            }
        CHECKF(worst < 1e-6, "rope case %zu: abs err %g", c, worst);
        free(x), free(y);
    }
}

/* A random forest in DFS pre-order: parent[j] < j, subtrees contiguous. */
static void rand_tree(int32_t n, int32_t *parent, int32_t *st, int32_t *en, int32_t *depth) {
    int32_t path[4096], len = 0;
    for (int32_t j = 0; j < n; j++) {
        if (len > 0) len -= (int32_t)(test_rng_u64(&rng) % (uint64_t)(len + 1)) * (test_rng_u64(&rng) % 3 == 0);
        if (j > 0 && len == 0 && test_rng_u64(&rng) % 4) len = 1; /* mostly one root */
        parent[j] = len ? path[len - 1] : -1;
        depth[j] = len;
        path[len++] = j;
        st[j] = j;
    }
    for (int32_t j = n - 1; j >= 0; j--) {
        en[j] = j;
        for (int32_t i = j + 1; i < n; i++) {
            int32_t a = i;
            while (a >= 0 && a != j) a = parent[a];
            if (a == j) en[j] = i;
        }
    }
}

static bool is_ancestor_or_self(const int32_t *parent, int32_t i, int32_t j) {
    for (int32_t a = j; a >= 0; a = parent[a])
        if (a == i) return true;
    return false;
}

static void test_attention(void) {
    es__err err;
    es__pool *pool3;
    CHECK_OK(es__pool_create(NULL, 3, -1, &err, &pool3));
    const struct {
        int32_t n_head, n_head_kv, hd, n_past, n;
    } cases[] = {{4, 4, 10, 0, 1}, {4, 2, 10, 5, 9}, {6, 2, 16, 33, 17}, {2, 1, 64, 0, 40}, {3, 3, 7, 100, 3}};
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        const int32_t nh = cases[c].n_head, nkv = cases[c].n_head_kv, hd = cases[c].hd, np = cases[c].n_past,
                      n = cases[c].n, n_ctx = np + n + 3;
        int32_t parent[64], st[64], en[64], depth[64];
        rand_tree(n, parent, st, en, depth);
        float *q = rand_vec((int64_t)n * nh * hd, 2), *kc = rand_vec((int64_t)nkv * n_ctx * hd, 2),
              *vc = rand_vec((int64_t)nkv * n_ctx * hd, 1);
        float *out = malloc(sizeof(float) * (size_t)(n * nh * hd)), *out3 = malloc(sizeof(float) * (size_t)(n * nh * hd));
        poison(out, (int64_t)n * nh * hd);
        poison(out3, (int64_t)n * nh * hd);
        const float scale = 1.0f / sqrtf((float)hd);
        CHECK_OK(es__cpu_attention(NULL, q, kc, vc, n_ctx, nh, nkv, hd, np, n, st, en, scale, out, &err));
        CHECK_OK(es__cpu_attention(pool3, q, kc, vc, n_ctx, nh, nkv, hd, np, n, st, en, scale, out3, &err));
        CHECKF(memcmp(out, out3, sizeof(float) * (size_t)(n * nh * hd)) == 0, "attention case %zu: threads differ", c);
        /* dense reference */
        double worst = 0;
        for (int32_t j = 0; j < n; j++)
            for (int32_t h = 0; h < nh; h++) {
                int32_t g = h / (nh / nkv);
                double s[256], mx = -INFINITY, sum = 0, o[64] = {0};
                int32_t slots[256], m = 0;
                for (int32_t sl = 0; sl < np + n; sl++)
                    if (sl < np || is_ancestor_or_self(parent, sl - np, j)) slots[m++] = sl;
                for (int32_t i = 0; i < m; i++) {
                    double d = 0;
                    for (int32_t e = 0; e < hd; e++)
                        d += (double)q[(j * nh + h) * hd + e] * kc[((int64_t)g * n_ctx + slots[i]) * hd + e];
                    s[i] = d * scale;
                    mx = s[i] > mx ? s[i] : mx;
                }
                for (int32_t i = 0; i < m; i++) sum += (s[i] = exp(s[i] - mx));
                for (int32_t i = 0; i < m; i++)
                    for (int32_t e = 0; e < hd; e++) o[e] += s[i] / sum * vc[((int64_t)g * n_ctx + slots[i]) * hd + e];
                for (int32_t e = 0; e < hd; e++) {
                    double err1 = fabs(out[(j * nh + h) * hd + e] - o[e]);
                    if (!(err1 <= worst)) worst = err1;
                }
            }
        CHECKF(worst < 2e-6, "attention case %zu: abs err %g (values in [-1, 1])", c, worst);
        /* batch invariance: each token again as the last node of a chain of its ancestors, with
         * their keys/values moved to consecutive slots, gives the same bits */
        bool same = true;
        for (int32_t j = 0; j < n; j++) {
            int32_t chain[64], len = depth[j] + 1;
            for (int32_t a = j, d = depth[j]; a >= 0; a = parent[a], d--) chain[d] = a;
            float *kc2 = malloc(sizeof(float) * (size_t)nkv * n_ctx * hd), *vc2 = malloc(sizeof(float) * (size_t)nkv * n_ctx * hd);
            memcpy(kc2, kc, sizeof(float) * (size_t)nkv * n_ctx * hd);
            memcpy(vc2, vc, sizeof(float) * (size_t)nkv * n_ctx * hd);
            for (int32_t g = 0; g < nkv; g++)
                for (int32_t d = 0; d < len; d++) {
                    memcpy(kc2 + ((int64_t)g * n_ctx + np + d) * hd, kc + ((int64_t)g * n_ctx + np + chain[d]) * hd, sizeof(float) * (size_t)hd);
                    memcpy(vc2 + ((int64_t)g * n_ctx + np + d) * hd, vc + ((int64_t)g * n_ctx + np + chain[d]) * hd, sizeof(float) * (size_t)hd);
                }
            int32_t cst[64], cen[64];
            for (int32_t d = 0; d < len; d++) cst[d] = d, cen[d] = len - 1;
            float *qc = malloc(sizeof(float) * (size_t)(len * nh * hd)), *oc = malloc(sizeof(float) * (size_t)(len * nh * hd));
            for (int32_t d = 0; d < len; d++) memcpy(qc + d * nh * hd, q + chain[d] * nh * hd, sizeof(float) * (size_t)(nh * hd));
            poison(oc, (int64_t)len * nh * hd);
            CHECK_OK(es__cpu_attention(pool3, qc, kc2, vc2, n_ctx, nh, nkv, hd, np, len, cst, cen, scale, oc, &err));
            same = same && memcmp(oc + (len - 1) * nh * hd, out + j * nh * hd, sizeof(float) * (size_t)(nh * hd)) == 0;
            free(kc2), free(vc2), free(qc), free(oc);
        }
        CHECKF(same, "attention case %zu: a tree node differs from the same token at the end of its chain", c);
        free(q), free(kc), free(vc), free(out), free(out3);
    }
    float d[4];
    int32_t z[1] = {0};
    CHECK_FAILS(es__cpu_attention(NULL, d, d, d, 4, 3, 2, 1, 0, 1, z, z, 1.f, d, &err), ES_ERR_INVALID_ARGUMENT, "n_head 3");
    CHECK_FAILS(es__cpu_attention(NULL, d, d, d, 4, 1, 1, 1, 3, 2, z, z, 1.f, d, &err), ES_ERR_INVALID_ARGUMENT, "n_ctx 4");
    es__pool_destroy(pool3);
}

static void test_kv_write(void) {
    const int32_t nkv = 2, hd = 3, n_ctx = 6, np = 2, n = 3;
    float kc[2 * 6 * 3], vc[2 * 6 * 3], kn[3 * 2 * 3], vn[3 * 2 * 3];
    poison(kc, 36), poison(vc, 36);
    for (int i = 0; i < 18; i++) kn[i] = (float)i, vn[i] = (float)(100 + i);
    es__cpu_kv_write(kc, vc, n_ctx, nkv, hd, np, n, kn, vn);
    bool ok = true;
    for (int32_t i = 0; i < n; i++)
        for (int32_t g = 0; g < nkv; g++)
            for (int32_t e = 0; e < hd; e++) {
                ok = ok && kc[(g * n_ctx + np + i) * hd + e] == kn[(i * nkv + g) * hd + e];
                ok = ok && vc[(g * n_ctx + np + i) * hd + e] == vn[(i * nkv + g) * hd + e];
            }
    CHECK(ok);
    CHECK(isnan(kc[0]) && isnan(vc[(1 * n_ctx + 5) * hd])); /* other slots untouched */
}

static void test_elementwise(void) {
    int64_t n = 37;
    float *g = rand_vec(n, 8), *u = rand_vec(n, 2), *o = malloc(sizeof(float) * (size_t)n);
    poison(o, n);
    es__cpu_swiglu(g, u, n, o);
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        ok = ok && fabs(o[i] - ref) <= 1e-6 * (fabs(ref) + 1e-3);
    }
    CHECK(ok);
    poison(o, n);
    es__cpu_add(g, u, n, o);
    ok = true;
    for (int64_t i = 0; i < n; i++) ok = ok && o[i] == g[i] + u[i];
    CHECK(ok);
    poison(o, n);
    es__cpu_softmax(g, n, o);
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) mx = g[i] > mx ? g[i] : mx;
    for (int64_t i = 0; i < n; i++) sum += exp(g[i] - mx);
    ok = true;
    for (int64_t i = 0; i < n; i++) ok = ok && fabs(o[i] - exp(g[i] - mx) / sum) <= 1e-6;
    CHECK(ok);
    free(g), free(u), free(o);

    float a[8] = {1, 5, NAN, 5, -2, 4, 5, 0};
    CHECK(es__cpu_argmax(a, 8) == 1);
    float nans[2] = {NAN, NAN};
    CHECK(es__cpu_argmax(nans, 2) == 0);
    int32_t ids[8];
    float vals[5];
    CHECK(es__cpu_topk(a, 8, 5, ids, vals) == 5);
    int32_t want[5] = {1, 3, 6, 5, 0};
    for (int i = 0; i < 5; i++) CHECKF(ids[i] == want[i] && vals[i] == a[want[i]], "topk[%d] = %d", i, ids[i]);
    CHECK(es__cpu_topk(a, 8, 8, ids, NULL) == 7); /* the NaN is left out */
    /* top-k on a large random vector against a sort */
    int64_t nv = 1000;
    float *r = rand_vec(nv, 1);
    r[10] = r[20] = 2.0f; /* a tie at the top */
    int32_t top[10];
    CHECK(es__cpu_topk(r, nv, 10, top, NULL) == 10);
    CHECK(top[0] == 10 && top[1] == 20 && es__cpu_argmax(r, nv) == 10);
    ok = true;
    for (int i = 2; i < 10; i++) {
        int64_t rank = 0;
        for (int64_t j = 0; j < nv; j++) rank += r[j] > r[top[i]];
        ok = ok && rank == i && r[top[i]] <= r[top[i - 1]];
    }
    CHECK(ok);
    free(r);
}

/* ---- pool */

typedef struct pool_job {
    es__pool *p;
    int64_t *slots; /* [nth] */
    int rounds;
    int bad;
} pool_job;

static void pool_thread(void *arg, int ith, int nth) {
    pool_job *j = arg;
    for (int r = 0; r < j->rounds; r++) {
        j->slots[ith] = r * 1000 + ith;
        es__pool_barrier(j->p);
        for (int i = 0; i < nth; i++)
            if (j->slots[i] != r * 1000 + i) __atomic_add_fetch(&j->bad, 1, __ATOMIC_RELAXED);
        es__pool_barrier(j->p);
    }
}

typedef struct steal_job {
    es__pool *p;
    es__sched *s;
    int n_phases;
    int64_t n_units;
    int *count;   /* [n_phases][n_units] times each unit was run */
    int *owner;   /* [n_phases][n_units] thread that ran it */
    int bad;
} steal_job;

static void steal_thread(void *arg, int ith, int nth) {
    steal_job *j = arg;
    if (ith == 1) {
        struct timespec ts = {0, 20 * 1000 * 1000}; /* a late thread: the others must take its range */
        nanosleep(&ts, NULL);
    }
    for (int ph = 0; ph < j->n_phases; ph++) {
        es__work w;
        const int64_t n = j->n_units - ph; /* odd sizes */
        es__work_begin(&w, j->p, j->s, ph, n, 3, ith, nth);
        for (int64_t lo, hi; es__work_next(&w, &lo, &hi);)
            for (int64_t u = lo; u < hi; u++) {
                __atomic_add_fetch(&j->count[ph * j->n_units + u], 1, __ATOMIC_RELAXED);
                j->owner[ph * j->n_units + u] = ith;
            }
        es__work_end(&w);
        /* the phase is complete for everyone who gets past es__work_end */
        for (int64_t u = 0; u < n; u++)
            if (__atomic_load_n(&j->count[ph * j->n_units + u], __ATOMIC_RELAXED) != 1)
                __atomic_add_fetch(&j->bad, 1, __ATOMIC_RELAXED);
    }
}

static void test_steal(void) {
    es__err err;
    for (int nth = 1; nth <= 3; nth++) {
        es__pool *p;
        CHECK_OK(es__pool_create(NULL, nth, -1, &err, &p));
        const int n_phases = 5;
        const int64_t n_units = 1000;
        void *mem = malloc(es__sched_bytes(nth, n_phases) + 64);
        es__sched *s = (es__sched *)(void *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
        int *count = calloc((size_t)(n_phases * n_units), sizeof(int)), *owner = calloc((size_t)(n_phases * n_units), sizeof(int));
        es__sched_reset(s, nth, n_phases);
        steal_job j = {p, s, n_phases, n_units, count, owner, 0};
        es__pool_run(p, steal_thread, &j);
        CHECKF(j.bad == 0, "%d threads: %d units not done exactly once when a thread left es__work_end", nth, j.bad);
        bool once = true;
        for (int ph = 0; ph < n_phases; ph++)
            for (int64_t u = 0; u < n_units; u++) once = once && count[ph * n_units + u] == (u < n_units - ph ? 1 : 0);
        CHECK(once);
        if (nth >= 2) {
            /* thread 1 slept through phase 0: its range was taken by the others */
            int64_t lo, hi, stolen = 0;
            es__split_range(n_units, 3, 1, nth, &lo, &hi);
            for (int64_t u = lo; u < hi; u++) stolen += owner[u] != 1;
            CHECKF(stolen > 0, "%d threads: nobody took the late thread's units", nth);
        }
        free(count), free(owner), free(mem);
        es__pool_destroy(p);
    }
}

/* es__work_first names the chunk a thread claims first when nobody has taken from its range
 * (what the forward pass prefetches as the phase before ends). */
static void test_work_first(void) {
    const int64_t ns[] = {1, 7, 100, 1000, 4096, 32000};
    const int64_t aligns[] = {1, 3, 16};
    for (int nth = 1; nth <= 4; nth++) {
        void *mem = malloc(es__sched_bytes(nth, 1) + 64);
        es__sched *s = (es__sched *)(void *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
        for (size_t a = 0; a < ES__ARRAY_LEN(aligns); a++)
            for (size_t k = 0; k < ES__ARRAY_LEN(ns); k++)
                for (int ith = 0; ith < nth; ith++) {
                    es__sched_reset(s, nth, 1);
                    es__work w;
                    es__work_begin(&w, NULL, s, 0, ns[k], aligns[a], ith, nth);
                    int64_t lo = -1, hi = -1, flo, fhi;
                    const bool any = es__work_next(&w, &lo, &hi);
                    es__work_first(ns[k], aligns[a], ith, nth, &flo, &fhi);
                    /* an empty own range names an empty chunk (the first claim is then another's) */
                    CHECKF(flo == fhi || (any && lo == flo && hi == fhi),
                           "n %lld align %lld thread %d of %d: first chunk [%lld, %lld), es__work_first [%lld, %lld)",
                           (long long)ns[k], (long long)aligns[a], ith, nth, (long long)lo, (long long)hi,
                           (long long)flo, (long long)fhi);
                }
        free(mem);
    }
}

static void test_pool(void) {
    es__err err;
    for (int nth = 1; nth <= 4; nth++)
        for (int spin = 0; spin <= 1; spin++) {
            es__pool *p;
            CHECK_OK(es__pool_create(NULL, nth, spin ? -1 : 0, &err, &p));
            int64_t slots[4];
            pool_job j = {p, slots, 200, 0};
            for (int rep = 0; rep < 20; rep++) es__pool_run(p, pool_thread, &j);
            CHECKF(j.bad == 0, "pool %d threads spin %d: %d stale reads across the barrier", nth, spin, j.bad);
            es__pool_destroy(p);
        }
    es__pool *p = NULL;
    CHECK_FAILS(es__pool_create(NULL, 0, -1, &err, &p), ES_ERR_INVALID_ARGUMENT, "n_threads 0");
    CHECK(p == NULL);
    es__pool_destroy(NULL);
    int64_t lo, hi, covered = 0, prev = 0;
    for (int i = 0; i < 3; i++) {
        es__split_range(100, 16, i, 3, &lo, &hi);
        CHECK(lo == prev && (lo % 16 == 0 || lo == 100));
        covered += hi - lo;
        prev = hi;
    }
    CHECK(covered == 100 && prev == 100);
}

int main(void) {
    const es__kern *levels[4] = {es__kern_generic(), es__kern_x86_v3(), es__kern_x86_v4(), es__kern_neon()};
    for (int i = 0; i < 4; i++)
        if (levels[i]) test_kernels(levels[i]);
    if (es__kern_neon()) test_levels_agree(es__kern_generic(), es__kern_neon());
    printf("best level: %s\n", es__kern_best()->name);
    test_matmul_threads();
    test_get_rows();
    test_rmsnorm();
    test_rope();
    test_attention();
    test_kv_write();
    test_elementwise();
    test_pool();
    test_steal();
    test_work_first();
    TEST_MAIN_END();
}
