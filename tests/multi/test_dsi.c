/* test_dsi.c: DSI (ES_SPEC_DSI) is lossless. On random-weight models built in memory, with
 * drafters that agree with the target always (itself), often (its first layer) and never
 * (unrelated weights), several lookaheads and numbers of target servers, prompt lengths (chunked
 * prefill included), greedy and seeded sampling, the emitted tokens equal es_generate's token for
 * token while the caller now and then takes fewer tokens than a step decided; es_spec_generate
 * hands out what es_generate hands out with n_predict and callback stops, and afterwards the
 * target context holds exactly the sequence (its KV gives the bits of a fresh read) and a later
 * turn continues it; the context-full end matches es_generate's; rejection sampling gives the
 * same tokens for a seed whatever the lookahead, the number of servers and the timing; the
 * number of servers comes from measured latencies when not given; bad parameters fail cleanly.
 * Without a draft model the target's own Speculative Streaming streams draft (a random adapter on
 * a 12-token vocabulary, so that drafts are accepted now and then): the same checks, token for
 * token, for every number of streams, lookahead and servers.
 * The servers run on backends of their own: the library's 1-thread CPU backends by default, or
 * (Vulkan) the ones the test gives. argv[1]: "cpu" (default) or "vulkan". */
#include "../spec/mem_adapter.h"
#include "../spec/spec_run.h"
#include "sampler.h"

#define N_GEN 40

static bool quick;             /* Vulkan on lavapipe, or emulated: a subset of the settings, the same checks */
static es_backend *dbackend;   /* the drafter's */
static es_backend *servers[2]; /* Vulkan: the servers' beyond the first (CPU: the library's) */

static es_spec_params dsi_params(es_context *d, const es_sampler_params *sp, bool rejection, int32_t la, int32_t nt) {
    es_spec_params p = es_spec_default_params();
    p.strategy = ES_SPEC_DSI;
    p.draft_ctx = d;
    p.lookahead = la;
    p.sampling = *sp;
    p.rejection_sampling = rejection;
    p.ignore_eog = true;
    p.dsi.n_targets = nt;
    if (servers[0]) {
        p.dsi.backends = servers;
        p.dsi.n_backends = 2;
    }
    return p;
}

static es_context *draft_ctx(const es_model *m, int32_t n_ctx) {
    return test_ctx(m, dbackend, n_ctx, 16, NULL);
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
           "KV after DSI differs from a fresh read of the %d-token sequence", n);
    es_truncate(c, n - 1);
    es_context_free(f);
}

typedef struct sink {
    int32_t tokens[256];
    int32_t n, stop_after; /* stop_after >= 0: on_token says stop at that many */
} sink;

static bool collect(int32_t token, const char *piece, size_t len, void *user) {
    (void)piece;
    (void)len;
    sink *k = user;
    if (k->n < 256) k->tokens[k->n] = token;
    k->n++;
    return k->stop_after < 0 || k->n < k->stop_after;
}

/* Models with a real vocabulary (es_spec_generate hands out text pieces), built in memory: the
 * llama SentencePiece vocabulary of the shared test files, and the end-of-text token's output row
 * scaled up, so that greedy decoding ends the text now and then. NULL where the file is missing. */
static es_model *vocab_model, *gen_target, *gen_drafter;

static es_model *with_vocab(int32_t n_layer, int32_t eos) {
    mem_model_cfg cfg = {vocab_model->hp.n_vocab, 32, n_layer, 2, 2, 16, 48, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false,
                         ES__DTYPE_F32, 21};
    es_model *m = mem_model_create(&cfg);
    m->vocab = vocab_model->vocab;
    float *row = (float *)m->output->data + (size_t)eos * 32;
    for (int i = 0; i < 32; i++) row[i] *= 3.0f;
    return m;
}

