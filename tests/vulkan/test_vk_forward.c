/* test_vk_forward: the whole model on the Vulkan backend against the CPU backend, on random
 * in-memory llama models (GQA or not, tied or separate head, NORM or NEOX rope, every weight
 * type) in every feature configuration:
 *   - prefill logits of every row within a normalised error of the CPU's (bound below);
 *   - greedy generation identical to the CPU's, token for token;
 *   - batch invariance on Vulkan: a token's logits are bit-identical decoded alone, inside a
 *     prefill chain, and as a node of a verification tree; tree commit (KV compaction on the
 *     device) then continues exactly as plain decoding;
 *   - contexts long enough that attention uses several splits (and their merge), also with the
 *     smallest split a device may take (policy.h attn_split: splits of 16 keys, many merged), and
 *     with a subgroup per split (attn_team), where the device has subgroup arithmetic;
 *   - a GPU's whole profile (policy.c) forced on the test device.
 * Bound: max |vk - cpu| over a row <= 2e-5 * max |cpu| over that row (f32 accumulation in a
 * different order on each backend, amplified through the layers). */
#include "../common/test_ctx.h"
#include "../cpu/mem_model.h"
#include "vk_attn_variants.h"

#define LOGIT_BOUND 2e-5

typedef struct fcase {
    const char *name;
    mem_model_cfg cfg;
} fcase;

static const fcase cases[] = {
    {"f32 gqa neox", {97, 64, 2, 4, 2, 16, 96, 16, ES_ROPE_NEOX, 10000.0f, 1.0f, false, ES__DTYPE_F32, 1}},
    {"f16 mha norm tied", {101, 96, 2, 3, 3, 32, 160, 24, ES_ROPE_NORM, 10000.0f, 0.5f, true, ES__DTYPE_F16, 2}},
    {"q8_0 gqa norm", {89, 64, 2, 4, 1, 16, 128, 16, ES_ROPE_NORM, 500.0f, 1.0f, false, ES__DTYPE_Q8_0, 3}},
    {"q4_0 mha neox", {120, 64, 1, 2, 2, 32, 96, 32, ES_ROPE_NEOX, 10000.0f, 1.0f, false, ES__DTYPE_Q4_0, 4}},
    {"bf16 gqa norm", {77, 32, 2, 2, 1, 16, 64, 8, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_BF16, 5}},
    /* K-quants: rows of 256-element super-blocks; tied, the embedding lookup reads Q6_K too */
    {"q4_K gqa norm", {90, 256, 1, 4, 2, 64, 512, 64, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_Q4_K, 6}},
    {"q6_K mqa neox tied", {83, 256, 1, 4, 1, 64, 256, 32, ES_ROPE_NEOX, 10000.0f, 1.0f, true, ES__DTYPE_Q6_K, 7}},
    {"q3_K gqa neox tied", {86, 256, 1, 4, 2, 64, 256, 32, ES_ROPE_NEOX, 10000.0f, 1.0f, true, ES__DTYPE_Q3_K, 8}},
    {"q2_K mha norm tied", {81, 256, 1, 2, 2, 128, 256, 32, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_Q2_K, 9}},
    {"iq4_nl gqa norm tied", {95, 64, 2, 4, 2, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_IQ4_NL, 10}},
    /* IQ4_XS goes up in IQ4_NL's layout (weights.h); tied, the embedding lookup reads it too */
    {"iq4_xs mqa neox tied", {84, 256, 1, 4, 1, 64, 512, 32, ES_ROPE_NEOX, 10000.0f, 1.0f, true, ES__DTYPE_IQ4_XS, 14}},
    /* llama.cpp's fallbacks where rows are not whole super-blocks (widths of 96 and 160 here) */
    {"q5_0 gqa neox tied", {93, 96, 2, 6, 2, 16, 160, 16, ES_ROPE_NEOX, 10000.0f, 1.0f, true, ES__DTYPE_Q5_0, 11}},
    {"q5_1 mha norm", {88, 64, 2, 4, 4, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_Q5_1, 12}},
    {"q4_1 gqa norm tied", {91, 64, 1, 4, 2, 16, 128, 16, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_Q4_1, 13}},
};

/* llama.cpp's _M mixes (mem_model_mix: the head and the last layer's attn_v and ffn_down in the
 * second type): that layer's fused Q, K, V are parts of two types, each run by its own kernel.
 * Q4_K_M; and the Q5_0 / Q8_0 fallbacks of a width that is not whole super-blocks (Qwen2.5-0.5B's
 * Q4_K_M), NEOX-permuted and tied. */
static const struct {
    fcase c;
    es__dtype mix;
} mixes[] = {
    {{"q4_K_M mix gqa norm", {90, 256, 2, 4, 2, 64, 512, 64, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_Q4_K,
                              15}},
     ES__DTYPE_Q6_K},
    {{"q5_0 + q8_0 mix gqa neox tied",
      {93, 96, 2, 6, 2, 16, 160, 16, ES_ROPE_NEOX, 10000.0f, 1.0f, true, ES__DTYPE_Q5_0, 16}},
     ES__DTYPE_Q8_0},
};

