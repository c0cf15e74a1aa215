/* test_cpu_forward.c: properties of the CPU forward pass on random in-memory models of every
 * weight type (odd sizes, GQA and not, tied and not, NORM and NEOX rope, partial rotation):
 *   - batch invariance: a token's logits are bit-identical decoded alone, inside a prefill chain,
 *     and as a node of a verification tree; and under 1, 2 and 3 threads, and with the weights
 *     copied at upload or read in place (es_backend_params.cpu_weights_in_place);
 *   - KV compaction: committing a tree's accepted path then decoding equals decoding the path;
 *   - a batch that wants no logits, context-full and invalid batches (bad token, bad tree) fail
 *     cleanly and leave the context usable with unchanged results;
 *   - the kernel levels: the portable one (EDGESPEC_CPU_KERNELS=generic) gives the logits bits of
 *     the best one where they share their arithmetic (AArch64: neon), else agrees within 1e-4 of
 *     the largest logit (x86: other vector widths, fused or separate multiply-adds).
 * Numerical agreement with an independent reference is tests/cpu/test_cpu_reference.py's job, and
 * for these very models (mem_models.h) test_mem_model_reference.py's. */
#include "../common/test_ctx.h"
#include "backend.h"
#include "cpu/cpu.h"
#include "mem_models.h"

#define N_SEQ 12

typedef struct cfg_case {
    const char *name;
    mem_model_cfg m;
} cfg_case;

static const cfg_case cases[] = {
    {"f32 gqa neox odd", MEM_CFG_FORWARD_F32},
    {"f16 tied norm partial-rot", MEM_CFG_FORWARD_F16},
    {"bf16 gqa norm", MEM_CFG_FORWARD_BF16},
    {"q8_0 mqa neox", MEM_CFG_FORWARD_Q8_0},
    {"q4_0 tied norm", MEM_CFG_FORWARD_Q4_0},
};

typedef struct runner {
    es_backend *be;
    es_context *ctx;
    int32_t n_vocab;
} runner;

static bool runner_init(runner *r, const es_model *m, int n_threads, bool in_place, int32_t n_ctx) {
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = n_threads;
    bp.cpu_weights_in_place = in_place;
    es_status s = es_backend_create(&bp, &r->be);
    CHECK_OK(s);
    if (s != ES_OK) return false;
    r->ctx = test_ctx(m, r->be, n_ctx, 32, NULL);
    r->n_vocab = m->hp.n_vocab;
    if (r->ctx) /* the copy is a huge-page block; in place, the model's own tensor data */
        CHECKF((((es__cpu_weights *)r->ctx->weights)->repacked == NULL) == in_place, "weights %s",
               in_place ? "copied although asked to read them in place" : "not copied");
    return r->ctx != NULL;
}

static void runner_free(runner *r) {
    es_context_free(r->ctx);
    es_backend_free(r->be);
}

/* Copies batch token i's logits into out[n_vocab]. */
static bool take_logits(runner *r, int32_t i, float *out) {
    const float *l = NULL;
    es_status s = es_logits(r->ctx, i, &l);
    CHECK_OK(s);
    if (s != ES_OK) return false;
    memcpy(out, l, sizeof(float) * (size_t)r->n_vocab);
    for (int32_t v = 0; v < r->n_vocab; v++)
        if (!isfinite(out[v])) return false;
    return true;
}

