/* test_alspec_pair.c: ALSpec's Algorithm 2 over two contexts on two devices (lib/multi/alspec_pair.c,
 * es_alspec_create_pair), on a random-weight model built in memory and prompts of 3.3 chunks (every
 * decoded token speculates in every layer and leaves keys out). Device pairs: "host,host" (cpu),
 * or "0,0" (two logical devices on one Vulkan device) and "0,host" (vulkan):
 *   - lambda = 0 is exact: greedy tokens equal es_generate's on the first device alone, every
 *     speculation checked and none taken;
 *   - a forced pattern of hits and misses (lambda huge, misses forced at chosen layers and tokens,
 *     a miss right after a hit among them: the receiver has then written a wrong KV slot for the
 *     next layer): the verdicts follow the pattern and both contexts' caches agree slot for slot.
 *     Two devices of one kind compute what one does: the tokens' logits and both caches equal
 *     Algorithm 1's on one context with the same pattern (es__forward_alspec), bit for bit; with
 *     every layer forced to miss that is the exact run's cache. A mixed pair, whose devices round
 *     differently, is held to the all-miss case: every decoded slot of both caches equals the
 *     exact run's on the first device;
 *   - huge lambda through the public API: every check hits and the statistics count it;
 *   - the pair's argument checks.
 * Under the validation layer (name *vulkan*) and ThreadSanitizer (suite multi).
 * usage: test_alspec_pair [cpu|vulkan] */
#include "../spec/spec_run.h"
#include "multi/alspec_pair.h"
#include "backend.h"

#define N_GEN 8
#define MAX_L 8

static int32_t N_PROMPT, N_CTX, CHUNK;
static es_model *model;
static es_backend *dev[2];

static void prompt_tokens(int32_t *p, int32_t n, unsigned long long seed) {
    test_rng r = {seed};
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)(test_rng_u64(&r) % (uint64_t)model->hp.n_vocab);
}

static es_context *ctx_on(int k) {
    return test_ctx(model, dev[k], N_CTX, 64, NULL);
}

/* The cache of c's first n slots: [n_layer][K, V][n_head_kv][n][head_dim]. */
static float *cache(es_context *c, int32_t n) {
    const size_t f = (size_t)model->hp.n_layer * 2 * (size_t)model->hp.n_head_kv * (size_t)n * (size_t)model->hp.head_dim;
    float *kv = malloc(sizeof(float) * f);
    CHECK_OK(c->backend->vt->kv_io(c, n, kv, false));
    return kv;
}

/* Whether slots [lo, hi) of every layer, head and K/V agree in caches a and b of n slots. */
static bool same_slots(const float *a, const float *b, int32_t n, int32_t lo, int32_t hi) {
    const size_t hd = (size_t)model->hp.head_dim, runs = (size_t)model->hp.n_layer * 2 * (size_t)model->hp.n_head_kv;
    for (size_t r = 0; r < runs; r++)
        if (memcmp(a + (r * (size_t)n + (size_t)lo) * hd, b + (r * (size_t)n + (size_t)lo) * hd,
                   sizeof(float) * hd * (size_t)(hi - lo)) != 0)
            return false;
    return true;
}

static int32_t argmax(const float *l) {
    int32_t t = 0;
    for (int32_t v = 1; v < model->hp.n_vocab; v++)
        if (l[v] > l[t]) t = v;
    return t;
}

static void test_exact(const char *pair) {
    int32_t prompt[1400], want[N_GEN], got[N_GEN];
    prompt_tokens(prompt, N_PROMPT, 5);
    const es_sampler_params greedy = {0};
    /* plain decoding on the first device alone */
    backend = dev[0];
    const int32_t np = plain(model, prompt, N_PROMPT, &greedy, N_GEN, N_CTX, 64, want);
    es_context *a = ctx_on(0), *b = ctx_on(1);
    es_alspec_params p = {.chunk = CHUNK, .lambda = 0.0f};
    es_alspec *al = NULL;
    CHECK_OK(es_alspec_create_pair(a, b, &p, &al));
    int32_t n = 0;
    es_alspec_stats st;
    memset(&st, 0, sizeof st);
    if (al) {
        CHECK_OK(es_alspec_feed(al, prompt, (size_t)N_PROMPT));
        while (n < N_GEN && es_alspec_step(al, &got[n]) == ES_OK) n++;
        CHECK_OK(es_alspec_get_stats(al, &st));
    }
    CHECKF(np == N_GEN && n == N_GEN && memcmp(want, got, sizeof want) == 0,
           "%s: lambda 0 tokens differ from es_generate's on the first device (%s)", pair, al ? es_alspec_errmsg(al) : "");
    CHECKF(st.n_tokens == N_GEN - 1 && st.n_checks == st.n_tokens * model->hp.n_layer && st.n_hits == 0,
           "%s: lambda 0 statistics: tokens %lld, checks %lld, hits %lld", pair, (long long)st.n_tokens,
           (long long)st.n_checks, (long long)st.n_hits);
    es_alspec_free(al);
    /* huge lambda: every check hits */
    p.lambda = 1e30f;
    CHECK_OK(es_alspec_create_pair(a, b, &p, &al));
    if (al) {
        CHECK_OK(es_alspec_feed(al, prompt, (size_t)N_PROMPT));
        for (int32_t i = 0; i < N_GEN; i++) CHECK_OK(es_alspec_step(al, &got[i]));
        CHECK_OK(es_alspec_get_stats(al, &st));
        CHECKF(st.n_hits == st.n_checks && st.n_checks == (N_GEN - 1) * model->hp.n_layer &&
                   st.last_hits == model->hp.n_layer,
               "%s: huge lambda: %lld hits of %lld checks", pair, (long long)st.n_hits, (long long)st.n_checks);
    }
    es_alspec_free(al);
    es_context_free(a);
    es_context_free(b);
}