#define N_CTX 320          /* > 256: positions past the first attention split */
#define N_PROMPT_LONG 270  /* the first case reaches them, the others stay short */
#define N_PROMPT 40
#define N_GEN 12

static es_context *make_ctx(const es_model *m, es_backend *b, int32_t n_batch) {
    return test_ctx(m, b, N_CTX, n_batch, vk_test_log);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Normalised difference of two logit rows. */
static double row_err(const float *a, const float *ref, int32_t n) {
    double mx = 0, md = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        mx = fmax(mx, fabs(ref[i]));
        md = fmax(md, fabs((double)a[i] - ref[i]));
    }
    return md / (mx > 0 ? mx : 1);
}

/* Prefill prompt with logits for every row; returns a copy of all rows. */
static float *prefill(es_context *ctx, const int32_t *prompt, int32_t n, int32_t V, int32_t nb) {
    uint8_t *want = malloc((size_t)n);
    memset(want, 1, (size_t)n);
    float *out = malloc(sizeof(float) * (size_t)n * V);
    for (size_t i = 0; i < (size_t)n * V; i++) out[i] = NAN;
    for (int32_t i0 = 0; i0 < n; i0 += nb) {
        const int32_t k = n - i0 < nb ? n - i0 : nb;
        es_batch b = {k, prompt + i0, NULL, NULL, NULL, want};
        CHECK_OK(es_forward(ctx, &b));
        for (int32_t i = 0; i < k; i++) {
            const float *l = NULL;
            CHECK_OK(es_logits(ctx, i, &l));
            if (l) memcpy(out + (size_t)(i0 + i) * V, l, sizeof(float) * V);
        }
        CHECK_OK(es_commit(ctx, NULL, 0));
    }
    free(want);
    return out;
}

/* Greedy continuation of n tokens after the committed prompt, starting from logits `last`. */
static void greedy(es_context *ctx, const float *last, int32_t V, int32_t n, int32_t *out, float *logits_out) {
    int32_t tok = argmax(last, V);
    for (int32_t i = 0; i < n; i++) {
        out[i] = tok;
        es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(ctx, &b));
        const float *l = NULL;
        CHECK_OK(es_logits(ctx, 0, &l));
        CHECK_OK(es_commit(ctx, NULL, 0));
        if (!l) return;
        if (logits_out) memcpy(logits_out + (size_t)i * V, l, sizeof(float) * V);
        tok = argmax(l, V);
    }
}

