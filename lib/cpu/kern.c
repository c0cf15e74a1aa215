/* kern.c: choosing the kernel level (kern.h) for the running CPU. The levels themselves are
 * kern_impl.c compiled several times; this file only asks the CPU what it supports. */
#include "kern.h"

#include <stdlib.h>
#include <string.h>

const es__kern *es__kern_generic_impl(void);
#ifdef ES_HAVE_KERN_X86
const es__kern *es__kern_x86_v3_impl(void);
const es__kern *es__kern_x86_v4_impl(void);
#endif
#ifdef ES_HAVE_KERN_NEON
const es__kern *es__kern_neon_impl(void);
#endif

const es__kern *es__kern_generic(void) {
    return es__kern_generic_impl();
}

#ifdef ES_HAVE_KERN_X86
#include <cpuid.h>

static bool has_v3(void) {
    __builtin_cpu_init();
    /* F16C is CPUID.1:ECX bit 29 (not every compiler's __builtin_cpu_supports knows it); the AVX
     * checks above it also cover the operating system's saving of the vector registers */
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static bool has_v4(void) {
    return has_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
}
const es__kern *es__kern_x86_v3(void) {
    return has_v3() ? es__kern_x86_v3_impl() : NULL;
}
const es__kern *es__kern_x86_v4(void) {
    return has_v4() ? es__kern_x86_v4_impl() : NULL;
}
#else
const es__kern *es__kern_x86_v3(void) {
    return NULL;
}
const es__kern *es__kern_x86_v4(void) {
    return NULL;
}
#endif

/* NEON is part of the AArch64 base architecture (and of Android's arm64-v8a): no run-time check. */
const es__kern *es__kern_neon(void) {
#ifdef ES_HAVE_KERN_NEON
    return es__kern_neon_impl();
#else
    return NULL;
#endif
}

const es__kern *es__kern_best(void) {
    const char *cap = getenv("EDGESPEC_CPU_KERNELS");
    const es__kern *v4 = es__kern_x86_v4(), *v3 = es__kern_x86_v3();
    if (cap && strcmp(cap, "generic") == 0) return es__kern_generic();
    if (cap && strcmp(cap, "x86-64-v3") == 0) return v3 ? v3 : es__kern_generic();
    if (v4) return v4;
    if (v3) return v3;
    if (es__kern_neon()) return es__kern_neon();
    return es__kern_generic();
}

size_t es__kern_row_bytes(es__dtype type, int64_t n) {
    if (n < 0) return 0;
    switch (type) {
    case ES__DTYPE_F32: return (size_t)n * 4;
    case ES__DTYPE_F16:
    case ES__DTYPE_BF16: return (size_t)n * 2;
    case ES__DTYPE_Q8_0: return n % 32 ? 0 : (size_t)(n / 32) * 34;
    case ES__DTYPE_Q4_0: return n % 32 ? 0 : (size_t)(n / 32) * 18;
    case ES__DTYPE_Q4_1:
    case ES__DTYPE_Q5_0:
    case ES__DTYPE_Q5_1: return n % 32 ? 0 : (size_t)(n / 32) * es__q5_block_bytes(type);
    case ES__DTYPE_Q4_K: return n % 256 ? 0 : (size_t)(n / 256) * 144;
    case ES__DTYPE_Q5_K: return n % 256 ? 0 : (size_t)(n / 256) * 176;
    case ES__DTYPE_Q6_K: return n % 256 ? 0 : (size_t)(n / 256) * 210;
    case ES__DTYPE_Q2_K: return n % 256 ? 0 : (size_t)(n / 256) * 84;
    case ES__DTYPE_Q3_K: return n % 256 ? 0 : (size_t)(n / 256) * 110;
    case ES__DTYPE_IQ4_NL: return n % 32 ? 0 : (size_t)(n / 32) * 18;
    case ES__DTYPE_IQ4_XS: return n % 256 ? 0 : (size_t)(n / 256) * ES__IQ4XS_BYTES;
    }
    return 0;
}
