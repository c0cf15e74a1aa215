/* bench_time.h: what the benchmark programs under tests/bench share: a clock, the median of
 * repeated timings (DESIGN.md: quote medians), and a small deterministic generator for their
 * inputs, so two runs time the same work. */
#ifndef ES_BENCH_TIME_H
#define ES_BENCH_TIME_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on clock (CLOCK_MONOTONIC for wall time, CLOCK_PROCESS_CPUTIME_ID for CPU time). */
static inline double bench_now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[n] (n > 0); v is left sorted, so v[0] is the minimum. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return v[n / 2];
}

/* xorshift64: the next value of the sequence in *state (never 0). */
static inline uint64_t bench_xorshift(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

#endif
