/* bench_spec_call.c: where the time of a speculative step goes, per forward call, on a model and
 * backend: a one-token decode call, verification calls of bushy trees of N nodes, plain and
 * with every node's γ streams asked (the adapter's γ; lazily, as the strategy asks: the CPU runs
 * the last node's after the call, Vulkan runs small batches' streams inside the call and larger
 * ones' as a pass after it), with the early exit too (pruning nothing, and pruning every node
 * below the root), and the stream pass of one node after a 9-token batch (too many stream rows to
 * ride in the call on Vulkan). Medians of repetitions,
 * JSON lines on stdout. Usage:
 *   bench_spec_call MODEL.gguf [ADAPTER.ss.gguf] [cpu|vulkan] [threads] [reps] [n_past]
 * EDGESPEC_VKBENCH_CPU_TIME=1 times process CPU time instead of wall time (now_ms);
 * EDGESPEC_BENCH_MM_TILE=N sets the Vulkan device's matrix tile (policy.h mm_tile_tokens; 0 = one
 * pass per workgroup) to compare the small-batch passes with the one-pass kernel on one device;
 * EDGESPEC_BENCH_ATTN_SPLIT=N its attention split (attn_split: 16, 32, 64, 128 or 256 keys) and
 * EDGESPEC_BENCH_ATTN_TEAM=1 a subgroup per split (attn_team); EDGESPEC_BENCH_LANE_UNITS=N gives a weight
 * row a team only with N units per lane (team_lane_units; 0 = a team however few).
 * EDGESPEC_BENCH_PROFILE=1 turns on the backend's profile and prints each plain forward's per-op
 * time (ms per call) to stderr. EDGESPEC_BENCH_PAIRED=1 times instead, for each tree of 2, 4, 5 and
 * 8 nodes, a one-token call and the tree's call back to back, reps times, and prints the median of
 * their ratios: on a shared machine both sides of each ratio see the same load.
 * EDGESPEC_BENCH_RIDE=1 (CPU) times streams riding in the call against the stream pass (ride()). */
#include "../common/bench_time.h"
#include "cpu/msa.h"
#include "edgespec.h"
#include "forward_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef ES_BENCH_VULKAN
#include "backend_vk.h"
#include "ops.h"
#endif

/* The backend's info messages (the device's tuning, what a context measured) go to stderr. */
static void log_cb(es_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    fprintf(stderr, "bench_spec_call: %s\n", msg);
}

/* Wall time, or with EDGESPEC_VKBENCH_CPU_TIME set the process's CPU time (as the op runner's
 * switch): on a loaded machine, with LP_NUM_THREADS=0 (lavapipe running every dispatch on the
 * calling thread) or one CPU thread, that is the call's own work. */
static double now_ms(void) {
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("EDGESPEC_VKBENCH_CPU_TIME") != NULL;
    return 1e3 * bench_now(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC);
}

/* The plain forward's per-op time of the last reps calls, ms per call (the mean, from the sums). */
static void print_profile(es_backend *be, int32_t nodes, int reps) {
    es_profile_entry e[32];
    size_t n = 0;
    if (es_backend_profile(be, e, 32, &n) != ES_OK) return;
    double total = 0.0;
    fprintf(stderr, "profile %2d nodes:", nodes);
    for (size_t i = 0; i < n; i++) {
        fprintf(stderr, " %s %.3f", e[i].op, e[i].ms / reps);
        total += e[i].ms / reps;
    }
    fprintf(stderr, " | sum %.3f ms\n", total);
}

/* A GPU's clocks rise under load over a fraction of a second: on the H100 the first repetition
 * of edgespec-bench decoded at 60-70% of the rate, and bench_spec_call's first sizes on 853m came
 * out slower than later, larger ones (docs/perf.md, "Real GPU, third run"). Half a second of
 * one-token calls first; the last one's token stays provisional and the next call replaces it. */
static bool warm_up(es_context *ctx, double ms) {
    int32_t tok = 5;
    es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
    for (const double t0 = now_ms(); now_ms() - t0 < ms;)
        if (es_forward(ctx, &b) != ES_OK) {
            fprintf(stderr, "bench_spec_call: warm-up: %s\n", es_context_errmsg(ctx));
            return false;
        }
    return true;
}

/* A bushy tree of n nodes (node i's parent (i - 1) / 3) at n_past, flattened in pre-order. */
static void bushy_tree(int32_t n, int n_past, const es_model_info *info, int32_t *pos, int32_t *st, int32_t *en,
                       int32_t *toks) {
    int32_t parent[64], order[64];
    for (int32_t i = 0; i < n; i++) parent[i] = i == 0 ? -1 : (i - 1) / 3;
    es_tree_flatten(parent, n, n_past, order, pos, st, en);
    for (int32_t i = 0; i < n; i++) toks[i] = 1 + (order[i] * 11) % (info->n_vocab - 1);
}