static void make_vocab_models(void) {
    char path[1024];
    const char *shared = getenv("ES_SHARED_DIR");
    snprintf(path, sizeof path, "%s/vocab-tests/ggml-vocab-llama-spm.gguf", shared ? shared : "../shared");
    es_model_params mp = es_model_default_params();
    mp.vocab_only = true;
    CHECK_OK(es_model_load(path, &mp, &vocab_model));
    if (!vocab_model) return;
    es_model_info info;
    CHECK_OK(es_model_get_info(vocab_model, &info));
    vocab_model->hp.n_vocab = info.n_vocab;
    gen_target = with_vocab(2, info.eos_id);
    gen_drafter = with_vocab(1, info.eos_id); /* the target's first layer, the same end row */
}

/* es_spec_generate: the same tokens, pieces and stops as es_generate (end of text, n_predict
 * inside a step, a callback that says stop); the sequence then ends with the last token handed
 * out (the target's KV holds the rest) and a later call continues it. */
static void test_generate(const es_sampler_params *sp, bool ignore_eog) {
    const es_model *target = gen_target, *drafter = gen_drafter;
    if (!target) return;
    const struct {
        int32_t n_predict, stop_after, lookahead, n_targets;
    } cases[] = {{40, -1, 4, 2}, {6, -1, 3, 1}, {0, 3, 5, 3}, {11, 7, 2, 2}, {1, -1, 1, 1}, {30, -1, 6, 2}};
    int32_t prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = 100 + 37 * i;
    int ended = 0;
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        if (quick && c % 2) continue;
        const int32_t np = 7;
        es_generate_params gp = es_generate_default_params();
        gp.sampling = *sp;
        gp.ignore_eog = ignore_eog;
        gp.n_predict = cases[c].n_predict;
        gp.on_token = collect;
        sink kp = {{0}, 0, cases[c].stop_after}, ks = kp;
        gp.user = &kp;
        es_context *plain_ctx = new_ctx(target, 96, 16);
        int32_t want[96], got[96];
        es_generate_stats st, sst;
        CHECK_OK(es_generate(plain_ctx, prompt, np, &gp, want, 96, &st));
        es_context_free(plain_ctx);
        ended += st.n_generated < cases[c].n_predict && cases[c].stop_after < 0;
        es_context *tc = new_ctx(target, 96, 16), *dc = draft_ctx(drafter, 96);
        es_spec_params p = dsi_params(dc, sp, false, cases[c].lookahead, cases[c].n_targets);
        p.ignore_eog = ignore_eog;
        es_spec *s = NULL;
        CHECK_OK(es_spec_create(tc, &p, &s));
        if (s) {
            gp.user = &ks;
            CHECK_OK(es_spec_generate(s, prompt, np, &gp, got, 96, &sst));
            CHECKF(sst.n_generated == st.n_generated && ks.n == kp.n &&
                       memcmp(got, want, sizeof(int32_t) * (size_t)ES__MIN(kp.n, 96)) == 0 &&
                       memcmp(ks.tokens, kp.tokens, sizeof(int32_t) * (size_t)ES__MIN(kp.n, 256)) == 0,
                   "case %zu (ignore_eog %d): DSI handed out %d tokens, plain decoding %d (or other ones)", c,
                   ignore_eog, ks.n, kp.n);
            /* an end-of-text token is neither handed out nor kept */
            CHECKF(es_context_n_past(tc) == np + ks.n - 1, "case %zu: n_past %d after %d tokens", c,
                   es_context_n_past(tc), ks.n);
            int32_t seq[96 + 8];
            memcpy(seq, prompt, sizeof(int32_t) * np);
            memcpy(seq + np, got, sizeof(int32_t) * (size_t)ks.n);
            const int32_t n_seq = np + ks.n;
            check_kv(tc, target, seq);
            /* a later turn: three more tokens fed, then as plain decoding of it all */
            int32_t turn[3] = {prompt[8], prompt[9], prompt[10]};
            memcpy(seq + n_seq, turn, sizeof turn);
            int32_t more[5] = {0}, want_more[5] = {0};
            es_generate_params gm = gp;
            gm.on_token = NULL;
            gm.n_predict = 5;
            CHECK_OK(es_spec_generate(s, turn, 3, &gm, more, 5, &sst));
            es_context *pc = new_ctx(target, 96, 16);
            es_generate_stats pst;
            CHECK_OK(es_generate(pc, seq, (size_t)n_seq + 3, &gm, want_more, 5, &pst));
            es_context_free(pc);
            CHECKF(sst.n_generated == pst.n_generated && memcmp(more, want_more, sizeof more) == 0,
                   "case %zu: the next turn differs", c);
            es_spec_stats ss;
            CHECK_OK(es_spec_get_stats(s, &ss));
            CHECK(ss.dsi.n_targets == cases[c].n_targets && ss.dsi.n_jobs >= 1 && ss.n_target_calls == ss.dsi.n_jobs);
            es_spec_free(s);
        }
        es_context_free(tc);
        es_context_free(dc);
    }
    if (!ignore_eog && sp->temperature == 0.0f) CHECKF(ended > 0, "no case ended at an end-of-text token");
}

