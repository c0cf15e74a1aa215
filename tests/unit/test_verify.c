/* test_verify.c: tree verification on synthetic logits, no model needed.
 *  - greedy and seeded modes emit exactly the tokens of sequential es_sample calls (plain decoding)
 *    for several sampler settings, tree shapes, draft qualities and emission caps;
 *  - the rejection mode's output distribution equals plain sampling's (chi-square test over the
 *    first two tokens, many seeds), and the same test rejects the draft's distribution, so it has
 *    the power to fail. */
#include "decode/verify.h"

#include "../test.h"

#define V_MAX 64

/* ---- a synthetic language model: logits are a hash of (last two tokens, length) */

typedef struct synth {
    int32_t V;
    float scale;       /* peakiness of the target                */
    float draft_noise; /* how far the draft's logits stray        */
    uint64_t salt;
} synth;

static double hash_unit(uint64_t a, uint64_t b, uint64_t c) { /* [-1, 1) */
    test_rng r = {a * 0x9E3779B97F4A7C15ull ^ (b + 0x1234567ull) * 0xC2B2AE3D27D4EB4Full ^ c};
    test_rng_u64(&r);
    return test_rng_uniform(&r);
}

static void target_logits(const synth *s, const int32_t *seq, size_t n, float *out) {
    uint64_t ctx = (uint64_t)(n > 0 ? seq[n - 1] : 999) * 131 + (uint64_t)(n > 1 ? seq[n - 2] : 777) * 7 + n;
    for (int32_t i = 0; i < s->V; i++) out[i] = s->scale * (float)hash_unit(ctx, (uint64_t)i, s->salt);
}

static void draft_logits(const synth *s, const int32_t *seq, size_t n, float *out) {
    target_logits(s, seq, n, out);
    for (int32_t i = 0; i < s->V; i++) out[i] += s->draft_noise * (float)hash_unit((uint64_t)n, (uint64_t)i, 99);
}

/* ---- the speculative loop over the synthetic model */

typedef struct sim {
    const synth *s;
    es__verifier *v;
    es__tree *t;
    int32_t *hist; /* sequence so far, ending with the root token */
    size_t n_hist;
    float logits[256][V_MAX];  /* per node, enough for the trees here */
    double q[ES_SPEC_MAX_DEPTH + 1][V_MAX];                /* per level: the children's draft dist */
    int32_t n_eval;
    int32_t prune_mod; /* > 0: prune the subtree of every node whose hash says so, as tree pruning would */
    uint8_t skip[256];
} sim;

static es_status sim_logits(void *user, int32_t node, const float **out) {
    sim *m = user;
    int32_t path[ES_SPEC_MAX_DEPTH + 1], len = es__tree_path(m->t, node, path);
    int32_t seq[4096];
    memcpy(seq, m->hist, sizeof(int32_t) * m->n_hist);
    for (int32_t i = 1; i < len; i++) seq[m->n_hist + (size_t)i - 1] = m->t->token[path[i]];
    float *row = m->logits[node];
    target_logits(m->s, seq, m->n_hist + (size_t)len - 1, row);
    m->n_eval++;
    *out = row;
    return ES_OK;
}

static es_status sim_draft(void *user, int32_t node, const double **q) {
    sim *m = user;
    *q = m->q[m->t->depth[node]];
    return ES_OK;
}

/* One step: levels drafted from the draft model along its own greedy-ish guess of the first
 * candidates (every node at a depth shares its level's candidates, as streams do), verified. */
