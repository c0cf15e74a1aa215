/* test_spec_draft.c: draft-model speculative decoding is lossless. On random-weight models built
 * in memory, for drafters that agree with the target always (the target itself), often (the
 * target's first layer only: same embeddings, head and layer 0) and never (other weights), several
 * lookaheads, prompt lengths (chunked prefill included), greedy and seeded sampling, the emitted
 * tokens equal es_generate's token for token; the context's KV afterwards gives the same logits
 * as a fresh context that read the whole sequence; the context-full end matches es_generate's;
 * bad parameters fail cleanly. */
#include "spec_run.h"

#define N_GEN 40

static bool quick; /* Vulkan on lavapipe: a subset of the settings, the same checks */

/* Speculative decoding until n_gen tokens or the context is full. */
static int32_t speculative(es_context *c, es_context *d, const int32_t *prompt, int32_t n_prompt,
                           const es_sampler_params *sp, bool rejection, int32_t lookahead, int32_t n_gen, int32_t *out,
                           es_spec_stats *stats) {
    static int call;
    call++;
    es_spec_params p = es_spec_default_params();
    p.strategy = ES_SPEC_DRAFT;
    p.draft_ctx = d;
    p.lookahead = lookahead;
    p.sampling = *sp;
    p.rejection_sampling = rejection;
    p.ignore_eog = true;
    p.fixed_tree = rejection || call % 2 == 0; /* reproducible rejection sampling needs fixed drafts */
    return run_spec(c, &p, prompt, n_prompt, n_gen, out, stats);
}

/* The KV cache c holds (the first n_past tokens of seq) gives, for the next token of seq, the
 * same logits bits as a fresh context that reads seq[0..n_past] as a chain. */
static void check_kv(es_context *c, const es_model *m, const int32_t *seq) {
    const int32_t n = es_context_n_past(c) + 1;
    es_batch b = {1, seq + n - 1, NULL, NULL, NULL, NULL};
    const float *l1 = NULL, *l2 = NULL;
    CHECK_OK(es_forward(c, &b));
    CHECK_OK(es_logits(c, 0, &l1));
    es_context *f = new_ctx(m, es_context_n_ctx(c), 64);
    es_batch chain = {n, seq, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(f, &chain));
    CHECK_OK(es_logits(f, n - 1, &l2));
    CHECKF(l1 && l2 && memcmp(l1, l2, sizeof(float) * (size_t)m->hp.n_vocab) == 0,
           "KV after speculation differs from a fresh read of the %d-token sequence", n);
    es_context_free(f);
}