/* Misses forced at token t's layer l where pattern(t, l); t = 0 forces every layer. */
static bool forced_at(int32_t t, int32_t l) {
    if (t == 0) return true;
    return ((t + l) % 3 == 1) || (t == 2 && l % 2 == 1); /* token 2: hit, miss, hit, miss */
}

/* The decode of N_GEN tokens with the forced pattern: by the pair, and by Algorithm 1 (or a plain
 * forward, all_miss) on one context of the first device. */
static void test_forced(const char *pair, bool same_kind, bool all_miss, bool host_gated) {
    const int32_t L = model->hp.n_layer, V = model->hp.n_vocab;
    int32_t prompt[1400];
    prompt_tokens(prompt, N_PROMPT, 9);
    es_context *a = ctx_on(0), *b = ctx_on(1), *ref = ctx_on(0);
    es__alspec_pair *p = NULL;
    CHECK_OK(es__alspec_pair_create(a, b, CHUNK, host_gated, &p));
    if (!p) goto out;
    /* two Vulkan devices gate themselves unless asked not to (lavapipe has what it needs) */
    const bool want_device = !host_gated && a->backend->type == ES_BACKEND_VULKAN && same_kind;
    CHECKF(es__alspec_pair_device_gated(p) == want_device, "%s: gated on the %s, expected the %s", pair,
           es__alspec_pair_device_gated(p) ? "devices" : "host", want_device ? "devices" : "host");
    es_context *all[3] = {a, b, ref};
    for (int k = 0; k < 3; k++)
        for (int32_t off = 0; off < N_PROMPT; off += 64) {
            const es_batch pre = {N_PROMPT - off < 64 ? N_PROMPT - off : 64, prompt + off, NULL, NULL, NULL, NULL};
            CHECK_OK(es_forward(all[k], &pre));
            CHECK_OK(es_commit(all[k], NULL, pre.n_tokens));
        }
    float *lp = malloc(sizeof(float) * (size_t)V);
    es__err err = {0};
    int32_t tok = prompt[N_PROMPT - 1] ^ 1, tok_ref = tok;
    for (int32_t t = 0; t < N_GEN; t++) {
        uint8_t force[MAX_L];
        es__spec_verdict v[MAX_L], vr[MAX_L];
        for (int32_t l = 0; l < L; l++) force[l] = all_miss || forced_at(t, l);
        const es__alspec_call call = {CHUNK, 1e30f, force, v}, rcall = {CHUNK, 1e30f, force, vr};
        CHECKF(es__alspec_pair_decode(p, tok, &call, lp, &err) == ES_OK, "%s token %d: %s", pair, t, err.msg);
        const es_batch one = {1, &tok_ref, NULL, NULL, NULL, NULL};
        CHECK_OK(all_miss ? es_forward(ref, &one) : es__forward_alspec(ref, &one, &rcall));
        const float *lr = NULL;
        CHECK_OK(es_logits(ref, 0, &lr));
        for (int32_t l = 0; l < L; l++)
            CHECKF(v[l].valid && v[l].hit == !force[l], "%s token %d layer %d: hit %d, forced %d", pair, t, l, v[l].hit,
                   force[l]);
        if (same_kind)
            CHECKF(lr && memcmp(lp, lr, sizeof(float) * (size_t)V) == 0, "%s token %d: logits differ from one device's",
                   pair, t);
        tok_ref = argmax(lr);
        CHECK_OK(es_commit(ref, NULL, 1));
        tok = argmax(lp);
    }
    /* every cache against the reference's; the pair's against each other */
    const int32_t n = N_PROMPT + N_GEN;
    float *ka = cache(a, n), *kb = cache(b, n), *kr = cache(ref, n);
    CHECKF(same_slots(ka, kb, n, N_PROMPT, n), "%s: the two contexts' decoded KV slots differ", pair);
    if (same_kind || all_miss) {
        CHECKF(same_slots(ka, kr, n, 0, n), "%s: the first context's KV differs from one device's run", pair);
        CHECKF(same_slots(kb, kr, n, N_PROMPT, n), "%s: the second context's decoded KV differs from one device's run",
               pair);
    }
    free(ka), free(kb), free(kr), free(lp);
out:
    es__alspec_pair_free(p);
    es_context_free(a);
    es_context_free(b);
    es_context_free(ref);
}

