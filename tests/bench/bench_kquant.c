/* bench_kquant.c: the CPU kernels' one-token matrix-vector product per weight type, the K-quants
 * IQ4_NL, IQ4_XS, Q4_1, Q5_0 and Q5_1 beside Q4_0 and Q8_0, at every kernel level built in, on
 * one thread: once with a matrix that fits the L3 cache (the kernel's arithmetic rate) and once
 * with one four times the L3 (what decode sees). JSON lines on stdout: median and minimum wall time over repetitions, the median
 * process CPU time (less disturbed on a shared machine), weight GB/s and Gweights/s.
 * Usage: bench_kquant [reps [TYPE,TYPE,...]]   (the types by GGUF name; default all) */
#include "../common/bench_time.h"
#include "cpu/kern.h"

#include <stdio.h>
#include <string.h>

/* Whether the comma-separated list names name. */
static bool bench_list_has(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    const es__dtype types[] = {ES__DTYPE_Q4_0, ES__DTYPE_Q4_K, ES__DTYPE_Q5_K, ES__DTYPE_Q6_K, ES__DTYPE_Q8_0, ES__DTYPE_Q2_K,
                               ES__DTYPE_Q3_K, ES__DTYPE_IQ4_NL, ES__DTYPE_IQ4_XS, ES__DTYPE_Q4_1, ES__DTYPE_Q5_0, ES__DTYPE_Q5_1};
    const es__kern *levels[3] = {es__kern_generic(), es__kern_x86_v3(), es__kern_x86_v4()};
    const int64_t n_in = 4096, rows_l3 = 2048, rows_dram = 32768; /* 4.5 bits: 4.7 MiB and 75 MiB */
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    float *x = malloc(sizeof(float) * (size_t)n_in), *src = malloc(sizeof(float) * (size_t)n_in);
    float *y = malloc(sizeof(float) * (size_t)rows_dram);
    int panel_rows = 0; /* Q4_K prepares the activations in the panel */
    for (int li = 0; li < 3; li++)
        if (levels[li]) panel_rows = ES__MAX(panel_rows, levels[li]->panel_rows);
    float *panel = malloc(sizeof(float) * (size_t)(panel_rows * n_in));
    for (int64_t i = 0; i < n_in; i++) x[i] = (float)((double)(bench_xorshift(&rng) >> 11) / 9007199254740992.0 - 0.5);
    double *wall = malloc(sizeof(double) * (size_t)reps), *cpu = malloc(sizeof(double) * (size_t)reps);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        es__dtype_traits tr;
        es__dtype_info(types[ti], &tr);
        if (argc > 2 && !bench_list_has(argv[2], tr.name)) continue;
        const size_t rb = es__kern_row_bytes(types[ti], n_in);
        uint8_t *w = malloc(rb * (size_t)rows_dram);
        for (int64_t r = 0; r < 64; r++) { /* 64 distinct rows, repeated */
            for (int64_t i = 0; i < n_in; i++)
                src[i] = (float)((double)(bench_xorshift(&rng) >> 11) / 9007199254740992.0 - 0.5);
            es__quantize_row(types[ti], src, w + rb * (size_t)r, n_in);
        }
        for (int64_t r = 64; r < rows_dram; r++) memcpy(w + rb * (size_t)r, w + rb * (size_t)(r % 64), rb);
        for (int li = 0; li < 3; li++) {
            const es__kern *k = levels[li];
            if (!k) continue;
            for (int big = 0; big < 2; big++) {
                const int64_t rows = big ? rows_dram : rows_l3;
                k->matmul(types[ti], w, rb, n_in, 0, rows, x, n_in, 1, y, rows, panel); /* warm */
                for (int i = 0; i < reps; i++) {
                    const double t0 = bench_now(CLOCK_MONOTONIC), c0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
                    k->matmul(types[ti], w, rb, n_in, 0, rows, x, n_in, 1, y, rows, panel);
                    cpu[i] = bench_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                    wall[i] = bench_now(CLOCK_MONOTONIC) - t0;
                }
                const double med = bench_median(wall, reps), mn = wall[0], cmed = bench_median(cpu, reps);
                printf("{\"type\": \"%s\", \"level\": \"%s\", \"matrix\": \"%s\", \"rows\": %lld, \"cols\": %lld, "
                       "\"weight_bytes\": %zu, \"ms_median\": %.4f, \"ms_min\": %.4f, \"cpu_ms_median\": %.4f, "
                       "\"gbs_median\": %.3f, \"gweights_s_median\": %.3f}\n",
                       tr.name, k->name, big ? "4x L3" : "in L3", (long long)rows, (long long)n_in, rb * (size_t)rows,
                       med * 1e3, mn * 1e3, cmed * 1e3, (double)(rb * (size_t)rows) / med / 1e9,
                       (double)(rows * n_in) / med / 1e9);
                fflush(stdout);
            }
        }
        free(w);
    }
    free(x), free(src), free(y), free(panel), free(wall), free(cpu);
    return 0;
}
