/* bench_tree_attention.c: tree attention with DFS intervals against the same kernel reading a
 * dense N x N ancestor mask, at N = 16 .. 4096 tree nodes over a committed KV cache: time per call
 * (median of repetitions) and the memory the tree structure takes. The dense-mask variants exist
 * only here, as the baselines; the library never builds a mask. JSON lines on stdout.
 *   cpu (default): a loop written here both ways, and the library's es__cpu_attention;
 *   vulkan: the library's attn.comp against attn.comp built with DENSE_MASK=1 (meson.build here),
 *           the mask after the step data; GPU work of reps calls in one submission. Both must give
 *           the same bits (the benchmark fails otherwise) and match es__cpu_attention: meson test
 *           runs it small as the test tree_attention_dense_vulkan.
 * Usage: bench_tree_attention [reps] [n_past] [n_head] [head_dim] [cpu|vulkan] */
#include "../common/bench_time.h"
#include "cpu/kern.h"
#include "cpu/ops.h"
#include "edgespec.h"
#if ES_BENCH_VULKAN
#include "../common/vk_pin.h"
#include "attn_dense_ss.spv.h"
#include "attn_dense_tx.spv.h"
#include "backend_vk.h"
#include "oprun.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    return bench_xorshift(&rng_state);
}

static double now(void) {
    return bench_now(CLOCK_MONOTONIC);
}

typedef struct geo {
    int32_t n, n_past, n_ctx, nh, hd;
    const float *q, *kc, *vc;
    const int32_t *st, *en; /* intervals */
    const uint8_t *mask;    /* [n][n] dense */
    float *out, *scores;
    int32_t *visible;
    const es__kern *k;
} geo;

/* One kernel, two ways to find a query's in-batch keys: the interval test or the mask row. The
 * rest (scores, softmax, weighted sum in slot order) is identical, so the difference is the cost
 * of the structure itself. */
static void attend(const geo *g, bool dense) {
    const int32_t hd = g->hd;
    for (int32_t j = 0; j < g->n; j++) {
        int32_t n_vis = 0;
        if (dense) {
            const uint8_t *row = g->mask + (size_t)j * (size_t)g->n;
            for (int32_t i = 0; i < g->n; i++)
                if (row[i]) g->visible[n_vis++] = i;
        } else {
            for (int32_t i = 0; i < g->n; i++)
                if (g->st[i] <= g->st[j] && g->en[j] <= g->en[i]) g->visible[n_vis++] = i;
        }
        for (int32_t h = 0; h < g->nh; h++) {
            const float *q = g->q + ((size_t)j * (size_t)g->nh + (size_t)h) * (size_t)hd;
            const float *kh = g->kc + (size_t)h * (size_t)g->n_ctx * (size_t)hd;
            const float *vh = g->vc + (size_t)h * (size_t)g->n_ctx * (size_t)hd;
            const int32_t m = g->n_past + n_vis;
            float mx = -INFINITY, sum = 0.0f;
            for (int32_t s = 0; s < m; s++) {
                int32_t slot = s < g->n_past ? s : g->n_past + g->visible[s - g->n_past];
                float sc = g->k->dot(q, kh + (size_t)slot * (size_t)hd, hd) / sqrtf((float)hd);
                g->scores[s] = sc;
                mx = sc > mx ? sc : mx;
            }
            float *o = g->out + ((size_t)j * (size_t)g->nh + (size_t)h) * (size_t)hd;
            memset(o, 0, sizeof(float) * (size_t)hd);
            for (int32_t s = 0; s < m; s++) {
                int32_t slot = s < g->n_past ? s : g->n_past + g->visible[s - g->n_past];
                float w = expf(g->scores[s] - mx);
                sum += w;
                g->k->axpy(o, w, vh + (size_t)slot * (size_t)hd, hd);
            }
            for (int32_t d = 0; d < hd; d++) o[d] /= sum;
        }
    }
}

