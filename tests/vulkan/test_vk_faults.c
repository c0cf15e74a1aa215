/* test_vk_faults.c: Vulkan failures injected at chosen calls (es__vk_dev.fault: the n-th
 * vkAllocateMemory, vkQueueSubmit or fence wait from now returns the chosen VkResult) give a
 * clear error on the context that met them, never a crash or a hang, and everything else keeps
 * working:
 *   1. VK_ERROR_OUT_OF_DEVICE_MEMORY at every vkAllocateMemory of a context's creation (weights
 *      upload included): ES_ERR_DEVICE_MEMORY naming what the memory was for; the backend's
 *      device memory goes back to where it was, and the backend then makes a context that
 *      decodes the reference tokens;
 *   2. VK_ERROR_OUT_OF_DEVICE_MEMORY at a forward call's submission: that call fails with
 *      ES_ERR_DEVICE_MEMORY, the context is as before and its next call gives the reference
 *      logits bit for bit;
 *   3. VK_ERROR_DEVICE_LOST at a submission in the middle of es_generate, and at a fence wait:
 *      ES_ERR_BACKEND naming the call and VK_ERROR_DEVICE_LOST; the context rolls back; every
 *      later call on that backend (another of its contexts, a new context) fails at once saying
 *      the device was lost and by which call; freeing them is clean; a context on another Vulkan
 *      backend and one on the CPU backend, alive all along, decode the reference tokens, and so
 *      does a new Vulkan backend.
 * In suite 'vulkan', and under the validation layer in .ci/run (which must stay silent: the
 * injected failures never leave Vulkan objects in use). Model: $ES_SOURCE_ROOT/models/default.gguf. */
#include "backend.h"
#include "backend_vk.h"
#include "vk_test.h"

#define N_PREDICT 8

static es_model *model;
static int32_t want[N_PREDICT], want_cpu[N_PREDICT]; /* greedy tokens on Vulkan and on the CPU */
static float want_logits[4096];
static int32_t n_vocab;

static es__vk_dev *dev_of(es_backend *b) {
    return &((es__vk_backend *)b->impl)->dev;
}

/* The n-th call at point from now returns r (n = 0: no fault). */
static void inject(es__vk_dev *d, es__vk_fault_point point, uint32_t n, VkResult r) {
    d->fault[point].countdown = n;
    d->fault[point].result = r;
}

static es_context *make_ctx(es_backend *b, es_status *s) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.backend = b;
    es_context *c = (es_context *)&cp;
    *s = es_context_create(model, &cp, &c);
    CHECKF(*s == ES_OK ? c != NULL : c == NULL, "es_context_create: out handle after %s", es_status_str(*s));
    return *s == ES_OK ? c : NULL;
}

static es_status generate(es_context *c, int32_t *out) {
    const int32_t prompt[5] = {1, 400, 401, 402, 403};
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = N_PREDICT;
    gp.ignore_eog = true;
    memset(out, 0xff, sizeof(int32_t) * N_PREDICT);
    es_status s = es_generate(c, prompt, 5, &gp, out, N_PREDICT, NULL);
    if (s == ES_OK) s = es_truncate(c, 0);
    return s;
}

/* c decodes the reference tokens (the Vulkan ones, or the CPU's). */
static void check_decodes_as(es_context *c, const int32_t *ref, const char *what) {
    int32_t got[N_PREDICT];
    es_status s = c ? generate(c, got) : ES_ERR_INVALID_ARGUMENT;
    CHECKF(s == ES_OK && memcmp(got, ref, sizeof got) == 0, "%s: does not decode the reference (%s: %s)", what,
           es_status_str(s), c ? es_context_errmsg(c) : "no context");
}
static void check_decodes(es_context *c, const char *what) {
    check_decodes_as(c, want, what);
}

static es_status forward(es_context *c) {
    const int32_t toks[3] = {1, 400, 401};
    const es_batch b = {3, toks, NULL, NULL, NULL, NULL};
    return es_forward(c, &b);
}

static uint64_t device_bytes(es_backend *b) {
    es_backend_stats st;
    CHECK_OK(es_backend_get_stats(b, &st));
    return st.device_bytes;
}

