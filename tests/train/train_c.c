/* train_c.c: runs a model exported by tools/train through the library for test_train_c.py.
 *
 *   train_c MODEL [--ss ADAPTER] [--streams G] [--prune P] [--threads N] [--vulkan] [--fuse all|never] ID...
 *
 * Loads MODEL (and the adapter), feeds ID... as one chain batch at positions 0..n-1 on the CPU
 * backend (--vulkan: the Vulkan one; --fuse: every stream in the forward's rows, or none) and prints, for every token i, "main i" followed by its n_vocab logits; with --streams G,
 * also "stream i j" lines (j = 1..G) from the Speculative Streaming forward; with --prune P,
 * "pruned i 0|1" for every token and "exit i P" for every token whose probability P under its
 * parent's early exit the pruning computed (es__exit_prob; the others are left out). Values are
 * printed with 9 significant digits (exact for float).
 * The main-stream path uses only the public API; streams and pruning use the internal
 * Speculative Streaming forward (lib/core/forward_api.h), which has no public entry point.
 * Deliberately not here: any comparison (the Python side has the reference). */
#include "edgespec.h"
#include "forward_api.h"
#include "../common/vk_pin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "train_c: %s: %s\n", what, msg);
    return 1;
}

static void print_row(const char *tag, int32_t i, int32_t j, const float *v, int32_t n) {
    if (j >= 0)
        printf("%s %d %d", tag, (int)i, (int)j);
    else
        printf("%s %d", tag, (int)i);
    for (int32_t k = 0; k < n; k++) printf(" %.9g", (double)v[k]);
    printf("\n");
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *ss_path = NULL;
    int32_t n_streams = 0, n_threads = 1;
    bool vulkan = false;
    const char *fuse = NULL; /* Vulkan: "all" streams in the forward's rows, "never" (stream passes) */
    float prune = 0.0f;
    int32_t *toks = calloc((size_t)argc, sizeof *toks);
    int32_t n = 0;
    if (!toks) return fail("main", "out of memory");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ss") && i + 1 < argc) ss_path = argv[++i];
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc) n_streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prune") && i + 1 < argc) prune = strtof(argv[++i], NULL);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--vulkan")) vulkan = true;
        else if (!strcmp(argv[i], "--fuse") && i + 1 < argc) fuse = argv[++i];
        else if (!model_path) model_path = argv[i];
        else toks[n++] = atoi(argv[i]);
    }
    if (!model_path || n == 0) {
        fprintf(stderr, "usage: train_c MODEL [--ss ADAPTER] [--streams G] [--prune P] [--threads N] [--vulkan] "
                        "[--fuse all|never] ID...\n");
        return 2;
    }
    es_model *m = NULL;
    if (es_model_load(model_path, NULL, &m) != ES_OK) return fail(model_path, es_last_error());
    if (ss_path && es_model_load_adapter(m, ss_path) != ES_OK) return fail(ss_path, es_model_errmsg(m));
    es_model_info info;
    if (es_model_get_info(m, &info) != ES_OK) return fail("info", es_model_errmsg(m));

    es_backend_params bp = es_backend_default_params();
    bp.type = vulkan ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    if (fuse) bp.vk_tuning.fused_stream_rows = strcmp(fuse, "all") == 0 ? 1 << 20 : -1;
    bp.n_threads = n_threads;
    es_backend *be = NULL;
    if (vulkan) test_pin_vulkan();
    if (es_backend_create(&bp, &be) != ES_OK) return fail("backend", es_last_error());
    es_context_params cp = es_context_default_params();
    cp.backend = be;
    cp.n_ctx = n < 16 ? 16 : n;
    cp.n_batch = n;
    es_context *ctx = NULL;
    if (es_context_create(m, &cp, &ctx) != ES_OK) return fail("context", es_last_error());

    uint8_t *want = malloc((size_t)n);
    if (!want) return fail("main", "out of memory");
    memset(want, 1, (size_t)n);
    es_batch b = {0};
    b.n_tokens = n;
    b.tokens = toks;
    b.logits = want;
    es_status s = (n_streams > 0 || prune > 0.0f) ? es__forward(ctx, &b, &(es__call){n_streams, prune}) : es_forward(ctx, &b);
    if (s != ES_OK) return fail("forward", es_context_errmsg(ctx));
    for (int32_t i = 0; i < n; i++) {
        if (prune > 0.0f) printf("pruned %d %d\n", (int)i, es__pruned(ctx, i) ? 1 : 0);
        const float q = prune > 0.0f ? es__exit_prob(ctx, i) : -1.0f;
        if (q >= 0.0f) printf("exit %d %.9g\n", (int)i, (double)q);
        if (es__pruned(ctx, i)) continue;
        const float *lg = NULL;
        if (es_logits(ctx, i, &lg) != ES_OK) return fail("logits", es_context_errmsg(ctx));
        print_row("main", i, -1, lg, info.n_vocab);
        if (n_streams > 0) {
            const float *sl = NULL;
            if (es__stream_logits(ctx, i, 0, &sl) != ES_OK) return fail("stream logits", es_context_errmsg(ctx));
            for (int32_t j = 0; j < n_streams; j++) print_row("stream", i, j + 1, sl + (size_t)j * info.n_vocab, info.n_vocab);
        }
    }
    free(want);
    free(toks);
    es_context_free(ctx);
    es_backend_stats bs;
    if (es_backend_get_stats(be, &bs) != ES_OK) return fail("backend stats", es_last_error());
    if (bs.validation_messages) return fail("vulkan", "the validation layer reported messages");
    es_backend_free(be);
    es_model_free(m);
    return 0;
}