#if ES_BENCH_VULKAN
/* Median ms per call of the Vulkan kernel, interval or dense; out gets its result. */
static double vk_time(es_backend *be, const geo *g, bool dense, int reps, float *out) {
    const bool texel = es__vk_run_texel(be);
    const es__shader_info sh = {texel ? "attn_dense_tx" : "attn_dense_ss", "attn", texel,
                                texel ? attn_dense_tx : attn_dense_ss,
                                texel ? sizeof attn_dense_tx : sizeof attn_dense_ss};
    double t[16];
    const int runs = 5;
    for (int i = 0; i < runs; i++) {
        es__vk_attn_bench bench = {dense ? &sh : NULL, dense ? g->mask : NULL, (uint32_t)reps, 0.0, 0, 0.0f};
        if (es__vk_run_attention_bench(be, g->q, g->kc, g->vc, (uint32_t)g->n_ctx, (uint32_t)g->nh, (uint32_t)g->nh,
                                       (uint32_t)g->hd, (uint32_t)g->n_past, (uint32_t)g->n, g->en,
                                       1.0f / sqrtf((float)g->hd), out, &bench) != ES_OK) {
            fprintf(stderr, "bench_tree_attention: %s\n", es_backend_errmsg(be));
            exit(1);
        }
        t[i] = bench.ms;
    }
    return bench_median(t, runs);
}
#endif

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    const int32_t n_past = argc > 2 ? atoi(argv[2]) : 256, nh = argc > 3 ? atoi(argv[3]) : 8,
                  hd = argc > 4 ? atoi(argv[4]) : 64;
    const bool vulkan = argc > 5 && strcmp(argv[5], "vulkan") == 0;
    es_backend *be = NULL;
    if (vulkan) {
#if ES_BENCH_VULKAN
        test_pin_vulkan();
        es_backend_params bp = es_backend_default_params();
        bp.type = ES_BACKEND_VULKAN;
        if (es_backend_create(&bp, &be) != ES_OK || !be) {
            fprintf(stderr, "bench_tree_attention: %s\n", es_last_error());
            return 1;
        }
        /* the dense baseline is attn.comp with a mask: compare it with attn.comp, also where the
         * device's profile picks the subgroup kernel (a GPU's; policy.c), whose sums round apart */
        es__vk_dev_of(be)->policy.attn_team = false;
#else
        fprintf(stderr, "bench_tree_attention: built without Vulkan\n");
        return 1;
#endif
    }
    const int32_t sizes[] = {16, 64, 256, 1024, 4096};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int32_t n = sizes[si], n_ctx = n_past + n;
        /* a speculation-like tree: wide and shallow (depth <= 8), each node under a random earlier
         * node that is not at the bottom yet */
        int32_t *parent = malloc(sizeof(int32_t) * (size_t)n), *order = malloc(sizeof(int32_t) * (size_t)n);
        int32_t *dep = malloc(sizeof(int32_t) * (size_t)n), *open_nodes = malloc(sizeof(int32_t) * (size_t)n), n_open = 0;
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *st = malloc(sizeof(int32_t) * (size_t)n);
        int32_t *en = malloc(sizeof(int32_t) * (size_t)n), *row_of = malloc(sizeof(int32_t) * (size_t)n);
        for (int32_t i = 0; i < n; i++) {
            parent[i] = i == 0 ? -1 : open_nodes[rnd() % (uint64_t)n_open];
            dep[i] = i == 0 ? 0 : dep[parent[i]] + 1;
            if (dep[i] < 8) open_nodes[n_open++] = i;
        }
        if (es_tree_flatten(parent, n, n_past, order, pos, st, en) != ES_OK) return 1;
        for (int32_t r = 0; r < n; r++) row_of[order[r]] = r;
        uint8_t *mask = calloc((size_t)n * (size_t)n, 1);
        for (int32_t r = 0; r < n; r++)
            for (int32_t v = order[r]; v >= 0; v = parent[v]) mask[(size_t)r * (size_t)n + (size_t)row_of[v]] = 1;
        int32_t depth = 0;
        for (int32_t r = 0; r < n; r++) depth = pos[r] - n_past > depth ? pos[r] - n_past : depth;
        const size_t qn = (size_t)n * (size_t)nh * (size_t)hd, cn = (size_t)nh * (size_t)n_ctx * (size_t)hd;
        float *q = malloc(sizeof(float) * qn), *kc = malloc(sizeof(float) * cn), *vc = malloc(sizeof(float) * cn);
        for (size_t i = 0; i < qn; i++) q[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
        for (size_t i = 0; i < cn; i++) kc[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f, vc[i] = kc[i] * 0.5f;
        float *out = malloc(sizeof(float) * qn), *out2 = malloc(sizeof(float) * qn), *out3 = malloc(sizeof(float) * qn);
        float *scores = malloc(sizeof(float) * (size_t)n_ctx);
        int32_t *visible = malloc(sizeof(int32_t) * (size_t)n);
        geo g = {n, n_past, n_ctx, nh, hd, q, kc, vc, st, en, mask, out, scores, visible, es__kern_best()};
        if (vulkan) {
#if ES_BENCH_VULKAN
            es__err err;
            if (es__cpu_attention(NULL, q, kc, vc, n_ctx, nh, nh, hd, n_past, n, st, en, 1.0f / sqrtf((float)hd), out3,
                                  &err) != ES_OK)
                return 1;
            const double ms_int = vk_time(be, &g, false, reps, out), ms_dense = vk_time(be, &g, true, reps, out2);
            double worst = 0.0;
            for (size_t i = 0; i < qn; i++) /* a NaN in both variants must not pass as agreement */
                worst = fmax(worst, isfinite(out[i]) ? fabs((double)out[i] - (double)out3[i]) : INFINITY);
            if (memcmp(out, out2, sizeof(float) * qn) != 0 || !(worst < 1e-4)) {
                fprintf(stderr, "n %d: the Vulkan variants disagree (or differ from the CPU by %g)\n", n, worst);
                return 1;
            }
            printf("{\"backend\": \"%s\", \"n\": %d, \"depth\": %d, \"n_past\": %d, \"n_head\": %d, "
                   "\"head_dim\": %d, \"reps\": %d, \"interval_ms\": %.4f, \"dense_ms\": %.4f, "
                   "\"max_abs_diff_vs_cpu\": %.2e, \"interval_bytes\": %zu, \"dense_mask_bytes\": %zu}\n",
                   es_backend_name(be), n, depth, n_past, nh, hd, reps, ms_int, ms_dense, worst,
                   (size_t)n * sizeof(int32_t), (size_t)n * (size_t)n);
            fflush(stdout);
#endif
            free(parent), free(order), free(pos), free(st), free(en), free(row_of), free(mask);
            free(q), free(kc), free(vc), free(out), free(out2), free(out3), free(dep), free(open_nodes), free(scores),
                free(visible);
            continue;
        }
        double t_int[64], t_dense[64], t_lib[64];
        int r_n = reps < 64 ? reps : 64;
        for (int r = 0; r < r_n; r++) {
            double t0 = now();
            attend(&g, false);
            double t1 = now();
            g.out = out2;
            attend(&g, true);
            double t2 = now();
            g.out = out;
            es__err err;
            if (es__cpu_attention(NULL, q, kc, vc, n_ctx, nh, nh, hd, n_past, n, st, en, 1.0f / sqrtf((float)hd), out3,
                                  &err) != ES_OK)
                return 1;
            double t3 = now();
            t_int[r] = t1 - t0, t_dense[r] = t2 - t1, t_lib[r] = t3 - t2;
        }
        if (memcmp(out, out2, sizeof(float) * qn) != 0) fprintf(stderr, "n %d: variants disagree\n", n);
        printf("{\"n\": %d, \"depth\": %d, \"n_past\": %d, \"n_head\": %d, \"head_dim\": %d, \"reps\": %d, "
               "\"interval_ms\": %.4f, \"dense_ms\": %.4f, \"library_ms\": %.4f, "
               "\"interval_bytes\": %zu, \"dense_mask_bytes\": %zu}\n",
               n, depth, n_past, nh, hd, r_n, 1e3 * bench_median(t_int, r_n), 1e3 * bench_median(t_dense, r_n), 1e3 * bench_median(t_lib, r_n),
               (size_t)n * 2 * sizeof(int32_t), (size_t)n * (size_t)n);
        fflush(stdout);
        free(parent), free(order), free(pos), free(st), free(en), free(row_of), free(mask);
        free(q), free(kc), free(vc), free(out), free(out2), free(out3), free(dep), free(open_nodes), free(scores), free(visible);
    }
    es_backend_stats bs;
    if (be && (es_backend_get_stats(be, &bs) != ES_OK || bs.validation_messages != 0)) {
        fprintf(stderr, "bench_tree_attention: Vulkan validation messages (see the log)\n");
        return 1;
    }
    es_backend_free(be);
    return 0;
}
