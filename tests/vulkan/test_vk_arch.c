/* test_vk_arch: every architecture besides llama (lib/core/arch.h: qwen2's biases, phi3's fused
 * matrices, gemma's embedding scale and GeGLU, gemma2's post-branch norms, soft-capping and
 * alternating sliding window, a mistral-style window on llama, llama 3's rope_freqs.weight, phi3's
 * LongRoPE with its long and its short factors, YaRN, Gemma 2 27B's query scale, qwen3's per-head
 * Q and K norms with heads wider than n_embd / n_head, gemma3's sliding layers with a RoPE of their
 * own and its linear scaling of the global layers only, smollm3's layers without RoPE, granite's
 * embedding, attention, residual and logit multipliers) on the Vulkan backend against the CPU backend, on random-weight GGUF files written by mkmodel (the CPU
 * is checked against the numpy reference on the same kinds of files by
 * tests/cpu/test_arch_reference.py):
 *   - prefill logits of every row within a normalised error of the CPU's (bound below);
 *   - greedy decoding, fed the CPU's tokens, picks the CPU's token wherever the CPU's top two
 *     logits are clearly apart (confident positions);
 *   - batch invariance on each backend: a prefill split into other batches, and the main path of
 *     a verification tree, give bit-identical logits (with a window, positions past it and the
 *     in-batch side of it both matter), and decoding continues exactly after a tree commit.
 * One gemma2 case runs past the first attention split (256 positions), so a sliding window
 * leaves whole splits empty for attn_merge.
 * qwen3, gemma3, smollm3 and granite cases (deep_checks) also run Speculative Streaming's stream
 * rows (a random adapter on every layer, stream LoRA included; for gemma3 also on its last two
 * layers only, where the stream rows join after its post-branch norms): every tree node's streams within
 * STREAM_BOUND of the CPU's, the same bits whether they ride in the forward's rows or come from
 * the stream pass after it (both run the head norms: qk_norm_rope.comp in the forward's dispatch
 * and in the pass; both rotate each layer by its own RoPE table; granite's residual scale scales the
 * fused rows' and the pass's branches, its logit multiplier their heads); a context shift (the
 * cached keys are normalised and rotated, so the shift re-rotates them, each layer's by its own
 * table), after which the next tokens' logits match the CPU's; and one qwen3, one smollm3 and one
 * granite case (ALSpec refuses sliding windows, hence not gemma3) ALSpec at lambda 0 past two
 * chunks (every decoded token speculates in every layer, its layers recorded part by part), whose
 * tokens are plain greedy decoding's. */
#include "../common/test_ctx.h"
#include "../common/test_file.h"
#include "../spec/mem_adapter.h"
#include "forward_api.h"
#include "mkmodel.h"
#include "vk_test.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define LOGIT_BOUND 2e-5
#define STREAM_BOUND 2e-5
#define N_CTX 320
#define N_GEN 8
#define ALSPEC_PROMPT 530 /* past 2 chunks of 256 (Vulkan's ALSpec tile): every token speculates */

typedef struct acase {
    const char *name, *arch;
    es__dtype type;
    int32_t n_embd, n_layer, n_head, n_head_kv, n_ff;
    bool tied;
    int32_t window;
    float attn_cap, final_cap;
    int32_t n_prompt;
    int32_t head_dim; /* 0 = n_embd / n_head */
    bool rope_freqs;  /* llama 3's rope_freqs.weight */
    const char *rope_scaling; /* mkmodel's --rope-scaling (NULL: none) */
    float freq_base;  /* 0 = mkmodel's (10000) */
} acase;

