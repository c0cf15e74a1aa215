/* test_vk_ops: every Vulkan op other than mul_mat against the CPU backend's op of lib/cpu/ops.h,
 * on fresh random inputs with odd shapes, in every feature configuration. Bounds (normalised by
 * the largest reference magnitude of the row unless stated):
 *   rmsnorm 2e-6 (stored, or added into y times 1 or a residual scale; with the next norm in the
 *   same dispatch, each step 2e-6 and the bits of the two dispatches it replaces); rope (q rotated in
 *   place, k rotated into the cache) 1e-6; cache write of v exact; qwen3's per-head Q/K norms with RoPE (qk_norm_rope) against es__cpu_qkv_prepare 2e-6 of
 *   the row's (the cache's) largest value, v and the stream rows' v exact; tree attention 2e-5 of max |v| (many splits, chunks, GQA, random trees); softmax
 *   5e-5 per element of the row's max (the CPU sums up to 32000 exponentials in index order, the
 *   device in a tree: their rounding differs by that much); get_rows exact for every weight type; argmax and top-k
 *   exact ids and values (ties to the lower id, NaN ignored); KV compaction exact. */
#include "cpu/ops.h"
#include "cpu/opsi.h"
#include "oprun.h"
#include "backend_vk.h"
#include "qk_ref.h"
#include "vk_test.h"

/* A post-branch norm and the norm after it in one dispatch (gemma2's, forward.c rec_post_norm):
 * acc += add rmsnorm(x) w, then x = rmsnorm(acc) w2 in place. Against the CPU: acc as the plain
 * add's bound, the second norm as rmsnorm's of the device's acc; and bit for bit the two
 * dispatches it replaces (a forward that fuses must give what one that does not gives: batch
 * invariance, fused streams against the stream pass). ref: the CPU's rmsnorm(x) w. */
static void test_rmsnorm_post(es_backend *b, test_rng *r, const char *cfg, const float *x, const float *w,
                              const float *ref, uint32_t E, uint32_t n) {
    static const float adds[] = {1.0f, 0.22f};
    const size_t En = (size_t)E * n;
    for (size_t a = 0; a < ES__ARRAY_LEN(adds); a++) {
        float *w2 = rand_vec(r, E, 1.0f), *acc = rand_vec(r, En, 2.0f), *racc = malloc(sizeof *racc * En),
              *acc2 = malloc(sizeof *acc2 * En), *xz = malloc(sizeof *xz * En), *z2 = malloc(sizeof *z2 * En),
              *rz = malloc(sizeof *rz * En);
        memcpy(racc, acc, sizeof *acc * En);
        memcpy(acc2, acc, sizeof *acc * En);
        memcpy(xz, x, sizeof *x * En);
        for (size_t i = 0; i < En; i++) z2[i] = NAN;
        CHECK_OK(es__vk_run_rmsnorm_post(b, xz, w, w2, E, n, 1e-5f, adds[a], acc));
        for (size_t i = 0; i < En; i++) racc[i] += adds[a] == 1.0f ? ref[i] : adds[a] * ref[i];
        const double da = diff(acc, racc, En, max_abs(racc, En));
        CHECKF(da <= 2e-6, "[%s] rmsnorm post add %g E %u n %u: residual error %.3g > 2e-6", cfg, (double)adds[a], E,
               n, da);
        es__cpu_rmsnorm(acc, w2, E, n, 1e-5f, rz);
        for (uint32_t t = 0; t < n; t++) {
            const double d = diff(xz + (size_t)t * E, rz + (size_t)t * E, E, max_abs(rz + (size_t)t * E, E));
            CHECKF(d <= 2e-6, "[%s] rmsnorm post add %g E %u row %u: next norm error %.3g > 2e-6", cfg,
                   (double)adds[a], E, t, d);
        }
        CHECK_OK(es__vk_run_rmsnorm(b, x, w, E, n, 1e-5f, adds[a], acc2));
        CHECK_OK(es__vk_run_rmsnorm(b, acc2, w2, E, n, 1e-5f, 0.0f, z2));
        CHECKF(memcmp(acc, acc2, sizeof *acc * En) == 0 && memcmp(xz, z2, sizeof *xz * En) == 0,
               "[%s] rmsnorm post add %g E %u n %u: one dispatch differs from the two it replaces", cfg,
               (double)adds[a], E, n);
        free(w2), free(acc), free(racc), free(acc2), free(xz), free(z2), free(rz);
    }
}

