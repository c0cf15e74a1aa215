/* test_vk_mul_mat: the Vulkan matrix kernels (matrix-vector and tiled matrix-matrix) for every
 * weight type and epilogue against a double-precision reference on the dequantised weights, in
 * every feature configuration, with odd shapes; and batch invariance: each token's output is
 * bit-identical whether it is multiplied alone or inside a batch.
 * The CPU backend's es__cpu_matmul (with es__cpu_swiglu, es__cpu_geglu_range, es__cpu_add and
 * es__cpu_softcap for the epilogues) is a second reference. GeGLU (gemma), the soft-capped
 * store (gemma2's logits) and the store's and add's factor (granite's logit multiplier and
 * residual scale) are lib/core/arch.h's.
 * Bound: |y - ref| <= 2e-6 * sum_k |w_k x_k| (f32 accumulation of exactly decoded weights) against
 * the double reference, and twice that against the CPU backend. For the K-quants with a min
 * (Q4_K, Q5_K) the kernel sums d sc (q . x) and -dmin m (sum of x) per block, so the scale of the
 * bound uses |d sc q| + |dmin m| in place of |w| (es__k_unpack gives the terms; Q2_K likewise per
 * 16-element half, es__k_unpack16). */
#include "cpu/opsi.h"
#include "backend_vk.h"
#include "weights.h"
#include "oprun.h"
#include "vk_test.h"

#define BOUND 2e-6