static const acase cases[] = {
    {"qwen2 gqa tied", "qwen2", ES__DTYPE_F32, 64, 2, 4, 2, 96, true, 0, 0, 0, 20, 0, false, NULL, 0},
    {"qwen2 q8_0 window", "qwen2", ES__DTYPE_Q8_0, 64, 2, 4, 1, 96, false, 5, 0, 0, 20, 0, false, NULL, 0},
    {"phi3 q4_0", "phi3", ES__DTYPE_Q4_0, 64, 2, 4, 2, 96, false, 0, 0, 0, 20, 0, false, NULL, 0},
    {"phi3 f16 mha", "phi3", ES__DTYPE_F16, 64, 2, 2, 2, 64, false, 0, 0, 0, 20, 0, false, NULL, 0},
    {"gemma tied bf16", "gemma", ES__DTYPE_BF16, 64, 2, 4, 1, 128, true, 0, 0, 0, 20, 0, false, NULL, 0},
    {"gemma2 window caps long", "gemma2", ES__DTYPE_F32, 32, 3, 2, 1, 64, true, 7, 2.0f, 3.0f, 270, 0, false, NULL, 0},
    {"gemma2 q8_0", "gemma2", ES__DTYPE_Q8_0, 64, 2, 4, 2, 64, false, 4, 2.0f, 3.0f, 20, 0, false, NULL, 0},
    {"llama mistral window", "llama", ES__DTYPE_F32, 64, 2, 4, 2, 96, false, 6, 0, 0, 20, 0, false, NULL, 0},
    /* head_dim not n_embd / n_head, as Gemma 2 2B's (8 heads of 256 on n_embd 2304) */
    {"gemma2 head_dim 24", "gemma2", ES__DTYPE_F32, 48, 2, 4, 2, 64, true, 5, 2.0f, 3.0f, 20, 24, false, NULL, 0},
    /* llama 3.1/3.2's per-pair RoPE frequency divisors */
    {"llama3 rope_freqs", "llama", ES__DTYPE_Q8_0, 64, 2, 4, 2, 96, false, 0, 0, 0, 20, 0, true, NULL, 0},
    /* phi3 LongRoPE: the context (N_CTX) is beyond the original 64, so the long factors and the
     * attention factor; then within it (original N_CTX), the short factors */
    {"phi3 longrope long", "phi3", ES__DTYPE_F32, 64, 2, 4, 2, 96, false, 0, 0, 0, 20, 0, false, "longrope,64", 0},
    {"phi3 longrope short", "phi3", ES__DTYPE_Q8_0, 64, 2, 4, 4, 64, false, 0, 0, 0, 20, 0, false, "longrope,320", 0},
    /* YaRN (its ramp over pairs 2..6 of head_dim 16) */
    {"llama yarn", "llama", ES__DTYPE_F32, 64, 2, 4, 2, 96, false, 0, 0, 0, 20, 0, false, "yarn,4,4096", 0},
    /* 46 layers: Gemma 2 27B, queries scaled by (n_embd / n_head)^-1/2 = 12^-1/2, not head_dim's 8^-1/2 */
    {"gemma2 27b query scale", "gemma2", ES__DTYPE_F32, 48, 46, 4, 2, 32, true, 4, 2.0f, 3.0f, 12, 8, false, NULL, 0},
    /* qwen3's per-head Q and K norms (qk_norm_rope.comp); heads wider than n_embd / n_head, as
     * Qwen3-0.6B's 16 heads of 128 on n_embd 1024. The cases of an architecture stay together
     * (runs_in). */
    {"qwen3 head_dim 32", "qwen3", ES__DTYPE_F32, 64, 2, 4, 2, 96, false, 0, 0, 0, 20, 32, false, NULL, 0},
    {"qwen3 q8_0", "qwen3", ES__DTYPE_Q8_0, 64, 2, 4, 2, 96, false, 0, 0, 0, 20, 0, false, NULL, 0},
    {"qwen3 window", "qwen3", ES__DTYPE_F16, 64, 2, 4, 1, 96, false, 5, 0, 0, 20, 32, false, NULL, 0},
    {"qwen3 tied", "qwen3", ES__DTYPE_BF16, 64, 2, 4, 4, 64, true, 0, 0, 0, 20, 0, false, NULL, 0},
    /* gemma3: layers 0-4 and 6 slide (window shorter than the prompt) and rotate with their own
     * base (10000, the file writes none), layer 5 is global with the model's (1e6, so the tables
     * differ); qwen3's head norms (qk_norm_rope.comp), gemma2's post norms. Gemma 3 4B-27B scale
     * the global layers' RoPE only (linear 8). */
    {"gemma3 swa tied", "gemma3", ES__DTYPE_F32, 64, 7, 4, 2, 96, true, 4, 0, 0, 20, 0, false, NULL, 1e6f},
    {"gemma3 q8_0 head_dim 32", "gemma3", ES__DTYPE_Q8_0, 64, 7, 4, 1, 64, false, 3, 0, 0, 20, 32, false, NULL, 1e6f},
    {"gemma3 linear 8", "gemma3", ES__DTYPE_F32, 64, 7, 4, 2, 64, true, 5, 0, 0, 20, 0, false, "linear,8", 1e6f},
    /* smollm3: llama (NORM pairs) whose layers 3 and 7 take no RoPE (the identity table) */
    {"smollm3 gqa", "smollm3", ES__DTYPE_F32, 64, 4, 4, 2, 96, false, 0, 0, 0, 20, 0, false, NULL, 0},
    {"smollm3 tied bf16 window", "smollm3", ES__DTYPE_BF16, 64, 8, 4, 4, 64, true, 5, 0, 0, 20, 0, false, NULL, 1e5f},
    /* granite: llama (NORM pairs) with Granite 3's multipliers (mkmodel: embedding 12, attention
     * 1/head_dim, residual 0.22, logits 1/8): every branch's add and every head scale */
    {"granite gqa", "granite", ES__DTYPE_F32, 64, 3, 4, 2, 96, false, 0, 0, 0, 20, 0, false, NULL, 0},
    {"granite q8_0 tied", "granite", ES__DTYPE_Q8_0, 64, 2, 4, 4, 64, true, 0, 0, 0, 20, 0, false, NULL, 0},
};

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The gap between the top two logits, over the largest magnitude. */
static double margin(const float *x, int32_t n) {
    const int32_t b = argmax(x, n);
    double second = -INFINITY, mx = 0;
    for (int32_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(x[i]));
        if (i != b) second = fmax(second, x[i]);
    }
    return (x[b] - second) / (mx > 0 ? mx : 1);
}

