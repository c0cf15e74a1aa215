/* test_shared_backend.c: contexts sharing one backend, used from different threads (edgespec.h,
 * "Thread-safety"): each context on one thread at a time, the backend shared by all of them.
 *   1. two threads, one backend, each thread with its own context on the shared model: greedy
 *      generation gives, token for token, what one thread alone gives;
 *   2. create/free while generating: one thread generates while another creates contexts on the
 *      same backend, forwards a token through each and frees it, and a third reads the backend's
 *      counters, over and over.
 * Run under ThreadSanitizer (.ci/run's TSan lane: the library's code is instrumented, Mesa's is
 * not) and, for Vulkan, under the Khronos validation layer (EDGESPEC_VK_VALIDATION=1: its thread
 * checks see two threads using the queue or the command pool at once). Before the backend lock
 * covered context destruction, TSan reported es__vk_buf_destroy <- es_context_free against the
 * device-memory accounting of a context being created, and the validation layer reported
 * vkQueueSubmit's queue used simultaneously by vkDeviceWaitIdle.
 * usage: test_shared_backend [cpu|vulkan] [ROUNDS]   (model: $ES_SOURCE_ROOT/models/default.gguf) */
#include "edgespec.h"
#include "test_ctx.h"

#include <pthread.h>
#include <stdatomic.h>

#define N_PREDICT 12
#define N_CTX 96

static es_model *model;
static es_backend *backend;
static int rounds = 3;

typedef struct job {
    const char *prompt;
    int32_t want[N_PREDICT]; /* what one thread alone generates */
    int32_t got[N_PREDICT];
    int failures;            /* counted here, checked on the main thread */
    char why[512];
} job;

static void fail(job *j, const char *what, es_status s, const char *msg) {
    if (j->failures++ == 0) snprintf(j->why, sizeof j->why, "%s: %s: %s", what, es_status_str(s), msg);
}

/* Greedy generation of N_PREDICT tokens after prompt on ctx; ctx starts empty and ends empty. */
static es_status generate(es_context *ctx, const char *prompt, int32_t *out) {
    int32_t toks[64];
    size_t n = 0;
    es_status s = es_tokenize(model, prompt, strlen(prompt), true, false, toks, 64, &n);
    if (s != ES_OK) return s;
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = N_PREDICT;
    gp.ignore_eog = true;
    memset(out, 0xff, sizeof(int32_t) * N_PREDICT);
    s = es_generate(ctx, toks, n, &gp, out, N_PREDICT, NULL);
    if (s == ES_OK) s = es_truncate(ctx, 0);
    return s;
}

static es_context *make_ctx(void) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = 32;
    cp.backend = backend;
    es_context *c = NULL;
    return es_context_create(model, &cp, &c) == ES_OK ? c : NULL;
}

/* Test 1's thread: its own context, the prompt generated `rounds` times. */
static void *generator(void *arg) {
    job *j = arg;
    es_context *ctx = make_ctx();
    if (!ctx) {
        fail(j, "es_context_create", ES_ERR_BACKEND, es_last_error());
        return NULL;
    }
    for (int r = 0; r < rounds; r++) {
        es_status s = generate(ctx, j->prompt, j->got);
        if (s != ES_OK) fail(j, "generate", s, es_context_errmsg(ctx));
        else if (memcmp(j->got, j->want, sizeof j->got) != 0) fail(j, "generate", ES_OK, "other tokens than alone");
    }
    es_context_free(ctx);
    return NULL;
}

static atomic_int generating;

/* Test 2's churn: contexts created, used once and freed while the generator runs. */
static void *churn(void *arg) {
    job *j = arg;
    int made = 0;
    while (atomic_load(&generating) || made < 2) {
        es_context *c = make_ctx();
        if (!c) {
            fail(j, "es_context_create", ES_ERR_BACKEND, es_last_error());
            break;
        }
        const int32_t tok = 1;
        const es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
        es_status s = es_forward(c, &b);
        if (s != ES_OK) fail(j, "es_forward", s, es_context_errmsg(c));
        es_context_free(c);
        made++;
    }
    snprintf(j->why + strlen(j->why), sizeof j->why - strlen(j->why), " (%d contexts made)", made);
    return NULL;
}

/* Test 2's reader: the backend's counters while others call into it. */
static void *reader(void *arg) {
    job *j = arg;
    uint64_t last = 0;
    while (atomic_load(&generating)) {
        es_backend_stats st;
        es_status s = es_backend_get_stats(backend, &st);
        if (s != ES_OK) fail(j, "es_backend_get_stats", s, es_last_error());
        if (st.n_forward < last) fail(j, "es_backend_get_stats", ES_OK, "n_forward went backwards");
        last = st.n_forward;
        es_profile_entry e[8];
        size_t n = 0;
        s = es_backend_profile(backend, e, 8, &n);
        if (s != ES_OK && s != ES_ERR_BUFFER_TOO_SMALL) fail(j, "es_backend_profile", s, es_last_error());
    }
    return NULL;
}

/* Errors only (validation-layer messages among them), with the thread that saw them. */
static void log_error(es_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == ES_LOG_ERROR) fprintf(stderr, "[thread %lx] %s\n", (unsigned long)pthread_self(), msg);
}

static void check_job(const job *j, const char *name) {
    CHECKF(j->failures == 0, "%s: %d failures, the first: %s", name, j->failures, j->why);
}

int main(int argc, char **argv) {
    if (argc > 2) rounds = atoi(argv[2]);
    const char *root = getenv("ES_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/default.gguf", root ? root : ".");
    CHECK_OK(es_model_load(path, NULL, &model));
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    bp.log_fn = log_error;
    if (argc > 1 && strcmp(argv[1], "vulkan") == 0) {
        bp.type = ES_BACKEND_VULKAN;
        test_pin_vulkan();
    }
    if (model) CHECK_OK(es_backend_create(&bp, &backend));
    if (!backend) TEST_MAIN_END();
    printf("backend %s, %d rounds\n", es_backend_name(backend), rounds);

    job a = {"In the beginning God created", {0}, {0}, 0, ""};
    job b = {"And the earth was without form", {0}, {0}, 0, ""};
    es_context *solo = make_ctx();
    CHECK(solo != NULL);
    if (solo) {
        CHECK_OK(generate(solo, a.prompt, a.want));
        CHECK_OK(generate(solo, b.prompt, b.want));
        es_context_free(solo);
    }
    CHECK(memcmp(a.want, b.want, sizeof a.want) != 0); /* the prompts lead apart: a mix-up shows */

    /* 1. two threads, one backend */
    pthread_t t[3];
    pthread_create(&t[0], NULL, generator, &a);
    pthread_create(&t[1], NULL, generator, &b);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    check_job(&a, "thread A");
    check_job(&b, "thread B");

    /* 2. create/free (and counters read) while generating */
    job c = {"", {0}, {0}, 0, ""}, r = {"", {0}, {0}, 0, ""};
    a.failures = 0;
    atomic_store(&generating, 1);
    pthread_create(&t[1], NULL, churn, &c);
    pthread_create(&t[2], NULL, reader, &r);
    pthread_create(&t[0], NULL, generator, &a);
    pthread_join(t[0], NULL);
    atomic_store(&generating, 0);
    pthread_join(t[1], NULL);
    pthread_join(t[2], NULL);
    check_job(&a, "generator");
    check_job(&c, "churn");
    check_job(&r, "reader");
    printf("churn:%s\n", c.why);

    test_backend_end(backend);
    es_model_free(model);
    TEST_MAIN_END();
}