/* 1. out of device memory at each allocation of a context's creation */
static void test_alloc_oom(es_backend *b) {
    es__vk_dev *d = dev_of(b);
    const uint64_t base = device_bytes(b);
    /* the number of allocations a creation makes: a countdown that never reaches 0 */
    inject(d, ES__VK_FAULT_ALLOC, 1u << 30, VK_ERROR_OUT_OF_DEVICE_MEMORY);
    es_status s;
    es_context *c = make_ctx(b, &s);
    const uint32_t n = (1u << 30) - d->fault[ES__VK_FAULT_ALLOC].countdown;
    d->fault[ES__VK_FAULT_ALLOC].countdown = 0;
    CHECK_OK(s);
    es_context_free(c);
    CHECKF(n >= 3, "a context's creation made %u device allocations", n);
    int named = 0;
    for (uint32_t k = 1; k <= n; k++) {
        inject(d, ES__VK_FAULT_ALLOC, k, VK_ERROR_OUT_OF_DEVICE_MEMORY);
        c = make_ctx(b, &s);
        d->fault[ES__VK_FAULT_ALLOC].countdown = 0;
        CHECKF(s == ES_ERR_DEVICE_MEMORY && c == NULL, "allocation %u of %u: %s: %s", k, n, es_status_str(s),
               es_last_error());
        named += strstr(es_last_error(), "out of device memory") != NULL;
        es_context_free(c);
        CHECKF(device_bytes(b) == base, "allocation %u of %u: %llu bytes of device memory left behind", k, n,
               (unsigned long long)(device_bytes(b) - base));
    }
    CHECKF(named == (int)n, "%d of %u messages say 'out of device memory'", named, n);
    c = make_ctx(b, &s);
    CHECK_OK(s);
    check_decodes(c, "a context after the failed creations");
    es_context_free(c);
    printf("out of device memory at each of %u allocations of a context's creation: clean\n", n);
}

/* 2. out of device memory at a submission: that call fails, the context goes on */
static void test_submit_oom(es_backend *b) {
    es__vk_dev *d = dev_of(b);
    es_status s;
    es_context *c = make_ctx(b, &s);
    if (!c) return;
    inject(d, ES__VK_FAULT_SUBMIT, 1, VK_ERROR_OUT_OF_DEVICE_MEMORY);
    s = forward(c);
    CHECKF(s == ES_ERR_DEVICE_MEMORY && strstr(es_context_errmsg(c), "vkQueueSubmit") &&
               strstr(es_context_errmsg(c), "VK_ERROR_OUT_OF_DEVICE_MEMORY"),
           "submission out of memory: %s: %s", es_status_str(s), es_context_errmsg(c));
    CHECK(es_context_n_past(c) == 0);
    const float *l = NULL;
    CHECK(es_logits(c, 2, &l) != ES_OK); /* the failed call's rows are no batch */
    CHECK_OK(forward(c));
    CHECKF(es_logits(c, 2, &l) == ES_OK && memcmp(l, want_logits, sizeof(float) * (size_t)n_vocab) == 0,
           "the call after the failure gives other logits");
    CHECK_OK(es_truncate(c, 0));
    check_decodes(c, "the context after a failed submission");
    es_context_free(c);
}

