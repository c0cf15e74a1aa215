/* bench_model.c: `edgespec-vkbench model`: whole-model speed through the public API on either
 * backend: prefill (ppN: one forward call of N tokens), decode (tgN: N one-token calls with
 * commits), a verification tree (treeN: one call with an N-node tree vs a one-token call at the
 * same position), peak device memory, dispatches and submits per forward call, achieved weight
 * bandwidth. Medians over --reps runs; one JSON object per line on stdout; with --profile the
 * per-op device time of the decode runs goes to stderr as a table.
 * It deliberately measures only; correctness is the test suite's. */
#include "vkbench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Process CPU time (all threads), which a busy machine disturbs less than wall time. */
static double cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int fail(const char *what, es_status s) {
    fprintf(stderr, "vkbench model: %s: %s (%s)\n", what, es_last_error(), es_status_str(s));
    return 1;
}

/* Bytes of weights one decoded token reads: every matrix but the embedding table (one row). */
static uint64_t weight_bytes_per_token(const es_model *m, int32_t n_embd) {
    uint64_t total = 0, embd = 0;
    int32_t n = 0;
    es_model_info info;
    if (es_model_get_info(m, &info) != ES_OK) return 0;
    n = info.n_tensors;
    for (int32_t i = 0; i < n; i++) {
        es_tensor_info t;
        if (es_model_tensor_info(m, i, &t) != ES_OK) continue;
        if (strcmp(t.name, "token_embd.weight") == 0) {
            embd = t.nbytes;
            if (info.tied_output) total += t.nbytes; /* read in full as the output head */
            continue;
        }
        total += t.nbytes;
    }
    (void)embd;
    (void)n_embd;
    return total;
}

static int prefill_once(es_context *ctx, const int32_t *toks, int32_t n, double *ms) {
    es_status s = es_truncate(ctx, 0);
    if (s != ES_OK) return fail("truncate", s);
    es_batch b = {n, toks, NULL, NULL, NULL, NULL};
    const double t0 = now_ms();
    s = es_forward(ctx, &b);
    *ms = now_ms() - t0;
    if (s != ES_OK) return fail("prefill forward", s);
    return 0;
}

static int decode_run(es_context *ctx, const int32_t *toks, int32_t n_prompt, int32_t n, double *ms, double *cpu) {
    es_status s = es_truncate(ctx, 0);
    es_batch b = {n_prompt, toks, NULL, NULL, NULL, NULL};
    if (s == ES_OK) s = es_forward(ctx, &b);
    if (s == ES_OK) s = es_commit(ctx, NULL, 0);
    if (s != ES_OK) return fail("decode prompt", s);
    const double t0 = now_ms(), c0 = cpu_ms();
    for (int32_t i = 0; i < n && s == ES_OK; i++) {
        es_batch one = {1, &toks[(n_prompt + i) % 64], NULL, NULL, NULL, NULL};
        s = es_forward(ctx, &one);
        if (s == ES_OK) s = es_commit(ctx, NULL, 0);
    }
    *ms = now_ms() - t0;
    if (cpu) *cpu = cpu_ms() - c0;
    if (s != ES_OK) return fail("decode", s);
    return 0;
}

/* A bushy tree of n nodes in pre-order: node j's parent is (j - 1) / 2 relabelled... simpler:
 * a binary heap shape flattened depth-first. Fills dfs_end and pos. */
static int32_t build_tree(int32_t n, int32_t *st, int32_t *en) {
    /* heap children of i: 2i+1, 2i+2; pre-order numbering by an explicit stack */
    int32_t *order = malloc(sizeof *order * (size_t)n), *stack = malloc(sizeof *stack * (size_t)n);
    int32_t *pre = malloc(sizeof *pre * (size_t)n), *sz = malloc(sizeof *sz * (size_t)n);
    int32_t top = 0, k = 0, depth_max = 0;
    stack[top++] = 0;
    while (top) {
        int32_t h = stack[--top];
        pre[h] = k;
        order[k++] = h;
        if (2 * h + 2 < n) stack[top++] = 2 * h + 2;
        if (2 * h + 1 < n) stack[top++] = 2 * h + 1;
    }
    for (int32_t h = n - 1; h >= 0; h--) {
        sz[h] = 1 + (2 * h + 1 < n ? sz[2 * h + 1] : 0) + (2 * h + 2 < n ? sz[2 * h + 2] : 0);
        int32_t d = 0;
        for (int32_t x = h; x > 0; x = (x - 1) / 2) d++;
        if (d > depth_max) depth_max = d;
    }
    for (int32_t j = 0; j < n; j++) {
        st[j] = j;
        en[j] = j + sz[order[j]] - 1;
    }
    free(order), free(stack), free(pre), free(sz);
    return depth_max;
}