/* es_context_abort on the speculation's context, from on_token, ends a DSI generation with
 * ES_ERR_CANCELLED (DSI's own preemptions, which cancel that context too, neither take the
 * application's request for theirs nor drop it), keeping the tokens handed out; the next call
 * goes on from them as plain decoding would. */
typedef struct abort_sink {
    sink k;
    es_context *ctx; /* aborted at the fifth token */
} abort_sink;

static bool abort_at_5(int32_t token, const char *piece, size_t len, void *user) {
    abort_sink *a = user;
    collect(token, piece, len, &a->k);
    if (a->k.n == 5) es_context_abort(a->ctx);
    return true;
}

static void test_app_abort(const es_sampler_params *sp) {
    if (!gen_target) return;
    int32_t prompt[7];
    for (int i = 0; i < 7; i++) prompt[i] = 100 + 37 * i;
    es_context *tc = new_ctx(gen_target, 160, 16), *dc = draft_ctx(gen_drafter, 160);
    es_spec_params p = dsi_params(dc, sp, false, 3, 2);
    p.ignore_eog = true;
    es_spec *s = NULL;
    CHECK_OK(es_spec_create(tc, &p, &s));
    if (s) {
        es_generate_params gp = es_generate_default_params();
        gp.sampling = *sp;
        gp.ignore_eog = true;
        gp.n_predict = 120;
        gp.on_token = abort_at_5;
        abort_sink a = {{{0}, 0, -1}, tc};
        gp.user = &a;
        int32_t got[120];
        es_generate_stats st;
        CHECK_FAILS(es_spec_generate(s, prompt, 7, &gp, got, 120, &st), ES_ERR_CANCELLED, "es_context_abort");
        const int32_t n = a.k.n;
        CHECKF(n >= 5 && n < 120, "%d tokens handed out", n);
        /* a next turn of one token, then as plain decoding of the whole sequence */
        es_generate_params gm = gp;
        gm.on_token = NULL;
        gm.n_predict = 4;
        int32_t more[4], want[4];
        es_generate_stats mst, pst;
        CHECK_OK(es_spec_generate(s, prompt, 1, &gm, more, 4, &mst));
        int32_t seq[7 + 120 + 1];
        memcpy(seq, prompt, sizeof prompt);
        memcpy(seq + 7, a.k.tokens, sizeof(int32_t) * (size_t)ES__MIN(n, 120));
        seq[7 + ES__MIN(n, 120)] = prompt[0];
        es_context *pc = new_ctx(gen_target, 160, 16);
        CHECK_OK(es_generate(pc, seq, (size_t)(8 + ES__MIN(n, 120)), &gm, want, 4, &pst));
        es_context_free(pc);
        CHECKF(mst.n_generated == 4 && memcmp(more, want, sizeof more) == 0, "after the abort: not plain decoding");
        es_spec_free(s);
    }
    es_context_free(tc);
    es_context_free(dc);
}

