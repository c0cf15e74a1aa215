/* test_vk_spec_attn: ALSpec's speculative flash decode on Vulkan (attn.comp + attn_spec.comp)
 * against the CPU backend's (es__cpu_attention_spec, itself checked against float64 numpy by
 * tests/multi/test_spec_attn_reference.py), in every feature configuration, on fresh random
 * inputs at key counts around 2S and past it, not multiples of S:
 *   - the exact output equals the Vulkan plain attention's (attn.comp + attn_merge.comp) bit for bit;
 *   - the exact output and the speculation within 2e-5 of the CPU's (normalised by max |CPU|);
 *   - the verdict: valid exactly when n >= 2S; hit equal to the CPU's wherever the CPU's ratio
 *     ||spec - A|| / ||A|| is not within 2% of lambda; both hits and misses occur.
 * Also on devices that split attention in 16 keys or give a split a subgroup (policy.h attn_split,
 * attn_team), forced here. Slots past n hold NaN: reading past the token's keys fails the test. */
#include "cpu/ops.h"
#include "oprun.h"
#include "vk_attn_variants.h"

enum { UNIFORM, SINK, NEEDLE };
typedef struct spec_case {
    uint32_t n_head, n_head_kv, hd, n, chunk, kind;
    float lambda;
} spec_case;

static const spec_case CASES[] = {
    {4, 2, 64, 511, 256, UNIFORM, 0.1f}, {4, 2, 64, 513, 256, SINK, 0.1f},   {2, 2, 40, 769, 256, UNIFORM, 0.1f},
    {4, 1, 64, 1000, 256, SINK, 0.1f},   {4, 2, 64, 1537, 256, NEEDLE, 0.1f}, {8, 2, 128, 2049, 512, SINK, 0.2f},
    {4, 2, 64, 4099, 256, NEEDLE, 0.0f}, {6, 3, 64, 1801, 256, SINK, 0.0f},
};

static void fill(const spec_case *c, uint32_t n_ctx, test_rng *r, float *q, float *kc, float *vc) {
    const uint32_t hd = c->hd, group = c->n_head / c->n_head_kv;
    for (uint32_t i = 0; i < c->n_head * hd; i++) q[i] = 2.0f * test_rng_uniform(r);
    for (uint32_t g = 0; g < c->n_head_kv; g++)
        for (uint32_t s = 0; s < n_ctx; s++)
            for (uint32_t d = 0; d < hd; d++) {
                const size_t i = ((size_t)g * n_ctx + s) * hd + d;
                kc[i] = s < c->n ? 2.0f * test_rng_uniform(r) : NAN;
                vc[i] = s < c->n ? test_rng_uniform(r) : NAN;
            }
    if (c->kind == UNIFORM) return;
    /* a key aligned with its group's queries: the sink (speculation close) or a needle (far) */
    const uint32_t special = c->kind == SINK ? 0 : c->n / 2;
    for (uint32_t g = 0; g < c->n_head_kv; g++)
        for (uint32_t d = 0; d < hd; d++) {
            float sum = 0.0f;
            for (uint32_t j = 0; j < group; j++) sum += q[(g * group + j) * hd + d];
            kc[((size_t)g * n_ctx + special) * hd + d] = 2.0f * sum;
        }
}