static void test_rmsnorm(es_backend *b, test_rng *r, const char *cfg) {
    static const uint32_t Es[] = {1, 7, 64, 1000, 4099};
    for (size_t e = 0; e < sizeof Es / sizeof Es[0]; e++)
        for (uint32_t n = 1; n <= 5; n += 4) {
            const uint32_t E = Es[e];
            float *x = rand_vec(r, (size_t)E * n, 3.0f), *w = rand_vec(r, E, 1.0f), *y = rand_vec(r, (size_t)E * n, 0);
            float *ref = malloc(sizeof *ref * E * n);
            for (size_t i = 0; i < (size_t)E * n; i++) y[i] = NAN;
            CHECK_OK(es__vk_run_rmsnorm(b, x, w, E, n, 1e-5f, 0.0f, y));
            es__cpu_rmsnorm(x, w, E, n, 1e-5f, ref);
            for (uint32_t t = 0; t < n; t++) {
                double d = diff(y + (size_t)t * E, ref + (size_t)t * E, E, max_abs(ref + (size_t)t * E, E));
                CHECKF(d <= 2e-6, "[%s] rmsnorm E %u row %u: error %.3g > 2e-6", cfg, E, t, d);
            }
            /* add = 1 (gemma2's post-branch norms): y += the normalised rows, as the CPU forward;
             * add = 0.22 (a residual scale, granite's): y += 0.22 times them, as its x += s y */
            static const float adds[] = {1.0f, 0.22f};
            for (size_t a = 0; a < ES__ARRAY_LEN(adds); a++) {
                float *acc = rand_vec(r, (size_t)E * n, 2.0f), *racc = malloc(sizeof *racc * E * n);
                memcpy(racc, acc, sizeof *acc * E * n);
                CHECK_OK(es__vk_run_rmsnorm(b, x, w, E, n, 1e-5f, adds[a], acc));
                if (adds[a] == 1.0f)
                    es__cpu_add(racc, ref, (int64_t)E * n, racc);
                else
                    for (size_t i = 0; i < (size_t)E * n; i++) racc[i] += adds[a] * ref[i];
                const double da = diff(acc, racc, (size_t)E * n, max_abs(racc, (size_t)E * n));
                CHECKF(da <= 2e-6, "[%s] rmsnorm add %g E %u n %u: error %.3g > 2e-6", cfg, (double)adds[a], E, n, da);
                free(acc), free(racc);
            }
            test_rmsnorm_post(b, r, cfg, x, w, ref, E, n);
            free(x), free(w), free(y), free(ref);
        }
}