static double row_err(const float *a, const float *ref, int32_t n) {
    double mx = 0, md = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        mx = fmax(mx, fabs(ref[i]));
        md = fmax(md, fabs((double)a[i] - ref[i]));
    }
    return md / (mx > 0 ? mx : 1);
}

/* Prefill in batches of nb with every row's logits, committed; returns the rows. */
static float *prefill(es_context *ctx, const int32_t *prompt, int32_t n, int32_t V, int32_t nb) {
    uint8_t *want = malloc((size_t)n);
    memset(want, 1, (size_t)n);
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)V);
    for (size_t i = 0; i < (size_t)n * (size_t)V; i++) out[i] = NAN;
    for (int32_t i0 = 0; ctx && i0 < n; i0 += nb) {
        const int32_t k = n - i0 < nb ? n - i0 : nb;
        es_batch b = {k, prompt + i0, NULL, NULL, NULL, want};
        CHECK_OK(es_forward(ctx, &b));
        for (int32_t i = 0; i < k; i++) {
            const float *l = NULL;
            CHECK_OK(es_logits(ctx, i, &l));
            if (l) memcpy(out + (size_t)(i0 + i) * (size_t)V, l, sizeof(float) * (size_t)V);
        }
        CHECK_OK(es_commit(ctx, NULL, 0));
    }
    free(want);
    return out;
}

/* Decodes toks one at a time; the rows of logits into out. */
static void decode(es_context *ctx, const int32_t *toks, int32_t n, int32_t V, float *out) {
    for (int32_t i = 0; i < n; i++) {
        es_batch b = {1, &toks[i], NULL, NULL, NULL, NULL};
        const float *l = NULL;
        CHECK_OK(es_forward(ctx, &b));
        CHECK_OK(es_logits(ctx, 0, &l));
        CHECK_OK(es_commit(ctx, NULL, 0));
        if (l) memcpy(out + (size_t)i * (size_t)V, l, sizeof(float) * (size_t)V);
    }
}

/* The main path gen[0..3] of a tree with a branch after each node, against sequential rows seq;
 * then a commit of three and the next token. */
