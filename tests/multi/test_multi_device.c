/* test_multi_device.c: several devices from one device list (es_backends_create) and the KV cache
 * moved between them (es_context_kv_copy), the ground multi-device strategies stand on:
 *   1. device lists: "host,host", blanks, an empty entry, a trailing comma, too many entries, a
 *      Vulkan entry with the CPU type, too little room, and (Vulkan) an index that does not exist
 *      fail with a message naming the entry, leaving nothing created; "0,host" is one of each,
 *      and the two used at once each give what it gives alone;
 *   2. two devices (Vulkan "0,0": two logical devices on one physical device; CPU "host,host")
 *      load the same model and, used from two threads at once, give the logits of a device used
 *      alone, bit for bit, at every step of a prefill and 8 greedy decodes;
 *   3. each device accounts for itself: its forward calls, its own copy of the weights (Vulkan:
 *      the same bytes on both), its device memory; no validation message on either;
 *   4. es_context_kv_copy: a prefill on device 0 copied to device 1 decodes the next token with
 *      device 0's logits bit for bit; Vulkan -> CPU -> Vulkan round-trips the cache exactly; a
 *      destination too small fails and keeps its tokens.
 * Under the validation layer (name *vulkan*: EDGESPEC_VK_VALIDATION=1 in .ci/run, whose thread
 * checks see two devices' objects used at once) and ThreadSanitizer (suite multi, CPU variant).
 * usage: test_multi_device [cpu|vulkan]   (model: $ES_SOURCE_ROOT/models/default.gguf) */
#include "edgespec.h"
#include "../common/test_ctx.h"

#include <pthread.h>

#define N_STEPS 9 /* the prefill, then 8 greedy decodes */
#define N_CTX 64

static es_model *model;
static int32_t n_vocab;
static const int32_t prompt[6] = {1, 400, 401, 402, 403, 404};

typedef struct run {
    es_context *ctx;
    float *logits;           /* [N_STEPS][n_vocab] */
    es_status status;
    char why[512];
} run;

/* The prefill and 8 greedy decodes on r->ctx, every step's logits kept; the context ends empty. */
static void *decode(void *arg) {
    run *r = arg;
    es_batch b = {6, prompt, NULL, NULL, NULL, NULL};
    int32_t tok = 0;
    es_status s = ES_OK;
    for (int step = 0; s == ES_OK && step < N_STEPS; step++) {
        if (step > 0) b = (es_batch){1, &tok, NULL, NULL, NULL, NULL};
        const float *l = NULL;
        s = es_forward(r->ctx, &b);
        if (s == ES_OK) s = es_logits(r->ctx, b.n_tokens - 1, &l);
        if (s == ES_OK) s = es_commit(r->ctx, NULL, 0);
        if (s != ES_OK) break;
        memcpy(r->logits + (size_t)step * (size_t)n_vocab, l, sizeof(float) * (size_t)n_vocab);
        tok = 0;
        for (int32_t v = 1; v < n_vocab; v++)
            if (l[v] > l[tok]) tok = v;
    }
    if (s == ES_OK) s = es_truncate(r->ctx, 0);
    r->status = s;
    if (s != ES_OK) snprintf(r->why, sizeof r->why, "%s", es_context_errmsg(r->ctx));
    return NULL;
}

static es_status list(es_backend_type type, const char *devices, es_backend **out, size_t cap, size_t *n) {
    es_backend_params p = es_backend_default_params();
    p.type = type;
    p.device = devices;
    p.n_threads = 1;
    for (size_t i = 0; i < cap; i++) out[i] = (es_backend *)&p; /* must become NULL on failure */
    return es_backends_create(&p, out, cap, n);
}