static void test_get_rows(es_backend *b, test_rng *r, const char *cfg) {
    static const int types[] = {T_F32,  T_F16,  T_BF16, T_Q8_0,   T_Q4_0, T_Q4_K, T_Q5_K,
                                T_Q6_K, T_Q2_K, T_Q3_K, T_IQ4_NL, T_IQ4_XS, T_Q4_1, T_Q5_0, T_Q5_1};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int t = types[ti];
        /* Q4_K: 24 blocks, runs of three that straddle super-blocks in teams of 8 (weights.glsl) */
        const uint32_t K = t == T_Q4_K ? 768 : is_kq(t) || t == T_IQ4_XS ? 512 : t == T_Q8_0 || t == T_Q4_0 || t == T_IQ4_NL || is_q5(t) ? 96 : 37, rows = 53, n = 9;
        float *deq = malloc(sizeof *deq * K * rows);
        void *table = make_weights(r, t, rows, K, deq);
        int32_t ids[9];
        for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)(test_rng_u64(r) % rows);
        ids[3] = ids[1]; /* a repeat */
        ids[8] = (int32_t)rows - 1;
        float *out = malloc(sizeof *out * K * n), *ref = malloc(sizeof *ref * K * n);
        for (size_t i = 0; i < (size_t)K * n; i++) out[i] = NAN;
        CHECK_OK(es__vk_run_get_rows(b, (es__dtype)t, table, K, rows, ids, n, 1.0f, out));
        CHECK_OK(es__cpu_get_rows((es__dtype)t, table, K, rows, ids, n, ref, NULL));
        CHECKF(memcmp(out, ref, sizeof *out * K * n) == 0, "[%s] get_rows type %d differs from the CPU", cfg, t);
        /* gemma's embedding scale: one f32 multiply after dequantising, as the CPU forward does */
        const float scale = sqrtf(2304.0f);
        CHECK_OK(es__vk_run_get_rows(b, (es__dtype)t, table, K, rows, ids, n, scale, out));
        for (size_t i = 0; i < (size_t)K * n; i++) ref[i] *= scale;
        CHECKF(memcmp(out, ref, sizeof *out * K * n) == 0, "[%s] get_rows type %d, scale %g, differs from the CPU", cfg,
               t, (double)scale);
        free(deq), free(table), free(out), free(ref);
    }
}

static void test_rope_kv(es_backend *b, test_rng *r, const char *cfg) {
    static const struct {
        uint32_t n_head, n_head_kv, hd, n_rot;
        es_rope_type type;
    } cases[] = {{4, 2, 16, 16, ES_ROPE_NORM}, {3, 3, 12, 8, ES_ROPE_NEOX}, {2, 1, 64, 32, ES_ROPE_NORM},
                 {2, 2, 8, 2, ES_ROPE_NEOX}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t nh = cases[c].n_head, nkv = cases[c].n_head_kv, hd = cases[c].hd, n_rot = cases[c].n_rot;
        const uint32_t n = 6, n_past = 300, n_ctx = 320, width = (nh + 2 * nkv) * hd;
        const int32_t pos[6] = {300, 301, 302, 302, 301, 302}; /* a small tree */
        float *qkv = rand_vec(r, (size_t)n * width, 1.0f), *orig = malloc(sizeof *orig * n * width);
        memcpy(orig, qkv, sizeof *orig * n * width);
        const size_t cache = (size_t)nkv * n_ctx * hd;
        float *kc = rand_vec(r, cache, 1.0f), *vc = rand_vec(r, cache, 1.0f);
        float *kc0 = malloc(sizeof *kc0 * cache), *vc0 = malloc(sizeof *vc0 * cache);
        memcpy(kc0, kc, sizeof *kc * cache);
        memcpy(vc0, vc, sizeof *vc * cache);
        /* odd cases with qwen2's Q/K/V biases, added before the rotation */
        float *bias = c % 2 ? rand_vec(r, width, 1.0f) : NULL;
        CHECK_OK(es__vk_run_rope_kv(b, qkv, n, nh, nkv, hd, n_rot, cases[c].type, 10000.0f, 0.75f, pos, n_past, n_ctx,
                                    kc, vc, bias));
        if (bias)
            for (uint32_t t = 0; t < n; t++) es__cpu_add(orig + (size_t)t * width, bias, width, orig + (size_t)t * width);
        /* reference: rotate q and k on the CPU, write k and v into the cache */
        float *q = malloc(sizeof *q * n * nh * hd), *k = malloc(sizeof *k * n * nkv * hd), *v = malloc(sizeof *v * n * nkv * hd);
        for (uint32_t t = 0; t < n; t++) {
            memcpy(q + (size_t)t * nh * hd, orig + (size_t)t * width, sizeof *q * nh * hd);
            memcpy(k + (size_t)t * nkv * hd, orig + (size_t)t * width + nh * hd, sizeof *k * nkv * hd);
            memcpy(v + (size_t)t * nkv * hd, orig + (size_t)t * width + (nh + nkv) * hd, sizeof *v * nkv * hd);
        }
        es__cpu_rope(q, n, nh, hd, n_rot, pos, 10000.0f, 0.75f, cases[c].type);
        es__cpu_rope(k, n, nkv, hd, n_rot, pos, 10000.0f, 0.75f, cases[c].type);
        es__cpu_kv_write(kc0, vc0, (int32_t)n_ctx, (int32_t)nkv, (int32_t)hd, (int32_t)n_past, (int32_t)n, k, v);
        double dq = 0;
        for (uint32_t t = 0; t < n; t++)
            dq = fmax(dq, diff(qkv + (size_t)t * width, q + (size_t)t * nh * hd, nh * hd, 1.0));
        CHECKF(dq <= 1e-6, "[%s] rope q case %zu: error %.3g > 1e-6", cfg, c, dq);
        const double dk = diff(kc, kc0, cache, 1.0);
        CHECKF(dk <= 1e-6, "[%s] rope k into the cache case %zu: error %.3g > 1e-6", cfg, c, dk);
        CHECKF(memcmp(vc, vc0, sizeof *vc * cache) == 0, "[%s] cache write of v case %zu differs", cfg, c);
        free(bias);
        free(qkv), free(orig), free(kc), free(vc), free(kc0), free(vc0), free(q), free(k), free(v);
    }
}

