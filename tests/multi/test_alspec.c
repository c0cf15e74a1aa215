/* test_alspec.c: ALSpec's decoder (lib/multi/alspec.c) and its forward call (es__forward_alspec)
 * on the CPU backend or Vulkan (argv[1]), on a random-weight model built in memory, chunks of the
 * backend's tile (CPU 64, Vulkan 256) and prompts of 3.3 chunks, so that every decoded token
 * speculates in every layer and leaves keys out:
 *   - lambda = 0 is exact: greedy and seeded-sampling tokens equal es_generate's, token for token,
 *     every speculation checked and none taken;
 *   - a huge lambda takes every valid speculation (the statistics count them, per layer), and
 *     changes the logits against the exact run (else the test could not see a hit);
 *   - forced misses: the exact attention is used in the forced layers; with every layer forced
 *     the logits and the whole KV cache equal the exact run's bit for bit, and with misses forced
 *     below a chosen layer that hits, the KV of the layers up to it equals the exact run's while
 *     a later layer's differs (a hit changes exactly what follows it);
 *   - bad parameters and backends without speculative attention fail with a clear message. */
#include "../spec/spec_run.h"
#include "backend.h"
#include "forward_api.h"

#define N_GEN 20
#define MAX_PROMPT 1300

static int32_t N_PROMPT, N_CTX, CHUNK; /* from the backend's tile */

static es_model *model;

static void prompt_tokens(int32_t *p, int32_t n, unsigned long long seed) {
    test_rng r = {seed};
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)(test_rng_u64(&r) % (uint64_t)model->hp.n_vocab);
}

static int32_t run_alspec(float lambda, const es_sampler_params *sp, const int32_t *prompt, int32_t *out,
                          es_alspec_stats *st) {
    es_context *c = new_ctx(model, N_CTX, 64);
    es_alspec_params p = {.chunk = CHUNK, .lambda = lambda, .sampling = *sp};
    es_alspec *a = NULL;
    CHECK_OK(es_alspec_create(c, &p, &a));
    int32_t n = 0;
    if (a) {
        CHECK_OK(es_alspec_feed(a, prompt, N_PROMPT));
        for (; n < N_GEN; n++)
            if (es_alspec_step(a, &out[n]) != ES_OK) {
                fprintf(stderr, "step %d: %s\n", n, es_alspec_errmsg(a));
                break;
            }
        CHECK_OK(es_alspec_get_stats(a, st));
    }
    es_alspec_free(a);
    es_context_free(c);
    return n;
}

static void test_exact(void) {
    int32_t prompt[MAX_PROMPT], want[N_GEN], got[N_GEN];
    prompt_tokens(prompt, N_PROMPT, 5);
    es_sampler_params greedy = {0}, seeded = {0};
    seeded.temperature = 0.8f;
    seeded.seed = 1234;
    const es_sampler_params *sps[2] = {&greedy, &seeded};
    for (int k = 0; k < 2; k++) {
        es_alspec_stats st;
        const int32_t np = plain(model, prompt, N_PROMPT, sps[k], N_GEN, N_CTX, 64, want);
        const int32_t na = run_alspec(0.0f, sps[k], prompt, got, &st);
        CHECKF(np == N_GEN && na == N_GEN && memcmp(want, got, sizeof want) == 0,
               "%s: lambda 0 tokens differ from es_generate's", k ? "seeded" : "greedy");
        /* the first step samples from the prompt's logits; every later one decodes a token */
        CHECKF(st.n_tokens == N_GEN - 1 && st.n_spec_tokens == st.n_tokens &&
                   st.n_checks == st.n_tokens * model->hp.n_layer && st.n_hits == 0,
               "lambda 0 statistics: tokens %lld, speculated %lld, checks %lld, hits %lld", (long long)st.n_tokens,
               (long long)st.n_spec_tokens, (long long)st.n_checks, (long long)st.n_hits);
    }
    es_alspec_stats st;
    run_alspec(1e30f, &greedy, prompt, got, &st);
    int64_t per_layer = 0;
    for (int32_t l = 0; l < model->hp.n_layer; l++) per_layer += st.layer_hits[l];
    CHECKF(st.n_hits == st.n_checks && st.n_hits > 0 && per_layer == st.n_hits && st.last_hits == model->hp.n_layer,
           "huge lambda: %lld hits of %lld checks (%lld per layer)", (long long)st.n_hits, (long long)st.n_checks,
           (long long)per_layer);
}

/* One token after the prompt through es__forward_alspec (lambda huge, force as given) on one
 * context and a plain forward on another; returns whether the logits are bit-identical and fills
 * same_kv[l]: whether layer l's KV cache equals the exact run's. */