static void sim_step(sim *m, int32_t depth, int32_t k, int32_t max_nodes, uint64_t step, int32_t max_emit,
                     int32_t *emitted, int32_t *n_emitted, int32_t *accepted) {
    es__err err;
    es__levels lv;
    memset(&lv, 0, sizeof lv);
    static int32_t toks[ES_SPEC_MAX_DEPTH][V_MAX];
    static float lps[ES_SPEC_MAX_DEPTH][V_MAX];
    int32_t seq[4096];
    memcpy(seq, m->hist, sizeof(int32_t) * m->n_hist);
    size_t n = m->n_hist;
    int64_t root_pos = (int64_t)m->n_hist - 1;
    lv.n_levels = depth;
    for (int32_t g = 0; g < depth; g++) {
        float dl[V_MAX];
        draft_logits(m->s, seq, n, dl);
        int32_t got = 0;
        CHECK_OK(es__draft_candidates(m->v, dl, seq, n, root_pos + g + 1, step * 64 + (uint64_t)g, k, toks[g], lps[g],
                                      m->q[g], &got, &err));
        lv.k[g] = got;
        lv.tokens[g] = toks[g];
        lv.logp[g] = lps[g];
        seq[n++] = got > 0 ? toks[g][0] : 0;
    }
    CHECK_OK(es__tree_build(m->t, m->hist[m->n_hist - 1], &lv, max_nodes, (int32_t)root_pos, NULL, &err));
    if (m->prune_mod > 0) {
        memset(m->skip, 0, sizeof m->skip);
        for (int32_t i = 1; i < m->t->n; i++)
            if (m->skip[m->t->parent[i]] || hash_unit(step, (uint64_t)i, 5) * m->prune_mod > m->prune_mod - 1.0)
                m->skip[i] = 1; /* parents precede children in pre-order: whole subtrees go */
        m->t->skip = m->skip;
    }
    es__verify_src src = {m, sim_logits, sim_draft, NULL};
    es__verify_out out;
    int32_t hist_buf[4096];
    memcpy(hist_buf, m->hist, sizeof(int32_t) * m->n_hist);
    CHECK_OK(es__verify(m->v, m->t, &src, hist_buf, m->n_hist, max_emit, &out, &err));
    *n_emitted = 0;
    for (int32_t i = 1; i < out.n_path; i++) {
        CHECK(!(m->t->skip && m->t->skip[out.path[i]]));
        emitted[(*n_emitted)++] = m->t->token[out.path[i]];
    }
    emitted[(*n_emitted)++] = out.next;
    *accepted = out.n_path - 1;
    for (int32_t i = 0; i < *n_emitted; i++) m->hist[m->n_hist++] = emitted[i];
}

/* Plain decoding: es_sample at each position, as es_generate does. */
static void plain(const synth *s, const es_sampler_params *sp, const int32_t *prompt, size_t n_prompt, int32_t n_gen,
                  int32_t *out) {
    es_sampler *smp;
    CHECK_OK(es_sampler_create(s->V, sp, NULL, &smp));
    int32_t seq[4096];
    memcpy(seq, prompt, sizeof(int32_t) * n_prompt);
    size_t n = n_prompt;
    for (int32_t i = 0; i < n_gen; i++) {
        float l[V_MAX];
        target_logits(s, seq, n, l);
        int32_t tok = -1;
        CHECK_OK(es_sample(smp, l, (int64_t)n, seq, n, &tok));
        seq[n++] = tok;
        out[i] = tok;
    }
    es_sampler_free(smp);
}

static sim g_sim;