static bool same(const float *a, const float *b, int32_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* Builds a tree in DFS pre-order over a committed prefix of n_past tokens: a decoy branch first,
 * then the path seq[0..len) (root to node), with extra siblings hanging off the path. Returns the
 * node count; path_idx[d] is the batch index of the path's depth-d node. */
static int32_t make_tree(const int32_t *seq, int32_t len, int32_t n_vocab, test_rng *rng, int32_t *tok, int32_t *st,
                         int32_t *en, int32_t *pos, int32_t n_past, int32_t *path_idx) {
    int32_t n = 0;
    /* decoy root with one child: positions n_past, n_past + 1 */
    tok[n] = (int32_t)(test_rng_u64(rng) % (uint64_t)n_vocab), pos[n] = n_past, st[n] = n, en[n] = n + 1, n++;
    tok[n] = (int32_t)(test_rng_u64(rng) % (uint64_t)n_vocab), pos[n] = n_past + 1, st[n] = n, en[n] = n, n++;
    /* the path; before descending, each path node gets a leaf sibling-child first */
    int32_t open[64];
    for (int32_t d = 0; d < len; d++) {
        path_idx[d] = n;
        open[d] = n;
        tok[n] = seq[d], pos[n] = n_past + d, st[n] = n, n++;
        if (d + 1 < len) {
            tok[n] = (int32_t)(test_rng_u64(rng) % (uint64_t)n_vocab), pos[n] = n_past + d + 1, st[n] = n, en[n] = n,
            n++;
        }
    }
    for (int32_t d = 0; d < len; d++) en[open[d]] = n - 1;
    return n;
}

static void run_case(const cfg_case *cc) {
    es_model *m = mem_model_create(&cc->m);
    const int32_t V = cc->m.n_vocab;
    test_rng rng = {cc->m.seed * 77};
    int32_t seq[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) seq[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    float *chain = malloc(sizeof(float) * (size_t)(N_SEQ * V)); /* reference: the prefill chain, 1 thread */
    float *got = malloc(sizeof(float) * (size_t)V);

    for (int nth = 1; nth <= 3; nth++) {
        runner r;
        if (!runner_init(&r, m, nth, nth == 3, 64)) break;
        /* prefill chain with every row's logits */
        uint8_t all[N_SEQ];
        memset(all, 1, sizeof all);
        es_batch b = {N_SEQ, seq, NULL, NULL, NULL, all};
        CHECK_OK(es_forward(r.ctx, &b));
        bool ok = true;
        for (int i = 0; i < N_SEQ; i++) {
            if (nth == 1) {
                ok = ok && take_logits(&r, i, chain + (size_t)i * (size_t)V);
            } else {
                ok = ok && take_logits(&r, i, got) && same(got, chain + (size_t)i * (size_t)V, V);
            }
        }
        CHECKF(ok, "%s: prefill chain with %d threads differs from 1 thread (or is not finite)", cc->name, nth);
        CHECK_OK(es_commit(r.ctx, NULL, 0));
        CHECK(es_context_n_past(r.ctx) == N_SEQ);

        /* each token alone */
        CHECK_OK(es_truncate(r.ctx, 0));
        ok = true;
        for (int i = 0; i < N_SEQ; i++) {
            es_batch one = {1, &seq[i], NULL, NULL, NULL, NULL};
            CHECK_OK(es_forward(r.ctx, &one));
            ok = ok && take_logits(&r, 0, got) && same(got, chain + (size_t)i * (size_t)V, V);
            CHECK_OK(es_commit(r.ctx, NULL, 0));
        }
        CHECKF(ok, "%s, %d threads: a token decoded alone differs from the same token in the prefill chain", cc->name,
               nth);

        /* tree: prefix of 4 committed, path seq[4..9) inside a tree with decoys; then commit the path */
        CHECK_OK(es_truncate(r.ctx, 4));
        int32_t tok[64], st[64], en[64], pos[64], path[16];
        const int32_t len = 5;
        int32_t n = make_tree(seq + 4, len, V, &rng, tok, st, en, pos, 4, path);
        uint8_t want[64];
        memset(want, 1, sizeof want);
        es_batch tb = {n, tok, pos, st, en, want};
        CHECK_OK(es_forward(r.ctx, &tb));
        ok = true;
        for (int32_t d = 0; d < len; d++)
            ok = ok && take_logits(&r, path[d], got) && same(got, chain + (size_t)(4 + d) * (size_t)V, V);
        CHECKF(ok, "%s, %d threads: a tree node differs from the same token in the chain", cc->name, nth);
        CHECK(path[0] != 0); /* the path does not start at slot 0: compaction must move entries */
        CHECK_OK(es_commit(r.ctx, path, len));
        CHECK(es_context_n_past(r.ctx) == 4 + len);
        es_batch rest = {N_SEQ - 4 - len, seq + 4 + len, NULL, NULL, NULL, all};
        CHECK_OK(es_forward(r.ctx, &rest));
        ok = true;
        for (int32_t i = 0; i < N_SEQ - 4 - len; i++)
            ok = ok && take_logits(&r, i, got) && same(got, chain + (size_t)(4 + len + i) * (size_t)V, V);
        CHECKF(ok, "%s, %d threads: decoding after committing a tree path differs from the chain", cc->name, nth);
        runner_free(&r);
    }

    /* errors leave the context usable; a batch without logits still fills the cache */
    runner r;
    if (runner_init(&r, m, 2, false, 10)) {
        uint8_t none[8] = {0};
        es_batch b = {8, seq, NULL, NULL, NULL, none};
        CHECK_OK(es_forward(r.ctx, &b));
        const float *l;
        CHECK_FAILS(es_logits(r.ctx, 7, &l), ES_ERR_INVALID_ARGUMENT, "no logits");
        CHECK_OK(es_commit(r.ctx, NULL, 0));
        es_batch too_many = {3, seq + 8, NULL, NULL, NULL, NULL};
        CHECK_FAILS(es_forward(r.ctx, &too_many), ES_ERR_CONTEXT_FULL, "exceeds n_ctx 10");
        int32_t bad_tok[2] = {seq[8], V};
        es_batch bad = {2, bad_tok, NULL, NULL, NULL, NULL};
        CHECK_FAILS(es_forward(r.ctx, &bad), ES_ERR_INVALID_ARGUMENT, "outside [0,");
        int32_t bst[2] = {0, 1}, ben[2] = {0, 1}, bpos[2] = {8, 9};
        es_batch badtree = {2, seq + 8, bpos, bst, ben, NULL};
        CHECK_FAILS(es_forward(r.ctx, &badtree), ES_ERR_INVALID_TREE, "position 9");
        CHECK(es_context_n_past(r.ctx) == 8);
        uint8_t both[2] = {1, 1};
        es_batch next = {2, seq + 8, NULL, NULL, NULL, both};
        CHECK_OK(es_forward(r.ctx, &next));
        bool ok = true;
        for (int32_t i = 0; i < 2; i++) ok = ok && take_logits(&r, i, got) && same(got, chain + (size_t)(8 + i) * (size_t)V, V);
        CHECKF(ok, "%s: logits after rejected batches differ from the chain", cc->name);
        runner_free(&r);
    }
    free(chain);
    free(got);
    mem_model_free(m);
}

/* With profile set, the CPU backend reports its phases' wall times and counts forward calls. */
static void test_profile(void) {
    es_model *m = mem_model_create(&cases[0].m);
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    bp.profile = true;
    es_backend *be = NULL;
    CHECK_OK(es_backend_create(&bp, &be));
    es_context_params cp = es_context_default_params();
    cp.n_ctx = 32;
    cp.backend = be;
    es_context *ctx = NULL;
    CHECK_OK(es_context_create(m, &cp, &ctx));
    int32_t toks[4] = {1, 2, 3, 4};
    es_batch b = {4, toks, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(ctx, &b));
    CHECK_OK(es_forward(ctx, &b));
    es_backend_stats st;
    CHECK_OK(es_backend_get_stats(be, &st));
    CHECK(st.n_forward == 2);
    es_profile_entry e[32];
    size_t n = 0;
    CHECK_OK(es_backend_profile(be, e, 32, &n));
    bool attn = false, head = false, positive = true;
    for (size_t i = 0; i < n; i++) {
        attn = attn || (strcmp(e[i].op, "attention") == 0 && e[i].calls == 2 * (uint64_t)cases[0].m.n_layer);
        head = head || (strcmp(e[i].op, "mul_mat_head") == 0 && e[i].calls == 2);
        positive = positive && e[i].ms >= 0.0 && e[i].calls > 0;
    }
    CHECKF(n >= 8 && attn && head && positive, "profile: %zu entries", n);
    es_backend_profile_reset(be);
    CHECK_OK(es_backend_profile(be, e, 32, &n));
    CHECK(n == 0);
    es_context_free(ctx);
    es_backend_free(be);
    mem_model_free(m);
}

/* A prefill chain's logits on the best kernel level and on the portable one. The switch is read
 * when backends and ops start, so it is set while no backend of this test is alive. */
static void test_levels(const cfg_case *cc) {
    es_model *m = mem_model_create(&cc->m);
    const int32_t V = cc->m.n_vocab;
    test_rng rng = {cc->m.seed * 91};
    int32_t seq[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) seq[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    float *lv[2] = {malloc(sizeof(float) * (size_t)(N_SEQ * V)), malloc(sizeof(float) * (size_t)(N_SEQ * V))};
    const bool exact = strcmp(es__kern_best()->name, "neon") == 0;
    bool ok = true;
    for (int pass = 0; pass < 2 && ok; pass++) {
        if (pass == 1) {
            setenv("EDGESPEC_CPU_KERNELS", "generic", 1);
            CHECK(strcmp(es__kern_best()->name, "generic") == 0);
        }
        runner r = {0};
        ok = runner_init(&r, m, 2, false, 64);
        uint8_t all[N_SEQ];
        memset(all, 1, sizeof all);
        es_batch b = {N_SEQ, seq, NULL, NULL, NULL, all};
        if (ok) CHECK_OK(es_forward(r.ctx, &b));
        for (int i = 0; ok && i < N_SEQ; i++) ok = take_logits(&r, i, lv[pass] + (size_t)i * (size_t)V);
        if (r.ctx || r.be) runner_free(&r);
    }
    unsetenv("EDGESPEC_CPU_KERNELS");
    CHECKF(ok, "%s: logits on both kernel levels", cc->name);
    double worst = 0, scale = 0;
    for (size_t i = 0; ok && i < (size_t)(N_SEQ * V); i++) {
        const double d = fabs((double)lv[0][i] - lv[1][i]);
        if (!(d <= worst)) worst = d;
        if (fabs(lv[0][i]) > scale) scale = fabs(lv[0][i]);
    }
    printf("%s: %s vs generic logits: max difference %.3g of %.3g%s\n", cc->name, es__kern_best()->name, worst, scale,
           exact ? " (must be 0)" : "");
    if (exact)
        CHECKF(!ok || memcmp(lv[0], lv[1], sizeof(float) * (size_t)(N_SEQ * V)) == 0,
               "%s: neon and generic logits differ (by up to %.3g)", cc->name, worst);
    else
        CHECKF(!ok || worst <= 1e-4 * scale, "%s: %s and generic logits differ by %.3g of %.3g", cc->name,
               es__kern_best()->name, worst, scale);
    free(lv[0]), free(lv[1]);
    mem_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++) run_case(&cases[i]);
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++) test_levels(&cases[i]);
    test_profile();
    TEST_MAIN_END();
}