/* mix: ES__DTYPE_F32 for none, else mem_model_mix's type */
static void run_case(const fcase *fc, es__dtype mix, es_backend *cpu, es_backend *vk, const char *cfg,
                     int32_t n_prompt) {
    es_model *m = mem_model_create(&fc->cfg);
    if (mix != ES__DTYPE_F32) mem_model_mix(m, mix, fc->cfg.seed + 100);
    const int32_t V = m->hp.n_vocab;
    test_rng rng = {fc->cfg.seed * 77};
    int32_t prompt[N_PROMPT_LONG];
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);

    es_context *cc = make_ctx(m, cpu, 128), *vc = make_ctx(m, vk, 128);
    if (!cc || !vc) goto done;
    float *lc = prefill(cc, prompt, n_prompt, V, 128), *lv = prefill(vc, prompt, n_prompt, V, 128);
    double worst = 0;
    for (int32_t i = 0; i < n_prompt; i++) worst = fmax(worst, row_err(lv + (size_t)i * V, lc + (size_t)i * V, V));
    CHECKF(worst <= LOGIT_BOUND, "[%s] %s: prefill logits differ from the CPU by %.3g (normalised) > %.1g", cfg,
           fc->name, worst, LOGIT_BOUND);

    int32_t gc[N_GEN], gv[N_GEN];
    float *seq_logits = malloc(sizeof(float) * N_GEN * V);
    greedy(cc, lc + (size_t)(n_prompt - 1) * V, V, N_GEN, gc, NULL);
    greedy(vc, lv + (size_t)(n_prompt - 1) * V, V, N_GEN, gv, seq_logits);
    CHECKF(memcmp(gc, gv, sizeof gc) == 0, "[%s] %s: greedy tokens differ from the CPU backend", cfg, fc->name);

    /* Batch invariance: decode the same tokens as one chain, and as the main path of a tree with
     * distractor branches; every logit row must equal the one-at-a-time row bit for bit. */
    es_context *v2 = make_ctx(m, vk, 64);
    if (v2) {
        float *l2 = prefill(v2, prompt, n_prompt, V, 61);
        CHECKF(memcmp(l2, lv, sizeof(float) * (size_t)n_prompt * V) == 0,
               "[%s] %s: prefill logits depend on the batch split", cfg, fc->name);
        free(l2);
        /* tree: main path gv[0..3] with a sibling branch after each node */
        int32_t tok[8], st[8], en[8], pos[8];
        const int32_t n_past = es_context_n_past(v2);
        /* pre-order: 0:gv0, 1:gv1, 2:gv2, 3:gv3, 4:x (child of 2), 5:y (child of 1), 6:z (child of 0), 7: w (child of 6) */
        const int32_t parent[8] = {-1, 0, 1, 2, 2, 1, 0, 6};
        for (int i = 0; i < 4; i++) tok[i] = gv[i];
        for (int i = 4; i < 8; i++) tok[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
        const int32_t ends[8] = {7, 5, 4, 3, 4, 5, 7, 7};
        for (int i = 0; i < 8; i++) {
            int depth = 0;
            for (int p = parent[i]; p >= 0; p = parent[p]) depth++;
            st[i] = i;
            en[i] = ends[i];
            pos[i] = n_past + depth;
        }
        uint8_t want[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        es_batch tb = {8, tok, pos, st, en, want};
        CHECK_OK(es_forward(v2, &tb));
        for (int i = 0; i < 4; i++) {
            const float *l = NULL;
            CHECK_OK(es_logits(v2, i, &l));
            CHECKF(l && memcmp(l, seq_logits + (size_t)i * V, sizeof(float) * V) == 0,
                   "[%s] %s: tree node %d logits differ from sequential decoding", cfg, fc->name, i);
        }
        const int32_t path[3] = {0, 1, 2};
        CHECK_OK(es_commit(v2, path, 3));
        /* continue after the compaction: the next token's logits equal sequential decoding */
        es_batch nb = {1, &gv[3], NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(v2, &nb));
        const float *l = NULL;
        CHECK_OK(es_logits(v2, 0, &l));
        CHECKF(l && memcmp(l, seq_logits + 3 * (size_t)V, sizeof(float) * V) == 0,
               "[%s] %s: logits after a tree commit differ from sequential decoding", cfg, fc->name);
        es_context_free(v2);
    }
    free(seq_logits);
    free(lc);
    free(lv);
done:
    es_context_free(cc);
    es_context_free(vc);
    mem_model_free(m);
}

int main(void) {
    es_backend_params cp = es_backend_default_params();
    cp.n_threads = 2;
    es_backend *cpu = NULL;
    CHECK_OK(es_backend_create(&cp, &cpu));
    /* Every model in the default configuration, two per fallback configuration (each pipeline
     * costs lavapipe ~50 ms to compile, so the whole grid would be slow for CI). */
    const size_t n_cases = sizeof cases / sizeof cases[0];
    for (int c = 0; c < VK_N_CONFIGS; c++) {
        es_backend *vk = vk_backend(vk_configs[c].flags);
        if (!vk || !cpu) continue;
        for (size_t i = 0; i < n_cases; i++)
            if (c == 0 || i % (VK_N_CONFIGS - 1) == (size_t)(c - 1) % (VK_N_CONFIGS - 1) || i == (size_t)c)
                run_case(&cases[i], ES__DTYPE_F32, cpu, vk, vk_configs[c].name, i == 0 ? N_PROMPT_LONG : N_PROMPT);
        for (size_t i = 0; i < ES__ARRAY_LEN(mixes); i++)
            if (c == 0 || i == (size_t)c % ES__ARRAY_LEN(mixes))
                run_case(&mixes[i].c, mixes[i].mix, cpu, vk, vk_configs[c].name, N_PROMPT);
        es_backend_free(vk);
    }
    /* other devices' attention: small splits, a subgroup per split; same bounds, same invariance */
    for (size_t a = 0; a < VK_N_ATTN_VARIANTS; a++) {
        es_backend *vk = vk_backend_attn(a);
        if (!vk || !cpu) continue;
        run_case(&cases[0], ES__DTYPE_F32, cpu, vk, VK_ATTN_VARIANTS[a].name, N_PROMPT_LONG);
        run_case(&cases[2], ES__DTYPE_F32, cpu, vk, VK_ATTN_VARIANTS[a].name, N_PROMPT);
        es_backend_free(vk);
    }
    /* a GPU's whole profile (policy.c), forced on this device: two rows per team in one-token
     * calls, rmsnorm by workgroups of 256, teams however few units per lane, attention by
     * subgroups where the device has them; same bounds, same invariance */
    es_backend *gpu = vk_backend(0);
    if (gpu && cpu) {
        es__vk_dev_of(gpu)->policy = es__vk_policy_choose(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, NULL);
        run_case(&cases[0], ES__DTYPE_F32, cpu, gpu, "gpu profile", N_PROMPT_LONG);
        run_case(&cases[3], ES__DTYPE_F32, cpu, gpu, "gpu profile", N_PROMPT);
        run_case(&mixes[0].c, mixes[0].mix, cpu, gpu, "gpu profile", N_PROMPT);
    }
    if (gpu) es_backend_free(gpu);
    es_backend_free(cpu);
    VK_TEST_END();
}