static void test_exact(void) {
    es__err err;
    es__tree t;
    CHECK_OK(es__tree_init(&t, 256, NULL, &err));
    const struct {
        float temp;
        int32_t top_k;
        float top_p, min_p, rep;
    } cfgs[] = {{0.0f, 0, 1.0f, 0.0f, 1.0f}, {0.0f, 0, 1.0f, 0.0f, 1.3f}, {0.8f, 10, 0.95f, 0.05f, 1.0f},
                {1.5f, 0, 0.9f, 0.0f, 1.1f}, {1.0f, 0, 1.0f, 0.0f, 1.0f}};
    const struct {
        int32_t depth, k, max_nodes;
        float noise;
    } shapes[] = {{1, 1, 8, 0.2f}, {3, 2, 15, 0.3f}, {4, 3, 24, 0.5f}, {5, 1, 6, 0.1f}, {2, 4, 21, 3.0f}};
    int32_t total_accepted = 0;
    for (size_t c = 0; c < ES__ARRAY_LEN(cfgs); c++) {
        for (size_t sh = 0; sh < ES__ARRAY_LEN(shapes); sh++) {
            for (uint64_t seed = 1; seed <= 3; seed++) {
                synth s = {48, 3.0f, shapes[sh].noise, seed * 17 + c};
                es_sampler_params sp = es_sampler_default_params();
                sp.temperature = cfgs[c].temp;
                sp.top_k = cfgs[c].top_k;
                sp.top_p = cfgs[c].top_p;
                sp.min_p = cfgs[c].min_p;
                sp.repeat_penalty = cfgs[c].rep;
                sp.seed = seed;
                const int32_t n_gen = 120;
                int32_t want[200], got[400];
                int32_t prompt[3] = {5, 9, 2};
                plain(&s, &sp, prompt, 3, n_gen, want);
                es__verifier v;
                CHECK_OK(es__verifier_init(&v, s.V, &sp, false, NULL, &err));
                CHECK(v.mode == (sp.temperature == 0.0f ? ES__VERIFY_GREEDY : ES__VERIFY_SEEDED));
                sim *m = &g_sim;
                m->s = &s;
                m->v = &v;
                m->t = &t;
                static int32_t hist[4096];
                m->hist = hist;
                memcpy(hist, prompt, sizeof prompt);
                m->n_hist = 3;
                m->prune_mod = seed == 2 ? 3 : 0;
                int32_t n_got = 0;
                for (uint64_t step = 0; n_got < n_gen; step++) {
                    int32_t em[ES_SPEC_MAX_DEPTH + 1], n_em, acc;
                    /* cap emissions now and then, as a caller near n_predict does */
                    int32_t cap = (step % 5 == 4) ? 1 + (int32_t)(step % 3) : ES_SPEC_MAX_DEPTH + 1;
                    cap = ES__MIN(cap, n_gen - n_got);
                    sim_step(m, shapes[sh].depth, shapes[sh].k, shapes[sh].max_nodes, step, cap, em, &n_em, &acc);
                    CHECK(n_em >= 1 && n_em <= cap);
                    memcpy(got + n_got, em, sizeof(int32_t) * (size_t)n_em);
                    n_got += n_em;
                    total_accepted += acc;
                }
                int32_t first_diff = -1;
                for (int32_t i = 0; i < n_gen && first_diff < 0; i++)
                    if (got[i] != want[i]) first_diff = i;
                CHECKF(first_diff < 0, "cfg %zu shape %zu seed %llu: token %d differs (%d vs plain %d)", c, sh,
                       (unsigned long long)seed, first_diff, first_diff >= 0 ? got[first_diff] : 0,
                       first_diff >= 0 ? want[first_diff] : 0);
                es__verifier_free(&v);
            }
        }
    }
    /* the trees did their job: many draft tokens were accepted along the way */
    CHECKF(total_accepted > 1000, "only %d draft tokens accepted", total_accepted);
    es__tree_free(&t, NULL);
}

/* ---- distribution of the rejection mode */

static double chi2(const double *obs, const double *expect_p, int32_t cells, double n, int32_t *df, int32_t *impossible) {
    double x = 0.0;
    *df = -1;
    *impossible = 0;
    for (int32_t i = 0; i < cells; i++) {
        double e = expect_p[i] * n;
        if (e <= 0.0) {
            *impossible += obs[i] > 0.0;
            continue;
        }
        x += (obs[i] - e) * (obs[i] - e) / e;
        (*df)++;
    }
    return x;
}

/* Exact probability of the first two tokens under plain sampling (the sampler's distribution). */
static void exact_pair_probs(const synth *s, const es_sampler_params *sp, const int32_t *prompt, size_t n_prompt,
                             double *pp) {
    es_sampler *smp;
    CHECK_OK(es_sampler_create(s->V, sp, NULL, &smp));
    int32_t seq[16];
    memcpy(seq, prompt, sizeof(int32_t) * n_prompt);
    float l[V_MAX];
    double p1[V_MAX] = {0};
    es__dist d;
    target_logits(s, seq, n_prompt, l);
    CHECK_OK(es__sampler_dist(smp, l, seq, n_prompt, &d));
    for (int32_t i = 0; i < d.n; i++) p1[d.ids[i]] = d.w[i] / d.total;
    for (int32_t a = 0; a < s->V; a++) {
        for (int32_t b = 0; b < s->V; b++) pp[a * s->V + b] = 0.0;
        if (p1[a] == 0.0) continue;
        seq[n_prompt] = a;
        target_logits(s, seq, n_prompt + 1, l);
        CHECK_OK(es__sampler_dist(smp, l, seq, n_prompt + 1, &d));
        for (int32_t i = 0; i < d.n; i++) pp[a * s->V + d.ids[i]] = p1[a] * d.w[i] / d.total;
    }
    es_sampler_free(smp);
}

