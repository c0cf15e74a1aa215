/* test_params: the public params structs and their helpers: a zeroed struct, NULL and
 * es_*_default_params() mean the same (all defaults) for every struct, and each zero gets its
 * documented meaning (context sizes from the model, threads from the machine, log level warn);
 * es_vk_flags_parse (names, numbers, separators, unknown names; a build without Vulkan parses
 * too). The sampler's zeros are tested in test_sampler.c. */
#include "backend.h"
#include "platform.h"

#include "../cpu/mem_model.h"

static void test_vk_flags_parse(void) {
    uint32_t f = 0;
    CHECK_OK(es_vk_flags_parse("no-subgroup, storage-buffers", &f));
    CHECK(f == (ES_VK_NO_SUBGROUP | ES_VK_STORAGE_BUFFERS));
    CHECK_OK(es_vk_flags_parse("fallbacks", &f));
    CHECK(f == ES_VK_FALLBACKS);
    CHECK_OK(es_vk_flags_parse("0x10", &f));
    CHECK(f == ES_VK_NO_INT_DOT);
    CHECK_OK(es_vk_flags_parse("no-fp16 1,,", &f));
    CHECK(f == (ES_VK_NO_FP16 | ES_VK_NO_STORAGE16));
    f = 7;
    CHECK_OK(es_vk_flags_parse(NULL, &f));
    CHECK(f == 0);
    f = 7;
    CHECK_OK(es_vk_flags_parse("", &f));
    CHECK(f == 0);
    /* an unknown name lists the known ones and leaves the output as it was */
    f = 7;
    CHECK_FAILS(es_vk_flags_parse("no-subgroup,bogus", &f), ES_ERR_INVALID_ARGUMENT, "unknown flag 'bogus'");
    CHECK(strstr(es_last_error(), "no-storage16, no-storage8, no-fp16, no-subgroup, no-int-dot, storage-buffers, "
                                  "texel-buffers, fallbacks") != NULL);
    CHECK(f == 7);
    CHECK_FAILS(es_vk_flags_parse("0x1g", &f), ES_ERR_INVALID_ARGUMENT, "unknown flag '0x1g'");
    CHECK_FAILS(es_vk_flags_parse("fallbacks", NULL), ES_ERR_INVALID_ARGUMENT, "flags is NULL");
}

static void test_default_params_are_zero(void) {
    const es_model_params mp = es_model_default_params();
    CHECK(!mp.vocab_only && !mp.no_mmap && !mp.log_fn && !mp.log_user && mp.log_level == ES_LOG_DEFAULT &&
          !mp.allocator && !mp.progress_fn && !mp.progress_user);
    const es_backend_params bp = es_backend_default_params();
    CHECK(bp.type == ES_BACKEND_CPU && bp.n_threads == 0 && !bp.cpu_weights_in_place && !bp.device && bp.vk_flags == 0 &&
          !bp.pipeline_cache_path && !bp.profile && !bp.log_fn && !bp.log_user && bp.log_level == ES_LOG_DEFAULT &&
          !bp.allocator && !bp.progress_fn && !bp.progress_user);
    const es_context_params cp = es_context_default_params();
    CHECK(cp.n_ctx == 0 && cp.n_batch == 0 && !cp.backend && !cp.log_fn && !cp.log_user &&
          cp.log_level == ES_LOG_DEFAULT && !cp.allocator);
    const es_generate_params gp = es_generate_default_params();
    CHECK(gp.n_predict == 0 && !gp.ignore_eog && gp.sampling.temperature == 0.0f && gp.sampling.top_k == 0 &&
          gp.sampling.top_p == 0.0f && gp.sampling.min_p == 0.0f && gp.sampling.repeat_penalty == 0.0f &&
          gp.sampling.repeat_last_n == 0 && gp.sampling.seed == 0 && !gp.on_token && !gp.user);
}

static int log_calls[ES_LOG_DEBUG + 2]; /* per level; the last counts levels out of range */
static void count_log(es_log_level level, const char *msg, void *user) {
    (void)msg;
    (void)user;
    log_calls[level >= ES_LOG_DEFAULT && level <= ES_LOG_DEBUG ? level : ES_LOG_DEBUG + 1]++;
}

