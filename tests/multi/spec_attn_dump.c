/* spec_attn_dump.c: runs the CPU backend's speculative flash decode (es__cpu_attention_spec) and
 * its plain attention on fresh random inputs at many key counts, and writes inputs and outputs for
 * test_spec_attn_reference.py, which checks them against float64 numpy. Checks here only what
 * needs no reference: the exact output equals the plain attention's bit for bit.
 * Cases: key counts around 2S (2S - 1: no speculation; 2S; 2S + 1; a key past a chunk; S from 64 to 512), not
 * multiples of S, up to a few thousand keys; GQA and not; head sizes 40 (vector tails), 64, 128;
 * Gaussian, outlier-heavy (a few keys and values 30x larger), attention sinks (the first key
 * aligned with the query: the speculation is close) and a needle in the middle chunks (far).
 * Slots past n are NaN, so a read beyond the token's keys poisons the result.
 * usage: spec_attn_dump OUT_FILE */
#include "cpu/ops.h"
#include "cpu/pool.h"

#include "../test.h"

enum { GAUSS, OUTLIERS, SINK, NEEDLE };

typedef struct spec_case {
    int32_t n_head, n_head_kv, hd, n, chunk, kind;
    float lambda;
} spec_case;

static const spec_case CASES[] = {
    {4, 2, 64, 511, 256, GAUSS, 0.1f},     {4, 2, 64, 512, 256, SINK, 0.1f},
    {4, 2, 64, 513, 256, GAUSS, 0.1f},     {2, 2, 40, 769, 256, OUTLIERS, 0.1f},
    {4, 1, 64, 1000, 256, SINK, 0.1f},     {4, 2, 64, 1537, 256, NEEDLE, 0.1f},
    {8, 2, 64, 2049, 256, GAUSS, 0.1f},    {2, 1, 128, 3001, 512, OUTLIERS, 0.25f},
    {4, 4, 40, 1025, 512, SINK, 0.05f},    {4, 2, 64, 4099, 256, NEEDLE, 0.2f},
    {4, 2, 64, 2900, 256, SINK, 0.0f},     {6, 3, 64, 1801, 256, OUTLIERS, 0.15f},
    {4, 2, 64, 129, 64, GAUSS, 0.1f},      {4, 2, 48, 200, 64, SINK, 0.1f},
    {2, 1, 64, 255, 128, NEEDLE, 0.1f},    {8, 8, 64, 700, 192, OUTLIERS, 0.1f},
};

static float gauss(test_rng *r) {
    const float u = 0.5f * (test_rng_uniform(r) + 1.0f) + 1e-7f, v = test_rng_uniform(r);
    return sqrtf(-2.0f * logf(u)) * cosf(3.14159265f * v);
}