/* devices fails with status, naming what in the message, and leaves nothing behind. */
static void list_fails(es_backend_type type, const char *devices, es_status status, const char *what) {
    es_backend *out[3];
    size_t n = 99;
    const es_status s = list(type, devices, out, 3, &n);
    CHECKF(s == status, "'%s': %s, expected %s", devices, es_status_str(s), es_status_str(status));
    CHECKF(strstr(es_last_error(), what) != NULL, "'%s': message '%s' lacks '%s'", devices, es_last_error(), what);
    CHECKF(out[0] == NULL && out[1] == NULL && out[2] == NULL, "'%s': out not cleared", devices);
    CHECKF(status == ES_ERR_BUFFER_TOO_SMALL ? n > 3 : n == 0, "'%s': n = %zu", devices, n);
}

static void test_mixed(es_backend *vk, es_backend *cpu);

/* 1. device lists */
static void test_lists(bool vulkan) {
    es_backend *out[ES_MAX_DEVICES];
    size_t n = 0;
    CHECK_OK(list(ES_BACKEND_CPU, " host ,host", out, ES_MAX_DEVICES, &n));
    CHECK(n == 2 && out[0] && out[1] && out[0] != out[1]);
    for (size_t i = 0; i < n; i++) {
        CHECK(strcmp(es_backend_name(out[i]), "cpu") == 0);
        es_backend_free(out[i]);
    }
    CHECK_OK(list(ES_BACKEND_CPU, NULL, out, 1, &n));
    CHECK(n == 1 && out[0] && strcmp(es_backend_name(out[0]), "cpu") == 0);
    es_backend_free(out[0]);
    list_fails(ES_BACKEND_CPU, "host,,host", ES_ERR_INVALID_ARGUMENT, "entry 2 (at offset 5) is empty");
    list_fails(ES_BACKEND_CPU, "host,", ES_ERR_INVALID_ARGUMENT, "entry 2 (at offset 5) is empty");
    list_fails(ES_BACKEND_CPU, "host,0", ES_ERR_INVALID_ARGUMENT, "entry 2 '0' names a Vulkan device");
    list_fails(ES_BACKEND_CPU, "host,host,host,host,host,host,host,host,host", ES_ERR_INVALID_ARGUMENT,
               "more than 8 entries");
    list_fails(ES_BACKEND_CPU, "host,host,host,host", ES_ERR_BUFFER_TOO_SMALL, "4 devices, room for 3");
    list_fails((es_backend_type)7, "host", ES_ERR_INVALID_ARGUMENT, "unknown backend type 7");
    if (!vulkan) return;
    list_fails(ES_BACKEND_VULKAN, "0,99", ES_ERR_INVALID_ARGUMENT, "entry 2 '99'");
    CHECKF(strstr(es_last_error(), "'0,0'") != NULL, "no hint about logical devices: %s", es_last_error());
    /* a list given to es_backend_create, which makes one backend: pointed to es_backends_create */
    es_backend_params one = es_backend_default_params();
    one.type = ES_BACKEND_VULKAN;
    one.device = "0,0";
    es_backend *b = (es_backend *)&one;
    CHECK(es_backend_create(&one, &b) == ES_ERR_INVALID_ARGUMENT && b == NULL);
    CHECKF(strstr(es_last_error(), "a list of devices is for es_backends_create") != NULL, "%s", es_last_error());
    CHECK_OK(list(ES_BACKEND_VULKAN, "0, host", out, ES_MAX_DEVICES, &n));
    CHECK(n == 2 && out[0] && out[1]);
    if (n == 2) {
        CHECK(strcmp(es_backend_name(out[0]), "cpu") != 0);
        CHECK(strcmp(es_backend_name(out[1]), "cpu") == 0);
        test_mixed(out[0], out[1]);
        test_backend_end(out[0]);
        test_backend_end(out[1]);
    }
}

static es_context *make(es_backend *b, int32_t n_ctx) {
    return test_ctx(model, b, n_ctx, 16, NULL);
}