static void test_case(es_backend *b, test_rng *r, const char *cfg, const spec_case *c, int *hits, int *misses) {
    const uint32_t n_ctx = c->n + 5, qd = c->n_head * c->hd;
    const size_t cache = (size_t)c->n_head_kv * n_ctx * c->hd;
    float *q = malloc(sizeof(float) * qd), *kc = malloc(sizeof(float) * cache), *vc = malloc(sizeof(float) * cache);
    float *o = malloc(sizeof(float) * qd), *sp = malloc(sizeof(float) * qd), *plain = malloc(sizeof(float) * qd);
    float *co = malloc(sizeof(float) * qd), *csp = malloc(sizeof(float) * qd);
    float *o2 = malloc(sizeof(float) * qd), *sp2 = malloc(sizeof(float) * qd);
    fill(c, n_ctx, r, q, kc, vc);
    for (uint32_t i = 0; i < qd; i++) o[i] = sp[i] = plain[i] = NAN;
    const float scale = 1.0f / sqrtf((float)c->hd);
    es__spec_verdict v, cv;
    const int32_t zero = 0;
    CHECK_OK(es__vk_run_attention_spec(b, q, kc, vc, n_ctx, c->n_head, c->n_head_kv, c->hd, c->n, c->chunk, c->lambda,
                                       scale, o, sp, &v, false, 0, NULL));
    /* the pair's two parts (the speculation first, then the middle) give the same bits */
    es__spec_verdict v2;
    for (uint32_t i = 0; i < qd; i++) o2[i] = sp2[i] = NAN;
    CHECK_OK(es__vk_run_attention_spec(b, q, kc, vc, n_ctx, c->n_head, c->n_head_kv, c->hd, c->n, c->chunk, c->lambda,
                                       scale, o2, sp2, &v2, true, 0, NULL));
    CHECKF(memcmp(o, o2, sizeof(float) * qd) == 0 && v.valid == v2.valid && v.hit == v2.hit && v.err2 == v2.err2 &&
               v.norm2 == v2.norm2 && (!v.valid || memcmp(sp, sp2, sizeof(float) * qd) == 0),
           "[%s] n %u: the two-part run differs from the one-pass run", cfg, c->n);
    CHECK_OK(es__vk_run_attention(b, q, kc, vc, n_ctx, c->n_head, c->n_head_kv, c->hd, c->n - 1, 1, &zero, scale, plain));
    CHECK_OK(es__cpu_attention_spec(NULL, q, kc, vc, (int32_t)n_ctx, (int32_t)c->n_head, (int32_t)c->n_head_kv,
                                    (int32_t)c->hd, (int32_t)c->n, (int32_t)c->chunk, c->lambda, scale, co, csp, &cv,
                                    NULL));
    CHECKF(memcmp(o, plain, sizeof(float) * qd) == 0, "[%s] n %u: exact output differs from plain attention", cfg, c->n);
    const double e = diff(o, co, qd, max_abs(co, qd));
    CHECKF(e <= 2e-5, "[%s] n %u: exact output error %.3g against the CPU", cfg, c->n, e);
    CHECKF(v.valid == cv.valid && v.valid == (c->n >= 2 * c->chunk), "[%s] n %u S %u: valid %d, CPU %d", cfg, c->n,
           c->chunk, v.valid, cv.valid);
    if (cv.valid) {
        const double es = diff(sp, csp, qd, max_abs(csp, qd)), ratio = sqrt(cv.err2 / cv.norm2);
        CHECKF(es <= 2e-5, "[%s] n %u: speculation error %.3g against the CPU", cfg, c->n, es);
        if (fabs(ratio - c->lambda) > 0.02 * fmax(c->lambda, 1e-3)) {
            CHECKF(v.hit == cv.hit && cv.hit == (ratio < c->lambda), "[%s] n %u: hit %d, CPU %d, ratio %.4f, lambda %.2f",
                   cfg, c->n, v.hit, cv.hit, ratio, c->lambda);
            *hits += v.hit;
            *misses += !v.hit;
        }
    } else {
        CHECKF(!v.hit, "[%s] n %u: a hit without a speculation", cfg, c->n);
    }
    free(q), free(kc), free(vc), free(o), free(sp), free(plain), free(co), free(csp), free(o2), free(sp2);
}

int main(void) {
    test_rng r = {17};
    int hits = 0, misses = 0;
    for (int ci = 0; ci < VK_N_CONFIGS; ci++) {
        es_backend *b = vk_backend(vk_configs[ci].flags);
        if (!b) continue;
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
            test_case(b, &r, vk_configs[ci].name, &CASES[i], &hits, &misses);
        es_backend_free(b);
    }
    for (size_t a = 0; a < VK_N_ATTN_VARIANTS; a++) {
        es_backend *b = vk_backend_attn(a);
        if (!b) continue;
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
            test_case(b, &r, VK_ATTN_VARIANTS[a].name, &CASES[i], &hits, &misses);
        es_backend_free(b);
    }
    CHECKF(hits > 0 && misses > 0, "the cases gave %d hits and %d misses: both are needed", hits, misses);
    VK_TEST_END();
}
