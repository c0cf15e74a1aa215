/* test_tree_attention.c: tree attention with DFS intervals (FlashSpecInfer 5.1) on large trees:
 * random trees, forests, chains, stars and single nodes up to 4096 nodes, odd sizes, laid out by
 * es_tree_flatten, against a dense N x N ancestor mask built here only, as the reference, over a
 * KV cache with committed slots. Also: thread counts give the same bits, and every output is
 * written (poisoned outputs). */
#include "cpu/ops.h"

#include "../test.h"

#include <math.h>

static test_rng rng = {2024};

static float *rand_vec(size_t n, float amp) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = amp * test_rng_uniform(&rng);
    return v;
}

enum shape { RANDOM, DEEP, FOREST, CHAIN, STAR };

/* Parent links (labels shuffled) of the given shape. */
static void make_parents(int32_t n, enum shape sh, int32_t *parent) {
    int32_t *raw = malloc(sizeof(int32_t) * (size_t)n), *perm = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        int32_t lo = sh == DEEP ? (i > 4 ? i - 4 : 0) : 0;
        if (i == 0 || (sh == FOREST && test_rng_u64(&rng) % 16 == 0)) raw[i] = -1;
        else if (sh == CHAIN) raw[i] = i - 1;
        else if (sh == STAR) raw[i] = 0;
        else raw[i] = lo + (int32_t)(test_rng_u64(&rng) % (uint64_t)(i - lo));
        perm[i] = i;
    }
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)(test_rng_u64(&rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int32_t i = 0; i < n; i++) parent[perm[i]] = raw[i] < 0 ? -1 : perm[raw[i]];
    free(raw);
    free(perm);
}

static void check_case(int32_t n, enum shape sh, int32_t n_past, int32_t nh, int32_t nkv, int32_t hd, es__pool *pool) {
    const int32_t n_ctx = n_past + n + 5;
    int32_t *parent = calloc((size_t)n, sizeof(int32_t)), *order = calloc((size_t)n, sizeof(int32_t));
    int32_t *pos = calloc((size_t)n, sizeof(int32_t)), *st = calloc((size_t)n, sizeof(int32_t));
    int32_t *en = calloc((size_t)n, sizeof(int32_t)), *row_of = calloc((size_t)n, sizeof(int32_t));
    make_parents(n, sh, parent);
    CHECK_OK(es_tree_flatten(parent, n, n_past, order, pos, st, en));
    for (int32_t r = 0; r < n; r++) row_of[order[r]] = r;
    /* the dense reference mask, rows = queries, from parent links alone */
    uint8_t *mask = calloc((size_t)n * (size_t)n, 1);
    for (int32_t r = 0; r < n; r++)
        for (int32_t v = order[r]; v >= 0; v = parent[v]) mask[(size_t)r * (size_t)n + (size_t)row_of[v]] = 1;
    const size_t qn = (size_t)n * (size_t)nh * (size_t)hd, cn = (size_t)nkv * (size_t)n_ctx * (size_t)hd;
    float *q = rand_vec(qn, 2.0f), *kc = rand_vec(cn, 2.0f), *vc = rand_vec(cn, 1.0f);
    float *out = malloc(sizeof(float) * qn), *out1 = malloc(sizeof(float) * qn);
    for (size_t i = 0; i < qn; i++) out[i] = out1[i] = NAN;
    es__err err;
    const float scale = 1.0f / sqrtf((float)hd);
    CHECK_OK(es__cpu_attention(pool, q, kc, vc, n_ctx, nh, nkv, hd, n_past, n, st, en, scale, out, &err));
    CHECK_OK(es__cpu_attention(NULL, q, kc, vc, n_ctx, nh, nkv, hd, n_past, n, st, en, scale, out1, &err));
    CHECKF(memcmp(out, out1, sizeof(float) * qn) == 0, "n %d shape %d: thread counts give different bits", n, sh);
    double worst = 0.0;
    double *s = malloc(sizeof(double) * (size_t)(n_past + n)), o[128];
    for (int32_t j = 0; j < n; j++) {
        for (int32_t h = 0; h < nh; h++) {
            const int32_t g = h / (nh / nkv);
            const float *qj = q + ((size_t)j * (size_t)nh + (size_t)h) * (size_t)hd;
            double mx = -INFINITY, sum = 0.0;
            for (int32_t sl = 0; sl < n_past + n; sl++) {
                s[sl] = -INFINITY;
                if (sl >= n_past && !mask[(size_t)j * (size_t)n + (size_t)(sl - n_past)]) continue;
                const float *k = kc + ((size_t)g * (size_t)n_ctx + (size_t)sl) * (size_t)hd;
                double d = 0.0;
                for (int32_t e = 0; e < hd; e++) d += (double)qj[e] * (double)k[e];
                s[sl] = d * scale;
                mx = s[sl] > mx ? s[sl] : mx;
            }
            for (int32_t e = 0; e < hd; e++) o[e] = 0.0;
            for (int32_t sl = 0; sl < n_past + n; sl++) {
                if (s[sl] == -INFINITY) continue;
                double w = exp(s[sl] - mx);
                sum += w;
                const float *v = vc + ((size_t)g * (size_t)n_ctx + (size_t)sl) * (size_t)hd;
                for (int32_t e = 0; e < hd; e++) o[e] += w * (double)v[e];
            }
            for (int32_t e = 0; e < hd; e++) {
                double got = out[((size_t)j * (size_t)nh + (size_t)h) * (size_t)hd + (size_t)e];
                double e1 = fabs(got - o[e] / sum);
                if (!(e1 <= worst)) worst = e1; /* NaN (unwritten) sticks */
            }
        }
    }
    CHECKF(worst < 2e-6, "n %d shape %d n_past %d: max abs err %g vs the dense-mask reference", n, sh, n_past, worst);
    free(parent), free(order), free(pos), free(st), free(en), free(row_of), free(mask);
    free(q), free(kc), free(vc), free(out), free(out1), free(s);
}

int main(void) {
    es__err err;
    es__pool *pool;
    CHECK_OK(es__pool_create(NULL, 3, -1, &err, &pool));
    const int32_t sizes[] = {1, 2, 3, 16, 17, 31, 64, 100, 255, 1000};
    for (size_t i = 0; i < ES__ARRAY_LEN(sizes); i++)
        for (int sh = RANDOM; sh <= STAR; sh++) check_case(sizes[i], (enum shape)sh, (int32_t)(i * 7 % 40), 4, 2, 8, pool);
    /* the largest trees: 4096 nodes, and one node more than a power of two */
    check_case(4096, RANDOM, 64, 2, 1, 8, pool);
    check_case(4096, DEEP, 0, 2, 2, 4, pool);
    check_case(4096, STAR, 3, 2, 1, 8, pool);
    check_case(4097, FOREST, 9, 2, 1, 4, pool);
    check_case(2049, CHAIN, 1, 1, 1, 4, pool);
    es__pool_destroy(pool);
    TEST_MAIN_END();
}
