/* test_ctx.h: backends and contexts as the tests make them. A context of a given size on a given
 * backend; the backend a test's command line names ("cpu", or "vulkan" with "fallbacks" forcing
 * every fallback path, as the meson tests pass them); and the end of a test that used one, where
 * the Vulkan validation layer must have said nothing. Failures are failed checks, never exits:
 * the caller sees NULL and goes on to TEST_MAIN_END. */
#ifndef ES_TEST_CTX_H
#define ES_TEST_CTX_H

#include "edgespec.h"
#include "vk_pin.h"

#include "../test.h"

/* A context of n_ctx tokens taking batches of up to n_batch on b (NULL: a private CPU backend),
 * its messages to log (NULL: silent). NULL where creation failed. */
static inline es_context *test_ctx(const es_model *m, es_backend *b, int32_t n_ctx, int32_t n_batch, es_log_fn log) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.backend = b;
    cp.log_fn = log;
    es_context *c = NULL;
    CHECK_OK(es_context_create(m, &cp, &c));
    return c;
}

/* The backend argv names: argv[1] "cpu" (default, n_threads workers) or "vulkan" (the driver
 * pinned first, vk_pin.h); argv[2] (Vulkan) "fallbacks" (ES_VK_FALLBACKS), "fuse-all" (every
 * batch's streams in the forward's rows, past lavapipe's profile) or "never-fuse" (every stream
 * pass after the forward). *vulkan (may be NULL) says which. NULL where creation failed. */
static inline es_backend *test_backend_from_args(int argc, char **argv, int32_t n_threads, bool *vulkan) {
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = n_threads;
    const bool vk = argc > 1 && strcmp(argv[1], "vulkan") == 0;
    if (vk) {
        bp.type = ES_BACKEND_VULKAN;
        test_pin_vulkan();
    }
    if (argc > 2 && strcmp(argv[2], "fallbacks") == 0) bp.vk_flags = ES_VK_FALLBACKS;
    if (argc > 2 && strcmp(argv[2], "fuse-all") == 0) bp.vk_tuning.fused_stream_rows = 1 << 20;
    if (argc > 2 && strcmp(argv[2], "never-fuse") == 0) bp.vk_tuning.fused_stream_rows = -1;
    if (vulkan) *vulkan = vk;
    es_backend *b = NULL;
    CHECK_OK(es_backend_create(&bp, &b));
    return b;
}

/* The last use of b: no Vulkan validation message was counted (0 on the CPU); b is freed. */
static inline void test_backend_end(es_backend *b) {
    es_backend_stats bs;
    CHECK_OK(es_backend_get_stats(b, &bs));
    CHECKF(bs.validation_messages == 0, "%llu Vulkan validation messages (see the log)",
           (unsigned long long)bs.validation_messages);
    es_backend_free(b);
}

#endif