/* EDGESPEC_BENCH_PAIRED: each tree's call against a one-token call made just before it. */
static bool paired(es_context *ctx, const es_model_info *info, int n_past, int reps, double *ratio) {
    const int32_t sizes[] = {2, 4, 5, 8};
    double *one = malloc(sizeof(double) * (size_t)reps), *tree = malloc(sizeof(double) * (size_t)reps);
    bool ok = one && tree;
    int32_t tok = 5;
    es_batch b1 = {1, &tok, NULL, NULL, NULL, NULL};
    for (size_t si = 0; ok && si < sizeof sizes / sizeof *sizes; si++) {
        const int32_t n = sizes[si];
        int32_t pos[64], st[64], en[64], toks[64];
        bushy_tree(n, n_past, info, pos, st, en, toks);
        uint8_t all[64];
        memset(all, 1, sizeof all); /* every node's logits, as verification asks */
        es_batch b = {n, toks, pos, st, en, all};
        for (int r = 0; ok && r < reps + 2; r++) {
            const double t0 = now_ms();
            ok = es_forward(ctx, &b1) == ES_OK;
            const double t1 = now_ms();
            ok = ok && es_forward(ctx, &b) == ES_OK;
            const double t2 = now_ms();
            if (r < 2) continue;
            one[r - 2] = t1 - t0;
            tree[r - 2] = t2 - t1;
            ratio[r - 2] = (t2 - t1) / (t1 - t0);
        }
        if (!ok) {
            fprintf(stderr, "bench_spec_call: %s\n", es_context_errmsg(ctx));
            break;
        }
        printf("{\"call\": \"paired\", \"n_past\": %d, \"tree_nodes\": %d, \"median_ratio\": %.3f, "
               "\"one_token_median_ms\": %.3f, \"tree_median_ms\": %.3f}\n",
               n_past, n, bench_median(ratio, reps), bench_median(one, reps), bench_median(tree, reps));
        fflush(stdout);
    }
    if (!one || !tree) fprintf(stderr, "bench_spec_call: out of memory\n");
    free(one);
    free(tree);
    return ok;
}

/* EDGESPEC_BENCH_RIDE (CPU): what a step needs from a tree of n nodes with every stream, the call
 * and the last node's streams, with the streams riding in the call (msa_fused.c) against the
 * stream pass after it (of one stream and of all), alternated reps times; medians in ms. */
static bool ride(es_context *ctx, const es_model_info *info, int n_past, int reps, int32_t G) {
    const int32_t sizes[] = {1, 2, 3, 4, 5, 8, 16};
    double *t[3];
    bool ok = true;
    for (int k = 0; k < 3; k++) ok = (t[k] = malloc(sizeof(double) * (size_t)reps)) != NULL && ok;
    for (size_t si = 0; ok && si < sizeof sizes / sizeof *sizes; si++) {
        const int32_t n = sizes[si];
        int32_t pos[64], st[64], en[64], toks[64];
        bushy_tree(n, n_past, info, pos, st, en, toks);
        uint8_t all[64];
        memset(all, 1, sizeof all);
        es_batch b = {n, toks, pos, st, en, all};
        for (int r = 0; ok && r < reps + 1; r++)
            for (int k = 0; ok && k < 3; k++) { /* riding, a pass of one stream, a pass of all */
                es__msa_set_fuse_rows(ctx, k == 0 ? 1 << 20 : 0);
                const float *sl = NULL;
                const double t0 = now_ms();
                ok = es__forward(ctx, &b, &(es__call){G, 0.0f}) == ES_OK &&
                     es__stream_logits(ctx, n - 1, k == 1 ? 1 : G, &sl) == ES_OK;
                if (r > 0) t[k][r - 1] = now_ms() - t0;
            }
        if (ok)
            printf("{\"call\": \"ride\", \"n_past\": %d, \"tree_nodes\": %d, \"stream_rows\": %d, \"riding_ms\": %.3f, "
                   "\"pass1_ms\": %.3f, \"pass_all_ms\": %.3f}\n",
                   n_past, n, n * G, bench_median(t[0], reps), bench_median(t[1], reps), bench_median(t[2], reps));
        fflush(stdout);
    }
    if (!ok) fprintf(stderr, "bench_spec_call: %s\n", es_context_errmsg(ctx));
    for (int k = 0; k < 3; k++) free(t[k]);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_spec_call MODEL.gguf [ADAPTER.ss.gguf|-] [cpu|vulkan] [threads] [reps] [n_past]\n");
        return 2;
    }
    const char *adapter = argc > 2 && strcmp(argv[2], "-") != 0 ? argv[2] : NULL;
    const bool vk = argc > 3 && strcmp(argv[3], "vulkan") == 0;
    const int threads = argc > 4 ? atoi(argv[4]) : 2, reps = argc > 5 ? atoi(argv[5]) : 15;
    const int n_past = argc > 6 ? atoi(argv[6]) : 64;
    es_model *m = NULL;
    if (es_model_load(argv[1], NULL, &m) != ES_OK || (adapter && es_model_load_adapter(m, adapter) != ES_OK)) {
        fprintf(stderr, "bench_spec_call: %s\n", m ? es_model_errmsg(m) : es_last_error());
        return 1;
    }
    es_backend_params bp = es_backend_default_params();
    bp.type = vk ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    bp.n_threads = threads;
    bp.log_fn = log_cb;
    bp.log_level = ES_LOG_INFO;
    const bool prof = getenv("EDGESPEC_BENCH_PROFILE") != NULL;
    bp.profile = prof;
    es_backend *be = NULL;
    es_context *ctx = NULL;
    es_context_params cp = es_context_default_params();
    cp.n_ctx = n_past + 600;
    if (es_backend_create(&bp, &be) != ES_OK) return 1;