static void test_errors(void) {
    es_context *a = ctx_on(0), *b = ctx_on(1);
    es_alspec *al = NULL;
    es_alspec_params p = {.chunk = CHUNK, .lambda = 0.1f};
    CHECK_FAILS(es_alspec_create_pair(a, a, &p, &al), ES_ERR_INVALID_ARGUMENT, "two distinct contexts");
    CHECK(al == NULL);
    CHECK_FAILS(es_alspec_create_pair(a, NULL, &p, &al), ES_ERR_INVALID_ARGUMENT, "ctx2");
    /* the parts' preconditions: a speculation part needs the query an entering part left and
     * 2S keys, an attention part the speculation part right before it */
    const int32_t tok = 1;
    const es_batch one = {1, &tok, NULL, NULL, NULL, NULL};
    float spec[1024], exact[1024], x[1024], kv[1024];
    es__spec_verdict v;
    const es__alspec_part sp1 = {ES__AL_SPEC, 1, CHUNK, NULL, NULL, NULL, spec, NULL, &v};
    const es__alspec_part sp0 = {ES__AL_SPEC, 0, CHUNK, NULL, NULL, NULL, spec, NULL, &v};
    const es__alspec_part att = {ES__AL_ATTN, 0, CHUNK, NULL, NULL, NULL, NULL, exact, &v};
    CHECK_FAILS(es__forward_alspec_part(a, &one, &sp1), ES_ERR_INVALID_ARGUMENT, "left layer -1's query");
    CHECK_FAILS(es__forward_alspec_part(a, &one, &att), ES_ERR_INVALID_ARGUMENT, "not its speculation part");
    const es__alspec_part enter = {ES__AL_ENTER, -1, 0, NULL, NULL, x, NULL, NULL, NULL};
    CHECK_OK(es__forward_alspec_part(a, &one, &enter));
    CHECK_FAILS(es__forward_alspec_part(a, &one, &sp1), ES_ERR_INVALID_ARGUMENT, "left layer 0's query");
    CHECK_FAILS(es__forward_alspec_part(a, &one, &sp0), ES_ERR_INVALID_ARGUMENT, "a speculation needs 2S");
    CHECK_FAILS(es__forward_alspec_part(a, &one, &att), ES_ERR_INVALID_ARGUMENT, "not its speculation part");
    const es__alspec_part resume = {ES__AL_ENTER, 0, 0, NULL, NULL, x, NULL, NULL, NULL};
    CHECK_FAILS(es__forward_alspec_part(a, &one, &resume), ES_ERR_INVALID_ARGUMENT, "without its residual");
    CHECK_FAILS(es__kv_slot(a, 0, 1, kv, false), ES_ERR_INVALID_ARGUMENT, "slot 1");
    CHECK_OK(es__kv_slot(a, 0, 0, kv, false)); /* the provisional slot */
    es_context_free(a);
    es_context_free(b);
}

/* The devices of list (es_backends_create), the model's chunk and sizes for them. */
static bool open_pair(const char *list, es_backend_type type) {
    es_backend_params bp = es_backend_default_params();
    bp.type = type;
    bp.device = list;
    bp.n_threads = 2;
    size_t n = 0;
    CHECK_OK(es_backends_create(&bp, dev, 2, &n));
    if (n != 2) return false;
    int32_t tile = 0;
    for (int k = 0; k < 2; k++) {
        es_context *c = ctx_on(k);
        es__caps caps;
        es__context_caps(c, &caps);
        es_context_free(c);
        if (caps.alspec_tile > tile) tile = caps.alspec_tile;
    }
    CHUNK = tile; /* 64 (CPU) divides 256 (Vulkan) */
    N_PROMPT = CHUNK * 33 / 10;
    N_CTX = N_PROMPT + 2 * N_GEN;
    model->hp.n_ctx_train = N_CTX;
    return true;
}

static void run_pair(const char *list, es_backend_type type, bool same_kind) {
    if (!open_pair(list, type)) return;
    test_exact(list);
    for (int host_gated = 0; host_gated < 2; host_gated++) {
        test_forced(list, same_kind, true, host_gated);
        test_forced(list, same_kind, false, host_gated);
    }
    test_errors();
    test_backend_end(dev[0]);
    test_backend_end(dev[1]);
}

int main(int argc, char **argv) {
    const bool vk = argc > 1 && strcmp(argv[1], "vulkan") == 0;
    const mem_model_cfg cfg = {211, 64, 4, 4, 2, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 77};
    model = mem_model_create(&cfg);
    if (vk) {
        test_pin_vulkan();
        run_pair("0,0", ES_BACKEND_VULKAN, true);
        run_pair("0,host", ES_BACKEND_VULKAN, false);
    } else {
        run_pair("host,host", ES_BACKEND_CPU, true);
    }
    mem_model_free(model);
    TEST_MAIN_END();
}