static int tree_runs(es_context *ctx, const int32_t *toks, int32_t n_prompt, int32_t n, int reps, double *tree_ms,
                     double *one_ms) {
    int32_t *st = malloc(sizeof *st * (size_t)n), *en = malloc(sizeof *en * (size_t)n);
    build_tree(n, st, en);
    es_status s = es_truncate(ctx, 0);
    es_batch b = {n_prompt, toks, NULL, NULL, NULL, NULL};
    if (s == ES_OK) s = es_forward(ctx, &b);
    if (s == ES_OK) s = es_commit(ctx, NULL, 0);
    double *t = malloc(sizeof *t * (size_t)reps), *o = malloc(sizeof *o * (size_t)reps);
    uint8_t *want = malloc((size_t)n);
    memset(want, 1, (size_t)n);
    for (int r = 0; r < reps && s == ES_OK; r++) {
        es_batch tb = {n, toks, NULL, st, en, want};
        double t0 = now_ms();
        s = es_forward(ctx, &tb);
        t[r] = now_ms() - t0;
        es_batch ob = {1, toks, NULL, NULL, NULL, NULL};
        t0 = now_ms();
        if (s == ES_OK) s = es_forward(ctx, &ob);
        o[r] = now_ms() - t0;
    }
    if (s == ES_OK) {
        *tree_ms = median(t, reps);
        *one_ms = median(o, reps);
    }
    free(st), free(en), free(t), free(o), free(want);
    return s == ES_OK ? 0 : fail("tree forward", s);
}