#ifdef ES_BENCH_VULKAN
    if (vk && getenv("EDGESPEC_BENCH_MM_TILE")) {
        es__vk_dev_of(be)->policy.mm_tile_tokens = (uint32_t)atoi(getenv("EDGESPEC_BENCH_MM_TILE"));
        fprintf(stderr, "bench_spec_call: matrix tile %u rows\n", es__vk_dev_of(be)->policy.mm_tile_tokens);
    }
    if (vk && getenv("EDGESPEC_BENCH_ATTN_SPLIT")) {
        const uint32_t split = (uint32_t)atoi(getenv("EDGESPEC_BENCH_ATTN_SPLIT"));
        if (split < 16 || split > 256 || (split & (split - 1))) {
            fprintf(stderr, "bench_spec_call: EDGESPEC_BENCH_ATTN_SPLIT must be 16, 32, 64, 128 or 256\n");
            return 2;
        }
        es__vk_dev_of(be)->policy.attn_split = split;
        fprintf(stderr, "bench_spec_call: attention split %u keys\n", split);
    }
    if (vk && getenv("EDGESPEC_BENCH_ATTN_TEAM")) {
        es__vk_dev_of(be)->policy.attn_team = atoi(getenv("EDGESPEC_BENCH_ATTN_TEAM")) != 0;
        fprintf(stderr, "bench_spec_call: attention by %s\n", es__vk_attn_team(es__vk_dev_of(be)) ? "subgroups" : "invocations");
    }
    if (vk && getenv("EDGESPEC_BENCH_MV_ROWS")) {
        es__vk_dev_of(be)->policy.mv_rows = (uint32_t)atoi(getenv("EDGESPEC_BENCH_MV_ROWS"));
        fprintf(stderr, "bench_spec_call: %u rows per team in one-token calls\n", es__vk_dev_of(be)->policy.mv_rows);
    }
    if (vk && getenv("EDGESPEC_BENCH_NORM_WG")) {
        es__vk_dev_of(be)->policy.norm_wg = (uint32_t)atoi(getenv("EDGESPEC_BENCH_NORM_WG"));
        fprintf(stderr, "bench_spec_call: rmsnorm workgroups of %u\n", es__vk_dev_of(be)->policy.norm_wg);
    }
    if (vk && getenv("EDGESPEC_BENCH_LANE_UNITS")) { /* before the context uploads the weights */
        es__vk_dev_of(be)->policy.team_lane_units = (uint32_t)atoi(getenv("EDGESPEC_BENCH_LANE_UNITS"));
        fprintf(stderr, "bench_spec_call: teams from %u units per lane\n", es__vk_dev_of(be)->policy.team_lane_units);
    }
