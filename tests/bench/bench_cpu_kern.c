/* bench_cpu_kern.c: the CPU backend's matrix-product kernel at every instruction-set level built
 * into the library (generic, x86-64-v3/v4 on x86, neon on AArch64), per weight type, for one token
 * (decode: the row-streaming path) and for a small batch (the register tiles), on the same random
 * weights and activations. JSON lines on stdout: the median CPU time per call over repetitions
 * (CPU time: less disturbed on a shared machine, and under qemu-user it is the emulator's time),
 * then each level's ratio against the generic level. Under qemu these are emulation times, which
 * follow the number of guest instructions, not a device's speed.
 * LEVEL, TYPE and N_TOK (a level's name, a type's name, 1 or batch) keep the run to one of each, for instruction counts
 * under qemu (tools/bench/qemu_icount.py counts the guest instructions of two runs that differ
 * only in reps: their difference is the kernel's).
 * Usage: bench_cpu_kern [reps] [n_in] [n_out] [batch] [LEVEL] [TYPE] [N_TOK] */
#include "../common/bench_time.h"
#include "cpu/kern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_LEVELS 4

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* A row of f32 values in [-0.5, 0.5), or of f16/bf16 halves with exponents 10..15. */
static void fill_float_row(es__dtype t, uint8_t *row, int64_t n_in) {
    for (int64_t k = 0; k < n_in; k++) {
        const uint64_t x = bench_xorshift(&rng_state);
        if (t == ES__DTYPE_F32) {
            const float f = (float)(x >> 40) / 16777216.0f - 0.5f;
            memcpy(row + 4 * k, &f, 4);
            continue;
        }
        const uint16_t h = t == ES__DTYPE_F16 ? (uint16_t)((x & 1) << 15 | (10 + (x >> 1) % 6) << 10 | (x >> 8 & 1023))
                                              : (uint16_t)(0x3c00 | (x & 0x807f));
        memcpy(row + 2 * k, &h, 2);
    }
}

/* Finite weights of every type: f16 halves with exponents 10..15; quantised blocks of random
 * bytes with f16 scales (d, and Q4_K's and Q2_K's dmin) of such a size. */
