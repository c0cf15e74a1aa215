/* spec_run.h: what the speculative decoding tests share: contexts on the test's backend, plain
 * decoding (es_generate on a fresh context, the reference every strategy must reproduce token for
 * token) and a speculative run whose caller now and then takes fewer tokens than a step could
 * give. Deliberately no checks of its own beyond the API's status codes. */
#ifndef ES_TEST_SPEC_RUN_H
#define ES_TEST_SPEC_RUN_H

#include "../common/test_ctx.h"
#include "../cpu/mem_models.h"
#include "edgespec.h"

static es_backend *backend; /* the test's backend, test_backend_from_args in its main */

static es_context *new_ctx(const es_model *m, int32_t n_ctx, int32_t n_batch) {
    return test_ctx(m, backend, n_ctx, n_batch, NULL);
}

/* Plain decoding of n_gen tokens after the prompt. Returns the count generated. */
static int32_t plain(const es_model *m, const int32_t *prompt, int32_t n_prompt, const es_sampler_params *sp,
                     int32_t n_gen, int32_t n_ctx, int32_t n_batch, int32_t *out) {
    es_context *c = new_ctx(m, n_ctx, n_batch);
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = n_gen;
    gp.sampling = *sp;
    gp.ignore_eog = true;
    es_generate_stats st;
    CHECK_OK(es_generate(c, prompt, (size_t)n_prompt, &gp, out, (size_t)n_gen, &st));
    es_context_free(c);
    return st.n_generated;
}

/* Speculative decoding on c with p until n_gen tokens or the context is full; every fifth step
 * the caller takes 1 to 3 tokens only. Returns the count emitted. */
static inline int32_t run_spec(es_context *c, const es_spec_params *p, const int32_t *prompt, int32_t n_prompt,
                        int32_t n_gen, int32_t *out, es_spec_stats *stats) {
    es_spec *s = NULL;
    CHECK_OK(es_spec_create(c, p, &s));
    if (!s) return 0;
    CHECK_OK(es_spec_feed(s, prompt, (size_t)n_prompt));
    int32_t n = 0, steps = 0;
    while (n < n_gen) {
        int32_t buf[ES_SPEC_MAX_DEPTH + 1];
        size_t got = 0, cap = steps % 5 == 4 ? 1 + (size_t)(steps % 3) : ES__ARRAY_LEN(buf);
        es_status r = es_spec_step(s, buf, cap, &got);
        if (r == ES_ERR_CONTEXT_FULL) break;
        CHECK_OK(r);
        if (r != ES_OK) break;
        CHECK(got >= 1 && got <= cap);
        for (size_t i = 0; i < got && n < n_gen; i++) out[n++] = buf[i];
        steps++;
    }
    CHECK_OK(es_spec_get_stats(s, stats));
    es_spec_free(s);
    return n;
}

#endif