static void tree_check(es_context *ctx, const int32_t *gen, const float *seq, int32_t V, test_rng *rng,
                       const char *what) {
    const int32_t parent[8] = {-1, 0, 1, 2, 2, 1, 0, 6}, ends[8] = {7, 5, 4, 3, 4, 5, 7, 7};
    int32_t tok[8], st[8], en[8], pos[8];
    const int32_t n_past = es_context_n_past(ctx);
    for (int i = 0; i < 8; i++) {
        int depth = 0;
        for (int p = parent[i]; p >= 0; p = parent[p]) depth++;
        tok[i] = i < 4 ? gen[i] : (int32_t)(test_rng_u64(rng) % (uint64_t)V);
        st[i] = i;
        en[i] = ends[i];
        pos[i] = n_past + depth;
    }
    uint8_t want[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    es_batch tb = {8, tok, pos, st, en, want};
    CHECK_OK(es_forward(ctx, &tb));
    for (int i = 0; i < 4; i++) {
        const float *l = NULL;
        CHECK_OK(es_logits(ctx, i, &l));
        CHECKF(l && memcmp(l, seq + (size_t)i * (size_t)V, sizeof(float) * (size_t)V) == 0,
               "%s: tree node %d logits differ from sequential decoding", what, i);
    }
    const int32_t path[3] = {0, 1, 2};
    CHECK_OK(es_commit(ctx, path, 3));
    es_batch nb = {1, &gen[3], NULL, NULL, NULL, NULL};
    const float *l = NULL;
    CHECK_OK(es_forward(ctx, &nb));
    CHECK_OK(es_logits(ctx, 0, &l));
    CHECKF(l && memcmp(l, seq + 3 * (size_t)V, sizeof(float) * (size_t)V) == 0,
           "%s: logits after a tree commit differ from sequential decoding", what);
}

/* A Vulkan backend whose contexts fuse every tree's streams into the forward's rows (fuse) or
 * run the stream pass for all (tests/common/test_ctx.h's "fuse-all" and "never-fuse"). */
static es_backend *vk_fusing(bool fuse) {
    test_pin_vulkan();
    es_backend_params p = es_backend_default_params();
    p.type = ES_BACKEND_VULKAN;
    p.vk_tuning.fused_stream_rows = fuse ? 1 << 20 : -1;
    p.log_fn = vk_test_log;
    p.log_level = ES_LOG_WARN;
    es_backend *b = NULL;
    CHECK_OK(es_backend_create(&p, &b));
    return b;
}

/* Every node's G streams of a 6-node tree after the prompt on backend b: [6][G][V]. */
static float *tree_streams(const es_model *m, es_backend *b, const int32_t *prompt, int32_t P, int32_t G) {
    static const int32_t end[6] = {5, 3, 2, 3, 5, 5}, depth[6] = {0, 1, 2, 2, 1, 2}, st[6] = {0, 1, 2, 3, 4, 5};
    const int32_t V = m->hp.n_vocab;
    float *out = malloc(sizeof(float) * 6 * (size_t)G * (size_t)V);
    for (size_t i = 0; i < 6 * (size_t)G * (size_t)V; i++) out[i] = NAN;
    es_context *c = test_ctx(m, b, N_CTX, 16, vk_test_log);
    free(prefill(c, prompt, P, V, 16));
    int32_t pos[6], tok[6];
    for (int i = 0; i < 6; i++) pos[i] = P + depth[i], tok[i] = prompt[(i * 7) % P];
    es_batch tree = {6, tok, pos, st, end, NULL};
    if (c) CHECK_OK(es__forward(c, &tree, &(es__call){G, 0.0f}));
    for (int32_t i = 0; c && i < 6; i++) {
        const float *sl = NULL;
        CHECK_OK(es__stream_logits(c, i, 0, &sl));
        if (sl) memcpy(out + (size_t)i * G * V, sl, sizeof(float) * (size_t)G * (size_t)V);
    }
    es_context_free(c);
    return out;
}

/* The architectures whose cases run the checks below too (the file header): qwen3's head norms,
 * gemma3's and smollm3's RoPE tables chosen per layer (lib/core/rope.h), granite's residual and
 * logit multipliers (the stream rows' branches and heads). */
static bool deep_checks(const acase *ac) {
    return !strcmp(ac->arch, "qwen3") || !strcmp(ac->arch, "gemma3") || !strcmp(ac->arch, "smollm3") ||
           !strcmp(ac->arch, "granite");
}

/* The cases that run ALSpec (alspec_check): one per architecture of deep_checks but gemma3,
 * whose sliding layers ALSpec refuses (es_alspec_create: the speculation's chunks assume every key
 * is seen). */
static bool runs_alspec(const acase *ac) {
    return !strcmp(ac->name, "qwen3 head_dim 32") || !strcmp(ac->name, "smollm3 gqa") || !strcmp(ac->name, "granite gqa");
}

/* deep_checks (the file header): a shift of the committed cache on the CPU and on Vulkan, then the
 * next tokens' logits. */
static void shift_check(const acase *ac, const es_model *m, es_backend *cpu, es_backend *vk, const int32_t *prompt) {
    const int32_t V = m->hp.n_vocab, P = ac->n_prompt;
    es_backend *bs[2] = {cpu, vk};
    float *out[2];
    for (int k = 0; k < 2; k++) {
        out[k] = malloc(sizeof(float) * 4 * (size_t)V);
        for (size_t i = 0; i < 4 * (size_t)V; i++) out[k][i] = NAN;
        es_context *c = test_ctx(m, bs[k], N_CTX, 128, vk_test_log);
        if (!c) continue;
        free(prefill(c, prompt, P, V, 128));
        CHECK_OK(es_context_shift(c, 3, 7));
        decode(c, prompt + 5, 4, V, out[k]);
        es_context_free(c);
    }
    double worst = 0;
    for (int32_t i = 0; i < 4; i++) worst = fmax(worst, row_err(out[1] + (size_t)i * V, out[0] + (size_t)i * V, V));
    CHECKF(worst <= LOGIT_BOUND, "%s: logits after a context shift differ from the CPU's by %.3g > %.1g", ac->name,
           worst, LOGIT_BOUND);
    free(out[0]), free(out[1]);
}

/* deep_checks (the file header): ALSpec at lambda 0 on Vulkan against plain greedy decoding there. */
static void alspec_check(const acase *ac, const es_model *m, es_backend *vk) {
    const int32_t V = m->hp.n_vocab, P = ALSPEC_PROMPT, n_ctx = P + N_GEN + 8;
    int32_t *prompt = malloc(sizeof *prompt * P), want[N_GEN], got[N_GEN];
    test_rng rng = {(unsigned long long)ac->n_embd * 3};
    for (int32_t i = 0; i < P; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    es_context *c = test_ctx(m, vk, n_ctx, 128, vk_test_log);
    float *l = c ? prefill(c, prompt, P, V, 128) : NULL, *row = malloc(sizeof(float) * (size_t)V);
    want[0] = l ? argmax(l + (size_t)(P - 1) * V, V) : -1;
    for (int i = 1; c && i < N_GEN; i++) {
        decode(c, &want[i - 1], 1, V, row);
        want[i] = argmax(row, V);
    }
    es_context_free(c);
    c = test_ctx(m, vk, n_ctx, 128, vk_test_log);
    const es_alspec_params p = {.chunk = 256, .lambda = 0.0f};
    es_alspec *a = NULL;
    es_alspec_stats st = {0};
    if (c) CHECK_OK(es_alspec_create(c, &p, &a));
    if (a) CHECK_OK(es_alspec_feed(a, prompt, (size_t)P));
    for (int i = 0; a && i < N_GEN; i++) CHECK_OK(es_alspec_step(a, &got[i]));
    if (a) CHECK_OK(es_alspec_get_stats(a, &st));
    CHECKF(a && memcmp(got, want, sizeof want) == 0, "%s: ALSpec's tokens at lambda 0 differ from greedy decoding's",
           ac->name);
    CHECKF(st.n_spec_tokens == N_GEN - 1 && st.n_checks == st.n_spec_tokens * m->hp.n_layer,
           "%s: ALSpec speculated %lld of %d tokens, %lld checks", ac->name, (long long)st.n_spec_tokens, N_GEN - 1,
           (long long)st.n_checks);
    es_alspec_free(a);
    es_context_free(c);
    free(prompt), free(l), free(row);
}

/* deep_checks' stream rows on Vulkan, fused and from the pass, against the CPU's (the file header),
 * the adapter on the last n_msa layers (0: on every layer). */
static void stream_check(const acase *ac, const char *path, es_backend *cpu, es_backend *const vk[2], int32_t n_msa) {
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, NULL, &m));
    if (!m) return;
    const mem_adapter_cfg cfg = {3, n_msa ? n_msa : m->hp.n_layer, 0, 0, 2, 0.3f, (unsigned long long)ac->n_ff};
    mem_adapter_attach(m, &cfg);
    const int32_t V = m->hp.n_vocab, G = cfg.n_streams, P = 9;
    test_rng rng = {(unsigned long long)ac->n_embd + 5};
    int32_t prompt[9];
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    float *want = tree_streams(m, cpu, prompt, P, G), *fused = tree_streams(m, vk[0], prompt, P, G);
    float *pass = tree_streams(m, vk[1], prompt, P, G);
    double worst = 0;
    for (int32_t r = 0; r < 6 * G; r++) worst = fmax(worst, row_err(fused + (size_t)r * V, want + (size_t)r * V, V));
    CHECKF(worst <= STREAM_BOUND, "%s (%d MSA layers): streams differ from the CPU's by %.3g (normalised) > %.1g",
           ac->name, cfg.n_msa, worst, STREAM_BOUND);
    CHECKF(memcmp(fused, pass, sizeof(float) * 6 * (size_t)G * (size_t)V) == 0,
           "%s (%d MSA layers): fused streams and the stream pass's differ", ac->name, cfg.n_msa);
    free(want), free(fused), free(pass);
    es_model_free(m);
}