#endif
    cp.backend = be;
    if (es_context_create(m, &cp, &ctx) != ES_OK) {
        fprintf(stderr, "bench_spec_call: %s\n", es_last_error());
        return 1;
    }
    es_model_info info;
    es_model_get_info(m, &info);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_past);
    for (int i = 0; i < n_past; i++) prompt[i] = 1 + (i * 37) % (info.n_vocab - 1);
    /* in chunks of the context's default n_batch (512): a longer batch is refused */
    for (int i = 0; i < n_past; i += 512) {
        es_batch pre = {n_past - i < 512 ? n_past - i : 512, prompt + i, NULL, NULL, NULL, NULL};
        if (es_forward(ctx, &pre) != ES_OK || es_commit(ctx, NULL, 0) != ES_OK) {
            fprintf(stderr, "bench_spec_call: prompt: %s\n", es_context_errmsg(ctx));
            return 1;
        }
    }
    const int32_t sizes[] = {1, 2, 4, 5, 8, 16, 32, 64};
    int32_t G = 0; /* the adapter's streams: the most a forward accepts */
    for (G = adapter ? 16 : 0; G > 0; G--) {
        int32_t tok = 5;
        es_batch b1 = {1, &tok, NULL, NULL, NULL, NULL};
        if (es__forward(ctx, &b1, &(es__call){G, 0.0f}) == ES_OK) break;
    }
    uint8_t all[64];
    memset(all, 1, sizeof all);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (getenv("EDGESPEC_BENCH_RIDE")) {
        const int ok = !vk && G > 0 && ride(ctx, &info, n_past, reps, G);
        if (vk || !G) fprintf(stderr, "bench_spec_call: EDGESPEC_BENCH_RIDE is for the CPU backend with an adapter\n");
        return ok ? 0 : 1;
    }
    if (!warm_up(ctx, 500.0)) return 1;
    const bool pair = getenv("EDGESPEC_BENCH_PAIRED") != NULL;
    const int rc = pair && !paired(ctx, &info, n_past, reps, t) ? 1 : 0;
    for (size_t si = 0; !pair && si < sizeof sizes / sizeof *sizes; si++) {
        const int32_t n = sizes[si];
        /* a bushy tree: node i's parent is (i - 1) / 3, laid out in pre-order */
        int32_t parent[64], order[64], pos[64], st[64], en[64], toks[64];
        for (int32_t i = 0; i < n; i++) parent[i] = i == 0 ? -1 : (i - 1) / 3;
        es_tree_flatten(parent, n, n_past, order, pos, st, en);
        for (int32_t i = 0; i < n; i++) toks[i] = 1 + (order[i] * 11) % (info.n_vocab - 1);
        for (int mode = 0; mode < (adapter ? 4 : 1); mode++) {
            /* mode 0: plain forward; 1: with γ streams; 2: streams + pruning (threshold 1e-9: the
             * early exit, nothing pruned); 3: streams + pruning of every node below the root
             * (threshold 1): together, what a pruning call adds and what a pruned node saves */
            es_batch b = {n, toks, pos, st, en, all};
            for (int r = 0; r < reps + 2; r++) {
                if (prof && r == 2) es_backend_profile_reset(be);
                double t0 = now_ms();
                es_status s = mode == 0 ? es_forward(ctx, &b)
                                        : es__forward(ctx, &b, &(es__call){G, mode == 3 ? 1.0f : mode == 2 ? 1e-9f : 0.0f});
                if (s != ES_OK) {
                    fprintf(stderr, "bench_spec_call: %s\n", es_context_errmsg(ctx));
                    return 1;
                }
                if (r >= 2) t[r - 2] = now_ms() - t0;
            }
            printf("{\"backend\": \"%s\", \"n_past\": %d, \"call\": \"%s\", \"tree_nodes\": %d, \"median_ms\": %.3f}\n",
                   es_backend_name(be), n_past,
                   mode == 0 ? "forward" : mode == 1 ? "forward+streams" : mode == 2 ? "forward+streams+early_exit"
                                                                                     : "forward+streams+all_pruned",
                   n, bench_median(t, reps));
            fflush(stdout);
            if (prof && mode == 0) print_profile(be, n, reps);
        }
    }
    if (adapter && !pair) {
        /* the stream pass of one node (its first g streams, g = 1..the adapter's) plus their logits */
        int32_t chain[9];
        for (int i = 0; i < 9; i++) chain[i] = 5 + i;
        es_batch b = {9, chain, NULL, NULL, NULL, NULL};
        for (int32_t g = 1; g <= G; g++) {
            for (int r = 0; r < reps + 2; r++) {
                es__forward(ctx, &b, &(es__call){G, 0.0f});
                const float *sl = NULL;
                double t0 = now_ms();
                if (es__stream_logits(ctx, 8, g, &sl) != ES_OK) return 1;
                if (r >= 2) t[r - 2] = now_ms() - t0;
            }
            printf("{\"backend\": \"%s\", \"n_past\": %d, \"call\": \"stream_pass\", \"streams\": %d, \"median_ms\": %.3f}\n",
                   es_backend_name(be), n_past, g, bench_median(t, reps));
        }
    }
    free(t);
    free(prompt);
    es_context_free(ctx);
    es_backend_free(be);
    es_model_free(m);
    return rc;
}