/* 3. the device lost at the n-th submission (or fence wait) of es_generate on ctx */
static void test_lost(es_backend *b, es__vk_fault_point point, uint32_t nth, es_context *other_vk, es_context *cpu) {
    es__vk_dev *d = dev_of(b);
    es_status s;
    es_context *c = make_ctx(b, &s), *c2 = make_ctx(b, &s);
    if (!c || !c2) {
        es_context_free(c);
        es_context_free(c2);
        return;
    }
    const char *call = point == ES__VK_FAULT_SUBMIT ? "vkQueueSubmit" : "vkWaitForFences";
    inject(d, point, nth, VK_ERROR_DEVICE_LOST);
    int32_t got[N_PREDICT];
    s = generate(c, got);
    d->fault[point].countdown = 0;
    CHECKF(s == ES_ERR_BACKEND && strstr(es_context_errmsg(c), call) &&
               strstr(es_context_errmsg(c), "VK_ERROR_DEVICE_LOST") && strstr(es_context_errmsg(c), "lost"),
           "device lost at %s %u: %s: %s", call, nth, es_status_str(s), es_context_errmsg(c));
    CHECK(es_context_n_past(c) == 0); /* es_generate rolled back */
    /* everything on this device now fails at once, saying why */
    s = forward(c);
    CHECKF(s == ES_ERR_BACKEND && strstr(es_context_errmsg(c), "was lost") && strstr(es_context_errmsg(c), call),
           "the lost context's next call: %s: %s", es_status_str(s), es_context_errmsg(c));
    s = forward(c2);
    CHECKF(s == ES_ERR_BACKEND && strstr(es_context_errmsg(c2), "was lost"),
           "another context on the lost device: %s: %s", es_status_str(s), es_context_errmsg(c2));
    es_context *c3 = make_ctx(b, &s);
    CHECKF(c3 == NULL && s == ES_ERR_BACKEND && strstr(es_last_error(), "was lost"),
           "a new context on the lost device: %s: %s", es_status_str(s), es_last_error());
    es_context_free(c3);
    es_context_free(c);
    es_context_free(c2);
    /* the others never noticed */
    check_decodes(other_vk, "a context on another Vulkan backend");
    check_decodes_as(cpu, want_cpu, "a context on the CPU backend");
    printf("device lost at %s %u: clean\n", call, nth);
}

int main(void) {
    const char *root = getenv("ES_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/default.gguf", root ? root : ".");
    CHECK_OK(es_model_load(path, NULL, &model));
    if (!model) TEST_MAIN_END();
    es_model_info info;
    CHECK_OK(es_model_get_info(model, &info));
    n_vocab = info.n_vocab;
    CHECK(n_vocab <= 4096);
    es_backend *cpu_b = NULL;
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    CHECK_OK(es_backend_create(&bp, &cpu_b));
    es_backend *other = vk_backend(0), *b = vk_backend(0);
    if (!cpu_b || !other || !b) TEST_MAIN_END();

    /* the reference, on the Vulkan backend that is never hurt */
    es_status s;
    es_context *other_ctx = make_ctx(other, &s), *cpu_ctx = make_ctx(cpu_b, &s);
    if (!other_ctx || !cpu_ctx) TEST_MAIN_END();
    CHECK_OK(generate(other_ctx, want));
    CHECK_OK(forward(other_ctx));
    const float *l = NULL;
    CHECK_OK(es_logits(other_ctx, 2, &l));
    if (l) memcpy(want_logits, l, sizeof(float) * (size_t)n_vocab);
    CHECK_OK(es_truncate(other_ctx, 0));
    CHECK_OK(generate(cpu_ctx, want_cpu));

    test_alloc_oom(b);
    test_submit_oom(b);
    test_lost(b, ES__VK_FAULT_SUBMIT, 4, other_ctx, cpu_ctx); /* in the first generated tokens' calls */
    es_backend_stats st;
    CHECK_OK(es_backend_get_stats(b, &st));
    CHECKF(st.validation_messages == 0, "%llu validation messages", (unsigned long long)st.validation_messages);
    es_backend_free(b); /* a lost backend frees cleanly */
    b = vk_backend(0);
    if (b) test_lost(b, ES__VK_FAULT_WAIT, 7, other_ctx, cpu_ctx);
    es_backend_free(b);
    /* a new backend works */
    b = vk_backend(0);
    es_context *fresh = b ? make_ctx(b, &s) : NULL;
    check_decodes(fresh, "a context on a new Vulkan backend");
    es_context_free(fresh);
    es_backend_free(b);

    es_context_free(other_ctx);
    es_context_free(cpu_ctx);
    CHECK_OK(es_backend_get_stats(other, &st));
    CHECKF(st.validation_messages == 0, "%llu validation messages", (unsigned long long)st.validation_messages);
    es_backend_free(other);
    es_backend_free(cpu_b);
    es_model_free(model);
    TEST_MAIN_END();
}
