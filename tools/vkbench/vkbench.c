/* vkbench: micro-benchmarks of single Vulkan kernels (the forward pass is measured by
 * tools/bench). Prints one JSON object per measurement on stdout:
 *   edgespec-vkbench mul_mat [--type f32|f16|bf16|q8_0|q4_0] [--rows M] [--cols K] [--n N]
 *                            [--reps R] [--runs S] [--device SEL] [--flags FLAGS]
 *   edgespec-vkbench dispatch [--reps R] [--runs S]      (fixed cost per dispatch and submit)
 * Weight bandwidth is the bytes of the device layout read per dispatch divided by the median
 * time per dispatch (R dispatches in one submission, S submissions).
 * It deliberately checks results only loosely (a sanity check); tests/vulkan does it properly. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static uint16_t f32_to_f16(float f) { /* round to nearest even; fine for benchmark data */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffffu;
    if (e <= 0) return (uint16_t)sign;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)h;
}

/* Makes rows x K random weights of type in GGUF layout; returns bytes. */
static void *make_weights(es__dtype t, uint32_t rows, uint32_t K, size_t *bytes) {
    const size_t n = (size_t)rows * K;
    size_t sz = t == ES__DTYPE_F32 ? n * 4 : t == ES__DTYPE_Q8_0 ? n / 32 * 34 : t == ES__DTYPE_Q4_0 ? n / 32 * 18 : n * 2;
    uint8_t *w = malloc(sz);
    if (!w) return NULL;
    for (size_t i = 0; t == ES__DTYPE_F32 && i < n; i++) ((float *)w)[i] = frand();
    for (size_t i = 0; t == ES__DTYPE_F16 && i < n; i++) ((uint16_t *)w)[i] = f32_to_f16(frand());
    for (size_t i = 0; t == ES__DTYPE_BF16 && i < n; i++) {
        float f = frand();
        uint32_t x;
        memcpy(&x, &f, 4);
        ((uint16_t *)w)[i] = (uint16_t)(x >> 16);
    }
    for (size_t b = 0; t == ES__DTYPE_Q8_0 && b < n / 32; b++) {
        uint16_t d = f32_to_f16(0.01f);
        memcpy(w + 34 * b, &d, 2);
        for (int j = 0; j < 32; j++) w[34 * b + 2 + j] = (uint8_t)(int8_t)(frand() * 127);
    }
    for (size_t b = 0; t == ES__DTYPE_Q4_0 && b < n / 32; b++) {
        uint16_t d = f32_to_f16(0.1f);
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

static es__dtype parse_type(const char *s) {
    if (!strcmp(s, "f16")) return ES__DTYPE_F16;
    if (!strcmp(s, "bf16")) return ES__DTYPE_BF16;
    if (!strcmp(s, "q8_0")) return ES__DTYPE_Q8_0;
    if (!strcmp(s, "q4_0")) return ES__DTYPE_Q4_0;
    return ES__DTYPE_F32;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "mul_mat";
    const char *type_s = "f32", *device = NULL, *flags = NULL;
    uint32_t rows = 4096, K = 4096, n = 1, reps = 20, runs = 7;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--type")) type_s = argv[i + 1];
        else if (!strcmp(argv[i], "--rows")) rows = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) K = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--n")) n = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs")) runs = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else if (!strcmp(argv[i], "--flags")) flags = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    es_backend_params bp = es_backend_default_params();
    bp.type = ES_BACKEND_VULKAN;
    bp.device = device;
    if (flags && es__vk_parse_flags(flags, &bp.vk_flags, NULL) != ES_OK) {
        fprintf(stderr, "vkbench: %s\n", es_last_error());
        return 2;
    }
    es_backend *b = NULL;
    if (es_backend_create(&bp, &b) != ES_OK) {
        fprintf(stderr, "vkbench: %s\n", es_last_error());
        return 1;
    }
    const es__dtype type = parse_type(type_s);
    if (!strcmp(mode, "dispatch")) {
        rows = 8;
        K = 32;
        type_s = "f32";
    }
    size_t wbytes = 0;
    void *w = make_weights(!strcmp(mode, "dispatch") ? ES__DTYPE_F32 : type, rows, K, &wbytes);
    float *x = malloc(sizeof(float) * K * n), *y = malloc(sizeof(float) * rows * n);
    double *t = calloc(runs, sizeof *t);
    if (!w || !x || !y || !t) return 1;
    for (size_t i = 0; i < (size_t)K * n; i++) x[i] = frand();
    int rc = 0;
    for (uint32_t r = 0; r < runs && rc == 0; r++)
        if (es__vk_run_mul_mat(b, !strcmp(mode, "dispatch") ? ES__DTYPE_F32 : type, w, rows, K, x, n, ES__EPI_STORE, y,
                               reps, &t[r]) != ES_OK) {
            fprintf(stderr, "vkbench: %s\n", es_backend_errmsg(b));
            rc = 1;
        }
    if (rc == 0) {
        qsort(t, runs, sizeof *t, cmp_d);
        const double med = t[runs / 2];
        const double dev_bytes = (double)es__vk_mat_row_bytes(type, (K + 31) & ~31u, false) * rows +
                                 (double)es__vk_mat_row_bytes(type, (K + 31) & ~31u, true) * rows;
        printf("{\"op\": \"%s\", \"device\": \"%s\", \"type\": \"%s\", \"rows\": %u, \"cols\": %u, \"n\": %u, "
               "\"reps\": %u, \"runs\": %u, \"flags\": \"%s\", \"ms_median\": %.4f, \"ms_min\": %.4f, "
               "\"weight_gb_s\": %.2f, \"gflop_s\": %.2f}\n",
               mode, es_backend_name(b), type_s, rows, K, n, reps, runs, flags ? flags : "", med, t[0],
               dev_bytes / (med * 1e-3) / 1e9, 2.0 * rows * K * n / (med * 1e-3) / 1e9);
    }
    free(w);
    free(x);
    free(y);
    free(t);
    es_backend_free(b);
    return rc;
}