static void fill_weights(es__dtype t, uint8_t *w, size_t rows, int64_t n_in, size_t rb) {
    const bool floats = t == ES__DTYPE_F32 || t == ES__DTYPE_F16 || t == ES__DTYPE_BF16;
    const bool super = es__kern_row_bytes(t, 32) == 0; /* 256-element super-blocks */
    const int64_t per = super ? 256 : 32; /* elements per block */
    const size_t bb = es__kern_row_bytes(t, per);
    /* the f16 scales' offset in a block */
    const int at = t == ES__DTYPE_Q2_K ? 80 : t == ES__DTYPE_Q3_K ? 108 : t == ES__DTYPE_Q6_K ? 208 : 0;
    const int n_f16 = t == ES__DTYPE_Q4_K || t == ES__DTYPE_Q5_K || t == ES__DTYPE_Q2_K ? 2 : 1;
    for (size_t r = 0; r < rows; r++) {
        uint8_t *row = w + r * rb;
        if (floats) {
            fill_float_row(t, row, n_in);
            continue;
        }
        for (int64_t b = 0; b < n_in / per; b++) {
            uint8_t *blk = row + (size_t)b * bb;
            for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)bench_xorshift(&rng_state);
            for (int i = 0; i < n_f16; i++) {
                const uint16_t d = (uint16_t)(10 << 10 | (bench_xorshift(&rng_state) & 1023));
                memcpy(blk + at + 2 * i, &d, 2);
            }
        }
    }
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    const int64_t n_in = argc > 2 ? atoll(argv[2]) : 2048, n_out = argc > 3 ? atoll(argv[3]) : 128;
    const int64_t batch = argc > 4 ? atoll(argv[4]) : 6;
    const char *only_level = argc > 5 ? argv[5] : NULL, *only_type = argc > 6 ? argv[6] : NULL;
    const int64_t only_tok = argc > 7 ? atoll(argv[7]) : 0;
    if (reps < 1 || reps > 1000 || n_in < 32 || n_in % 32 || n_out < 1 || batch < 2) {
        fprintf(stderr, "usage: bench_cpu_kern [reps 1..1000] [n_in, a multiple of 32] [n_out] [batch >= 2]\n");
        return 2;
    }
    const es__kern *levels[N_LEVELS] = {es__kern_generic(), es__kern_x86_v3(), es__kern_x86_v4(), es__kern_neon()};
    const es__dtype types[] = {ES__DTYPE_F32,    ES__DTYPE_F16,    ES__DTYPE_BF16, ES__DTYPE_Q8_0, ES__DTYPE_Q4_0,
                               ES__DTYPE_Q4_K,   ES__DTYPE_Q5_K,   ES__DTYPE_Q6_K, ES__DTYPE_IQ4_NL,
                               ES__DTYPE_IQ4_XS, ES__DTYPE_Q2_K,   ES__DTYPE_Q3_K};
    const char *type_names[] = {"f32",  "f16",  "bf16",   "q8_0",   "q4_0", "q4_K",
                                "q5_K", "q6_K", "iq4_nl", "iq4_xs", "q2_K", "q3_K"};
    /* weights and activations 64-byte aligned, as the backend's (weights in pages; the context's
     * activations aligned for its 64-byte vectors); EDGESPEC_BENCH_X_OFFSET=N moves the activations
     * N bytes off (a multiple of 4: how misaligned rows cost the small-batch kernels) */
    const char *xoff_env = getenv("EDGESPEC_BENCH_X_OFFSET");
    const size_t xoff = xoff_env ? (size_t)atoi(xoff_env) / 4 * 4 % 64 : 0;
    void *x_mem = aligned_alloc(64, (sizeof(float) * (size_t)(n_in * batch) + xoff + 63) / 64 * 64);
    float *x = (float *)(void *)((uint8_t *)x_mem + xoff), *y = malloc(sizeof(float) * (size_t)(n_out * batch));
    int panel_rows = 0;
    for (int l = 0; l < N_LEVELS; l++)
        if (levels[l]) panel_rows = ES__MAX(panel_rows, levels[l]->panel_rows);
    float *panel = malloc(sizeof(float) * (size_t)(panel_rows * n_in));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int64_t i = 0; i < n_in * batch; i++) x[i] = (float)(bench_xorshift(&rng_state) >> 40) / 16777216.0f - 0.5f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        if (only_type && strcmp(only_type, type_names[ti]) != 0) continue;
        if (es__kern_row_bytes(types[ti], n_in) == 0) continue; /* rows not whole super-blocks */
        const size_t rb = es__kern_row_bytes(types[ti], n_in);
        uint8_t *w = aligned_alloc(64, (rb * (size_t)n_out + 63) / 64 * 64);
        fill_weights(types[ti], w, (size_t)n_out, n_in, rb);
        for (int64_t n_tok = 1; n_tok <= batch; n_tok += batch - 1) {
            if (only_tok && n_tok != only_tok) continue;
            double med[N_LEVELS] = {0};
            for (int l = 0; l < N_LEVELS; l++) {
                const es__kern *k = levels[l];
                if (!k || (only_level && strcmp(only_level, k->name) != 0)) continue;
                k->matmul(types[ti], w, rb, n_in, 0, n_out, x, n_in, n_tok, y, n_out, panel); /* warm up */
                for (int r = 0; r < reps; r++) {
                    const double c0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
                    for (int i = 0; i < 4; i++)
                        k->matmul(types[ti], w, rb, n_in, 0, n_out, x, n_in, n_tok, y, n_out, panel);
                    t[r] = (bench_now(CLOCK_PROCESS_CPUTIME_ID) - c0) / 4;
                }
                med[l] = bench_median(t, reps);
                printf("{\"bench\": \"cpu_kern\", \"level\": \"%s\", \"type\": \"%s\", \"n_in\": %lld, \"n_out\": %lld, "
                       "\"n_tok\": %lld, \"cpu_us_per_call_median\": %.2f, \"cpu_us_per_call_min\": %.2f, \"reps\": %d, "
                       "\"y0\": %.9g}\n",
                       k->name, type_names[ti], (long long)n_in, (long long)n_out, (long long)n_tok, 1e6 * med[l],
                       1e6 * t[0], reps, (double)y[0]);
            }
            for (int l = 1; l < N_LEVELS; l++)
                if (levels[l] && med[0] > 0 && med[l] > 0)
                    printf("{\"bench\": \"cpu_kern_ratio\", \"level\": \"%s\", \"type\": \"%s\", \"n_tok\": %lld, "
                           "\"generic_over_level\": %.2f}\n",
                           levels[l]->name, type_names[ti], (long long)n_tok, med[0] / med[l]);
        }
        free(w);
    }
    free(x_mem), free(y), free(panel), free(t);
    return 0;
}