/* qwen3's per-head Q and K norms (qk_norm_rope.comp) as the forward runs them: the token rows of
 * a random tree (Q in place; K and V into cache slots n_past + t, no other slot touched) and, in
 * even cases, two fused stream rows per token after them (Q, K, V kept in their rows, at their
 * token's position); odd cases add qwen2-style biases first. Row padding keeps its NaN bits. */
static void test_qk_norm_rope(es_backend *b, test_rng *r, const char *cfg) {
    static const es__vk_op_rope cases[] = {{4, 2, 32, 32, ES_ROPE_NEOX, 1e6f, 1.0f},  /* wider than n_embd / n_head */
                                           {3, 3, 12, 8, ES_ROPE_NEOX, 1e4f, 0.75f},  /* partial rotation */
                                           {2, 1, 128, 128, ES_ROPE_NEOX, 1e6f, 1.0f}, /* Qwen3-0.6B's heads */
                                           {4, 2, 16, 16, ES_ROPE_NORM, 1e4f, 1.0f}}; /* rope.ordering override */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const es__vk_op_rope *g = &cases[c];
        const uint32_t n = 6, G = c % 2 ? 0 : 2, rows = n * (1 + G), n_past = 300, n_ctx = 320, hd = g->hd;
        const uint32_t qd = g->n_head * hd, kvd = g->n_head_kv * hd, width = qd + 2 * kvd, stride = width + 4;
        int32_t end[6];
        random_tree(r, (int32_t)n, end, 0);
        const es__vk_op_batch batch = {n_past, n, end, NULL, 0};
        float *qkv = rand_vec(r, (size_t)rows * stride, 3.0f), *bias = c % 2 ? rand_vec(r, width, 0.5f) : NULL;
        for (uint32_t t = 0; t < rows; t++)
            for (uint32_t k = width; k < stride; k++) qkv[(size_t)t * stride + k] = NAN;
        float *qn = rand_vec(r, hd, 1.5f), *kn = rand_vec(r, hd, 1.5f), *ref = malloc(sizeof *ref * rows * stride);
        memcpy(ref, qkv, sizeof *ref * rows * stride);
        const size_t cache = (size_t)g->n_head_kv * n_ctx * hd;
        float *kc = rand_vec(r, cache, 1.0f), *vc = rand_vec(r, cache, 1.0f);
        float *kc0 = malloc(sizeof *kc0 * cache), *vc0 = malloc(sizeof *vc0 * cache);
        memcpy(kc0, kc, sizeof *kc * cache);
        memcpy(vc0, vc, sizeof *vc * cache);
        es__cpu_layer L;
        memset(&L, 0, sizeof L);
        if (bias) L.bq = bias, L.bk = bias + qd, L.bv = bias + qd + kvd;
        L.q_norm = qn;
        L.k_norm = kn;
        for (uint32_t t = 0; t < rows; t++) {
            float *row = ref + (size_t)t * stride;
            cpu_qk_prepare(g, &L, 1e-6f, (int32_t)n_past + tree_depth(end, (int32_t)(t < n ? t : (t - n) / G)), row);
            if (t < n) es__cpu_kv_write(kc0, vc0, (int32_t)n_ctx, (int32_t)g->n_head_kv, (int32_t)hd, (int32_t)(n_past + t), 1,
                                        row + qd, row + qd + kvd);
        }
        const es__vk_qk_norm_call call = {g, rows, stride, bias, qn, kn, 1e-6f, n, G, n_ctx, kc, vc};
        CHECK_OK(es__vk_run_qk_norm_rope(b, &call, &batch, qkv));
        double d = 0;
        bool pad = true;
        for (uint32_t t = 0; t < rows; t++) {
            const float *out = qkv + (size_t)t * stride, *want = ref + (size_t)t * stride;
            const uint32_t m = t < n ? qd : width; /* a token row's K and V went to the cache */
            d = fmax(d, diff(out, want, m, max_abs(want, m)));
            pad = pad && memcmp(out + width, want + width, sizeof *out * (stride - width)) == 0;
        }
        CHECKF(d <= 2e-6, "[%s] qk_norm_rope case %zu (hd %u, n_rot %u, %u streams): rows' error %.3g > 2e-6", cfg, c,
               hd, g->n_rot, G, d);
        CHECKF(pad, "[%s] qk_norm_rope case %zu wrote row padding", cfg, c);
        const double dk = diff(kc, kc0, cache, max_abs(kc0, cache));
        CHECKF(dk <= 2e-6, "[%s] qk_norm_rope case %zu: keys in the cache, error %.3g > 2e-6", cfg, c, dk);
        CHECKF(memcmp(vc, vc0, sizeof *vc * cache) == 0, "[%s] qk_norm_rope case %zu: cache write of v differs", cfg, c);
        free(qkv), free(bias), free(qn), free(kn), free(ref), free(kc), free(vc), free(kc0), free(vc0);
    }
}

