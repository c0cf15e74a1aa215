/* test_spec_stream.c: Speculative Streaming decoding is lossless. On random-weight in-memory
 * models with random adapters (a small vocabulary, so that drafts are accepted now and then and
 * accepted paths of several depths get their KV compacted), for several γ, k, node caps, pruning
 * thresholds, prompt lengths and emission caps, greedy and seeded sampling emit exactly what
 * es_generate emits; the KV left behind equals a fresh read of the sequence; rejection sampling is
 * reproducible; bad parameters fail cleanly. */
#include "decode/spec.h"
#include "mem_adapter.h"
#include "spec_run.h"

#define N_GEN 48

static bool quick; /* Vulkan on lavapipe: a subset of the settings, the same checks */

typedef struct cfg {
    int32_t gamma, k, max_nodes;
    float prune;
} cfg;

static bool fixed; /* draft to the limits every step (reproducible rejection sampling) */

static int32_t speculative(es_context *c, const cfg *g, const int32_t *prompt, int32_t n_prompt,
                           const es_sampler_params *sp, bool rejection, int32_t n_gen, int32_t *out, es_spec_stats *st) {
    es_spec_params p = es_spec_default_params();
    p.strategy = ES_SPEC_STREAM;
    p.n_streams = g->gamma;
    p.top_k = g->k;
    p.max_nodes = g->max_nodes;
    p.prune_threshold = g->prune;
    p.sampling = *sp;
    p.rejection_sampling = rejection;
    p.ignore_eog = true;
    p.fixed_tree = fixed;
    return run_spec(c, &p, prompt, n_prompt, n_gen, out, st);
}