/* The pair distribution of the draft (what a verifier that trusted the draft would emit). */
static void draft_pair_probs(const synth *s, const es_sampler_params *sp, const int32_t *prompt, size_t n_prompt,
                             double *pp) {
    es_sampler *smp;
    CHECK_OK(es_sampler_create(s->V, sp, NULL, &smp));
    int32_t seq[16];
    memcpy(seq, prompt, sizeof(int32_t) * n_prompt);
    float l[V_MAX];
    double p1[V_MAX] = {0};
    es__dist d;
    draft_logits(s, seq, n_prompt, l);
    CHECK_OK(es__sampler_dist(smp, l, seq, n_prompt, &d));
    for (int32_t i = 0; i < d.n; i++) p1[d.ids[i]] = d.w[i] / d.total;
    for (int32_t a = 0; a < s->V; a++) {
        for (int32_t b = 0; b < s->V; b++) pp[a * s->V + b] = 0.0;
        seq[n_prompt] = a;
        draft_logits(s, seq, n_prompt + 1, l);
        CHECK_OK(es__sampler_dist(smp, l, seq, n_prompt + 1, &d));
        for (int32_t i = 0; i < d.n; i++) pp[a * s->V + d.ids[i]] = p1[a] * d.w[i] / d.total;
    }
    es_sampler_free(smp);
}

static void test_rejection_distribution(void) {
    es__err err;
    es__tree t;
    CHECK_OK(es__tree_init(&t, 64, NULL, &err));
    const struct {
        float temp;
        int32_t top_k;
        int32_t depth, k;
        float noise;
        int32_t prune_mod;
    } cfgs[] = {
        {1.0f, 0, 2, 2, 0.8f, 0}, /* a tree, full-support distributions             */
        {0.7f, 3, 2, 3, 1.5f, 0}, /* filtered: p and q live on different token sets */
        {1.0f, 0, 3, 1, 0.5f, 0}, /* a chain, as draft-model decoding drafts        */
        {1.3f, 0, 1, 5, 0.0f, 0}, /* draft == target: every first candidate passes  */
        {1.0f, 0, 1, 4, 4.0f, 0}, /* a confidently wrong draft, most of q tried     */
        {0.5f, 0, 2, 3, 3.0f, 0},
        {1.0f, 0, 2, 4, 1.0f, 2}, /* pruned subtrees (about half the nodes)         */
    };
    for (size_t c = 0; c < ES__ARRAY_LEN(cfgs); c++) {
        synth s = {6, 1.5f, cfgs[c].noise, 4242 + c};
        es_sampler_params sp = es_sampler_default_params();
        sp.temperature = cfgs[c].temp;
        sp.top_k = cfgs[c].top_k;
        sp.top_p = 1.0f;
        sp.min_p = 0.0f;
        int32_t prompt[2] = {1, 4};
        const int32_t cells = s.V * s.V;
        double want[V_MAX], wrong[V_MAX], obs[V_MAX] = {0};
        exact_pair_probs(&s, &sp, prompt, 2, want);
        draft_pair_probs(&s, &sp, prompt, 2, wrong);
        const int32_t trials = 40000;
        int64_t accepted = 0, steps = 0;
        for (int32_t trial = 0; trial < trials; trial++) {
            sp.seed = 1000003ull * (uint64_t)trial + c;
            es__verifier v;
            CHECK_OK(es__verifier_init(&v, s.V, &sp, true, NULL, &err));
            if (trial == 0) CHECK(v.mode == ES__VERIFY_REJECTION);
            sim *m = &g_sim;
            static int32_t hist[64];
            m->s = &s;
            m->v = &v;
            m->t = &t;
            m->hist = hist;
            memcpy(hist, prompt, sizeof prompt);
            m->n_hist = 2;
            m->prune_mod = cfgs[c].prune_mod;
            int32_t got[64], n_got = 0;
            for (uint64_t step = 0; n_got < 2; step++) {
                int32_t em[ES_SPEC_MAX_DEPTH + 1], n_em, acc;
                sim_step(m, cfgs[c].depth, cfgs[c].k, 64, step, ES_SPEC_MAX_DEPTH + 1, em, &n_em, &acc);
                memcpy(got + n_got, em, sizeof(int32_t) * (size_t)n_em);
                n_got += n_em;
                accepted += acc;
                steps++;
            }
            obs[got[0] * s.V + got[1]] += 1.0;
            es__verifier_free(&v);
        }
        int32_t df, impossible;
        double x = chi2(obs, want, cells, trials, &df, &impossible);
        double limit = df + 6.0 * sqrt(2.0 * df) + 10.0; /* p ~ 1e-7 */
        CHECKF(x < limit && impossible == 0, "cfg %zu: chi2 %.1f (df %d, limit %.1f), %d impossible pairs", c, x, df,
               limit, impossible);
        /* the same statistic sees the draft's distribution as different (power), unless the two agree */
        int32_t df2, imp2;
        double x2 = chi2(obs, wrong, cells, trials, &df2, &imp2);
        if (cfgs[c].noise > 0.0f) CHECKF(x2 > df2 + 6.0 * sqrt(2.0 * df2) + 10.0 || imp2 > 0, "cfg %zu: chi2 vs draft %.1f", c, x2);
        CHECKF(accepted > 0, "cfg %zu: no draft token accepted", c);
        printf("rejection cfg %zu: chi2 %.1f (df %d), vs draft %.1f; %.3f draft tokens accepted per step\n", c, x, df,
               x2, (double)accepted / (double)steps);
    }
    es__tree_free(&t, NULL);
}

