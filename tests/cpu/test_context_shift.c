/* test_context_shift.c: es_context_shift on the CPU backend (or Vulkan with argv[1]).
 *   - On one-layer models (NORM and NEOX, partial rotation, GQA and MQA), where a layer's keys
 *     and values depend on a token and its position only, the next token's logits after a shift
 *     equal those of a fresh prefill of the shifted sequence, within 2e-5 of the row's largest
 *     logit (the keys are rotated twice instead of once), at several keep / drop splits; also
 *     with llama 3's per-pair frequency divisors (rope_freqs.weight), with YaRN and with phi3's
 *     LongRoPE, whose magnitudes the cached keys carry already (the shift turns them by a unit
 *     rotation), and in a sliding layer with a RoPE of its own (gemma3's local layers).
 *     (With more layers no such reference exists: the kept tokens' deeper keys and values still
 *     carry what they attended to before the shift, by design.)
 *   - es_generate with shift_context runs on past n_ctx with the tokens of the same loop written
 *     out by hand.
 *   - The whole tail can go, and decoding goes on; bad arguments fail with a message and leave
 *     the context as it was. */
#include "../common/test_ctx.h"
#include "mem_models.h"

#include <math.h>

static es_backend *backend;

static double row_err(const float *a, const float *b, int32_t n) {
    double m = 0, scale = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        m = fmax(m, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return m / (scale > 0 ? scale : 1);
}

/* Logits of the last of toks[0..n) after a prefill of the rest on a fresh context. */
static void fresh_logits(const es_model *m, const int32_t *toks, int32_t n, float *out) {
    es_context *c = test_ctx(m, backend, 64, 64, NULL);
    es_batch b = {n, toks, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &b));
    const float *l = NULL;
    CHECK_OK(es_logits(c, n - 1, &l));
    if (l) memcpy(out, l, sizeof(float) * (size_t)m->hp.n_vocab);
    es_context_free(c);
}

static void check_one_layer(const mem_model_cfg *mc, mem_rope_variant v, const char *name) {
    es_model *m = mem_model_create(mc);
    mem_model_set_rope(&m->hp, v);
    const int32_t V = m->hp.n_vocab, N = 40;
    test_rng rng = {mc->seed * 7 + 3};
    int32_t toks[64];
    for (int32_t i = 0; i < N + 1; i++) toks[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    static float want[4096], got[4096];
    const int32_t splits[][2] = {{0, 1}, {4, 9}, {1, 38}, {10, 30}};
    double worst = 0;
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        const int32_t keep = splits[k][0], drop = splits[k][1];
        es_context *c = test_ctx(m, backend, 64, 64, NULL);
        es_batch pre = {N, toks, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &pre));
        CHECK_OK(es_commit(c, NULL, 0));
        CHECK_OK(es_context_shift(c, keep, drop));
        CHECK(es_context_n_past(c) == N - drop);
        es_batch next = {1, toks + N, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &next));
        const float *l = NULL;
        CHECK_OK(es_logits(c, 0, &l));
        if (l) memcpy(got, l, sizeof(float) * (size_t)V);
        es_context_free(c);
        /* the shifted sequence: the kept head, the tail after the dropped tokens, the next token */
        int32_t seq[64], n = 0;
        for (int32_t i = 0; i < keep; i++) seq[n++] = toks[i];
        for (int32_t i = keep + drop; i <= N; i++) seq[n++] = toks[i];
        fresh_logits(m, seq, n, want);
        const double e = row_err(got, want, V);
        worst = fmax(worst, e);
        CHECKF(e < 2e-5, "%s: keep %d drop %d: logits after the shift differ from a fresh prefill by %.2e", name,
               keep, drop, e);
    }
    printf("%s: worst difference after a shift %.2e\n", name, worst);
    mem_model_free(m);
}

static void check_errors(void) {
    mem_model_cfg mc = MEM_CFG_SHIFT_ERRORS;
    es_model *m = mem_model_create(&mc);
    es_context *c = test_ctx(m, backend, 32, 32, NULL);
    int32_t t[6] = {1, 2, 3, 4, 5, 6};
    es_batch b = {6, t, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &b));
    CHECK_OK(es_commit(c, NULL, 0));
    CHECK_FAILS(es_context_shift(c, 2, 5), ES_ERR_INVALID_ARGUMENT, "keep 2 and drop 5 of 6");
    CHECK_FAILS(es_context_shift(c, 2, 0), ES_ERR_INVALID_ARGUMENT, "drop 0");
    CHECK_FAILS(es_context_shift(c, -1, 1), ES_ERR_INVALID_ARGUMENT, "keep -1");
    CHECK_FAILS(es_context_shift(NULL, 0, 1), ES_ERR_INVALID_ARGUMENT, "ctx is NULL");
    CHECK(es_context_n_past(c) == 6);
    /* the whole tail can go; then decoding goes on with finite logits */
    CHECK_OK(es_context_shift(c, 1, 5));
    CHECK(es_context_n_past(c) == 1);
    es_batch one = {1, t, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &one));
    const float *l = NULL;
    CHECK_OK(es_logits(c, 0, &l));
    bool finite = l != NULL;
    for (int32_t i = 0; finite && i < 50; i++) finite = isfinite(l[i]);
    CHECK(finite);
    es_context_free(c);
    mem_model_free(m);
}