/* argv[1]: "cpu" (default) or "vulkan". */
int main(int argc, char **argv) {
    backend = test_backend_from_args(argc, argv, 1, &quick);
    if (!backend) TEST_MAIN_END();
    const mem_model_cfg tc = MEM_CFG_DRAFT(3, 11);
    es_model *target = mem_model_create(&tc);
    const mem_model_cfg nc = MEM_CFG_DRAFT(1, 11); /* same seed: the target's embeddings, head and first layer */
    es_model *near = mem_model_create(&nc);
    const mem_model_cfg fc = MEM_CFG_DRAFT(1, 99);
    es_model *far = mem_model_create(&fc);
    const es_model *drafters[3] = {target, near, far};
    const char *names[3] = {"itself", "its first layer", "unrelated"};

    test_rng rng = {5};
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % 97);
    const int32_t prompt_lens[3] = {1, 5, 37};
    es_sampler_params greedy = es_sampler_default_params(), sampled = es_sampler_default_params();
    greedy.temperature = 0.0f;
    sampled.temperature = 0.9f;
    sampled.top_k = 20;
    sampled.top_p = 0.95f;
    sampled.min_p = 0.05f;
    sampled.seed = 7;
    const es_sampler_params *modes[2] = {&greedy, &sampled};

    for (int di = 0; di < 3; di++) {
        double accept = 0.0;
        int runs = 0;
        for (int la = quick ? 3 : 1; la <= (quick ? 3 : 5); la += 2) {
            for (int pi = quick; pi < 3; pi += 1 + quick) {
                for (int mi = 0; mi < 2; mi++) {
                    const int32_t np = prompt_lens[pi];
                    int32_t want[N_GEN], got[N_GEN];
                    int32_t n_want = plain(target, prompt, np, modes[mi], N_GEN, 256, 16, want);
                    es_context *c = new_ctx(target, 256, 16), *d = new_ctx(drafters[di], 256, 16);
                    es_spec_stats st;
                    int32_t n_got = speculative(c, d, prompt, np, modes[mi], false, la, N_GEN, got, &st);
                    int32_t diff = -1;
                    for (int32_t i = 0; i < n_want && diff < 0; i++)
                        if (i >= n_got || got[i] != want[i]) diff = i;
                    CHECKF(n_got == n_want && diff < 0, "drafter %s, lookahead %d, prompt %d, mode %d: token %d differs",
                           names[di], la, np, mi, diff);
                    /* a drafter identical to the target has every draft accepted */
                    if (di == 0)
                        for (int dd = 0; dd < la; dd++) CHECK(st.accepted[dd] == st.drafted[dd]);
                    CHECK(st.n_draft_calls > 0 && st.n_generated >= N_GEN && st.n_prompt == np);
                    accept += st.tokens_per_call;
                    runs++;
                    /* the KV left behind is exactly the sequence's */
                    int32_t seq[64 + N_GEN + ES_SPEC_MAX_DEPTH];
                    memcpy(seq, prompt, sizeof(int32_t) * (size_t)np);
                    memcpy(seq + np, got, sizeof(int32_t) * (size_t)n_got);
                    if (la == 3 && mi == 0) CHECK(es_context_n_past(c) >= np + n_got - 1 - 2);
                    es_context_free(c);
                    es_context_free(d);
                }
            }
        }
        printf("drafter %s: %.2f tokens per target call on average\n", names[di], accept / runs);
    }

    /* KV invariant: stop at an exact count so the pending root is the last token */
    {
        int32_t got[N_GEN + ES_SPEC_MAX_DEPTH];
        es_context *c = new_ctx(target, 256, 16), *d = new_ctx(near, 256, 16);
        es_spec_params p = es_spec_default_params();
        p.strategy = ES_SPEC_DRAFT;
        p.draft_ctx = d;
        p.lookahead = 4;
        p.sampling = greedy;
        es_spec *s = NULL;
        CHECK_OK(es_spec_create(c, &p, &s));
        CHECK_OK(es_spec_feed(s, prompt, 9));
        int32_t n = 0;
        while (n < N_GEN) {
            size_t k = 0;
            CHECK_OK(es_spec_step(s, got + n, (size_t)(N_GEN - n), &k));
            n += (int32_t)k;
            if (k == 0) break;
        }
        int32_t seq[9 + N_GEN];
        memcpy(seq, prompt, sizeof(int32_t) * 9);
        memcpy(seq + 9, got, sizeof(int32_t) * (size_t)n);
        /* the first steps' calls timed both models; the costs are fitted unless the probe's tree
         * took no longer than its one-node call (cold calls, as under the sanitizers) */
        es_spec_costs kc;
        CHECK_OK(es_spec_get_costs(s, &kc));
        CHECKF(kc.adaptive && (kc.fitted ? kc.draft_call > 0 : kc.calib_hi_ms <= kc.calib_one_ms) && kc.calib_plain_ms > 0 &&
                   kc.calib_draft_ms > 0 && kc.calib_g_hi == 0,
               "calibration: plain %g ms, drafter %g ms (%g calls), 1 node %g ms, %d nodes %g", kc.calib_plain_ms,
               kc.calib_draft_ms, kc.draft_call, kc.calib_one_ms, kc.calib_n_hi, kc.calib_hi_ms);
        CHECK(es_context_n_past(c) == 9 + n - 1);
        check_kv(c, target, seq);
        /* the drafter may lag: one token (an accepted last draft it has not read yet), or the
         * tokens of plain steps, taken where drafts did not pay (it reads them when one does) */
        CHECK(es_context_n_past(d) <= 9 + n - 1 && es_context_n_past(d) >= 9);
        check_kv(d, near, seq);
        /* a later turn: feed more tokens and go on, still equal to plain decoding of it all */
        CHECK_OK(es_spec_feed(s, prompt + 20, 6));
        int32_t more[8], n_more = 0;
        while (n_more < 8) {
            size_t k = 0;
            CHECK_OK(es_spec_step(s, more + n_more, (size_t)(8 - n_more), &k));
            n_more += (int32_t)k;
            if (k == 0) break;
        }
        int32_t all[9 + N_GEN + 6], want[8];
        memcpy(all, seq, sizeof(int32_t) * (size_t)(9 + n));
        memcpy(all + 9 + n, prompt + 20, sizeof(int32_t) * 6);
        plain(target, all, 9 + n + 6, &greedy, 8, 256, 16, want);
        CHECK(n_more == 8 && memcmp(more, want, sizeof want) == 0);
        es_spec_free(s);
        es_context_free(c);
        es_context_free(d);
    }

    /* the context's end: as many tokens as es_generate gives, then ES_ERR_CONTEXT_FULL */
    for (int mi = 0; mi < 2; mi++) {
        const int32_t n_ctx = 30, np = 11;
        int32_t want[64], got[64];
        int32_t n_want = plain(target, prompt, np, modes[mi], 64, n_ctx, 16, want);
        es_context *c = new_ctx(target, n_ctx, 16), *d = new_ctx(near, n_ctx, 16);
        es_spec_stats st;
        int32_t n_got = speculative(c, d, prompt, np, modes[mi], false, 4, 64, got, &st);
        CHECKF(n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_want) == 0,
               "context end: %d tokens vs %d", n_got, n_want);
        es_context_free(c);
        es_context_free(d);
    }

    /* rejection sampling runs, stays in the vocabulary and is reproducible for a seed */
    {
        int32_t a[N_GEN], b[N_GEN];
        es_spec_stats st;
        for (int rep = 0; rep < 2; rep++) {
            es_context *c = new_ctx(target, 256, 16), *d = new_ctx(near, 256, 16);
            int32_t n = speculative(c, d, prompt, 5, &sampled, true, 3, N_GEN, rep ? b : a, &st);
            CHECK(n == N_GEN);
            es_context_free(c);
            es_context_free(d);
        }
        bool in_vocab = true;
        for (int i = 0; i < N_GEN; i++) in_vocab = in_vocab && a[i] >= 0 && a[i] < 97;
        CHECK(in_vocab && memcmp(a, b, sizeof a) == 0);
    }

    /* bad parameters */
    {
        es_context *c = new_ctx(target, 256, 16), *d = new_ctx(near, 128, 16), *d2 = new_ctx(near, 256, 16);
        es_spec *s = (es_spec *)1;
        es_spec_params p = es_spec_default_params();
        p.strategy = ES_SPEC_DRAFT;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "needs draft_ctx");
        CHECK(s == NULL);
        p.draft_ctx = d;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "n_ctx >= 256");
        p.draft_ctx = d2;
        p.lookahead = 17;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "lookahead 17");
        p.lookahead = 2;
        p.sampling.top_p = 2.0f;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "top_p");
        p.sampling = greedy;
        p.strategy = ES_SPEC_STREAM;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "needs an adapter");
        p.strategy = ES_SPEC_DRAFT;
        CHECK_OK(es_spec_create(c, &p, &s));
        int32_t buf[8], bad[2] = {3, 97};
        size_t k = 0;
        CHECK_FAILS(es_spec_step(s, buf, 8, &k), ES_ERR_INVALID_ARGUMENT, "feed a prompt first");
        CHECK_FAILS(es_spec_feed(s, bad, 2), ES_ERR_INVALID_ARGUMENT, "id 97");
        CHECK(es_context_n_past(c) == 0);
        int32_t many[300] = {0};
        CHECK_FAILS(es_spec_feed(s, many, 300), ES_ERR_CONTEXT_FULL, "exceed n_ctx 256");
        CHECK_OK(es_spec_feed(s, prompt, 3));
        CHECK_FAILS(es_spec_step(s, buf, 0, &k), ES_ERR_INVALID_ARGUMENT, "cap >= 1");
        CHECK_OK(es_spec_step(s, buf, 8, &k));
        es_spec_free(s);
        es_spec_free(NULL);
        es_context_free(c);
        es_context_free(d);
        es_context_free(d2);
    }
    mem_model_free(target);
    mem_model_free(near);
    mem_model_free(far);
    test_backend_end(backend);
    TEST_MAIN_END();
}
