/* test_abort.c: es_context_abort, the cooperative cancellation DSI's preemption stands on.
 *   - A request made while no forward runs cancels the next es_forward with ES_ERR_CANCELLED
 *     and is cleared by it: the call after succeeds. The provisional batch is dropped, the
 *     committed tokens stay, and the context then gives the logits bits of one never cancelled.
 *   - A strategy's own requests (es__context_abort_own, DSI's preemption) cancel the same way,
 *     but es__context_abort_clear drops only them, never the application's, and a cancelled call
 *     says whether it took the application's (es__context_app_abort_taken).
 *   - A request taken inside the backend: a context waits for a backend another context's long
 *     forward holds; aborted meanwhile, its call fails at the backend's first check (CPU: before
 *     layer 0; Vulkan: before its submission).
 *   - CPU: a request from another thread during a long forward stops it between layers, well
 *     before the call would have ended, whatever the number of pool threads (all stop at the same
 *     layer: a disagreement would hang the pool).
 * argv[1]: "cpu" (default) or "vulkan"; argv[2] "emulated" (a cross build's suite under qemu-user,
 * where a long call takes a hundred times longer): long calls of 64 tokens, as on Vulkan, instead
 * of 192; every check is relative to the measured length of a long call. */
#include "../common/test_ctx.h"
#include "../cpu/mem_model.h"
#include "forward_api.h"

#include <pthread.h>
#include <time.h>

static void sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The logits of the token after seq[0..n) from a fresh context: the reference. */
static void fresh_logits(const es_model *m, es_backend *b, const int32_t *seq, int32_t n, float *out) {
    es_context *c = test_ctx(m, b, 256, 256, NULL);
    es_batch chain = {n, seq, NULL, NULL, NULL, NULL};
    const float *l = NULL;
    CHECK_OK(es_forward(c, &chain));
    CHECK_OK(es_logits(c, n - 1, &l));
    if (l) memcpy(out, l, sizeof(float) * (size_t)m->hp.n_vocab);
    es_context_free(c);
}

/* c holds seq[0..n - 1) committed: its next forward of seq[n - 1] gives the reference bits. */
static void check_continues(es_context *c, const es_model *m, es_backend *b, const int32_t *seq, int32_t n,
                            const char *what) {
    CHECKF(es_context_n_past(c) == n - 1, "%s: n_past %d, expected %d", what, es_context_n_past(c), n - 1);
    float *want = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    fresh_logits(m, b, seq, n, want);
    es_batch one = {1, seq + n - 1, NULL, NULL, NULL, NULL};
    const float *l = NULL;
    CHECK_OK(es_forward(c, &one));
    CHECK_OK(es_logits(c, 0, &l));
    CHECKF(l && memcmp(l, want, sizeof(float) * (size_t)m->hp.n_vocab) == 0, "%s: logits differ after cancellation",
           what);
    es_truncate(c, n - 1);
    free(want);
}

typedef struct long_call {
    es_context *c;
    const int32_t *tokens;
    int32_t n;
    es_status st;
    volatile int started; /* set just before the call */
} long_call;

static void *run_long(void *arg) {
    long_call *lc = arg;
    es_batch b = {lc->n, lc->tokens, NULL, NULL, NULL, NULL};
    __atomic_store_n(&lc->started, 1, __ATOMIC_SEQ_CST);
    lc->st = es_forward(lc->c, &b);
    if (lc->st == ES_OK) es_truncate(lc->c, es_context_n_past(lc->c)); /* drops the provisional batch */
    return NULL;
}

typedef struct aborter {
    es_context *c;
    double after_ms;
} aborter;

static void *run_abort(void *arg) {
    aborter *a = arg;
    sleep_ms(a->after_ms);
    es_context_abort(a->c);
    return NULL;
}