/* 2 and 3: two devices at once against one alone */
static void test_two_devices(es_backend **dev, bool vulkan) {
    run ref = {make(dev[0], N_CTX), NULL, ES_OK, ""}, r[2] = {{make(dev[0], N_CTX), NULL, ES_OK, ""},
                                                             {make(dev[1], N_CTX), NULL, ES_OK, ""}};
    const size_t bytes = sizeof(float) * (size_t)n_vocab * N_STEPS;
    ref.logits = malloc(bytes);
    r[0].logits = malloc(bytes);
    r[1].logits = malloc(bytes);
    if (!ref.ctx || !r[0].ctx || !r[1].ctx || !ref.logits || !r[0].logits || !r[1].logits) goto out;
    decode(&ref);
    CHECKF(ref.status == ES_OK, "alone: %s", ref.why);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, decode, &r[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECKF(r[i].status == ES_OK, "device %d: %s", i, r[i].why);
        for (int step = 0; r[i].status == ES_OK && step < N_STEPS; step++) {
            const size_t o = (size_t)step * (size_t)n_vocab;
            CHECKF(memcmp(r[i].logits + o, ref.logits + o, sizeof(float) * (size_t)n_vocab) == 0,
                   "device %d, step %d: logits differ from device 0 alone", i, step);
        }
    }
    es_backend_stats st[2];
    CHECK_OK(es_backend_get_stats(dev[0], &st[0]));
    CHECK_OK(es_backend_get_stats(dev[1], &st[1]));
    CHECKF(st[0].n_forward == 2 * N_STEPS && st[1].n_forward == N_STEPS, "forward calls %llu and %llu",
           (unsigned long long)st[0].n_forward, (unsigned long long)st[1].n_forward);
    if (vulkan) {
        CHECKF(st[0].weight_bytes > 0 && st[0].weight_bytes == st[1].weight_bytes,
               "weights: %llu and %llu bytes", (unsigned long long)st[0].weight_bytes,
               (unsigned long long)st[1].weight_bytes);
        CHECK(st[0].device_bytes > st[0].weight_bytes && st[1].device_bytes > st[1].weight_bytes);
        CHECK(st[1].n_forward_submits > 0 && st[1].n_dispatches > 0);
        CHECK(st[0].n_dispatches == 2 * st[1].n_dispatches); /* two runs against one, same shapes */
    }
out:
    es_context_free(ref.ctx);
    es_context_free(r[0].ctx);
    es_context_free(r[1].ctx);
    free(ref.logits);
    free(r[0].logits);
    free(r[1].logits);
    if (vulkan) {
        es_backend_stats after;
        CHECK_OK(es_backend_get_stats(dev[1], &after));
        CHECKF(after.device_bytes == after.weight_bytes, "device 1 holds %llu bytes past its weights after its "
               "context was freed", (unsigned long long)(after.device_bytes - after.weight_bytes));
    }
}

/* 2 for "0,host": a Vulkan device and the CPU backend at once each give what it gives alone (the
 * two compute differently, so each against itself) */
static void test_mixed(es_backend *vk, es_backend *cpu) {
    es_backend *dev[2] = {vk, cpu};
    run ref[2], r[2];
    const size_t bytes = sizeof(float) * (size_t)n_vocab * N_STEPS;
    for (int i = 0; i < 2; i++) {
        ref[i] = (run){make(dev[i], N_CTX), malloc(bytes), ES_OK, ""};
        r[i] = (run){make(dev[i], N_CTX), malloc(bytes), ES_OK, ""};
    }
    if (!ref[0].ctx || !ref[1].ctx || !r[0].ctx || !r[1].ctx || !ref[0].logits || !ref[1].logits || !r[0].logits ||
        !r[1].logits)
        goto out;
    decode(&ref[0]);
    decode(&ref[1]);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, decode, &r[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECKF(ref[i].status == ES_OK && r[i].status == ES_OK, "0,host device %d: %s %s", i, ref[i].why, r[i].why);
        CHECKF(memcmp(ref[i].logits, r[i].logits, bytes) == 0, "0,host device %d: logits differ from it alone", i);
    }
out:
    for (int i = 0; i < 2; i++) {
        es_context_free(ref[i].ctx);
        es_context_free(r[i].ctx);
        free(ref[i].logits);
        free(r[i].logits);
    }
}