/* ---- rejection sampling preserves the target's distribution */

/* The probabilities of the first two tokens after prompt under m's sampler: the exact pair
 * distribution of plain sampling (or, for the drafter, of trusting its drafts). */
static void pair_probs(const es_model *m, const es_sampler_params *sp, const int32_t *prompt, int32_t np, double *pp) {
    const int32_t V = m->hp.n_vocab;
    es_sampler *smp = NULL;
    CHECK_OK(es_sampler_create(V, sp, NULL, &smp));
    es_context *c = new_ctx(m, 64, 16);
    int32_t seq[16];
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)np);
    double p1[16] = {0};
    const float *l = NULL;
    es__dist d;
    es_batch b = {np, seq, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &b));
    CHECK_OK(es_logits(c, np - 1, &l));
    CHECK_OK(es__sampler_dist(smp, l, seq, (size_t)np, &d));
    for (int32_t i = 0; i < d.n; i++) p1[d.ids[i]] = d.w[i] / d.total;
    for (int32_t a = 0; a < V; a++) {
        seq[np] = a;
        es_batch b2 = {np + 1, seq, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &b2));
        CHECK_OK(es_logits(c, np, &l));
        CHECK_OK(es__sampler_dist(smp, l, seq, (size_t)np + 1, &d));
        for (int32_t y = 0; y < V; y++) pp[a * V + y] = 0.0;
        for (int32_t i = 0; i < d.n; i++) pp[a * V + d.ids[i]] = p1[a] * d.w[i] / d.total;
    }
    es_context_free(c);
    es_sampler_free(smp);
}

static double chi2(const double *obs, const double *p, int32_t cells, double n, int32_t *df, int32_t *impossible) {
    double x = 0.0;
    *df = -1;
    *impossible = 0;
    for (int32_t i = 0; i < cells; i++) {
        const double e = p[i] * n;
        if (e <= 0.0) {
            *impossible += obs[i] > 0.0;
            continue;
        }
        x += (obs[i] - e) * (obs[i] - e) / e;
        (*df)++;
    }
    return x;
}

/* Many seeds, two tokens each: their pair frequencies follow plain sampling's exact pair
 * distribution (chi-square, p ~ 1e-7 limit), and the same statistic tells them from the
 * drafter's, so the test can see a verifier that trusts its drafts. */
static void test_rejection_distribution(void) {
    mem_model_cfg tc = {6, 16, 2, 2, 2, 8, 24, 8, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 31};
    es_model *t = mem_model_create(&tc);
    tc.seed = 32;
    es_model *dm = mem_model_create(&tc);
    es_sampler_params sp = es_sampler_default_params();
    sp.temperature = 1.0f;
    const int32_t prompt[3] = {1, 4, 2}, V = 6, cells = 36, trials = 3000;
    double want[36], draft[36], obs[36] = {0};
    pair_probs(t, &sp, prompt, 3, want);
    pair_probs(dm, &sp, prompt, 3, draft);
    int64_t accepted = 0;
    for (int32_t trial = 0; trial < trials; trial++) {
        sp.seed = 1000003ull * (uint64_t)trial + 17;
        es_context *c = new_ctx(t, 32, 8), *d = draft_ctx(dm, 32);
        es_spec_params p = dsi_params(d, &sp, true, 1 + trial % 3, 1 + trial % 2);
        es_spec *s = NULL;
        CHECK_OK(es_spec_create(c, &p, &s));
        if (s) {
            CHECK_OK(es_spec_feed(s, prompt, 3));
            int32_t got[8], n = 0;
            while (n < 2) {
                size_t k = 0;
                es_status st = es_spec_step(s, got + n, 2, &k);
                CHECK_OK(st);
                if (st != ES_OK) break;
                n += (int32_t)k;
            }
            if (n >= 2 && got[0] >= 0 && got[0] < V && got[1] >= 0 && got[1] < V) obs[got[0] * V + got[1]] += 1.0;
            es_spec_stats st;
            CHECK_OK(es_spec_get_stats(s, &st));
            for (int dd = 0; dd < ES_SPEC_MAX_DEPTH; dd++) accepted += st.accepted[dd];
            es_spec_free(s);
        }
        es_context_free(c);
        es_context_free(d);
    }
    int32_t df, imp, df2, imp2;
    const double x = chi2(obs, want, cells, trials, &df, &imp), x2 = chi2(obs, draft, cells, trials, &df2, &imp2);
    const double limit = df + 6.0 * sqrt(2.0 * df) + 10.0;
    printf("rejection sampling: chi2 %.1f (df %d, limit %.1f) against plain sampling, %.1f against the drafter; "
           "%lld drafts accepted in %d runs\n",
           x, df, limit, x2, (long long)accepted, trials);
    CHECKF(x < limit && imp == 0, "chi2 %.1f (df %d, limit %.1f), %d impossible pairs", x, df, limit, imp);
    CHECKF(x2 > df2 + 6.0 * sqrt(2.0 * df2) + 10.0 || imp2 > 0, "the drafter's pair distribution passes too: chi2 %.1f",
           x2);
    CHECK(accepted > trials / 10);
    mem_model_free(t);
    mem_model_free(dm);
}

