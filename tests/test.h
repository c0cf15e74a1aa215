/* test.h: a minimal test harness. A test program is a main() that runs checks; failures print
 * file:line and the expression, and the exit status is the failure count (capped), so meson sees
 * failures. No skips: every check runs. */
#ifndef ES_TEST_H
#define ES_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int es_test_failures;
static int es_test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        es_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            es_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        es_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            es_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Checks an es_status call and prints the library's message on failure. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        es_status es_test_s = (expr);                                                              \
        es_test_checks++;                                                                          \
        if (es_test_s != ES_OK) {                                                                  \
            es_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr,              \
                    es_status_str(es_test_s), es_last_error());                                     \
        }                                                                                          \
    } while (0)

/* Expects a specific failure status and a message containing needle. */
#define CHECK_FAILS(expr, status, needle)                                                          \
    do {                                                                                           \
        es_status es_test_s = (expr);                                                              \
        es_test_checks++;                                                                          \
        if (es_test_s != (status) || !strstr(es_last_error(), (needle))) {                         \
            es_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s: expected %s containing \"%s\", got %s: \"%s\"\n",          \
                    __FILE__, __LINE__, #expr, es_status_str(status), (needle),                    \
                    es_status_str(es_test_s), es_last_error());                                     \
        }                                                                                          \
    } while (0)

#define TEST_MAIN_END()                                                                            \
    do {                                                                                           \
        printf("%d checks, %d failed\n", es_test_checks, es_test_failures);                         \
        if (es_test_checks == 0) {                                                                 \
            fprintf(stderr, "no checks ran\n");                                                    \
            return 1;                                                                              \
        }                                                                                          \
        return es_test_failures > 100 ? 100 : es_test_failures;                                    \
    } while (0)

/* Deterministic test RNG (splitmix64), seeded per test so failures reproduce. */
typedef struct test_rng {
    unsigned long long s;
} test_rng;
static inline unsigned long long test_rng_u64(test_rng *r) {
    unsigned long long z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float test_rng_uniform(test_rng *r) { /* [-1, 1) */
    return (float)((double)(test_rng_u64(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

#endif /* ES_TEST_H */