/* gelu's tanh form, in double */
static double gelu(double g) {
    return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

/* |w| of each weight, or |d sc q| + |dmin m| for the K-quants with a min. */
static float *weight_mags(int type, const void *w, const float *deq, uint32_t rows, uint32_t k) {
    float *mag = malloc(sizeof(float) * rows * k);
    for (size_t i = 0; i < (size_t)rows * k; i++) mag[i] = fabsf(deq[i]);
    if (type == T_Q4_K || type == T_Q5_K)
        for (uint32_t rr = 0; rr < rows; rr++)
            for (uint32_t sb = 0; sb < k / 256; sb++) {
                int8_t q[256];
                float a[8], bm[8];
                es__k_unpack((uint32_t)type, (const uint8_t *)w + row_bytes(type, k) * rr + kq_bytes(type) * sb, q, a, bm);
                for (int e = 0; e < 256; e++) mag[(size_t)rr * k + sb * 256 + e] = fabsf(a[e / 32] * q[e]) + fabsf(bm[e / 32]);
            }
    if (type == T_Q2_K) /* the same per 16-element half */
        for (uint32_t rr = 0; rr < rows; rr++)
            for (uint32_t sb = 0; sb < k / 256; sb++) {
                int8_t q[256];
                float a[16], bm[16];
                es__k_unpack16((uint32_t)type, (const uint8_t *)w + row_bytes(type, k) * rr + kq_bytes(type) * sb, q, a,
                               bm);
                for (int e = 0; e < 256; e++) mag[(size_t)rr * k + sb * 256 + e] = fabsf(a[e / 16] * q[e]) + fabsf(bm[e / 16]);
            }
    return mag;
}

static void check_case(es_backend *b, test_rng *r, int type, uint32_t rows, uint32_t k, uint32_t n, uint32_t epi,
                       const char *cfg) {
    const bool glu = epi == ES__EPI_SWIGLU || epi == ES__EPI_GEGLU;
    float *deq = malloc(sizeof(float) * rows * k);
    void *w = make_weights(r, type, rows, k, deq);
    float *mag = weight_mags(type, w, deq, rows, k);
    float *x = malloc(sizeof(float) * k * n);
    for (size_t i = 0; i < (size_t)k * n; i++) x[i] = test_rng_uniform(r);
    const uint32_t cols = glu ? rows / 2 : rows;
    float *y = malloc(sizeof(float) * cols * n), *y0 = malloc(sizeof(float) * cols * n);
    for (size_t i = 0; i < (size_t)cols * n; i++) y0[i] = y[i] = epi == ES__EPI_ADD ? test_rng_uniform(r) : NAN;
    CHECK_OK(es__vk_run_mul_mat(b, (es__dtype)type, w, rows, k, x, n, epi, y, 1, NULL));
    /* the CPU backend's ops on the same inputs */
    float *full = malloc(sizeof(float) * rows * n), *cpu = malloc(sizeof(float) * cols * n);
    CHECK_OK(es__cpu_matmul(NULL, (es__dtype)type, w, k, rows, x, n, full, NULL));
    for (uint32_t t = 0; t < n; t++) {
        float *yc = cpu + (size_t)t * cols, *f = full + (size_t)t * rows;
        if (glu) {
            for (uint32_t c = 0; c < cols; c++) {
                float g = f[2 * c], u = f[2 * c + 1];
                if (epi == ES__EPI_SWIGLU)
                    es__cpu_swiglu(&g, &u, 1, &yc[c]);
                else
                    es__cpu_geglu_range(&g, &u, 0, 1, &yc[c]);
            }
        } else if (epi == ES__EPI_ADD) {
            es__cpu_add(y0 + (size_t)t * cols, f, cols, yc);
        } else {
            memcpy(yc, f, sizeof(float) * cols);
        }
    }
    double worst = 0, worst_cpu = 0;
    for (uint32_t t = 0; t < n; t++) {
        for (uint32_t c = 0; c < cols; c++) {
            double ref = 0, scale = 0, g = 0, gs = 0;
            const uint32_t rr = glu ? 2 * c + 1 : c;
            for (uint32_t j = 0; j < k; j++) {
                ref += (double)deq[(size_t)rr * k + j] * x[(size_t)t * k + j];
                scale += fabs((double)mag[(size_t)rr * k + j] * x[(size_t)t * k + j]);
            }
            if (glu) {
                for (uint32_t j = 0; j < k; j++) {
                    g += (double)deq[(size_t)(2 * c) * k + j] * x[(size_t)t * k + j];
                    gs += fabs((double)mag[(size_t)(2 * c) * k + j] * x[(size_t)t * k + j]);
                }
                const double sg = epi == ES__EPI_SWIGLU ? g / (1 + exp(-g)) : gelu(g), u = ref;
                /* first-order error of silu(g) * u (or gelu) from the errors of g and u (|silu'|,
                 * |gelu'| < 1.13, so 1.1 of a bound that has slack), plus the rounding of silu */
                scale = 1.1 * gs * fabs(u) + fabs(sg) * scale + fabs(sg * u);
                ref = sg * u;
            } else if (epi == ES__EPI_ADD) {
                ref += y0[(size_t)t * cols + c];
                scale += fabs(y0[(size_t)t * cols + c]);
            }
            double e = norm_err(y[(size_t)t * cols + c], ref, scale);
            if (e > worst) worst = e;
            e = norm_err(y[(size_t)t * cols + c], cpu[(size_t)t * cols + c], scale);
            if (e > worst_cpu) worst_cpu = e;
        }
    }
    CHECKF(worst <= BOUND, "[%s] type %d rows %u k %u n %u epi %u: normalised error %.3g > %.1g", cfg, type, rows, k, n,
           epi, worst, BOUND);
    CHECKF(worst_cpu <= 2 * BOUND, "[%s] type %d rows %u k %u n %u epi %u: normalised difference from the CPU %.3g > %.1g",
           cfg, type, rows, k, n, epi, worst_cpu, 2 * BOUND);
    free(full);
    free(cpu);
    /* batch invariance: token t alone == token t in the batch, bit for bit */
    if (n > 1 && epi != ES__EPI_ADD) {
        float *y1 = malloc(sizeof(float) * cols);
        for (uint32_t t = 0; t < n; t += (n > 4 ? n / 3 : 1)) {
            CHECK_OK(es__vk_run_mul_mat(b, (es__dtype)type, w, rows, k, x + (size_t)t * k, 1, epi, y1, 1, NULL));
            CHECKF(memcmp(y1, y + (size_t)t * cols, sizeof(float) * cols) == 0,
                   "[%s] type %d rows %u k %u: token %u of %u differs from the same token alone", cfg, type, rows, k, t, n);
        }
        free(y1);
    }
    free(deq);
    free(mag);
    free(w);
    free(x);
    free(y);
    free(y0);
}

/* The store and add epilogues' finish: the factor (granite's logit multiplier, its residual scale)
 * and the store's soft-capping (gemma2's logits) after it: y = c tanh(s W x / c), y = s W x or
 * y += s W x, against the CPU's matmul, its x += s y and es__cpu_softcap; c = 2 bends products of
 * this size (about 1) visibly, and s = 2.5 before it differs from s after it. A factor of 1 gives
 * the bits of none (the other architectures'). */
static void check_finish(es_backend *b, test_rng *r, int type, uint32_t k, uint32_t epi, float scale, float cap,
                         const char *cfg) {
    const uint32_t rows = 70, n = 3;
    const size_t ny = (size_t)rows * n;
    float *deq = malloc(sizeof(float) * rows * k);
    void *w = make_weights(r, type, rows, k, deq);
    float *x = malloc(sizeof(float) * k * n), *y = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny);
    float *ref = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
    for (size_t i = 0; i < (size_t)k * n; i++) x[i] = test_rng_uniform(r);
    for (size_t i = 0; i < ny; i++) y[i] = y0[i] = epi == ES__EPI_ADD ? test_rng_uniform(r) : NAN;
    es__vk_ss_proj ss;
    memset(&ss, 0, sizeof ss);
    ss.softcap = cap;
    ss.scale = scale;
    CHECK_OK(es__vk_run_mul_mat_ss(b, (es__dtype)type, w, rows, k, x, n, epi, &ss, y));
    CHECK_OK(es__cpu_matmul(NULL, (es__dtype)type, w, k, rows, x, n, ref, NULL));
    const float s = scale != 0.0f ? scale : 1.0f;
    for (size_t i = 0; i < ny; i++) ref[i] = epi == ES__EPI_ADD ? y0[i] + s * ref[i] : s * ref[i];
    if (cap > 0) es__cpu_softcap(ref, (int64_t)ny, cap);
    double worst = 0, mx = 1;
    for (size_t i = 0; i < ny; i++) mx = fmax(mx, fabs(ref[i]));
    for (size_t i = 0; i < ny; i++) worst = fmax(worst, isfinite(y[i]) ? fabs((double)y[i] - ref[i]) / mx : INFINITY);
    CHECKF(worst <= 1e-5, "[%s] type %d epi %u scale %g softcap %g: differs from the CPU by %.3g > 1e-5 (of the largest)",
           cfg, type, epi, (double)scale, (double)cap, worst);
    /* a factor of 1: the same bits as none */
    memcpy(y, y0, sizeof(float) * ny), memcpy(y1, y0, sizeof(float) * ny);
    ss.scale = 0.0f;
    CHECK_OK(es__vk_run_mul_mat_ss(b, (es__dtype)type, w, rows, k, x, n, epi, &ss, y));
    ss.scale = 1.0f;
    CHECK_OK(es__vk_run_mul_mat_ss(b, (es__dtype)type, w, rows, k, x, n, epi, &ss, y1));
    CHECKF(memcmp(y, y1, sizeof(float) * ny) == 0, "[%s] type %d epi %u softcap %g: a factor of 1 changes the bits", cfg,
           type, epi, (double)cap);
    free(deq), free(w), free(x), free(y), free(y0), free(ref), free(y1);
}