/* DSI with the target's streams as the drafter (draft_ctx NULL): token for token against
 * es_generate, greedy and seeded, whatever the streams, lookahead, servers and prompt; rejection
 * sampling repeats for a seed across lookaheads and servers. */
static void test_streams_drafter(const es_sampler_params *const modes[2]) {
    mem_model_cfg mc = {12, 32, 3, 4, 2, 8, 48, 8, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 31};
    es_model *m = mem_model_create(&mc);
    mem_adapter_cfg ac = {4, 2, 1, 4, 2, 0.3f, 32};
    mem_adapter_attach(m, &ac);
    test_rng rng = {77};
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % 12);
    const int32_t cfgs[][4] = {/* n_streams, lookahead, servers, prompt */ {0, 3, 2, 6}, {1, 1, 1, 1}, {2, 4, 1, 33},
                               {4, 6, 3, 6}, {3, 2, 2, 1}};
    int64_t accepted = 0, drafted = 0;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        for (int mi = 0; mi < 2; mi++) {
            if (quick && (ci + (size_t)mi) % 2) continue;
            const int32_t np = cfgs[ci][3];
            int32_t want[N_GEN], got[N_GEN];
            const int32_t n_want = plain(m, prompt, np, modes[mi], N_GEN, 128, 16, want);
            es_context *c = new_ctx(m, 128, 16);
            es_spec_params p = dsi_params(NULL, modes[mi], false, cfgs[ci][1], cfgs[ci][2]);
            p.n_streams = cfgs[ci][0];
            es_spec_stats st;
            const int32_t n_got = run_spec(c, &p, prompt, np, N_GEN, got, &st);
            CHECKF(n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_want) == 0,
                   "streams drafter, %d streams, lookahead %d, %d servers, prompt %d, mode %d: other tokens", cfgs[ci][0],
                   cfgs[ci][1], cfgs[ci][2], np, mi);
            CHECK(st.dsi.n_targets == cfgs[ci][2]);
            for (int dd = 0; dd < ES_SPEC_MAX_DEPTH; dd++) accepted += st.accepted[dd], drafted += st.drafted[dd];
            es_context_free(c);
        }
    }
    /* how many drafts reach a server before it decides their positions alone is timing: a
     * drafter as slow as the target (ASan, a loaded machine) may see none verified */
    printf("streams drafter: %lld of %lld verified drafts accepted\n", (long long)accepted, (long long)drafted);
    CHECK(accepted <= drafted);
    int32_t first[N_GEN], again[N_GEN];
    for (int r = 0; r < 2; r++) {
        es_context *c = new_ctx(m, 128, 16);
        es_spec_params p = dsi_params(NULL, modes[1], true, r ? 5 : 2, r ? 1 : 2);
        es_spec_stats st;
        CHECK(run_spec(c, &p, prompt, 6, N_GEN, r ? again : first, &st) == N_GEN);
        es_context_free(c);
    }
    CHECK(memcmp(first, again, sizeof first) == 0);
    es_context *c = new_ctx(m, 128, 16);
    es_spec *s = (es_spec *)1;
    es_spec_params p = dsi_params(NULL, modes[0], false, 3, 2);
    p.n_streams = 5;
    CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "n_streams 5 outside [0, 4]");
    CHECK(s == NULL);
    es_context_free(c);
    mem_adapter_model_free(m);
}

