/* test_kv_memory.c: the CPU backend's memory follows the tokens used, not n_ctx.
 *   1. a context of 262,144 tokens (a 2.3 GiB KV cache for models/default.gguf) makes the process
 *      resident set (/proc/self/statm) grow by a few MiB, not by the cache, and generating 48
 *      tokens into it adds about what 48 tokens' KV needs;
 *   2. a context larger than the machine's memory fails at creation, in well under a second, with
 *      ES_ERR_OUT_OF_MEMORY and a message that says how much it needs and how much fits (a
 *      watchdog ends the test if creation starts filling memory instead);
 *   3. the same through a user allocator: the KV cache is not written at creation either.
 * Before the fix the KV cache was malloc + memset: case 1 grew by the whole cache and case 2
 * wrote until the watchdog fired (or the out-of-memory killer came). */
#define _DEFAULT_SOURCE
#include "edgespec.h"
#include "test_alloc.h"

#include "../test.h"

#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* What mapping `bytes` without touching them adds to the resident set: about nothing natively,
 * but under qemu-user (the aarch64 lane) the emulator's own per-page bookkeeping of the guest's
 * mappings (about 14 MiB for 2.3 GiB), which is not memory the library made resident. The
 * checks below allow for it. */
static double mapping_overhead(double bytes) {
    const double r0 = rss_bytes();
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    const double r1 = rss_bytes();
    munmap(p, (size_t)bytes);
    return r1 > r0 ? r1 - r0 : 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "test_kv_memory: context creation ran past 1 s: it is filling memory\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

static es_context *make(es_model *m, es_backend *b, int32_t n_ctx, const es_allocator *a, es_status *s) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 64;
    cp.backend = b;
    cp.allocator = a;
    es_context *c = NULL;
    *s = es_context_create(m, &cp, &c);
    return c;
}

static es_status generate(es_context *c, es_model *m, int32_t n) {
    int32_t toks[32];
    size_t nt = 0;
    es_status s = es_tokenize(m, "In the beginning", 16, true, false, toks, 32, &nt);
    if (s != ES_OK) return s;
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = n;
    gp.ignore_eog = true;
    return es_generate(c, toks, nt, &gp, NULL, 0, NULL);
}

int main(void) {
    const char *root = getenv("ES_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/default.gguf", root ? root : ".");
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, NULL, &m));
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    es_backend *b = NULL;
    if (m) CHECK_OK(es_backend_create(&bp, &b));
    if (!b) TEST_MAIN_END();
    es_model_info info;
    CHECK_OK(es_model_get_info(m, &info));
    const double per_token = (double)info.n_layer * info.n_head_kv * info.head_dim * 2 * sizeof(float);

    /* warm up: weights uploaded (kept while a context uses them: `keep` holds them for the
     * whole test), thread pool and allocator arenas in use */
    es_status s;
    es_context *keep = make(m, b, 256, NULL, &s), *c = NULL;
    CHECK_OK(s);
    if (keep) CHECK_OK(generate(keep, m, 16));

    /* 1. a large context: resident memory grows with the tokens used */
    const int32_t big = 262144;
    const double ovh = mapping_overhead(per_token * big);
    printf("mapping %.0f MiB untouched: resident +%.1f MiB (the platform's bookkeeping, allowed for below)\n",
           per_token * big / MIB, ovh / MIB);
    const double r0 = rss_bytes();
    c = make(m, b, big, NULL, &s);
    CHECK_OK(s);
    const double r1 = rss_bytes();
    printf("n_ctx %d: KV cache %.0f MiB; resident +%.1f MiB after creation\n", big, per_token * big / MIB,
           (r1 - r0) / MIB);
    CHECKF(r1 - r0 - ovh < 4 * MIB, "creating a %d-token context made %.1f MiB resident (its KV cache is %.0f MiB)", big,
           (r1 - r0) / MIB, per_token * big / MIB);
    if (c) CHECK_OK(generate(c, m, 48));
    const double r2 = rss_bytes();
    printf("after 48 tokens: +%.1f MiB (their KV: %.2f MiB)\n", (r2 - r0) / MIB, per_token * 64 / MIB);
    CHECKF(r2 - r0 - ovh < 4 * MIB + per_token * 64, "48 tokens made %.1f MiB resident", (r2 - r0) / MIB);
    es_context_free(c);

    /* 2. more than the machine has: a clean failure before any of it is touched */
    const double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    double want = 1.5 * phys / per_token;
    const int32_t huge = want > (double)INT32_MAX ? INT32_MAX : (int32_t)want;
    signal(SIGALRM, watchdog);
    alarm(1);
    const double t0 = now();
    c = make(m, b, huge, NULL, &s);
    const double dt = now() - t0;
    alarm(0);
    printf("n_ctx %d (%.1f GiB of KV, %.1f GiB of memory): %s in %.3f s: %s\n", huge, per_token * huge / (MIB * 1024),
           phys / (MIB * 1024), es_status_str(s), dt, es_last_error());
    CHECK(c == NULL && s == ES_ERR_OUT_OF_MEMORY);
    CHECKF(dt < 1.0, "failing took %.2f s", dt);
    CHECKF(strstr(es_last_error(), "GiB") && strstr(es_last_error(), "tokens fit"), "message: %s", es_last_error());
    es_context_free(c);
    /* the backend is still usable */
    c = make(m, b, 128, NULL, &s);
    CHECK_OK(s);
    if (c) CHECK_OK(generate(c, m, 4));
    es_context_free(c);

    /* 3. with a user allocator too */
    test_alloc ta;
    es_allocator a = test_allocator(&ta, -1, false);
    const double r3 = rss_bytes();
    c = make(m, b, big, &a, &s);
    CHECK_OK(s);
    const double r4 = rss_bytes();
    CHECKF(r4 - r3 - ovh < 4 * MIB, "with an allocator, a %d-token context made %.1f MiB resident", big, (r4 - r3) / MIB);
    if (c) CHECK_OK(generate(c, m, 8));
    es_context_free(c);
    CHECKF(ta.live == 0, "%ld blocks leaked", ta.live);

    es_context_free(keep);
    es_backend_free(b);
    es_model_free(m);
    TEST_MAIN_END();
}