/* Candidates: distinct, sorted as documented, and rejection draws follow q. */
static void test_candidates(void) {
    es__err err;
    es_sampler_params sp = es_sampler_default_params();
    sp.temperature = 0.0f;
    es__verifier v;
    CHECK_OK(es__verifier_init(&v, 8, &sp, false, NULL, &err));
    float l[8] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -INFINITY, 0.0f, 3.0f};
    int32_t tok[8], n;
    float lp[8];
    CHECK_OK(es__draft_candidates(&v, l, NULL, 0, 0, 0, 4, tok, lp, NULL, &n, &err));
    CHECK(n == 4 && tok[0] == 7 && tok[1] == 1 && tok[2] == 3 && tok[3] == 4); /* ties to the lower id */
    CHECK(lp[0] > lp[1] && lp[1] == lp[2] && lp[0] < 0.0f);
    CHECK_OK(es__draft_candidates(&v, l, NULL, 0, 0, 0, 20, tok, lp, NULL, &n, &err));
    CHECK(n == 7); /* -inf is never a candidate */
    l[2] = NAN;
    CHECK_FAILS(es__draft_candidates(&v, l, NULL, 0, 0, 0, 2, tok, lp, NULL, &n, &err), ES_ERR_BACKEND, "token 2");
    es__verifier_free(&v);

    /* seeded: the first candidate is the sampler's own draw at that position */
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    float l2[8] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.1f, 0.0f, 1.5f};
    es_sampler *smp;
    CHECK_OK(es_sampler_create(8, &sp, NULL, &smp));
    for (uint64_t seed = 0; seed < 50; seed++) {
        sp.seed = seed;
        CHECK_OK(es__verifier_init(&v, 8, &sp, false, NULL, &err));
        es_sampler_free(smp);
        CHECK_OK(es_sampler_create(8, &sp, NULL, &smp));
        int32_t want;
        CHECK_OK(es_sample(smp, l2, 17, NULL, 0, &want));
        CHECK_OK(es__draft_candidates(&v, l2, NULL, 0, 17, 0, 3, tok, lp, NULL, &n, &err));
        CHECK(n == 3 && tok[0] == want && tok[1] != tok[0] && tok[2] != tok[0] && tok[1] != tok[2]);
        es__verifier_free(&v);
    }
    es_sampler_free(smp);

    /* rejection: the first draw's frequencies follow q, and q is the normalised distribution */
    double counts[8] = {0}, q[8];
    const int trials = 40000;
    CHECK_OK(es__verifier_init(&v, 8, &sp, true, NULL, &err));
    for (int i = 0; i < trials; i++) {
        CHECK_OK(es__draft_candidates(&v, l2, NULL, 0, 0, (uint64_t)i, 3, tok, lp, q, &n, &err));
        counts[tok[0]] += 1.0;
        if (i == 0) CHECK(n == 3 && tok[0] != tok[1] && tok[1] != tok[2] && tok[0] != tok[2]);
    }
    double sum = 0.0;
    for (int i = 0; i < 8; i++) sum += q[i];
    CHECK(fabs(sum - 1.0) < 1e-12);
    int32_t df, imp;
    double x = chi2(counts, q, 8, trials, &df, &imp);
    CHECKF(x < df + 6.0 * sqrt(2.0 * df) + 10.0, "first draws vs q: chi2 %.1f", x);
    es__verifier_free(&v);
}

int main(void) {
    test_candidates();
    test_exact();
    test_rejection_distribution();
    TEST_MAIN_END();
}
