/* vkbench: benchmarks of the Vulkan backend. One JSON object per measurement on stdout:
 *   edgespec-vkbench mul_mat [--type f32|f16|bf16|q8_0|q4_0|q4_K|q5_K|q6_K] [--rows M] [--cols K] [--n N]
 *                            [--reps R] [--runs S] [--device SEL] [--flags FLAGS] [--tile T]
 *       one matrix kernel: R dispatches in one submission, median of S submissions (--tile: the
 *       device policy's tile in place of its profile's, lib/vulkan/policy.h); weight
 *       bandwidth = bytes of the device layout per dispatch / time per dispatch; with
 *       EDGESPEC_VKBENCH_CPU_TIME set, the time is the process's CPU time (the op runner's switch,
 *       tests/common/oprun.c), which a busy machine disturbs less than wall time
 *   edgespec-vkbench dispatch [--reps R] [--runs S]
 *       the fixed cost of a dispatch (a tiny kernel R times in one submission) and of a submit
 *       (R = 1)
 *   edgespec-vkbench membw [--runs S]
 *       the host's memory read bandwidth with 1 and 2 threads (the decode speed of light)
 *   edgespec-vkbench model -m FILE [--backend vulkan|cpu] [--threads N] [--pp 64,512] [--tg 128]
 *                          [--tree 32] [--reps R] [--profile]      (bench_model.c)
 * It deliberately checks nothing: tests/vulkan does. */
#include "backend_vk.h"
#include "gguf.h"
#include "oprun.h"
#include "test_dtype.h"
#include "vkbench.h"