/* q: [n_head][hd]; caches (n_head_kv, n_ctx, hd), slots >= n NaN. */
static void fill(const spec_case *c, int32_t n_ctx, test_rng *r, float *q, float *kc, float *vc) {
    const int32_t hd = c->hd;
    for (int32_t i = 0; i < c->n_head * hd; i++) q[i] = gauss(r);
    for (int32_t g = 0; g < c->n_head_kv; g++)
        for (int32_t s = 0; s < n_ctx; s++) {
            const bool big = c->kind == OUTLIERS && test_rng_u64(r) % 97 == 0;
            for (int32_t d = 0; d < hd; d++) {
                const size_t i = ((size_t)g * n_ctx + s) * hd + d;
                kc[i] = s < c->n ? gauss(r) * (big ? 30.0f : 1.0f) : NAN;
                vc[i] = s < c->n ? gauss(r) * (big ? 30.0f : 1.0f) : NAN;
            }
        }
    /* a key aligned with every query head of its group takes most of the attention */
    const int32_t special = c->kind == SINK ? 0 : c->kind == NEEDLE ? c->n / 2 : -1;
    if (special < 0) return;
    const int32_t group = c->n_head / c->n_head_kv;
    for (int32_t g = 0; g < c->n_head_kv; g++)
        for (int32_t d = 0; d < hd; d++) {
            float sum = 0.0f;
            for (int32_t j = 0; j < group; j++) sum += q[(g * group + j) * hd + d];
            kc[((size_t)g * n_ctx + special) * hd + d] = 3.0f * sum;
        }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: spec_attn_dump OUT_FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "wb");
    if (!f) return 1;
    es__pool *pool = NULL;
    CHECK_OK(es__pool_create(NULL, 2, 0, NULL, &pool));
    test_rng r = {2024};
    const int32_t n_case = (int32_t)(sizeof CASES / sizeof CASES[0]);
    fwrite(&n_case, sizeof n_case, 1, f);
    for (int32_t ci = 0; ci < n_case; ci++) {
        const spec_case *c = &CASES[ci];
        const int32_t n_ctx = c->n + 7, qd = c->n_head * c->hd;
        const size_t cache = (size_t)c->n_head_kv * n_ctx * c->hd;
        float *q = malloc(sizeof(float) * qd), *kc = malloc(sizeof(float) * cache), *vc = malloc(sizeof(float) * cache);
        float *out = malloc(sizeof(float) * qd), *spec = malloc(sizeof(float) * qd), *plain = malloc(sizeof(float) * qd);
        fill(c, n_ctx, &r, q, kc, vc);
        for (int32_t i = 0; i < qd; i++) out[i] = spec[i] = plain[i] = NAN;
        es__spec_verdict v;
        const float scale = 1.0f / sqrtf((float)c->hd);
        /* odd cases on the calling thread: the split over threads must not matter */
        CHECK_OK(es__cpu_attention_spec(ci % 2 ? NULL : pool, q, kc, vc, n_ctx, c->n_head, c->n_head_kv, c->hd, c->n,
                                        c->chunk, c->lambda, scale, out, spec, &v, NULL));
        const int32_t zero = 0;
        CHECK_OK(es__cpu_attention(pool, q, kc, vc, n_ctx, c->n_head, c->n_head_kv, c->hd, c->n - 1, 1, &zero, &zero,
                                   scale, plain, NULL));
        CHECKF(memcmp(out, plain, sizeof(float) * qd) == 0, "case %d (n %d): exact output differs from plain attention",
               ci, c->n);
        int32_t s2 = 0;
        CHECKF(v.valid == es__spec_window(c->n, c->chunk, &s2), "case %d: valid %d", ci, v.valid);
        const int32_t hdr[8] = {c->n_head, c->n_head_kv, c->hd, c->n, c->chunk, n_ctx, v.valid, v.hit};
        fwrite(hdr, sizeof hdr, 1, f);
        fwrite(&c->lambda, sizeof(float), 1, f);
        fwrite(q, sizeof(float), qd, f);
        fwrite(kc, sizeof(float), cache, f);
        fwrite(vc, sizeof(float), cache, f);
        fwrite(out, sizeof(float), qd, f);
        fwrite(spec, sizeof(float), qd, f);
        free(q), free(kc), free(vc), free(out), free(spec), free(plain);
    }
    /* bad parameters: a clear error, nothing written */
    float x[64] = {0}, o[64], sp[64];
    es__spec_verdict v;
    es__err err = {0};
    CHECK_FAILS(es__cpu_attention_spec(NULL, x, x, x, 1, 1, 1, 64, 1, 100, 0.1f, 1.0f, o, sp, &v, &err),
                ES_ERR_INVALID_ARGUMENT, "chunk 100");
    CHECK_FAILS(es__cpu_attention_spec(NULL, x, x, x, 1, 1, 1, 64, 1, 64, -1.0f, 1.0f, o, sp, &v, &err),
                ES_ERR_INVALID_ARGUMENT, "lambda");
    es__pool_destroy(pool);
    fclose(f);
    TEST_MAIN_END();
}