static void run_case(const acase *ac, const char *path, es_backend *cpu, es_backend *vk, const char *cfg) {
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, NULL, &m));
    if (!m) return;
    es_model_info mi;
    es_model_get_info(m, &mi);
    const int32_t V = mi.n_vocab, P = ac->n_prompt;
    char what[160];
    snprintf(what, sizeof what, "[%s] %s", cfg, ac->name);
    test_rng rng = {(unsigned long long)P * 31 + (unsigned long long)ac->n_embd};
    int32_t prompt[N_CTX];
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    es_context *cc = test_ctx(m, cpu, N_CTX, 128, vk_test_log), *vc = test_ctx(m, vk, N_CTX, 128, vk_test_log);
    float *lc = prefill(cc, prompt, P, V, 128), *lv = prefill(vc, prompt, P, V, 128);
    double worst = 0;
    for (int32_t i = 0; i < P; i++) worst = fmax(worst, row_err(lv + (size_t)i * V, lc + (size_t)i * V, V));
    CHECKF(worst <= LOGIT_BOUND, "%s: prefill logits differ from the CPU by %.3g (normalised) > %.1g", what, worst,
           LOGIT_BOUND);

    /* greedy on the CPU; Vulkan fed the same tokens must pick them where the CPU is confident */
    int32_t gen[N_GEN];
    float *sc = malloc(sizeof(float) * N_GEN * (size_t)V), *sv = malloc(sizeof(float) * N_GEN * (size_t)V);
    gen[0] = argmax(lc + (size_t)(P - 1) * V, V);
    for (int i = 0; i < N_GEN; i++) {
        decode(cc, &gen[i], 1, V, sc + (size_t)i * V);
        if (i + 1 < N_GEN) gen[i + 1] = argmax(sc + (size_t)i * V, V);
    }
    decode(vc, gen, N_GEN, V, sv);
    int confident = 0;
    for (int i = 0; i < N_GEN; i++) {
        if (margin(sc + (size_t)i * V, V) < 1e-3) continue;
        confident++;
        CHECKF(argmax(sv + (size_t)i * V, V) == argmax(sc + (size_t)i * V, V),
               "%s: greedy token %d differs from the CPU's at a confident position", what, i);
    }
    CHECKF(confident >= N_GEN / 2, "%s: only %d of %d positions confident: the check says little", what, confident,
           N_GEN);

    /* batch invariance on each backend, on a fresh context: another batch split, then a tree */
    es_backend *bs[2] = {cpu, vk};
    const float *ref[2] = {lc, lv}, *seq[2] = {sc, sv};
    for (int k = 0; k < 2; k++) {
        es_context *c2 = test_ctx(m, bs[k], N_CTX, 64, vk_test_log);
        if (!c2) continue;
        float *l2 = prefill(c2, prompt, P, V, 7);
        char w2[200];
        snprintf(w2, sizeof w2, "%s %s", what, k ? "vulkan" : "cpu");
        CHECKF(memcmp(l2, ref[k], sizeof(float) * (size_t)P * V) == 0, "%s: prefill logits depend on the batch split",
               w2);
        free(l2);
        tree_check(c2, gen, seq[k], V, &rng, w2);
        es_context_free(c2);
    }
    if (deep_checks(ac)) shift_check(ac, m, cpu, vk, prompt);
    free(sc), free(sv), free(lc), free(lv);
    es_context_free(cc);
    es_context_free(vc);
    es_model_free(m);
}