static void test_attention(es_backend *b, test_rng *r, const char *cfg) {
    static const struct {
        uint32_t n_ctx, n_head, n_head_kv, hd, n_past, n;
        int chain;
    } cases[] = {{40, 2, 2, 8, 0, 1, 1},     {40, 4, 2, 16, 7, 13, 0},    {600, 4, 1, 32, 300, 9, 0},
                 {600, 2, 2, 64, 0, 70, 1},  {600, 3, 3, 12, 520, 33, 0}, {1100, 2, 1, 128, 1000, 5, 0},
                 {300, 2, 2, 256, 250, 12, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t n_ctx = cases[c].n_ctx, nh = cases[c].n_head, nkv = cases[c].n_head_kv, hd = cases[c].hd;
        const uint32_t n_past = cases[c].n_past, n = cases[c].n;
        const size_t cache = (size_t)nkv * n_ctx * hd;
        float *q = rand_vec(r, (size_t)n * nh * hd, 1.0f), *kc = rand_vec(r, cache, 1.0f), *vc = rand_vec(r, cache, 1.0f);
        int32_t *end = malloc(sizeof *end * n), *start = malloc(sizeof *start * n);
        random_tree(r, (int32_t)n, end, cases[c].chain);
        for (uint32_t j = 0; j < n; j++) start[j] = (int32_t)j;
        float *out = malloc(sizeof *out * n * nh * hd), *ref = malloc(sizeof *ref * n * nh * hd);
        for (size_t i = 0; i < (size_t)n * nh * hd; i++) out[i] = NAN;
        const float scale = 1.0f / sqrtf((float)hd);
        CHECK_OK(es__vk_run_attention(b, q, kc, vc, n_ctx, nh, nkv, hd, n_past, n, end, scale, out));
        CHECK_OK(es__cpu_attention(NULL, q, kc, vc, (int32_t)n_ctx, (int32_t)nh, (int32_t)nkv, (int32_t)hd,
                                   (int32_t)n_past, (int32_t)n, start, end, scale, ref, NULL));
        const double d = diff(out, ref, (size_t)n * nh * hd, max_abs(vc, cache));
        CHECKF(d <= 2e-5, "[%s] attention case %zu (n_ctx %u, n_past %u, n %u, hd %u): error %.3g > 2e-5", cfg, c,
               n_ctx, n_past, n, hd, d);
        /* with a sliding window (ending inside the batch, the committed keys, or past a split)
         * and soft-capped scores (lib/core/arch.h); positions n_past + depth */
        int32_t *pos = malloc(sizeof *pos * n);
        for (uint32_t j = 0; j < n; j++) {
            pos[j] = (int32_t)n_past;
            for (uint32_t i = 0; i < j; i++) pos[j] += (int32_t)i <= (int32_t)j && (int32_t)j <= end[i];
        }
        const uint32_t window = 3 + (uint32_t)c * 47;
        es__vk_attn_bench ex = {NULL, NULL, 1, 0.0, window, 1.5f};
        for (size_t i = 0; i < (size_t)n * nh * hd; i++) out[i] = NAN;
        CHECK_OK(es__vk_run_attention_bench(b, q, kc, vc, n_ctx, nh, nkv, hd, n_past, n, end, scale, out, &ex));
        CHECK_OK(es__cpu_attention_ex(NULL, q, kc, vc, (int32_t)n_ctx, (int32_t)nh, (int32_t)nkv, (int32_t)hd,
                                      (int32_t)n_past, (int32_t)n, start, end, pos, (int32_t)window, 1.5f, scale, ref,
                                      NULL));
        const double dw = diff(out, ref, (size_t)n * nh * hd, max_abs(vc, cache));
        CHECKF(dw <= 2e-5, "[%s] attention case %zu, window %u, softcap 1.5: error %.3g > 2e-5", cfg, c, window, dw);
        free(pos);
        free(q), free(kc), free(vc), free(end), free(start), free(out), free(ref);
    }
}

static void test_softmax(es_backend *b, test_rng *r, const char *cfg) {
    static const uint32_t Vs[] = {1, 17, 32000};
    for (size_t i = 0; i < sizeof Vs / sizeof Vs[0]; i++) {
        const uint32_t V = Vs[i], n = 3;
        float *x = rand_vec(r, (size_t)V * n, 20.0f), *y = malloc(sizeof *y * V * n), *ref = malloc(sizeof *ref * V * n);
        CHECK_OK(es__vk_run_softmax(b, x, V, n, y));
        for (uint32_t t = 0; t < n; t++) {
            es__cpu_softmax(x + (size_t)t * V, V, ref + (size_t)t * V);
            const double d = diff(y + (size_t)t * V, ref + (size_t)t * V, V, max_abs(ref + (size_t)t * V, V));
            CHECKF(d <= 5e-5, "[%s] softmax V %u row %u: error %.3g > 5e-5", cfg, V, t, d);
        }
        free(x), free(y), free(ref);
    }
}

static void test_topk(es_backend *b, test_rng *r, const char *cfg) {
    static const uint32_t Vs[] = {5, 1000, 32003}, ks[] = {1, 5, 40};
    for (size_t i = 0; i < sizeof Vs / sizeof Vs[0]; i++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            const uint32_t V = Vs[i], k = ks[j] < V ? ks[j] : V, n = 2;
            float *x = rand_vec(r, (size_t)V * n, 4.0f);
            /* ties: repeat the largest values at later ids; a NaN in the middle */
            for (uint32_t t = 0; t < n; t++) {
                float *row = x + (size_t)t * V;
                int32_t a = es__cpu_argmax(row, V);
                row[V - 1] = row[a];
                if (V > 4) row[V / 2] = NAN, row[1] = row[a];
            }
            int32_t *ids = malloc(sizeof *ids * n * k), *rid = malloc(sizeof *rid * k);
            float *vals = malloc(sizeof *vals * n * k), *rval = malloc(sizeof *rval * k);
            CHECK_OK(es__vk_run_topk(b, x, V, n, k, ids, vals));
            for (uint32_t t = 0; t < n; t++) {
                /* fewer than k non-NaN entries: the CPU returns the count, Vulkan pads with id -1 */
                const int32_t got = es__cpu_topk(x + (size_t)t * V, V, (int32_t)k, rid, rval);
                bool pad_ok = true;
                for (uint32_t m = (uint32_t)got; m < k; m++) pad_ok = pad_ok && ids[(size_t)t * k + m] == -1;
                CHECKF(got > 0 && pad_ok && memcmp(ids + (size_t)t * k, rid, sizeof *rid * (size_t)got) == 0 &&
                           memcmp(vals + (size_t)t * k, rval, sizeof *rval * (size_t)got) == 0,
                       "[%s] top-%u of %u row %u differs from the CPU (first ids %d vs %d)", cfg, k, V, t, ids[t * k],
                       rid[0]);
                CHECKF(ids[(size_t)t * k] == es__cpu_argmax(x + (size_t)t * V, V), "[%s] argmax of %u row %u", cfg, V, t);
            }
            free(x), free(ids), free(rid), free(vals), free(rval);
        }
}

static void test_kv_move(es_backend *b, test_rng *r, const char *cfg) {
    const uint32_t nkv = 3, n_ctx = 40, hd = 20, n_past = 11;
    const int32_t keep[5] = {0, 2, 3, 6, 7};
    const size_t cache = (size_t)nkv * n_ctx * hd;
    float *kc = rand_vec(r, cache, 1.0f), *vc = rand_vec(r, cache, 1.0f);
    float *rk = malloc(sizeof *rk * cache), *rv = malloc(sizeof *rv * cache);
    memcpy(rk, kc, sizeof *rk * cache);
    memcpy(rv, vc, sizeof *rv * cache);
    for (uint32_t h = 0; h < nkv; h++)
        for (int i = 0; i < 5; i++) {
            size_t dst = ((size_t)h * n_ctx + n_past + (size_t)i) * hd, src = ((size_t)h * n_ctx + n_past + (size_t)keep[i]) * hd;
            memmove(rk + dst, rk + src, sizeof *rk * hd);
            memmove(rv + dst, rv + src, sizeof *rv * hd);
        }
    CHECK_OK(es__vk_run_kv_move(b, kc, vc, nkv, n_ctx, hd, n_past, keep, 5));
    CHECKF(memcmp(kc, rk, sizeof *kc * cache) == 0 && memcmp(vc, rv, sizeof *vc * cache) == 0,
           "[%s] KV compaction differs from sequential moves", cfg);
    free(kc), free(vc), free(rk), free(rv);
}

int main(void) {
    test_rng r = {7};
    for (int c = 0; c < VK_N_CONFIGS; c++) {
        es_backend *b = vk_backend(vk_configs[c].flags);
        if (!b) continue;
        const char *cfg = vk_configs[c].name;
        test_rmsnorm(b, &r, cfg);
        test_get_rows(b, &r, cfg);
        test_rope_kv(b, &r, cfg);
        test_qk_norm_rope(b, &r, cfg);
        test_attention(b, &r, cfg);
        test_softmax(b, &r, cfg);
        test_topk(b, &r, cfg);
        test_kv_move(b, &r, cfg);
        es_backend_free(b);
    }
    /* a GPU's rmsnorm (policy.h norm_wg): a workgroup of 256, rows shorter and longer than it */
    es_backend *b = vk_backend(0);
    if (b) {
        es__vk_dev_of(b)->policy.norm_wg = 256;
        test_rmsnorm(b, &r, "norm-wg-256");
        es_backend_free(b);
    }
    VK_TEST_END();
}