int vkbench_model(const vkbench_opts *o) {
    es_model *m = NULL;
    es_status s = es_model_load(o->model, NULL, &m);
    if (s != ES_OK) return fail("load", s);
    es_model_info info;
    es_model_get_info(m, &info);
    es_backend_params bp = es_backend_default_params();
    bp.type = o->vulkan ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    bp.n_threads = o->threads;
    bp.device = o->device;
    bp.vk_flags = o->vk_flags;
    bp.profile = o->profile;
    es_backend *b = NULL;
    s = es_backend_create(&bp, &b);
    if (s != ES_OK) {
        es_model_free(m);
        return fail("backend", s);
    }
    int32_t max_pp = 64;
    for (int i = 0; i < o->n_pp; i++) max_pp = o->pp[i] > max_pp ? o->pp[i] : max_pp;
    es_context_params cp = es_context_default_params();
    cp.backend = b;
    cp.n_ctx = 2048;
    cp.n_batch = max_pp;
    es_context *ctx = NULL;
    double t_up = now_ms();
    s = es_context_create(m, &cp, &ctx);
    t_up = now_ms() - t_up;
    int rc = s == ES_OK ? 0 : fail("context", s);
    int32_t *toks = malloc(sizeof *toks * (size_t)(max_pp + 64));
    for (int32_t i = 0; i < max_pp + 64; i++) toks[i] = (int32_t)((i * 7919u + 13u) % (uint32_t)info.n_vocab);
    const char *be = o->vulkan ? "vulkan" : "cpu";
    printf("{\"model\": \"%s\", \"backend\": \"%s\", \"device\": \"%s\", \"flags\": \"%s\", \"threads\": %d, "
           "\"n_params\": %llu, \"weight_bytes\": %llu, \"setup_ms\": %.1f}\n",
           o->model, be, es_backend_name(b), o->flags ? o->flags : "", o->threads, (unsigned long long)info.n_params,
           (unsigned long long)info.weight_bytes, t_up);
    double *runs = malloc(sizeof *runs * (size_t)(o->reps + 1));
    for (int i = 0; rc == 0 && i < o->n_pp; i++) {
        double warm;
        rc = prefill_once(ctx, toks, o->pp[i], &warm); /* records this shape's command buffer */
        for (int r = 0; rc == 0 && r < o->reps; r++) rc = prefill_once(ctx, toks, o->pp[i], &runs[r]);
        if (rc == 0) {
            double med = median(runs, o->reps);
            printf("{\"test\": \"pp%d\", \"backend\": \"%s\", \"ms_median\": %.2f, \"tokens_per_s\": %.2f}\n", o->pp[i],
                   be, med, o->pp[i] * 1e3 / med);
        }
    }
    es_backend_stats st0, st1;
    if (rc == 0 && o->tg > 0) {
        double warm;
        rc = decode_run(ctx, toks, 8, 2, &warm, NULL);
        es_backend_get_stats(b, &st0);
        es_backend_profile_reset(b);
        double *cpus = malloc(sizeof *cpus * (size_t)o->reps);
        for (int r = 0; rc == 0 && r < o->reps; r++) rc = decode_run(ctx, toks, 8, o->tg, &runs[r], &cpus[r]);
        es_backend_get_stats(b, &st1);
        if (rc == 0) {
            const double med = median(runs, o->reps), tps = o->tg * 1e3 / med;
            const uint64_t wb = weight_bytes_per_token(m, info.n_embd);
            const double calls = (double)st1.n_forward;
            printf("{\"test\": \"tg%d\", \"backend\": \"%s\", \"ms_median\": %.2f, \"tokens_per_s\": %.2f, "
                   "\"ms_per_token\": %.3f, \"cpu_ms_per_token\": %.3f, \"weight_bytes_per_token\": %llu, "
                   "\"weight_gb_s\": %.2f, \"dispatches_per_forward\": %.1f, \"submits_per_forward\": %.2f}\n",
                   o->tg, be, med, tps, med / o->tg, median(cpus, o->reps) / o->tg, (unsigned long long)wb,
                   (double)wb * tps / 1e9,
                   calls > 0 ? (double)st1.n_dispatches / calls : 0.0,
                   calls > 0 ? (double)st1.n_forward_submits / calls : 0.0);
        }
        free(cpus);
        if (rc == 0 && o->profile) {
            es_profile_entry e[32];
            size_t n = 0;
            es_backend_profile(b, e, 32, &n);
            double total = 0;
            for (size_t i = 0; i < n; i++) total += e[i].ms;
            fprintf(stderr, "%-18s %8s %10s %7s\n", "op", "calls", "total ms", "share");
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, "%-18s %8llu %10.2f %6.1f%%\n", e[i].op, (unsigned long long)e[i].calls, e[i].ms,
                        total > 0 ? 100.0 * e[i].ms / total : 0.0);
        }
    }
    if (rc == 0 && o->tree > 1 && o->tree <= max_pp) {
        double tree_ms = 0, one_ms = 0;
        rc = tree_runs(ctx, toks, 8, o->tree, o->reps, &tree_ms, &one_ms);
        if (rc == 0)
            printf("{\"test\": \"tree%d\", \"backend\": \"%s\", \"tree_ms\": %.2f, \"one_token_ms\": %.2f, "
                   "\"ratio\": %.3f}\n",
                   o->tree, be, tree_ms, one_ms, tree_ms / one_ms);
    }
    if (rc == 0) {
        es_backend_stats st;
        es_backend_get_stats(b, &st);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("{\"memory\": true, \"backend\": \"%s\", \"device_peak_bytes\": %llu, \"weight_device_bytes\": %llu, "
               "\"max_rss_bytes\": %llu}\n",
               be, (unsigned long long)st.device_peak_bytes, (unsigned long long)st.weight_bytes,
               (unsigned long long)ru.ru_maxrss * 1024ull);
    }
    free(runs);
    free(toks);
    es_context_free(ctx);
    es_backend_free(b);
    es_model_free(m);
    return rc;
}