/* A backend whose profile never walks short rows solo (NULL where Vulkan is missing). */
static es_backend *no_solo_backend(void) {
    test_pin_vulkan();
    es_backend_params p = es_backend_default_params();
    p.type = ES_BACKEND_VULKAN;
    p.vk_tuning.solo_row_elements = -1;
    p.log_fn = vk_test_log;
    es_backend *b = NULL;
    CHECK_OK(es_backend_create(&p, &b));
    return b;
}

/* Uploads through a staging buffer a few rows deep: every refill falls between rows, and some
 * between a row's value plane and its scale plane. A refill there submitted the value plane's copy
 * before it was written, and quantised models larger than the 32 MiB staging buffer lost row
 * ranges on the device (a 2-layer Q8_0 model of width 1024: logits 27% off the CPU's). */
static void test_small_staging(test_rng *r) {
    es_backend *b = vk_backend(0);
    if (!b) return;
    /* sizes that leave a row's value plane room but not its scales at some refill, whatever the
     * planes' sizes on this device */
    static const int types[] = {T_Q8_0, T_Q4_0, T_Q5_1, T_Q4_K};
    for (uint64_t size = 2600; size <= 9000; size += 800) {
        es__vk_run_staging = size;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) check_case(b, r, types[ti], 41, 1024, 3, ES__EPI_STORE, "staging");
    }
    es__vk_run_staging = 0;
    es_backend_free(b);
}