/* es_generate with shift_context runs past n_ctx: its tokens are those of a loop written out
 * here with the same rule (when a token finds the context full, the older half of what follows
 * the kept start goes), greedy, on a two-layer model. */
static void check_generate(void) {
    const mem_model_cfg mc = MEM_CFG_SHIFT_GENERATE;
    es_model *m = mem_model_create(&mc);
    const int32_t V = m->hp.n_vocab, n_ctx = 24, n_keep = 3, n_gen = 70;
    int32_t prompt[6] = {5, 9, 13, 2, 40, 7}, got[80], want[80];
    es_context *c = test_ctx(m, backend, n_ctx, 8, NULL);
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = n_gen;
    gp.ignore_eog = true;
    gp.shift_context = true;
    gp.n_keep = n_keep;
    es_generate_stats st;
    CHECK_OK(es_generate(c, prompt, 6, &gp, got, 80, &st));
    CHECKF(st.n_generated == n_gen, "generated %d of %d past a context of %d", st.n_generated, n_gen, n_ctx);
    es_context_free(c);
    /* the same by hand */
    c = test_ctx(m, backend, n_ctx, 8, NULL);
    es_batch b = {6, prompt, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &b));
    const float *l = NULL;
    CHECK_OK(es_logits(c, 5, &l));
    CHECK_OK(es_commit(c, NULL, 0));
    for (int32_t i = 0; i < n_gen && l; i++) {
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++) best = l[v] > l[best] ? v : best;
        want[i] = best;
        if (es_context_n_past(c) >= n_ctx) CHECK_OK(es_context_shift(c, n_keep, (es_context_n_past(c) - n_keep) / 2));
        es_batch one = {1, &want[i], NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &one));
        CHECK_OK(es_logits(c, 0, &l));
        CHECK_OK(es_commit(c, NULL, 0));
    }
    int bad = 0;
    for (int32_t i = 0; i < n_gen; i++) bad += got[i] != want[i];
    CHECKF(bad == 0, "%d of %d tokens differ from the loop written out", bad, n_gen);
    /* without shifting, generation stops at the full context */
    gp.shift_context = false;
    es_truncate(c, 0);
    CHECK_OK(es_generate(c, prompt, 6, &gp, got, 80, &st));
    CHECK(st.n_generated == n_ctx - 6 + 1);
    /* a shift that would keep everything is an error */
    gp.shift_context = true;
    gp.n_keep = n_ctx;
    es_truncate(c, 0);
    CHECK_FAILS(es_generate(c, prompt, 6, &gp, got, 80, &st), ES_ERR_CONTEXT_FULL, "leaves nothing to drop");
    es_context_free(c);
    mem_model_free(m);
}

int main(int argc, char **argv) {
    backend = test_backend_from_args(argc, argv, 2, NULL);
    if (!backend) TEST_MAIN_END();
    const mem_model_cfg norm = MEM_CFG_SHIFT_NORM, neox = MEM_CFG_SHIFT_NEOX, mqa = MEM_CFG_SHIFT_MQA;
    check_one_layer(&norm, MEM_ROPE_PLAIN, "norm gqa");
    check_one_layer(&norm, MEM_ROPE_LLAMA3, "norm gqa, llama 3 frequency divisors");
    check_one_layer(&neox, MEM_ROPE_PLAIN, "neox partial rotation, scaled");
    check_one_layer(&mqa, MEM_ROPE_PLAIN, "neox mqa f16");
    check_one_layer(&norm, MEM_ROPE_YARN, "norm gqa, yarn");
    check_one_layer(&neox, MEM_ROPE_LONGROPE, "neox partial rotation, longrope");
    check_one_layer(&neox, MEM_ROPE_LOCAL, "neox partial rotation, scaled, a sliding layer's own RoPE");
    check_errors();
    check_generate();
    test_backend_end(backend);
    TEST_MAIN_END();
}
