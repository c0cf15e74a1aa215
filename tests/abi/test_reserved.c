/* test_reserved.c: the growth rule of edgespec.h's params structs, seen from an application
 * (public API, shared library): a nonzero reserved word in any params struct, as a caller built
 * against a newer header would pass, is ES_ERR_INVALID_ARGUMENT naming the struct and the word,
 * and the call changes nothing; zeroed structs still work. Usage: test_reserved MODEL. */
#include "edgespec.h"
#include "test.h"

static bool all_zero(const uint64_t *words, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (words[i] != 0) return false;
    return true;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_reserved MODEL\n");
        return 2;
    }
    CHECK(strcmp(es_version(), ES_VERSION_STRING) == 0);

    es_model_params mp = {0};
    mp.reserved[7] = 1;
    es_model *m = (es_model *)&mp; /* must come back NULL */
    CHECK_FAILS(es_model_load(argv[1], &mp, &m), ES_ERR_INVALID_ARGUMENT, "es_model_params.reserved[7]");
    CHECK(m == NULL);
    mp.reserved[7] = 0;
    CHECK_OK(es_model_load(argv[1], &mp, &m));

    es_backend_params bp = {0};
    bp.n_threads = 1;
    bp.reserved[0] = 3;
    es_backend *b = NULL;
    CHECK_FAILS(es_backend_create(&bp, &b), ES_ERR_INVALID_ARGUMENT, "es_backend_params.reserved[0]");
    bp.reserved[0] = 0;
    bp.vk_tuning.reserved[2] = 1;
    CHECK_FAILS(es_backend_create(&bp, &b), ES_ERR_INVALID_ARGUMENT, "es_backend_params.vk_tuning.reserved[2]");
    CHECK(b == NULL);
    bp.vk_tuning.reserved[2] = 0;
    CHECK_OK(es_backend_create(&bp, &b));

    es_context_params cp = {0};
    cp.n_ctx = 64;
    cp.backend = b;
    cp.reserved[4] = 1;
    es_context *ctx = NULL;
    CHECK_FAILS(es_context_create(m, &cp, &ctx), ES_ERR_INVALID_ARGUMENT, "es_context_params.reserved[4]");
    cp.reserved[4] = 0;
    CHECK_OK(es_context_create(m, &cp, &ctx));
    es_context *draft = NULL;
    CHECK_OK(es_context_create(m, &cp, &draft));

    es_sampler_params sp = {0};
    sp.reserved[1] = 1;
    es_sampler *smp = NULL;
    CHECK_FAILS(es_sampler_create(100, &sp, NULL, &smp), ES_ERR_INVALID_ARGUMENT, "es_sampler_params.reserved[1]");

    int32_t prompt[4] = {1, 2, 3, 4}, out[4];
    es_generate_params gp = {0};
    gp.n_predict = 2;
    gp.reserved[6] = 1;
    CHECK_FAILS(es_generate(ctx, prompt, 4, &gp, out, 4, NULL), ES_ERR_INVALID_ARGUMENT,
                "es_generate_params.reserved[6]");
    gp.reserved[6] = 0;
    gp.sampling.reserved[5] = 1;
    CHECK_FAILS(es_generate(ctx, prompt, 4, &gp, out, 4, NULL), ES_ERR_INVALID_ARGUMENT, "es_sampler_params.reserved[5]");
    CHECK(es_context_n_past(ctx) == 0); /* the failed calls changed nothing */
    gp.sampling.reserved[5] = 0;
    CHECK_OK(es_generate(ctx, prompt, 4, &gp, out, 4, NULL));

    es_alspec_params ap = {0};
    ap.reserved[3] = 1;
    es_alspec *al = NULL;
    CHECK_FAILS(es_alspec_create(ctx, &ap, &al), ES_ERR_INVALID_ARGUMENT, "es_alspec_params.reserved[3]");
    CHECK(al == NULL);
    CHECK_FAILS(es_alspec_create_pair(ctx, ctx, &ap, &al), ES_ERR_INVALID_ARGUMENT, "es_alspec_params.reserved[3]");
    CHECK(al == NULL);
    es_quantize_params qp = es_quantize_default_params();
    qp.reserved[5] = 1;
    CHECK_FAILS(es_quantize(argv[1], "reserved-never-written.gguf", "q8_0", &qp), ES_ERR_INVALID_ARGUMENT,
                "es_quantize_params.reserved[5]");

    es_spec_params pp = {0};
    pp.strategy = ES_SPEC_DRAFT;
    pp.draft_ctx = draft;
    pp.reserved[3] = 1;
    es_spec *spec = NULL;
    CHECK_FAILS(es_spec_create(ctx, &pp, &spec), ES_ERR_INVALID_ARGUMENT, "es_spec_params.reserved[3]");
    pp.reserved[3] = 0;
    pp.dsi.reserved[0] = 1;
    CHECK_FAILS(es_spec_create(ctx, &pp, &spec), ES_ERR_INVALID_ARGUMENT, "es_spec_params.dsi.reserved[0]");
    CHECK(spec == NULL);
    pp.dsi.reserved[0] = 0;
    CHECK_OK(es_spec_create(ctx, &pp, &spec));
    gp.reserved[0] = 1;
    CHECK_FAILS(es_spec_generate(spec, prompt, 4, &gp, out, 4, NULL), ES_ERR_INVALID_ARGUMENT,
                "es_generate_params.reserved[0]");
    gp.reserved[0] = 0;
    CHECK_OK(es_spec_generate(spec, prompt, 4, &gp, out, 4, NULL));

    /* what the library returns has its reserved words zeroed */
    es_model_info mi;
    memset(&mi, 0xff, sizeof mi);
    CHECK_OK(es_model_get_info(m, &mi));
    es_tensor_info ti;
    memset(&ti, 0xff, sizeof ti);
    CHECK_OK(es_model_tensor_info(m, 0, &ti));
    es_spec_stats ss;
    memset(&ss, 0xff, sizeof ss);
    CHECK_OK(es_spec_get_stats(spec, &ss));
    es_spec_costs sc;
    memset(&sc, 0xff, sizeof sc);
    CHECK_OK(es_spec_get_costs(spec, &sc));
    es_backend_stats bs;
    memset(&bs, 0xff, sizeof bs);
    CHECK_OK(es_backend_get_stats(b, &bs));
    /* each struct's own count: a new field takes reserved words (edgespec.h) */
#define ALL_ZERO(s) all_zero((s).reserved, sizeof (s).reserved / sizeof (s).reserved[0])
    CHECK(ALL_ZERO(mi) && ALL_ZERO(ti) && ALL_ZERO(bs));
    CHECK(ALL_ZERO(ss) && ALL_ZERO(ss.dsi) && ALL_ZERO(sc));

    es_spec_free(spec);
    es_context_free(draft);
    es_context_free(ctx);
    es_backend_free(b);
    es_model_free(m);
    TEST_MAIN_END();
}
