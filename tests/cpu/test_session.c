/* test_session.c: session files (es_context_save / es_context_load) on the CPU backend, or Vulkan
 * with argv[1]:
 *   - a saved context reloads into a fresh one with the same tokens, and the next token's logits
 *     are bit-identical to the original context's; an empty context round-trips too;
 *   - (Vulkan) a file the CPU backend saved loads on Vulkan: the layouts agree, and the next
 *     token's logits are the CPU's within the backends' usual 1e-4;
 *   - every truncation, a flipped byte anywhere (checksum), a wrong magic or version, another
 *     model of the same shapes, a file longer than the context, and too small a token buffer fail
 *     with a message naming what, and leave the context as it was (its logits unchanged). */
#include "../common/test_ctx.h"
#include "mem_models.h"

#include <math.h>
#include <stdio.h>

static es_backend *backend;

static const mem_model_cfg cfg = MEM_CFG_SESSION(51);
static const int32_t toks[12] = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3};

/* Next-token logits (of token 7 after the context) into out. */
static void next_logits(es_context *c, float *out, int32_t V) {
    const int32_t t = 7;
    es_batch b = {1, &t, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &b));
    const float *l = NULL;
    CHECK_OK(es_logits(c, 0, &l));
    if (l) memcpy(out, l, sizeof(float) * (size_t)V);
}

static es_context *prefilled(const es_model *m, es_backend *b, int32_t n_ctx) {
    es_context *c = test_ctx(m, b, n_ctx, 16, NULL);
    es_batch pre = {12, toks, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &pre));
    CHECK_OK(es_commit(c, NULL, 0));
    return c;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(*n);
    if (fread(d, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return d;
}

static void spill(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) fwrite(d, 1, n, f), fclose(f);
}

/* A bad file fails with needle in the message; c keeps its 12 tokens and its next logits. */
static void expect_bad(es_context *c, const char *path, es_status status, const char *needle, const float *want,
                       int32_t V) {
    int32_t got[16];
    size_t n = 0;
    CHECK_FAILS(es_context_load(c, path, got, 16, &n), status, needle);
    CHECK(es_context_n_past(c) == 12);
    static float l[4096];
    next_logits(c, l, V);
    CHECKF(memcmp(l, want, sizeof(float) * (size_t)V) == 0, "after a failed load ('%s') the context changed", needle);
    CHECK_OK(es_truncate(c, 12));
}

int main(int argc, char **argv) {
    bool vulkan = false;
    backend = test_backend_from_args(argc, argv, 2, &vulkan);
    if (!backend) TEST_MAIN_END();
    char path[480], bad[512];
    snprintf(path, sizeof path, "%s/es_test_session_%d.bin", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)vulkan);
    snprintf(bad, sizeof bad, "%s.bad", path);
    es_model *m = mem_model_create(&cfg);
    const int32_t V = m->hp.n_vocab;
    static float want[4096], got[4096];

    /* round trip on this backend: bit-identical */
    es_context *a = prefilled(m, backend, 32);
    CHECK_FAILS(es_context_save(a, toks, 11, path), ES_ERR_INVALID_ARGUMENT, "11 tokens given, the cache holds 12");
    CHECK_OK(es_context_save(a, toks, 12, path));
    next_logits(a, want, V);
    CHECK_OK(es_truncate(a, 12));
    es_context *b = test_ctx(m, backend, 32, 16, NULL);
    int32_t back[16] = {0};
    size_t n = 0;
    CHECK_OK(es_context_load(b, path, back, 16, &n));
    CHECK(n == 12 && memcmp(back, toks, sizeof toks) == 0 && es_context_n_past(b) == 12);
    next_logits(b, got, V);
    CHECKF(memcmp(got, want, sizeof(float) * (size_t)V) == 0, "reloaded logits differ from the original's");
    /* an empty context round-trips */
    es_context *e = test_ctx(m, backend, 32, 16, NULL);
    CHECK_OK(es_context_save(e, NULL, 0, bad));
    CHECK_OK(es_context_load(e, bad, back, 16, &n));
    CHECK(n == 0 && es_context_n_past(e) == 0);
    es_context_free(e);

    /* (Vulkan) the CPU backend's file */
    if (vulkan) {
        es_context *cpu = prefilled(m, NULL, 32);
        CHECK_OK(es_context_save(cpu, toks, 12, bad));
        static float ref[4096];
        next_logits(cpu, ref, V);
        es_context_free(cpu);
        CHECK_OK(es_context_load(b, bad, back, 16, &n));
        next_logits(b, got, V);
        double worst = 0, scale = 0;
        /* NaN sticks (fmax would drop it); also spelled this way because aarch64 gcc 12 -O3 fails
         * with an internal error vectorising the two fmax reductions */
        for (int32_t i = 0; i < V; i++) {
            const double d = fabs((double)got[i] - ref[i]);
            if (!(d <= worst)) worst = d;
            if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
        }
        CHECKF(worst <= 1e-4 * scale, "a CPU session on Vulkan: logits off by %.2e of %.2e", worst, scale);
        CHECK_OK(es_truncate(b, 12));
    }

    /* bad files leave the context as it was */
    size_t size = 0;
    uint8_t *file = slurp(path, &size);
    CHECK(file && size > 64);
    for (size_t cut = 0; file && cut < size; cut += 1 + cut / 3) {
        spill(bad, file, cut);
        expect_bad(a, bad, ES_ERR_FORMAT, cut < 40 ? "" : "truncated", want, V);
    }
    for (size_t at = 40; file && at < size; at += size / 7) { /* past the header: the checksum says */
        file[at] ^= 0x10;
        spill(bad, file, size);
        expect_bad(a, bad, ES_ERR_FORMAT, "checksum mismatch", want, V);
        file[at] ^= 0x10;
    }
    if (file) {
        file[0] ^= 1;
        spill(bad, file, size);
        expect_bad(a, bad, ES_ERR_FORMAT, "not a session file", want, V);
        file[0] ^= 1;
        file[4] = 9;
        spill(bad, file, size);
        expect_bad(a, bad, ES_ERR_UNSUPPORTED, "session version 9", want, V);
    }
    expect_bad(a, "/nonexistent/session.bin", ES_ERR_IO, "cannot read", want, V);
    const mem_model_cfg other_cfg = MEM_CFG_SESSION(52);
    es_model *other = mem_model_create(&other_cfg);
    es_context *o = prefilled(other, backend, 32);
    CHECK_OK(es_context_save(o, toks, 12, bad));
    expect_bad(a, bad, ES_ERR_INVALID_ARGUMENT, "saved with another model", want, V);
    es_context_free(o);
    mem_model_free(other);
    es_context *small = test_ctx(m, backend, 8, 8, NULL);
    CHECK_FAILS(es_context_load(small, path, back, 16, &n), ES_ERR_CONTEXT_FULL, "room for 8");
    es_context_free(small);
    CHECK_FAILS(es_context_load(b, path, back, 4, &n), ES_ERR_BUFFER_TOO_SMALL, "room for 4");
    CHECK(n == 12);
    free(file);
    remove(path);
    remove(bad);
    es_context_free(a);
    es_context_free(b);
    mem_model_free(m);
    test_backend_end(backend);
    TEST_MAIN_END();
}