/* The logits of decoding token 405 next on c (committed, then rolled back). */
static void next_logits(es_context *c, float *out) {
    const int32_t tok = 405;
    const es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
    const float *l = NULL;
    memset(out, 0xff, sizeof(float) * (size_t)n_vocab);
    CHECK_OK(es_forward(c, &b));
    CHECK_OK(es_logits(c, 0, &l));
    if (l) memcpy(out, l, sizeof(float) * (size_t)n_vocab);
}

/* 4. the KV cache from one device to another */
static void test_kv_copy(es_backend **dev, es_backend *cpu) {
    es_context *a = make(dev[0], N_CTX), *b = make(dev[1], N_CTX), *host = make(cpu, N_CTX), *small = make(dev[1], 4),
               *back = make(dev[1], N_CTX);
    float *want = malloc(sizeof(float) * (size_t)n_vocab), *got = malloc(sizeof(float) * (size_t)n_vocab);
    if (!a || !b || !host || !small || !back || !want || !got) goto out;
    const es_batch pb = {6, prompt, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(a, &pb));
    CHECK_OK(es_commit(a, NULL, 0));
    CHECK_OK(es_context_kv_copy(b, a));
    CHECK(es_context_n_past(b) == 6 && es_context_n_past(a) == 6);
    next_logits(a, want);
    next_logits(b, got);
    CHECK(memcmp(want, got, sizeof(float) * (size_t)n_vocab) == 0);
    /* through the CPU backend and back: the cache's values move as they are */
    CHECK_OK(es_context_kv_copy(host, a));
    CHECK_OK(es_context_kv_copy(back, host));
    CHECK(es_context_n_past(host) == 6 && es_context_n_past(back) == 6);
    next_logits(back, got);
    CHECK(memcmp(want, got, sizeof(float) * (size_t)n_vocab) == 0);
    /* too small: an error naming both sizes, the destination as it was */
    const int32_t two[2] = {1, 400};
    const es_batch sb = {2, two, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(small, &sb));
    CHECK_OK(es_commit(small, NULL, 0));
    CHECK(es_context_kv_copy(small, a) == ES_ERR_CONTEXT_FULL);
    CHECKF(strstr(es_context_errmsg(small), "holds 6 tokens, the destination has room for 4") != NULL, "%s",
           es_context_errmsg(small));
    CHECK(es_context_n_past(small) == 2);
    CHECK(es_context_kv_copy(a, a) == ES_ERR_INVALID_ARGUMENT);
    CHECK(es_context_kv_copy(NULL, a) == ES_ERR_INVALID_ARGUMENT);
out:
    es_context_free(a);
    es_context_free(b);
    es_context_free(host);
    es_context_free(small);
    es_context_free(back);
    free(want);
    free(got);
}

int main(int argc, char **argv) {
    const bool vulkan = argc > 1 && strcmp(argv[1], "vulkan") == 0;
    if (vulkan) test_pin_vulkan();
    const char *root = getenv("ES_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/default.gguf", root ? root : ".");
    CHECK_OK(es_model_load(path, NULL, &model));
    if (!model) TEST_MAIN_END();
    es_model_info info;
    CHECK_OK(es_model_get_info(model, &info));
    n_vocab = info.n_vocab;

    test_lists(vulkan);
    es_backend *dev[2] = {NULL, NULL}, *cpu = NULL;
    size_t n = 0;
    CHECK_OK(list(vulkan ? ES_BACKEND_VULKAN : ES_BACKEND_CPU, vulkan ? "0,0" : "host,host", dev, 2, &n));
    CHECK_OK(list(ES_BACKEND_CPU, "host", &cpu, 1, &n));
    if (dev[0] && dev[1] && cpu) {
        test_two_devices(dev, vulkan);
        test_kv_copy(dev, cpu);
    }
    if (dev[0]) test_backend_end(dev[0]);
    if (dev[1]) test_backend_end(dev[1]);
    es_backend_free(cpu);
    es_model_free(model);
    TEST_MAIN_END();
}