/* argv[1]: "cpu" (default) or "vulkan"; argv[2] (Vulkan): "fallbacks" forces every fallback path. */
int main(int argc, char **argv) {
    backend = test_backend_from_args(argc, argv, 1, &quick);
    if (!backend) TEST_MAIN_END();
    mem_model_cfg mc = MEM_CFG_STREAM(3);
    es_model *m = mem_model_create(&mc);
    mem_adapter_cfg ac = MEM_ADAPTER_STREAM;
    mem_adapter_attach(m, &ac);

    test_rng rng = {77};
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % 12);
    es_sampler_params greedy = es_sampler_default_params(), sampled = es_sampler_default_params();
    greedy.temperature = 0.0f;
    sampled.temperature = 1.0f;
    sampled.top_k = 0;
    sampled.top_p = 0.9f;
    sampled.min_p = 0.0f;
    sampled.repeat_penalty = 1.1f;
    sampled.seed = 3;
    const es_sampler_params *modes[2] = {&greedy, &sampled};
    const cfg cfgs[] = {{1, 1, 2, 0.0f},   {3, 2, 15, 0.0f},  {4, 3, 32, 0.0f}, {2, 4, 21, 0.0f},
                        {4, 3, 32, 0.05f}, {3, 3, 40, 0.2f},  {4, 2, 7, 0.01f}};
    const int32_t prompt_lens[3] = {1, 6, 33};
    int64_t accepted_deep = 0, pruned = 0;
    for (size_t ci = 0; ci < ES__ARRAY_LEN(cfgs); ci += 1 + (quick && ci % 2 == 0)) {
        for (int pi = quick; pi < 3; pi++) {
            for (int mi = 0; mi < 2; mi++) {
                const int32_t np = prompt_lens[pi];
                int32_t want[N_GEN], got[N_GEN];
                int32_t n_want = plain(m, prompt, np, modes[mi], N_GEN, 256, 24, want);
                es_context *c = new_ctx(m, 256, 24);
                es_spec_stats st;
                /* fixed trees (deep paths whatever the timings) and adaptive ones, alternately */
                fixed = (pi + mi) % 2 == 0;
                int32_t n_got = speculative(c, &cfgs[ci], prompt, np, modes[mi], false, N_GEN, got, &st);
                fixed = false;
                int32_t diff = -1;
                for (int32_t i = 0; i < n_want && diff < 0; i++)
                    if (i >= n_got || got[i] != want[i]) diff = i;
                CHECKF(n_got == n_want && diff < 0, "cfg %zu, prompt %d, mode %d: token %d differs", ci, np, mi, diff);
                for (int d = 1; d < ES_SPEC_MAX_DEPTH; d++) accepted_deep += st.accepted[d];
                pruned += st.n_pruned;
                CHECK(st.n_tree_nodes >= st.n_target_calls && st.n_draft_calls == 0);
                es_context_free(c);
            }
        }
    }
    /* the runs did exercise deep accepted paths (KV compaction) and pruning */
    CHECKF(accepted_deep > 20 && pruned > 20, "only %lld accepted beyond depth 1, %lld pruned",
           (long long)accepted_deep, (long long)pruned);
    printf("%lld drafts accepted beyond depth 1, %lld nodes pruned\n", (long long)accepted_deep, (long long)pruned);

    /* KV afterwards equals a fresh read of the sequence; a second feed continues exactly */
    {
        es_context *c = new_ctx(m, 256, 24);
        es_spec_params p = es_spec_default_params();
        p.sampling = greedy;
        p.top_k = 3;
        p.prune_threshold = 0.02f;
        es_spec *s = NULL;
        CHECK_OK(es_spec_create(c, &p, &s));
        es_spec_costs k0;
        CHECK_OK(es_spec_get_costs(s, &k0));
        CHECK(k0.adaptive && !k0.fitted && k0.calibrate_ms == 0); /* measured in the first step */
        CHECK_OK(es_spec_feed(s, prompt, 7));
        int32_t seq[7 + N_GEN + 8];
        memcpy(seq, prompt, sizeof(int32_t) * 7);
        int32_t n = 0;
        while (n < N_GEN) {
            size_t k = 0;
            CHECK_OK(es_spec_step(s, seq + 7 + n, (size_t)(N_GEN - n), &k));
            if (k == 0) break;
            n += (int32_t)k;
        }
        /* the adaptive trees' calibration timed the first steps' own calls (a plain call, one node
         * with every stream and its pass, a small tree); what it measured is there to see */
        es_spec_costs kc;
        es_spec_params rp;
        CHECK_OK(es_spec_get_costs(s, &kc));
        CHECK_OK(es_spec_get_params(s, &rp));
        /* fitted, unless the probe's tree took no longer than its one-node call (cold calls, as
         * under the sanitizers): the slope then waits for a warm tree over warm plain calls */
        CHECKF(kc.adaptive && (kc.fitted || kc.calib_hi_ms <= kc.calib_one_ms), "costs unknown: 1 node %g ms, %d nodes %g",
               kc.calib_one_ms, kc.calib_n_hi, kc.calib_hi_ms);
        CHECKF(kc.calibrate_ms == 0 && kc.calib_plain_ms > 0 && kc.calib_one_ms > 0 && kc.calib_hi_ms > 0 &&
                   kc.calib_n_hi >= 2 && kc.calib_n_hi <= 3 && kc.calib_g_hi == rp.n_streams && kc.calib_pass1_ms == 0 &&
                   kc.calib_pass_hi_ms > 0 && kc.calib_draft_ms == 0 && kc.explore_every >= 8,
               "calibration %g ms: plain %g, 1 node %g, %d nodes %g, passes %d: %g / %g, explore every %d",
               kc.calibrate_ms, kc.calib_plain_ms, kc.calib_one_ms, kc.calib_n_hi, kc.calib_hi_ms, kc.calib_g_hi,
               kc.calib_pass1_ms, kc.calib_pass_hi_ms, kc.explore_every);
        CHECK(es_context_n_past(c) == 7 + n - 1);
        es_batch b = {1, seq + 7 + n - 1, NULL, NULL, NULL, NULL};
        const float *l1 = NULL, *l2 = NULL;
        CHECK_OK(es_forward(c, &b));
        CHECK_OK(es_logits(c, 0, &l1));
        float keep[12];
        if (l1) memcpy(keep, l1, sizeof keep);
        es_context *f = new_ctx(m, 256, 24);
        for (int32_t off = 0; off < 7 + n; off += 24) {
            es_batch part = {ES__MIN(24, 7 + n - off), seq + off, NULL, NULL, NULL, NULL};
            CHECK_OK(es_forward(f, &part));
            if (off + 24 >= 7 + n) CHECK_OK(es_logits(f, part.n_tokens - 1, &l2));
            else CHECK_OK(es_commit(f, NULL, 0));
        }
        CHECKF(l1 && l2 && memcmp(keep, l2, sizeof keep) == 0, "KV after speculation differs from a fresh read");
        es_context_free(f);
        /* the forward above left a provisional token: a new feed replaces it */
        es_truncate(c, es_context_n_past(c));
        CHECK_OK(es_spec_feed(s, prompt + 40, 5));
        int32_t more[8], n_more = 0, want[8];
        while (n_more < 8) {
            size_t k = 0;
            CHECK_OK(es_spec_step(s, more + n_more, (size_t)(8 - n_more), &k));
            if (k == 0) break;
            n_more += (int32_t)k;
        }
        memcpy(seq + 7 + n, prompt + 40, sizeof(int32_t) * 5);
        plain(m, seq, 7 + n + 5, &greedy, 8, 256, 24, want);
        CHECK(n_more == 8 && memcmp(more, want, sizeof want) == 0);
        es_spec_free(s);
        es_context_free(c);
    }

    /* pruning chosen by the tuner (prune_threshold 0 on adaptive trees): its measuring calls
     * prune and record the early exit's probabilities, and the output stays plain decoding's. The
     * tuner starts from costs that make drafting pay (seeded as after its probe), so that trees
     * are drafted whatever this machine's timings say. */
    for (int mi = 0; mi < 2; mi++) {
        int32_t want[N_GEN], got[N_GEN];
        const int32_t n_want = plain(m, prompt, 6, modes[mi], N_GEN, 256, 24, want);
        es_context *c = new_ctx(m, 256, 24);
        es_spec_params p = es_spec_default_params();
        p.sampling = *modes[mi];
        p.top_k = 3;
        p.ignore_eog = true;
        es_spec *s = NULL;
        CHECK_OK(es_spec_create(c, &p, &s));
        CHECK(s->tune.prune_auto);
        CHECK_OK(es_spec_feed(s, prompt, 6));
        const es__tuner_costs cheap = {1.0, 1.0, 4, 1.1, 4, 0.1, 0.0};
        s->tune.probing = false;
        es__tuner_seed(&s->tune, &cheap);
        int32_t n_got = 0;
        while (n_got < N_GEN) {
            size_t k = 0;
            CHECK_OK(es_spec_step(s, got + n_got, (size_t)(N_GEN - n_got), &k));
            if (k == 0) break;
            n_got += (int32_t)k;
        }
        CHECKF(n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_want) == 0,
               "tuned pruning, mode %d: %d tokens vs %d, or they differ", mi, n_got, n_want);
        CHECKF(s->tune.ow > 0.0, "tuned pruning, mode %d: no measuring call", mi);
        es_spec_costs kc;
        CHECK_OK(es_spec_get_costs(s, &kc));
        CHECK(kc.prune_threshold >= 0.0 && kc.prune_threshold <= 0.1 + 1e-6);
        es_spec_free(s);
        es_context_free(c);
    }

    /* the context's end matches es_generate's */
    for (int mi = 0; mi < 2; mi++) {
        int32_t want[64], got[64];
        const cfg g = {4, 3, 32, 0.0f};
        int32_t n_want = plain(m, prompt, 9, modes[mi], 64, 29, 24, want);
        es_context *c = new_ctx(m, 29, 24);
        es_spec_stats st;
        int32_t n_got = speculative(c, &g, prompt, 9, modes[mi], false, 64, got, &st);
        CHECKF(n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_want) == 0,
               "context end: %d tokens vs %d", n_got, n_want);
        es_context_free(c);
    }

    /* rejection sampling: reproducible, in the vocabulary */
    {
        int32_t a[N_GEN], b[N_GEN];
        es_spec_stats st;
        const cfg g = {3, 3, 24, 0.02f};
        fixed = true;
        for (int rep = 0; rep < 2; rep++) {
            es_context *c = new_ctx(m, 256, 24);
            CHECK(speculative(c, &g, prompt, 5, &sampled, true, N_GEN, rep ? b : a, &st) == N_GEN);
            es_context_free(c);
        }
        fixed = false;
        bool ok = memcmp(a, b, sizeof a) == 0;
        for (int i = 0; i < N_GEN; i++) ok = ok && a[i] >= 0 && a[i] < 12;
        CHECK(ok);
    }

    /* bad parameters */
    {
        es_context *c = new_ctx(m, 256, 24);
        es_spec *s = (es_spec *)1;
        es_spec_params p = es_spec_default_params();
        p.n_streams = 5;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "n_streams 5 outside [0, 4]");
        CHECK(s == NULL);
        p.n_streams = 0;
        p.top_k = 65;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "top_k 65");
        p.top_k = 0;
        p.prune_threshold = 1.5f;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "prune_threshold 1.5");
        p.prune_threshold = 0.0f;
        /* a negative threshold: never prune, the tuner does not choose */
        p.prune_threshold = -1.0f;
        CHECK_OK(es_spec_create(c, &p, &s));
        CHECK(!s->tune.prune_auto);
        es_spec_free(s);
        p.prune_threshold = 0.0f;
        p.max_nodes = -1;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "max_nodes -1");
        p.max_nodes = 0;
        p.strategy = (es_spec_strategy)7;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "unknown strategy 7");
        CHECK_FAILS(es_spec_create(NULL, &p, &s), ES_ERR_INVALID_ARGUMENT, "ctx is NULL");
        /* a zeroed struct (and NULL) is every default: Speculative Streaming with the adapter's
         * gamma, greedy, and the resolved values are what es_spec_get_params reports */
        const es_spec_params zero = {0};
        const es_spec_params *given[2] = {&zero, NULL};
        for (int i = 0; i < 2; i++) {
            CHECK_OK(es_spec_create(c, given[i], &s));
            es_spec_params r;
            CHECK_OK(es_spec_get_params(s, &r));
            CHECK(r.strategy == ES_SPEC_STREAM && r.n_streams == 4 && r.top_k == 2 && r.max_nodes == 32 &&
                  r.lookahead == 4 && r.sampling.temperature == 0.0f && !r.fixed_tree);
            es_spec_free(s);
        }
        /* fixed trees measure nothing */
        {
            es_spec_params fp = es_spec_default_params();
            fp.fixed_tree = true;
            es_spec_costs kc;
            memset(&kc, 0xff, sizeof kc);
            CHECK_OK(es_spec_create(c, &fp, &s));
            CHECK_OK(es_spec_get_costs(s, &kc));
            CHECK(!kc.adaptive && !kc.fitted && kc.calibrate_ms == 0 && kc.calib_plain_ms == 0 && kc.explore_every == 0);
            CHECK_FAILS(es_spec_get_costs(NULL, &kc), ES_ERR_INVALID_ARGUMENT, "NULL argument");
            es_spec_free(s);
        }
        es_context_free(c);
    }
    mem_adapter_model_free(m);
    test_backend_end(backend);
    TEST_MAIN_END();
}