/* The CPU backend logs one info line when created: level 0 (warn) drops it, info lets it through,
 * and the callback never receives ES_LOG_DEFAULT. Threads: 0 = the online processors. */
static void test_backend_defaults(void) {
    es_backend *b = NULL;
    CHECK_OK(es_backend_create(NULL, &b));
    CHECK(b && b->type == ES_BACKEND_CPU && b->n_threads == es__cpu_count() && strcmp(es_backend_name(b), "cpu") == 0);
    es_backend_free(b);
    for (int verbose = 0; verbose < 2; verbose++) {
        es_backend_params p;
        memset(&p, 0, sizeof p);
        p.log_fn = count_log;
        p.log_level = verbose ? ES_LOG_INFO : ES_LOG_DEFAULT;
        memset(log_calls, 0, sizeof log_calls);
        b = NULL;
        CHECK_OK(es_backend_create(&p, &b));
        CHECK(b && b->n_threads == es__cpu_count() && b->log.level == (verbose ? ES_LOG_INFO : ES_LOG_WARN));
        CHECK(log_calls[ES_LOG_INFO] == verbose && log_calls[ES_LOG_DEFAULT] == 0 && log_calls[ES_LOG_DEBUG + 1] == 0);
        es_backend_free(b);
    }
}

/* n_ctx 0 = the model's n_ctx_train capped at 4096, n_batch 0 = 512 capped at n_ctx, a NULL
 * backend = a private CPU backend that logs through the context's callback. */
static void test_context_defaults(void) {
    const mem_model_cfg mc = {50, 32, 1, 2, 2, 16, 48, 16, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_F32, 1};
    es_model *m = mem_model_create(&mc);
    es_context_params zero;
    memset(&zero, 0, sizeof zero);
    const struct {
        int32_t n_ctx_train, n_ctx, n_batch, want_ctx, want_batch;
    } cases[] = {
        {256, 0, 0, 256, 256},      {10000, 0, 0, 4096, 512}, {4096, 0, 0, 4096, 512}, {0, 0, 0, 4096, 512},
        {256, 1000, 0, 1000, 512}, {256, 0, 100, 256, 100},  {256, 64, 100, 64, 64},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++) {
        m->hp.n_ctx_train = cases[i].n_ctx_train;
        for (int null_params = 0; null_params < 2; null_params++) {
            if (null_params && (cases[i].n_ctx || cases[i].n_batch)) continue;
            es_context_params p = zero;
            p.n_ctx = cases[i].n_ctx;
            p.n_batch = cases[i].n_batch;
            es_context *ctx = NULL;
            CHECK_OK(es_context_create(m, null_params ? NULL : &p, &ctx));
            CHECKF(ctx && ctx->n_ctx == cases[i].want_ctx && ctx->n_batch == cases[i].want_batch,
                   "case %zu (%s): n_ctx %d, n_batch %d", i, null_params ? "NULL" : "zeroed", ctx ? ctx->n_ctx : -1,
                   ctx ? ctx->n_batch : -1);
            CHECK(ctx && ctx->owns_backend && ctx->backend->n_threads == es__cpu_count() &&
                  ctx->log.level == ES_LOG_WARN);
            es_context_free(ctx);
        }
    }
    es_context_params p = zero;
    p.log_fn = count_log;
    p.log_level = ES_LOG_INFO;
    memset(log_calls, 0, sizeof log_calls);
    es_context *ctx = NULL;
    CHECK_OK(es_context_create(m, &p, &ctx));
    CHECK(log_calls[ES_LOG_INFO] >= 1 && log_calls[ES_LOG_DEFAULT] == 0); /* the private backend's line */
    es_context_free(ctx);
    mem_model_free(m);
}

int main(void) {
    test_default_params_are_zero();
    test_backend_defaults();
    test_context_defaults();
    test_vk_flags_parse();
    TEST_MAIN_END();
}