/* Every case runs in the default configuration; fallback configuration c runs case 2c - 1 and
 * case c - 1 of qwen3, of gemma3 and of smollm3 (where they have one), so each variant of
 * qwen3's own kernel (read path, reduction) runs once and every fallback reads per-layer RoPE
 * tables (each pipeline costs lavapipe ~50 ms to compile: the whole grid would be slow for CI). */
static bool runs_in(size_t i, int c) {
    static const char *const own[] = {"qwen3", "gemma3", "smollm3"};
    if (c == 0 || i == (size_t)(2 * c - 1)) return true;
    for (size_t a = 0; a < ES__ARRAY_LEN(own); a++) {
        size_t q0 = 0;
        while (q0 < ES__ARRAY_LEN(cases) && strcmp(cases[q0].arch, own[a]) != 0) q0++;
        if (i == q0 + (size_t)(c - 1) && strcmp(cases[i].arch, own[a]) == 0) return true;
    }
    return false;
}

/* The case's model file in dir; false where writing failed. */
static bool write_model(const acase *ac, const char *path) {
    es_mk_params p = es_mk_default_params();
    p.arch = ac->arch;
    p.type = ac->type;
    p.n_vocab = 300;
    p.n_embd = ac->n_embd;
    p.n_layer = ac->n_layer;
    p.n_head = ac->n_head;
    p.n_head_kv = ac->n_head_kv;
    p.n_ff = ac->n_ff;
    p.n_ctx = runs_alspec(ac) ? ALSPEC_PROMPT + 2 * N_GEN : N_CTX; /* alspec_check's */
    p.tied = ac->tied;
    p.rope = strcmp(ac->arch, "llama") && strcmp(ac->arch, "smollm3") && strcmp(ac->arch, "granite") ? ES_ROPE_NEOX
                                                                                                    : ES_ROPE_NORM;
    if (ac->freq_base > 0) p.freq_base = ac->freq_base;
    p.sliding_window = ac->window;
    p.attn_softcap = ac->attn_cap;
    p.final_softcap = ac->final_cap;
    p.head_dim = ac->head_dim;
    p.rope_freqs = ac->rope_freqs;
    CHECK(!ac->rope_scaling || es_mk_parse_rope_scaling(ac->rope_scaling, &p));
    p.seed = (uint64_t)ac->n_ff * 7 + (uint64_t)ac->n_layer;
    es__err err = {0};
    CHECKF(es_mk_write(&p, path, &err) == ES_OK, "mkmodel %s: %s", ac->name, err.msg);
    return err.status == ES_OK;
}

