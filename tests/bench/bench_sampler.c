/* bench_sampler.c: time per es_sample call for the sampler configurations the CLI offers, at
 * vocabulary sizes of the test models, llama-2 (32000) and llama-3 (128256), so the sampler's
 * share of a decoding step can be compared with a forward call. Logits are random with a spread
 * like a language model's (most mass on a few dozen tokens). JSON lines on stdout; median and
 * minimum over repetitions of 200 calls each, wall time, and the median CPU time (less disturbed
 * on a shared machine).
 * Usage: bench_sampler [reps] */
#include "../common/bench_time.h"
#include "edgespec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uni(void) { /* [0, 1) */
    return (double)(bench_xorshift(&rng_state) >> 11) / 9007199254740992.0;
}

typedef struct config {
    const char *name;
    float temp;
    int32_t top_k;
    float top_p, min_p, penalty;
} config;

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    const int32_t vocabs[] = {512, 32000, 128256};
    const config configs[] = {
        {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f},
        {"CLI defaults (T 0.8, top-k 40, top-p 0.95, min-p 0.05)", 0.8f, 40, 0.95f, 0.05f, 1.0f},
        {"T 1, top-p 0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f},
        {"T 1, no filter", 1.0f, 0, 1.0f, 0.0f, 1.0f},
        {"CLI defaults + repeat penalty 1.1 over 64", 0.8f, 40, 0.95f, 0.05f, 1.1f},
    };
    enum { CALLS = 200, ROWS = 8 };
    int32_t history[64];
    for (int i = 0; i < 64; i++) history[i] = (int32_t)(uni() * 500);
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        const int32_t nv = vocabs[v];
        float *logits = malloc(sizeof(float) * (size_t)nv * ROWS);
        for (int64_t i = 0; i < (int64_t)nv * ROWS; i++) logits[i] = (float)(3.0 * (uni() + uni() + uni() - 1.5));
        for (int r = 0; r < ROWS; r++) /* a few clear favourites per row */
            for (int j = 0; j < 8; j++) logits[(size_t)r * (size_t)nv + (size_t)(uni() * nv)] += 6.0f + (float)j;
        for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
            const config *cf = &configs[c];
            es_sampler_params p = es_sampler_default_params();
            p.temperature = cf->temp;
            p.top_k = cf->top_k;
            p.top_p = cf->top_p;
            p.min_p = cf->min_p;
            p.repeat_penalty = cf->penalty;
            p.repeat_last_n = 64;
            es_sampler *s;
            if (es_sampler_create(nv, &p, NULL, &s) != ES_OK) {
                fprintf(stderr, "%s\n", es_last_error());
                return 1;
            }
            double *t = malloc(sizeof(double) * (size_t)reps), *cpu = malloc(sizeof(double) * (size_t)reps);
            int64_t sink = 0;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = bench_now(CLOCK_MONOTONIC), c0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
                for (int i = 0; i < CALLS; i++) {
                    int32_t tok;
                    es_sample(s, logits + (size_t)(i % ROWS) * (size_t)nv, i, history, 64, &tok);
                    sink += tok;
                }
                t[rep] = (bench_now(CLOCK_MONOTONIC) - t0) / CALLS * 1e6;
                cpu[rep] = (bench_now(CLOCK_PROCESS_CPUTIME_ID) - c0) / CALLS * 1e6;
            }
            const double t_med = bench_median(t, reps), cpu_med = bench_median(cpu, reps);
            printf("{\"bench\": \"sampler\", \"n_vocab\": %d, \"config\": \"%s\", \"us_per_call_median\": %.2f, "
                   "\"us_per_call_min\": %.2f, \"cpu_us_per_call_median\": %.2f, \"reps\": %d, \"calls\": %d, "
                   "\"check\": %lld}\n",
                   nv, cf->name, t_med, t[0], cpu_med, reps, CALLS, (long long)sink);
            free(t);
            free(cpu);
            es_sampler_free(s);
        }
        free(logits);
    }
    return 0;
}