int main(int argc, char **argv) {
    bool vulkan = false;
    es_backend *backend = test_backend_from_args(argc, argv, 2, &vulkan);
    if (!backend) TEST_MAIN_END();
    mem_model_cfg cfg = {97, 64, 3, 4, 2, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 3};
    es_model *m = mem_model_create(&cfg);
    test_rng rng = {9};
    int32_t seq[256];
    for (int i = 0; i < 256; i++) seq[i] = (int32_t)(test_rng_u64(&rng) % 97);

    /* a request while idle: the next forward takes it, the one after runs */
    {
        es_context *c = test_ctx(m, backend, 256, 64, NULL);
        es_batch pre = {10, seq, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &pre));
        CHECK_OK(es_commit(c, NULL, 0));
        es_batch prov = {3, seq + 10, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &prov)); /* provisional, then cancelled: it must go */
        es_context_abort(c);
        es_context_abort(c); /* two requests are one */
        es_batch one = {1, seq + 10, NULL, NULL, NULL, NULL};
        CHECK_FAILS(es_forward(c, &one), ES_ERR_CANCELLED, "es_context_abort");
        CHECK(strstr(es_context_errmsg(c), "es_context_abort") != NULL);
        CHECK(es__context_app_abort_taken(c));
        const float *l = NULL;
        CHECK_FAILS(es_logits(c, 0, &l), ES_ERR_INVALID_ARGUMENT, "no logits");
        CHECK_FAILS(es_commit(c, NULL, 0), ES_ERR_INVALID_ARGUMENT, "no forward call to commit");
        check_continues(c, m, backend, seq, 11, "idle request");
        CHECK(!es__context_abort_clear(c)); /* nothing left behind */
        es__context_abort_own(c);
        CHECK(es__context_abort_clear(c)); /* a strategy can drop its own request no call took */
        CHECK_OK(es_forward(c, &one));
        es__context_abort_own(c); /* a strategy's own request cancels a call as the application's */
        CHECK_FAILS(es_forward(c, &one), ES_ERR_CANCELLED, "es_context_abort");
        CHECK(!es__context_app_abort_taken(c));
        es_context_abort(c);
        es__context_abort_own(c);
        CHECK(es__context_abort_clear(c)); /* the application's request stays */
        CHECK_FAILS(es_forward(c, &one), ES_ERR_CANCELLED, "es_context_abort");
        CHECK(es__context_app_abort_taken(c));
        es_context_abort(c);
        es__context_abort_own(c);
        CHECK_FAILS(es_forward(c, &one), ES_ERR_CANCELLED, "es_context_abort");
        CHECK(es__context_app_abort_taken(c)); /* the call took both */
        CHECK(!es__context_abort_clear(c));
        CHECK_OK(es_forward(c, &one));
        CHECK(!es__context_app_abort_taken(c)); /* each call says what it took */
        es_context_abort(NULL); /* harmless */
        es_context_free(c);
    }

    /* a request taken inside the backend: c2 waits for the backend c1's long call holds */
    mem_model_cfg big = {256, 256, 12, 4, 4, 64, 768, 64, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 5};
    es_model *bm = mem_model_create(&big);
    int32_t long_tokens[256];
    for (int i = 0; i < 256; i++) long_tokens[i] = (int32_t)(test_rng_u64(&rng) % 256);
    const bool emulated = argc > 2 && strcmp(argv[2], "emulated") == 0;
    const int32_t n_long = vulkan || emulated ? 64 : 192;
    {
        es_context *c1 = test_ctx(bm, backend, 256, 256, NULL), *c2 = test_ctx(bm, backend, 256, 256, NULL);
        es_batch pre = {5, long_tokens, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c2, &pre));
        CHECK_OK(es_commit(c2, NULL, 0));
        /* how long a long call takes */
        long_call warm = {c1, long_tokens, n_long, ES_OK, 0};
        double t0 = now_ms();
        run_long(&warm);
        const double t_long = now_ms() - t0;
        CHECK_OK(warm.st);
        bool inside = false;
        for (int attempt = 0; attempt < 6 && !inside; attempt++) {
            long_call lc = {c1, long_tokens, n_long, ES_OK, 0};
            pthread_t th;
            pthread_create(&th, NULL, run_long, &lc);
            while (!__atomic_load_n(&lc.started, __ATOMIC_SEQ_CST)) sleep_ms(0.1);
            sleep_ms(t_long / 8);
            aborter ab = {c2, t_long / 8};
            pthread_t ta;
            pthread_create(&ta, NULL, run_abort, &ab);
            es_batch one = {1, long_tokens + 5, NULL, NULL, NULL, NULL};
            const es_status st = es_forward(c2, &one); /* blocks on the backend until c1's call ends */
            pthread_join(ta, NULL);
            pthread_join(th, NULL);
            CHECK_OK(lc.st);
            const char *msg = es_context_errmsg(c2);
            if (st == ES_OK) { /* c1 ended first (a slow machine): try again */
                es__context_abort_clear(c2);
                es_truncate(c2, 5);
                continue;
            }
            CHECKF(st == ES_ERR_CANCELLED, "got %s: %s", es_status_str(st), msg);
            inside = strstr(msg, vulkan ? "before its submission" : "before layer 0") != NULL;
            if (!inside) CHECKF(strstr(msg, "before it began") != NULL, "unexpected message: %s", msg);
        }
        CHECKF(inside, "no attempt had the backend take the request (long call %.1f ms)", t_long);
        int32_t cont[6];
        memcpy(cont, long_tokens, sizeof cont);
        check_continues(c2, bm, backend, cont, 6, "request taken inside the backend");
        es_context_free(c1);
        es_context_free(c2);
    }

    /* CPU: between layers of a running call, with 1 and 2 pool threads */
    for (int nt = 1; nt <= 2 && !vulkan; nt++) {
        es_backend_params bp = es_backend_default_params();
        bp.n_threads = nt;
        es_backend *b = NULL;
        CHECK_OK(es_backend_create(&bp, &b));
        es_context *c = test_ctx(bm, b, 256, 256, NULL);
        es_batch pre = {7, long_tokens, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(c, &pre));
        CHECK_OK(es_commit(c, NULL, 0));
        long_call warm = {c, long_tokens + 7, n_long, ES_OK, 0};
        double t0 = now_ms();
        run_long(&warm);
        const double t_long = now_ms() - t0;
        CHECK_OK(warm.st);
        CHECK_OK(es_truncate(c, 7));
        bool between = false;
        for (int attempt = 0; attempt < 6 && !between; attempt++) {
            aborter ab = {c, t_long / 3};
            pthread_t ta;
            es_batch b2 = {n_long, long_tokens + 7, NULL, NULL, NULL, NULL};
            pthread_create(&ta, NULL, run_abort, &ab);
            t0 = now_ms();
            const es_status st = es_forward(c, &b2);
            const double t_cut = now_ms() - t0;
            pthread_join(ta, NULL);
            const char *msg = es_context_errmsg(c);
            int layer = -1;
            const char *at = strstr(msg, "before layer ");
            if (st == ES_ERR_CANCELLED && at) layer = atoi(at + 13);
            if (st == ES_OK) {
                es__context_abort_clear(c);
                CHECK_OK(es_commit(c, NULL, 0));
                CHECK_OK(es_truncate(c, 7));
                continue;
            }
            CHECKF(st == ES_ERR_CANCELLED, "got %s: %s", es_status_str(st), msg);
            between = layer >= 1 && layer < big.n_layer && t_cut < 0.8 * t_long;
            printf("%d threads: call of %.1f ms cancelled after %.1f ms before layer %d of %d\n", nt, t_long, t_cut,
                   layer, big.n_layer);
        }
        CHECKF(between, "%d threads: no attempt stopped between layers", nt);
        check_continues(c, bm, b, long_tokens, 8, "cancelled between layers");
        es_context_free(c);
        es_backend_free(b);
    }
    mem_model_free(bm);
    mem_model_free(m);
    test_backend_end(backend);
    TEST_MAIN_END();
}