int main(void) {
    (void)mem_model_create; /* mem_adapter.h's in-memory models: this test reads files */
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    es_backend *cpu = NULL;
    CHECK_OK(es_backend_create(&bp, &cpu));
    const size_t n_cases = sizeof cases / sizeof cases[0];
    char paths[sizeof cases / sizeof cases[0]][128];
    bool ok[sizeof cases / sizeof cases[0]];
    for (size_t i = 0; i < n_cases; i++) {
        snprintf(paths[i], sizeof paths[i], "/tmp/es-vk-arch-%d-%zu.gguf", (int)getpid(), i);
        ok[i] = write_model(&cases[i], paths[i]);
    }
    for (int c = 0; c < VK_N_CONFIGS; c++) {
        es_backend *vk = vk_backend(vk_configs[c].flags);
        if (!vk || !cpu) continue;
        for (size_t i = 0; i < n_cases; i++)
            if (ok[i] && runs_in(i, c))
                run_case(&cases[i], paths[i], cpu, vk, vk_configs[c].name);
        es_backend_free(vk);
    }
    es_backend *ss_vk[2] = {vk_fusing(true), vk_fusing(false)};
    for (size_t i = 0; i < n_cases; i++) {
        if (!ok[i] || !ss_vk[0] || !ss_vk[1] || !cpu || !deep_checks(&cases[i])) continue;
        stream_check(&cases[i], paths[i], cpu, ss_vk, 0);
        /* post-branch norms do the next layer's pre-norm in their dispatch, but not where the fused
         * stream rows join the forward's (lib/vulkan/forward.c record_next): an adapter on the
         * last layers only */
        if (!strcmp(cases[i].arch, "gemma3")) stream_check(&cases[i], paths[i], cpu, ss_vk, 2);
    }
    for (size_t i = 0; i < n_cases; i++) { /* runs_alspec's */
        es_model *m = NULL;
        if (!ok[i] || !ss_vk[1] || !runs_alspec(&cases[i])) continue;
        CHECK_OK(es_model_load(paths[i], NULL, &m));
        if (m) alspec_check(&cases[i], m, ss_vk[1]);
        es_model_free(m);
    }
    es_backend_free(ss_vk[0]);
    es_backend_free(ss_vk[1]);
    for (size_t i = 0; i < n_cases; i++) remove(paths[i]);
    es_backend_free(cpu);
    VK_TEST_END();
}