int main(void) {
    test_rng r = {42};
    test_small_staging(&r);
    static const int types[] = {T_F32, T_F16, T_BF16, T_Q8_0, T_Q4_0};
    /* Every type and epilogue in the default configuration; the fallback configurations run the
     * cases that reach their different code (reads, reductions, native loads) with fewer shapes,
     * since each new pipeline costs lavapipe ~50 ms to compile. */
    for (int c = 0; c < VK_N_CONFIGS; c++) {
        es_backend *b = vk_backend(vk_configs[c].flags);
        if (!b) continue;
        const char *cfg = vk_configs[c].name;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const int t = types[ti];
            const bool blk = t == T_Q8_0 || t == T_Q4_0;
            check_case(b, &r, t, 67, blk ? 96 : 45, 1, ES__EPI_STORE, cfg);        /* short rows: one lane per row */
            check_case(b, &r, t, 130, blk ? 1024 : 200, 7, ES__EPI_STORE, cfg);    /* a tile; teams where the profile allows */
            if (c > 0) continue;
            check_case(b, &r, t, 33, 64, 5, ES__EPI_ADD, cfg);
            check_case(b, &r, t, 2 * 37, blk ? 160 : 81, 6, ES__EPI_SWIGLU, cfg);
            check_case(b, &r, t, 2 * 37, 512, 1, ES__EPI_SWIGLU, cfg);
            check_case(b, &r, t, 2 * 37, blk ? 160 : 81, 6, ES__EPI_GEGLU, cfg);
            check_case(b, &r, t, 2 * 19, 64, 1, ES__EPI_GEGLU, cfg);
            const uint32_t kf = blk ? 96 : 45;
            check_finish(b, &r, t, kf, ES__EPI_STORE, 0.0f, 2.0f, cfg);   /* gemma2's logits */
            check_finish(b, &r, t, kf, ES__EPI_STORE, 0.125f, 0.0f, cfg); /* granite's: 1 / logit_scale */
            check_finish(b, &r, t, kf, ES__EPI_STORE, 2.5f, 2.0f, cfg);   /* the factor, then the cap */
            check_finish(b, &r, t, kf, ES__EPI_ADD, 0.22f, 0.0f, cfg);    /* granite's residual scale */
        }
        /* the K-quants: rows of whole 256-element super-blocks, every epilogue in the default
         * configuration, the tiled case in the others */
        static const int ktypes[] = {T_Q4_K, T_Q5_K, T_Q6_K};
        for (size_t ti = 0; ti < sizeof ktypes / sizeof ktypes[0]; ti++) {
            const int t = ktypes[ti];
            check_case(b, &r, t, 130, 1024, 7, ES__EPI_STORE, cfg);
            if (t == T_Q4_K) { /* Q4_K's lane runs (weights.glsl): a last group of 24 blocks (runs of
                                  three, straddling super-blocks in teams of 8), one of 8 after a full one */
                check_case(b, &r, t, 70, 768, 3, ES__EPI_STORE, cfg);
                check_case(b, &r, t, 36, 1280, 1, ES__EPI_ADD, cfg);
            }
            if (c > 0) continue;
            check_case(b, &r, t, 67, 256, 1, ES__EPI_STORE, cfg);
            check_case(b, &r, t, 33, 512, 5, ES__EPI_ADD, cfg);
            check_case(b, &r, t, 2 * 37, 256, 6, ES__EPI_SWIGLU, cfg);
            check_case(b, &r, t, 2 * 37, 2048, 1, ES__EPI_SWIGLU, cfg);
        }
        /* the low-bit types (Q2_K's four scale sets, Q3_K's offset nibbles, IQ4_NL's grid, IQ4_XS in its layout) and
         * Q4_1, Q5_0 and Q5_1 (Q5_0's groups of four blocks, Q5_K's layout for the others; rows
         * of 896, Qwen2.5-0.5B's width, 28 blocks: not whole super-blocks): a team-walked tile in
         * every configuration; solo rows and the epilogues in the default */
        static const int ltypes[] = {T_Q2_K, T_Q3_K, T_IQ4_NL, T_IQ4_XS, T_Q4_1, T_Q5_0, T_Q5_1};
        for (size_t ti = 0; ti < sizeof ltypes / sizeof ltypes[0]; ti++) {
            const int t = ltypes[ti];
            const bool q5 = is_q5(t);
            check_case(b, &r, t, 66, q5 ? 896 : 1024, 5, ES__EPI_STORE, cfg);
            if (c > 0) continue;
            check_case(b, &r, t, 67, q5 ? 96 : 256, 1, ES__EPI_STORE, cfg);
            check_case(b, &r, t, 33, 512, 3, ES__EPI_ADD, cfg);
            check_case(b, &r, t, 2 * 21, q5 ? 896 : 512, 1, ES__EPI_SWIGLU, cfg);
            check_case(b, &r, t, 2 * 19, 256, 4, ES__EPI_GEGLU, cfg);
        }
        es_backend_free(b);
    }
    /* a device profile that never walks short rows solo: teams on rows of 45-200 elements too
     * (the lane rule still sends rows of under two units per lane solo) */
    {
        es_backend *b = no_solo_backend();
        for (size_t ti = 0; b && ti < sizeof types / sizeof types[0]; ti++) {
            const bool blk = types[ti] == T_Q8_0 || types[ti] == T_Q4_0;
            check_case(b, &r, types[ti], 130, blk ? 256 : 200, 7, ES__EPI_STORE, "no-solo");
            check_case(b, &r, types[ti], 33, 64, 5, ES__EPI_ADD, "no-solo");
        }
        es_backend_free(b);
    }
    /* a GPU's profile may give teams to rows with fewer units than lanes (policy.h
     * team_lane_units 0): lanes without a block, and runs of one block per lane */
    {
        es_backend *b = no_solo_backend();
        if (b) {
            es__vk_dev *d = es__vk_dev_of(b);
            d->policy.team_lane_units = 0;
            /* what the cases below run: a team of every lane on 3 blocks of 32 */
            CHECK(d->subgroup_size > 3 && es__vk_row_team(d, ES__DTYPE_Q8_0, 96) == d->subgroup_size);
        }
        for (size_t ti = 0; b && ti < sizeof types / sizeof types[0]; ti++) {
            const bool blk = types[ti] == T_Q8_0 || types[ti] == T_Q4_0;
            check_case(b, &r, types[ti], 67, blk ? 96 : 20, 1, ES__EPI_STORE, "few-units");
            check_case(b, &r, types[ti], 33, blk ? 160 : 45, 5, ES__EPI_ADD, "few-units");
        }
        static const int few_k[] = {T_Q4_K, T_Q6_K, T_Q2_K};
        for (size_t ti = 0; b && ti < sizeof few_k / sizeof few_k[0]; ti++) {
            check_case(b, &r, few_k[ti], 67, 256, 1, ES__EPI_STORE, "few-units");
            check_case(b, &r, few_k[ti], 33, 768, 3, ES__EPI_STORE, "few-units");
        }
        es_backend_free(b);
    }
    /* a GPU's one-token calls (policy.h mv_rows 2): teams of two rows where batches keep eight,
     * walked solo and by teams; check_case's invariance check compares the two bit for bit,
     * SwiGLU's row pairs and Q4_K's lane runs included */
    for (int solo = 0; solo < 2; solo++) {
        es_backend *b = solo ? vk_backend(0) : no_solo_backend();
        if (b) es__vk_dev_of(b)->policy.mv_rows = 2;
        static const int mv_types[] = {T_F32, T_F16, T_Q8_0, T_Q4_0, T_Q4_K, T_Q6_K};
        for (size_t ti = 0; b && ti < sizeof mv_types / sizeof mv_types[0]; ti++) {
            const int t = mv_types[ti];
            const bool blk = t != T_F32 && t != T_F16;
            const char *cfg = solo ? "mv-rows-2" : "mv-rows-2, no-solo";
            check_case(b, &r, t, 131, blk ? 768 : 200, 7, ES__EPI_STORE, cfg);
            check_case(b, &r, t, 2 * 37, blk ? 256 : 81, 6, ES__EPI_SWIGLU, cfg);
        }
        es_backend_free(b);
    }
    VK_TEST_END();
}