#include <pthread.h>
#include <time.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Makes rows x K random weights of type in GGUF layout; returns bytes. */
static void *make_weights(es__dtype t, uint32_t rows, uint32_t K, size_t *bytes) {
    const size_t n = (size_t)rows * K;
    uint64_t sz64 = 0;
    if (!es__dtype_row_bytes(t, n, &sz64)) return NULL; /* K not whole blocks of the type */
    const size_t sz = (size_t)sz64;
    uint8_t *w = malloc(sz);
    if (!w) return NULL;
    if (es__is_k_quant(t)) { /* random quants and sub-block scales; super-block scales of 0.001 */
        const size_t bb = sz / (n / 256);
        for (size_t i = 0; i < sz; i++) w[i] = (uint8_t)(rand() & 0xff);
        const uint16_t d = es__f32_to_f16(0.001f);
        /* d (and dmin) where the type keeps them: Q6_K and Q3_K at the end, Q2_K d, dmin at 80 */
        const size_t d_at = t == ES__DTYPE_Q6_K ? 208 : t == ES__DTYPE_Q3_K ? 108 : t == ES__DTYPE_Q2_K ? 80 : 0;
        const bool has_min = t != ES__DTYPE_Q6_K && t != ES__DTYPE_Q3_K;
        for (size_t b = 0; b < n / 256; b++) {
            memcpy(w + bb * b + d_at, &d, 2);
            if (has_min) memcpy(w + bb * b + d_at + 2, &d, 2);
        }
    }
    if (es__is_q5_family(t)) { /* random quants, block scales (and mins) of 0.001 */
        const size_t bb = es__q5_block_bytes(t);
        const uint16_t d = es__f32_to_f16(0.001f);
        for (size_t i = 0; i < sz; i++) w[i] = (uint8_t)(rand() & 0xff);
        for (size_t b = 0; b < n / 32; b++) {
            memcpy(w + bb * b, &d, 2);
            if (t != ES__DTYPE_Q5_0) memcpy(w + bb * b + 2, &d, 2);
        }
    }
    if (t == ES__DTYPE_IQ4_NL) { /* random grid indices, block scales of 0.001 */
        const uint16_t d = es__f32_to_f16(0.001f);
        for (size_t i = 0; i < sz; i++) w[i] = (uint8_t)(rand() & 0xff);
        for (size_t b = 0; b < n / 32; b++) memcpy(w + 18 * b, &d, 2);
    }
    for (size_t i = 0; t == ES__DTYPE_F32 && i < n; i++) ((float *)w)[i] = frand();
    for (size_t i = 0; t == ES__DTYPE_F16 && i < n; i++) ((uint16_t *)w)[i] = es__f32_to_f16(frand());
    for (size_t i = 0; t == ES__DTYPE_BF16 && i < n; i++) {
        float f = frand();
        uint32_t x;
        memcpy(&x, &f, 4);
        ((uint16_t *)w)[i] = (uint16_t)(x >> 16);
    }
    for (size_t b = 0; t == ES__DTYPE_Q8_0 && b < n / 32; b++) {
        uint16_t d = es__f32_to_f16(0.01f);
        memcpy(w + 34 * b, &d, 2);
        for (int j = 0; j < 32; j++) w[34 * b + 2 + j] = (uint8_t)(int8_t)(frand() * 127);
    }
    for (size_t b = 0; t == ES__DTYPE_Q4_0 && b < n / 32; b++) {
        uint16_t d = es__f32_to_f16(0.1f);
        memcpy(w + 18 * b, &d, 2);
        for (int j = 0; j < 16; j++) w[18 * b + 2 + j] = (uint8_t)(rand() & 0xff);
    }
    *bytes = sz;
    return w;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_job;

static void *bw_read(void *arg) {
    bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 3 < j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Read bandwidth of a 1 GiB buffer with 1 and 2 threads: median of runs passes. */
static int membw(const vkbench_opts *o) {
    const size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 1;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    for (int threads = 1; threads <= 2; threads++) {
        double *t = calloc((size_t)o->runs, sizeof *t);
        uint64_t sink = 0;
        for (int r = 0; r < o->runs; r++) {
            pthread_t th[2];
            bw_job jobs[2];
            const double t0 = wall_ms();
            for (int k = 0; k < threads; k++) {
                jobs[k] = (bw_job){buf + n / (size_t)threads * (size_t)k, n / (size_t)threads, 0};
                pthread_create(&th[k], NULL, bw_read, &jobs[k]);
            }
            for (int k = 0; k < threads; k++) {
                pthread_join(th[k], NULL);
                sink += jobs[k].sum;
            }
            t[r] = wall_ms() - t0;
        }
        qsort(t, (size_t)o->runs, sizeof *t, cmp_d);
        printf("{\"op\": \"membw\", \"threads\": %d, \"read_gb_s\": %.2f, \"check\": %llu}\n", threads,
               (double)bytes / (t[o->runs / 2] * 1e-3) / 1e9, (unsigned long long)(sink & 1));
        free(t);
    }
    free(buf);
    return 0;
}

static int kernel_bench(const char *mode, const vkbench_opts *o) {
    es_backend_params bp = es_backend_default_params();
    bp.type = ES_BACKEND_VULKAN;
    bp.device = o->device;
    bp.vk_flags = o->vk_flags;
    es_backend *b = NULL;
    if (es_backend_create(&bp, &b) != ES_OK) {
        fprintf(stderr, "vkbench: %s\n", es_last_error());
        return 1;
    }
    if (o->tile >= 0) es__vk_dev_of(b)->policy.mm_tile_tokens = (uint32_t)o->tile;
    const bool disp = !strcmp(mode, "dispatch");
    const es__dtype type = disp ? ES__DTYPE_F32 : test_dtype_parse(o->type);
    const uint32_t rows = disp ? 8 : o->rows, K = disp ? 32 : o->cols, n = o->n;
    size_t wbytes = 0;
    void *w = make_weights(type, rows, K, &wbytes);
    float *x = malloc(sizeof(float) * K * n), *y = malloc(sizeof(float) * rows * n);
    double *t = calloc((size_t)o->runs, sizeof *t);
    if (!w || !x || !y || !t) return 1;
    for (size_t i = 0; i < (size_t)K * n; i++) x[i] = frand();
    int rc = 0;
    for (int r = 0; r < o->runs && rc == 0; r++)
        if (es__vk_run_mul_mat(b, type, w, rows, K, x, n, ES__EPI_STORE, y, (uint32_t)o->reps, &t[r]) != ES_OK) {
            fprintf(stderr, "vkbench: %s\n", es_backend_errmsg(b));
            rc = 1;
        }
    if (rc == 0) {
        qsort(t, (size_t)o->runs, sizeof *t, cmp_d);
        const double med = t[o->runs / 2];
        const uint32_t Kp = (K + 31) & ~31u;
        const double dev_bytes = (double)(es__vk_mat_row_bytes(type, Kp, 8, false) + es__vk_mat_row_bytes(type, Kp, 8, true)) * rows;
        printf("{\"op\": \"%s\", \"device\": \"%s\", \"type\": \"%s\", \"rows\": %u, \"cols\": %u, \"n\": %u, "
               "\"tile\": %u, \"reps\": %d, \"runs\": %d, \"flags\": \"%s\", \"ms_median\": %.4f, \"ms_min\": %.4f, "
               "\"weight_gb_s\": %.2f, \"gflop_s\": %.2f}\n",
               mode, es_backend_name(b), disp ? "f32" : o->type, rows, K, n, es__vk_dev_of(b)->policy.mm_tile_tokens,
               o->reps, o->runs, o->flags ? o->flags : "",
               med, t[0], dev_bytes / (med * 1e-3) / 1e9, 2.0 * rows * K * n / (med * 1e-3) / 1e9);
    }
    free(w);
    free(x);
    free(y);
    free(t);
    es_backend_free(b);
    return rc;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "mul_mat";
    vkbench_opts o;
    memset(&o, 0, sizeof o);
    o.type = "f32";
    o.vulkan = true;
    o.threads = 2;
    o.reps = 20;
    o.runs = 7;
    o.rows = o.cols = 4096;
    o.n = 1;
    o.tile = -1;
    o.tg = 128;
    o.tree = 32;
    o.pp[0] = 64;
    o.pp[1] = 512;
    o.n_pp = 2;
    bool reps_set = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--profile")) {
            o.profile = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "vkbench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--type")) o.type = v;
        else if (!strcmp(a, "--rows")) o.rows = (uint32_t)atoi(v);
        else if (!strcmp(a, "--cols")) o.cols = (uint32_t)atoi(v);
        else if (!strcmp(a, "--n")) o.n = (uint32_t)atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v), reps_set = true;
        else if (!strcmp(a, "--runs")) o.runs = atoi(v);
        else if (!strcmp(a, "--tile")) o.tile = atoi(v);
        else if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--flags")) o.flags = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--backend")) o.vulkan = strcmp(v, "cpu") != 0;
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--tg")) o.tg = atoi(v);
        else if (!strcmp(a, "--tree")) o.tree = atoi(v);
        else if (!strcmp(a, "--pp")) {
            o.n_pp = 0;
            for (const char *p = v; *p && o.n_pp < 8; p += strcspn(p, ",") + (p[strcspn(p, ",")] ? 1 : 0))
                o.pp[o.n_pp++] = atoi(p);
        } else {
            fprintf(stderr, "vkbench: unknown option %s\n", a);
            return 2;
        }
    }
    if (o.flags && es_vk_flags_parse(o.flags, &o.vk_flags) != ES_OK) {
        fprintf(stderr, "vkbench: %s\n", es_last_error());
        return 2;
    }
    if (o.reps < 1 || o.runs < 1) return 2;
    if (!strcmp(mode, "membw")) return membw(&o);
    if (!strcmp(mode, "model")) {
        if (!o.model) {
            fprintf(stderr, "vkbench model: -m FILE is required\n");
            return 2;
        }
        if (!reps_set) o.reps = 3;
        return vkbench_model(&o);
    }
    if (!strcmp(mode, "mul_mat") || !strcmp(mode, "dispatch")) return kernel_bench(mode, &o);
    fprintf(stderr, "vkbench: unknown mode %s (mul_mat, dispatch, membw, model)\n", mode);
    return 2;
}