static bool forced(const uint8_t *force, es__spec_verdict *v, bool *same_kv) {
    int32_t prompt[MAX_PROMPT + 1];
    prompt_tokens(prompt, N_PROMPT + 1, 9);
    es_context *a = new_ctx(model, N_CTX, N_CTX), *b = new_ctx(model, N_CTX, N_CTX);
    const es_batch pre = {N_PROMPT, prompt, NULL, NULL, NULL, NULL}, one = {1, prompt + N_PROMPT, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(a, &pre));
    CHECK_OK(es_commit(a, NULL, N_PROMPT));
    CHECK_OK(es_forward(b, &pre));
    CHECK_OK(es_commit(b, NULL, N_PROMPT));
    const es__alspec_call call = {CHUNK, 1e30f, force, v};
    CHECK_OK(es__forward_alspec(a, &one, &call));
    CHECK_OK(es_forward(b, &one));
    const float *la = NULL, *lb = NULL;
    CHECK_OK(es_logits(a, 0, &la));
    CHECK_OK(es_logits(b, 0, &lb));
    const bool same = la && lb && memcmp(la, lb, sizeof(float) * (size_t)model->hp.n_vocab) == 0;
    CHECK_OK(es_commit(a, NULL, 1));
    CHECK_OK(es_commit(b, NULL, 1));
    /* the caches [n_layer][K, V][n_head_kv][n][head_dim] */
    const int32_t n = N_PROMPT + 1;
    const size_t per = 2 * (size_t)model->hp.n_head_kv * (size_t)n * (size_t)model->hp.head_dim;
    float *ka = malloc(sizeof(float) * per * (size_t)model->hp.n_layer), *kb = malloc(sizeof(float) * per * (size_t)model->hp.n_layer);
    CHECK_OK(a->backend->vt->kv_io(a, n, ka, false));
    CHECK_OK(b->backend->vt->kv_io(b, n, kb, false));
    for (int32_t l = 0; l < model->hp.n_layer; l++) same_kv[l] = memcmp(ka + per * l, kb + per * l, sizeof(float) * per) == 0;
    free(ka), free(kb);
    es_context_free(a);
    es_context_free(b);
    return same;
}

static void test_forced_misses(void) {
    const int32_t nl = model->hp.n_layer;
    uint8_t force[8];
    es__spec_verdict v[8];
    bool same_kv[8];
    memset(force, 1, sizeof force);
    CHECKF(forced(force, v, same_kv), "every layer forced to miss: logits differ from the exact run");
    for (int32_t l = 0; l < nl; l++) {
        CHECKF(same_kv[l], "every layer forced to miss: layer %d's KV differs from the exact run's", l);
        CHECKF(v[l].valid && !v[l].hit, "forced miss at layer %d: valid %d hit %d", l, v[l].valid, v[l].hit);
    }
    /* layers below `hit` forced to miss, `hit` takes its speculation: the KV of layers <= hit is
     * computed before any speculation was used and equals the exact run's; the next layer's
     * differs, and so do the logits */
    const int32_t hit = 1;
    memset(force, 0, sizeof force);
    for (int32_t l = 0; l < hit; l++) force[l] = 1;
    CHECKF(!forced(force, v, same_kv), "a hit at layer %d left the logits unchanged", hit);
    for (int32_t l = 0; l < nl; l++) {
        CHECKF(v[l].valid && v[l].hit == (l >= hit), "layer %d: hit %d, forced %d", l, v[l].hit, force[l]);
        CHECKF(same_kv[l] == (l <= hit), "layer %d's KV %s the exact run's with the first hit at layer %d", l,
               same_kv[l] ? "equals" : "differs from", hit);
    }
}

static void test_errors(void) {
    es_context *c = new_ctx(model, N_CTX, 64);
    es_alspec *a = NULL;
    es_alspec_params p;
    memset(&p, 0, sizeof p);
    p.chunk = 100;
    p.lambda = 0.1f;
    CHECK_FAILS(es_alspec_create(c, &p, &a), ES_ERR_INVALID_ARGUMENT, "chunk 100");
    CHECK(a == NULL);
    p.chunk = CHUNK;
    p.lambda = -1.0f;
    CHECK_FAILS(es_alspec_create(c, &p, &a), ES_ERR_INVALID_ARGUMENT, "lambda");
    p.lambda = 0.1f;
    CHECK_OK(es_alspec_create(c, &p, &a));
    int32_t t = 0;
    CHECK_FAILS(es_alspec_step(a, &t), ES_ERR_INVALID_ARGUMENT, "feed");
    es_alspec_free(a);
    const int32_t two[2] = {1, 2};
    es__spec_verdict v[8];
    const es__alspec_call call = {CHUNK, 0.1f, NULL, v};
    const es_batch b = {2, two, NULL, NULL, NULL, NULL};
    CHECK_FAILS(es__forward_alspec(c, &b, &call), ES_ERR_INVALID_ARGUMENT, "one token");
    es_context_free(c);
    es_alspec_free(NULL);
}

int main(int argc, char **argv) {
    backend = test_backend_from_args(argc, argv, 2, NULL);
    const mem_model_cfg cfg = {211, 64, 4, 4, 2, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 77};
    model = mem_model_create(&cfg);
    es_context *probe = new_ctx(model, 256, 16);
    es__caps caps;
    es__context_caps(probe, &caps);
    es_context_free(probe);
    CHUNK = caps.alspec_tile;
    N_PROMPT = CHUNK * 33 / 10;
    N_CTX = N_PROMPT + 2 * N_GEN;
    model->hp.n_ctx_train = N_CTX;
    test_exact();
    test_forced_misses();
    test_errors();
    mem_model_free(model);
    test_backend_end(backend);
    TEST_MAIN_END();
}
