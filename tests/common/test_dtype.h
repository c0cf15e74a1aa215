/* test_dtype.h: the weight types the backends compute with, named as GGUF names them (the
 * library's own table, es__dtype_info), for the messages of tests and the command lines of test
 * helpers and benchmarks (tests/cpu/cpu_logits, tools/vkbench). */
#ifndef ES_TEST_DTYPE_H
#define ES_TEST_DTYPE_H

#include "gguf.h"

#include <string.h>

static const es__dtype test_dtypes[] = {ES__DTYPE_F32, ES__DTYPE_F16, ES__DTYPE_BF16, ES__DTYPE_Q8_0, ES__DTYPE_Q4_0};

static inline const char *test_dtype_name(es__dtype t) {
    es__dtype_traits tr;
    return es__dtype_info((uint32_t)t, &tr) ? tr.name : "?";
}

/* The type named s (any type the library reads, the K-quants included); f32 when s names none. */
static inline es__dtype test_dtype_parse(const char *s) {
    for (uint32_t t = 0; t < 64; t++)
        if (es__dtype_info(t, NULL) && strcmp(s, test_dtype_name((es__dtype)t)) == 0) return (es__dtype)t;
    return ES__DTYPE_F32;
}

#endif