/* argv[1]: "cpu" (default) or "vulkan"; argv[2] "emulated" (a cross build's suite under qemu-user,
 * where the full set took 105 s): the CPU with the quick subset. */
int main(int argc, char **argv) {
    bool vulkan = false;
    backend = test_backend_from_args(argc, argv, 1, &vulkan);
    if (!backend) TEST_MAIN_END();
    quick = vulkan || (argc > 2 && strcmp(argv[2], "emulated") == 0);
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 1;
    if (vulkan) {
        bp.type = ES_BACKEND_VULKAN;
        for (int i = 0; i < 2; i++) CHECK_OK(es_backend_create(&bp, &servers[i]));
    }
    CHECK_OK(es_backend_create(&bp, &dbackend));
    mem_model_cfg tc = {97, 64, 3, 4, 2, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 11};
    es_model *target = mem_model_create(&tc);
    mem_model_cfg dc = tc;
    dc.n_layer = 1; /* same seed: the target's embeddings, head and first layer */
    es_model *near = mem_model_create(&dc);
    dc.seed = 99;
    es_model *far = mem_model_create(&dc);
    const es_model *drafters[3] = {target, near, far};
    const char *names[3] = {"itself", "its first layer", "unrelated"};

    test_rng rng = {5};
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % 97);
    const int32_t prompt_lens[3] = {1, 5, 37};
    es_sampler_params greedy = es_sampler_default_params(), sampled = es_sampler_default_params();
    sampled.temperature = 0.9f;
    sampled.top_k = 20;
    sampled.top_p = 0.95f;
    sampled.min_p = 0.05f;
    sampled.seed = 7;
    const es_sampler_params *modes[2] = {&greedy, &sampled};
    const int32_t lookaheads[3] = {1, 3, 6}, n_targets[3] = {1, 2, 3};

    /* token for token against es_generate */
    for (int di = 0; di < 3; di++) {
        double per_call = 0.0;
        int runs = 0;
        for (int li = 0; li < 3; li++) {
            for (int ti = 0; ti < 3; ti++) {
                if (quick && (li + ti) % 2) continue;
                for (int pi = 0; pi < 3; pi++) {
                    for (int mi = 0; mi < 2; mi++) {
                        if ((li + ti + pi + mi) % 2 && (quick || di == 2)) continue;
                        const int32_t np = prompt_lens[pi];
                        int32_t want[N_GEN], got[N_GEN];
                        int32_t n_want = plain(target, prompt, np, modes[mi], N_GEN, 256, 16, want);
                        es_context *c = new_ctx(target, 256, 16), *d = draft_ctx(drafters[di], 256);
                        es_spec_params p = dsi_params(d, modes[mi], false, lookaheads[li], n_targets[ti]);
                        es_spec_stats st;
                        int32_t n_got = run_spec(c, &p, prompt, np, N_GEN, got, &st);
                        int32_t diff = -1;
                        for (int32_t i = 0; i < n_want && diff < 0; i++)
                            if (i >= n_got || got[i] != want[i]) diff = i;
                        CHECKF(n_got == n_want && diff < 0,
                               "drafter %s, lookahead %d, %d servers, prompt %d, mode %d: token %d differs", names[di],
                               lookaheads[li], n_targets[ti], np, mi, diff);
                        /* a drafter identical to the target has every verified draft accepted */
                        if (di == 0)
                            for (int dd = 0; dd < ES_SPEC_MAX_DEPTH; dd++) CHECK(st.accepted[dd] == st.drafted[dd]);
                        CHECK(st.n_generated >= N_GEN && st.n_prompt == np && st.dsi.n_targets == n_targets[ti]);
                        CHECK(st.dsi.n_jobs >= 1 && st.dsi.n_jobs_preempted <= st.dsi.n_jobs);
                        per_call += st.tokens_per_call;
                        runs++;
                        es_context_free(c);
                        es_context_free(d);
                    }
                }
            }
        }
        printf("drafter %s: %.2f tokens per target call on average\n", names[di], runs ? per_call / runs : 0.0);
    }

    test_streams_drafter(modes);

    make_vocab_models();
    for (int mi = 0; mi < 2; mi++)
        for (int eog = 0; eog < 2; eog++) test_generate(modes[mi], eog);
    test_app_abort(&greedy);
    if (gen_target) gen_target->vocab = gen_drafter->vocab = NULL;
    mem_model_free(gen_target);
    mem_model_free(gen_drafter);
    es_model_free(vocab_model);

    /* the context's end: as many tokens as es_generate gives, then ES_ERR_CONTEXT_FULL */
    for (int mi = 0; mi < 2; mi++) {
        const int32_t n_ctx = 30, np = 11;
        int32_t want[64], got[64];
        int32_t n_want = plain(target, prompt, np, modes[mi], 64, n_ctx, 16, want);
        es_context *c = new_ctx(target, n_ctx, 16), *d = draft_ctx(near, n_ctx);
        es_spec_params p = dsi_params(d, modes[mi], false, 3, 2);
        es_spec_stats st;
        int32_t n_got = run_spec(c, &p, prompt, np, 64, got, &st);
        CHECKF(n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_want) == 0,
               "context end: %d tokens vs %d", n_got, n_want);
        es_context_free(c);
        es_context_free(d);
    }

    /* rejection sampling: in the vocabulary, and the same tokens for a seed whatever the
     * lookahead, the servers and the timing (drafts and decisions are keyed by position) */
    {
        int32_t first[N_GEN], again[N_GEN];
        const int32_t cfgs[4][2] = {{3, 2}, {3, 2}, {1, 1}, {6, 3}};
        for (int r = 0; r < (quick ? 2 : 4); r++) {
            es_context *c = new_ctx(target, 256, 16), *d = draft_ctx(near, 256);
            es_spec_params p = dsi_params(d, &sampled, true, cfgs[r][0], cfgs[r][1]);
            es_spec_stats st;
            int32_t n = run_spec(c, &p, prompt, 5, N_GEN, r ? again : first, &st);
            CHECK(n == N_GEN);
            bool in_vocab = true;
            for (int i = 0; i < N_GEN; i++) in_vocab = in_vocab && (r ? again : first)[i] >= 0 && (r ? again : first)[i] < 97;
            CHECK(in_vocab);
            if (r) CHECKF(memcmp(first, again, sizeof first) == 0, "rejection sampling, lookahead %d, %d servers: other tokens",
                          cfgs[r][0], cfgs[r][1]);
            int32_t acc = 0;
            for (int dd = 0; dd < ES_SPEC_MAX_DEPTH; dd++) acc += (int32_t)st.accepted[dd];
            CHECK(acc > 0); /* drafts were tested and some accepted */
            es_context_free(c);
            es_context_free(d);
        }
    }

    /* the distribution is the verifier's arithmetic on the target's logits, the same on every
     * backend; on lavapipe its 800 runs of fresh contexts took minutes under MALLOC_PERTURB_ */
    if (!vulkan) test_rejection_distribution();

    /* the number of servers from measured latencies, within its cap */
    {
        es_context *c = new_ctx(target, 256, 16), *d = draft_ctx(near, 256);
        es_spec_params p = dsi_params(d, &greedy, false, 2, 0);
        es_spec *s = NULL;
        es_spec_params got;
        /* the cap's default: what can compute at once (two backends given on Vulkan, and server
         * 0's; on the CPU the processors the drafter leaves) */
        CHECK_OK(es_spec_create(c, &p, &s));
        CHECK_OK(es_spec_get_params(s, &got));
        CHECKF(got.dsi.max_targets == (servers[0] ? 3 : ES__MAX(1, es__cpu_count() - 1)), "max_targets %d",
               got.dsi.max_targets);
        es_spec_free(s);
        p.dsi.max_targets = 3;
        CHECK_OK(es_spec_create(c, &p, &s));
        CHECK_OK(es_spec_get_params(s, &got));
        CHECK(got.dsi.n_targets == 0 && got.dsi.max_targets == 3 && got.lookahead == 2);
        CHECK_OK(es_spec_feed(s, prompt, 9));
        CHECK_OK(es_spec_get_params(s, &got));
        int32_t buf[8];
        size_t k = 0;
        CHECK_OK(es_spec_step(s, buf, 8, &k));
        es_spec_stats st;
        CHECK_OK(es_spec_get_stats(s, &st));
        printf("measured: target call %.3f ms, draft call %.3f ms, lookahead 2: %d servers\n", st.dsi.target_call_ms,
               st.dsi.draft_call_ms, got.dsi.n_targets);
        CHECK(got.dsi.n_targets >= 1 && got.dsi.n_targets <= 3 && st.dsi.n_targets == got.dsi.n_targets);
        CHECK(st.dsi.target_call_ms > 0.0 && st.dsi.draft_call_ms > 0.0);
        const double want = ceil(st.dsi.target_call_ms / (2.0 * st.dsi.draft_call_ms));
        CHECKF(got.dsi.n_targets == (int32_t)ES__MAX(1.0, ES__MIN(want, 3.0)), "%d servers, the formula says %.0f",
               got.dsi.n_targets, want);
        es_spec_free(s);
        es_context_free(c);
        es_context_free(d);
        es_spec_get_params(NULL, &got);
    }

    /* bad parameters */
    {
        es_context *c = new_ctx(target, 256, 16), *d = draft_ctx(near, 128), *d2 = draft_ctx(near, 256);
        es_spec *s = (es_spec *)1;
        es_spec_params p = dsi_params(NULL, &greedy, false, 3, 2);
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "DSI needs draft_ctx");
        CHECK(s == NULL);
        p.draft_ctx = d;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "n_ctx >= 256");
        p.draft_ctx = d2;
        p.lookahead = 16;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "lookahead 16");
        p.lookahead = 15; /* 17 tokens: more than the target's n_batch 16 */
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "n_batch and max_nodes must be >= 17");
        p.lookahead = 3;
        p.dsi.n_targets = 17;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "dsi.n_targets 17");
        p.dsi.n_targets = 2;
        p.dsi.max_targets = -1;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "dsi.max_targets -1");
        p.dsi.max_targets = 0;
        p.dsi.backends = NULL;
        p.dsi.n_backends = 2;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "dsi.backends NULL with n_backends 2");
        es_backend *none[1] = {NULL};
        p.dsi.backends = none;
        p.dsi.n_backends = 1;
        CHECK_FAILS(es_spec_create(c, &p, &s), ES_ERR_INVALID_ARGUMENT, "dsi.backends[0] is NULL");
        p = dsi_params(d2, &greedy, false, 3, 2);
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
        CHECK(k >= 1);
        es_spec_free(s); /* while its workers run ahead */
        es_spec_free(NULL);
        es_context_free(c);
        es_context_free(d);
        es_context_free(d2);
    }
    mem_model_free(target);
    mem_model_free(near);
    mem_model_free(far);
    for (int i = 0; i < 2; i++) es_backend_free(servers[i]);
    es_backend_free(dbackend);
    test_backend_end(backend);
    TEST_MAIN_END();
}
