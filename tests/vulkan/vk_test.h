/* vk_test.h: helpers for the Vulkan tests: backends in each feature configuration, a log
 * callback that counts validation-layer messages (the validation run fails on any), weight data
 * in the GGUF layouts with an independent dequantiser, and error measures. */
#ifndef ES_VK_TEST_H
#define ES_VK_TEST_H

#ifndef ES_TEST_VULKAN
#define ES_TEST_VULKAN 1 /* every test here runs Vulkan */
#endif

#include "../common/vk_pin.h"
#include "edgespec.h"
#include "gguf.h"
#include "test.h"

#include <stdint.h>
#include <string.h>
#include "loader.h" /* Vulkan types, and the entry points the library opened */

/* The configurations every Vulkan test runs: the device's own features, every fallback at once,
 * storage buffers with native 8/16-bit loads and subgroups, texel buffers without subgroups. */
static const struct {
    const char *name;
    uint32_t flags;
} vk_configs[] = {
    {"default", 0},
    {"fallbacks", ES_VK_FALLBACKS},
    {"storage-buffers", ES_VK_STORAGE_BUFFERS},
    {"texel-no-subgroup", ES_VK_NO_SUBGROUP | ES_VK_TEXEL_BUFFERS},
};
#define VK_N_CONFIGS ((int)(sizeof vk_configs / sizeof vk_configs[0]))

static int vk_log_errors;
static void vk_test_log(es_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == ES_LOG_ERROR) {
        vk_log_errors++;
        fprintf(stderr, "log: %s\n", msg);
    }
}

/* A Vulkan backend on the pinned driver with fallback flags and a pipeline cache file (NULL =
 * none); NULL where creation failed. */
static inline es_backend *vk_backend_cached(uint32_t flags, const char *cache_path) {
    test_pin_vulkan();
    es_backend_params p = es_backend_default_params();
    p.type = ES_BACKEND_VULKAN;
    p.vk_flags = flags;
    p.pipeline_cache_path = cache_path;
    p.log_fn = vk_test_log;
    p.log_level = ES_LOG_WARN;
    es_backend *b = NULL;
    CHECK_OK(es_backend_create(&p, &b));
    return b;
}

static inline es_backend *vk_backend(uint32_t flags) {
    return vk_backend_cached(flags, NULL);
}

/* Every Vulkan test ends with this: no error was logged (validation messages are errors). */
#define VK_TEST_END()                                                                              \
    do {                                                                                           \
        CHECKF(vk_log_errors == 0, "%d error messages were logged (validation layer?)", vk_log_errors); \
        TEST_MAIN_END();                                                                           \
    } while (0)

/* ---- weight types (values as in the GGUF files) */
enum {
    T_F32 = 0,
    T_F16 = 1,
    T_Q4_0 = 2,
    T_Q4_1 = 3,
    T_Q5_0 = 6,
    T_Q5_1 = 7,
    T_Q8_0 = 8,
    T_Q2_K = 10,
    T_Q3_K = 11,
    T_Q4_K = 12,
    T_Q5_K = 13,
    T_Q6_K = 14,
    T_IQ4_NL = 20,
    T_IQ4_XS = 23,
    T_BF16 = 30
};
static inline bool is_kq(int t) {
    return t == T_Q2_K || t == T_Q3_K || t == T_Q4_K || t == T_Q5_K || t == T_Q6_K;
}
static inline bool is_q5(int t) { /* Q4_1, Q5_0, Q5_1: 32-element blocks with a min or a fifth bit */
    return t == T_Q4_1 || t == T_Q5_0 || t == T_Q5_1;
}
static inline size_t kq_bytes(int t) {
    return t == T_Q2_K ? 84 : t == T_Q3_K ? 110 : t == T_Q4_K ? 144 : t == T_Q5_K ? 176 : 210;
}

static inline float h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
    double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp((double)(m | 1024u), (int)e - 25);
    float f = (float)v;
    return s ? -f : f;
}
static inline uint16_t f2h(float f) { /* round to nearest even, normal range */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffffu;
    if (e <= 0) return (uint16_t)sign;
    if (e >= 31) return (uint16_t)(sign | 0x7bffu);
    uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)h;
}
static inline float bf2f(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline size_t row_bytes(int type, int64_t k) {
    switch (type) {
    case T_F32: return (size_t)k * 4;
    case T_F16:
    case T_BF16: return (size_t)k * 2;
    case T_Q8_0: return (size_t)k / 32 * 34;
    case T_Q4_0:
    case T_IQ4_NL: return (size_t)k / 32 * 18;
    case T_Q4_1: return (size_t)k / 32 * 20;
    case T_Q5_0: return (size_t)k / 32 * 22;
    case T_Q5_1: return (size_t)k / 32 * 24;
    case T_IQ4_XS: return (size_t)k / 256 * 136;
    case T_Q2_K:
    case T_Q3_K:
    case T_Q4_K:
    case T_Q5_K:
    case T_Q6_K: return (size_t)k / 256 * kq_bytes(type);
    }
    return 0;
}

/* Random weights of type (rows x k) in GGUF layout, and their exact f32 values in deq. */
static inline void *make_weights(test_rng *r, int type, int64_t rows, int64_t k, float *deq) {
    uint8_t *w = malloc(row_bytes(type, k) * (size_t)rows);
    for (int64_t i = 0; i < rows; i++) {
        uint8_t *row = w + row_bytes(type, k) * (size_t)i;
        float *d = deq + i * k;
        if (type == T_F32 || type == T_F16 || type == T_BF16) {
            for (int64_t j = 0; j < k; j++) {
                float v = test_rng_uniform(r);
                if (type == T_F32) {
                    memcpy(row + 4 * j, &v, 4);
                    d[j] = v;
                } else if (type == T_F16) {
                    uint16_t h = f2h(v);
                    memcpy(row + 2 * j, &h, 2);
                    d[j] = h2f(h);
                } else {
                    uint32_t x;
                    memcpy(&x, &v, 4);
                    uint16_t b = (uint16_t)(x >> 16);
                    memcpy(row + 2 * j, &b, 2);
                    d[j] = bf2f(b);
                }
            }
        } else if (is_kq(type)) {
            /* random quants and 6-/8-bit scales; f16 super-block scales in a normal range. The
             * values come from the library's dequantiser, which test_kquant checks against an
             * independent decoder and numpy. */
            for (int64_t b = 0; b < k / 256; b++) {
                uint8_t *blk = row + (size_t)b * kq_bytes(type);
                for (size_t j = 0; j < kq_bytes(type); j++) blk[j] = (uint8_t)test_rng_u64(r);
                const uint16_t dh = f2h(0.0005f + 0.001f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                const uint16_t mh = f2h(0.0005f + 0.002f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                if (type == T_Q6_K || type == T_Q3_K) {
                    memcpy(blk + (type == T_Q6_K ? 208 : 108), &dh, 2);
                } else if (type == T_Q2_K) {
                    memcpy(blk + 80, &dh, 2);
                    memcpy(blk + 82, &mh, 2);
                } else {
                    memcpy(blk, &dh, 2);
                    memcpy(blk + 2, &mh, 2);
                }
            }
            es__dequantize_row((uint32_t)type, row, d, k);
        } else if (is_q5(type)) {
            /* random quants (and fifth bits), a scale as Q4_0's and a min that may be either
             * sign; values from the library's dequantiser (test_kquant checks it) */
            const size_t bs = row_bytes(type, 32);
            for (int64_t b = 0; b < k / 32; b++) {
                uint8_t *blk = row + (size_t)b * bs;
                for (size_t j = 0; j < bs; j++) blk[j] = (uint8_t)test_rng_u64(r);
                const uint16_t dh = f2h(0.0002f + 0.002f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                const uint16_t mh = f2h(-0.02f + 0.03f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                memcpy(blk, &dh, 2);
                if (type != T_Q5_0) memcpy(blk + 2, &mh, 2);
            }
            es__dequantize_row((uint32_t)type, row, d, k);
        } else if (type == T_IQ4_XS) {
            /* random grid indices and 6-bit scales under an f16 super-block scale; values from the
             * library's dequantiser (test_kquant checks it against an independent decoder and numpy) */
            for (int64_t b = 0; b < k / 256; b++) {
                uint8_t *blk = row + (size_t)b * 136;
                for (size_t j = 0; j < 136; j++) blk[j] = (uint8_t)test_rng_u64(r);
                const uint16_t dh = f2h(0.00002f + 0.0002f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                memcpy(blk, &dh, 2);
            }
            es__dequantize_row((uint32_t)type, row, d, k);
        } else if (type == T_IQ4_NL) {
            /* random grid indices, scales as Q4_0's; values from the library's dequantiser
             * (test_kquant checks it against an independent decoder and numpy) */
            for (int64_t b = 0; b < k / 32; b++) {
                uint8_t *blk = row + (size_t)b * 18;
                const uint16_t dh = f2h(0.0002f + 0.002f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                memcpy(blk, &dh, 2);
                for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)test_rng_u64(r);
            }
            es__dequantize_row((uint32_t)type, row, d, k);
        } else {
            const int bs = type == T_Q8_0 ? 34 : 18;
            for (int64_t b = 0; b < k / 32; b++) {
                uint8_t *blk = row + (size_t)b * bs;
                uint16_t dh = f2h(0.002f + 0.02f * (float)(test_rng_u64(r) % 1000) / 1000.0f);
                memcpy(blk, &dh, 2);
                const float df = h2f(dh);
                for (int j = 0; j < 32; j++) {
                    if (type == T_Q8_0) {
                        int8_t q = (int8_t)((int)(test_rng_u64(r) % 255) - 127);
                        blk[2 + j] = (uint8_t)q;
                        d[b * 32 + j] = df * (float)q;
                    } else if (j < 16) {
                        uint8_t byte = (uint8_t)(test_rng_u64(r) & 0xff);
                        blk[2 + j] = byte;
                        d[b * 32 + j] = df * (float)((int)(byte & 15) - 8);
                        d[b * 32 + j + 16] = df * (float)((int)(byte >> 4) - 8);
                    }
                }
            }
        }
    }
    return w;
}

/* Normalised error of a dot-product-like result: |y - ref| / scale, scale > 0 (e.g. the sum of
 * |w x| over the reduction). NaN and infinities count as failures (returns +inf). */
static inline double norm_err(double y, double ref, double scale) {
    if (!isfinite(y)) return INFINITY;
    return fabs(y - ref) / (scale > 0 ? scale : 1e-30);
}

/* ---- random inputs, poison and error measures */

static inline double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* max |a - b| / scale; infinite when a has a NaN or an infinity */
static inline double diff(const float *a, const float *b, size_t n, double scale) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        m = fmax(m, fabs((double)a[i] - b[i]));
    }
    return m / (scale > 0 ? scale : 1);
}

static inline float *rand_vec(test_rng *r, size_t n, float scale) {
    float *x = malloc(sizeof *x * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = scale * test_rng_uniform(r);
    return x;
}

/* n NaNs: outputs start poisoned, so an element a kernel leaves unwritten fails every bound. */
static inline float *nan_vec(size_t n) {
    float *x = malloc(sizeof *x * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* A random batch tree of n nodes in DFS pre-order, as dfs_end[]: each node's parent is the node
 * before it or one of that node's ancestors, or none (a forest: several trees in one batch).
 * chain: each node's parent is the node before it. */
static inline void random_tree(test_rng *r, int32_t n, int32_t *dfs_end, int chain) {
    int32_t *parent = malloc(sizeof *parent * (size_t)n);
    for (int32_t j = 0; j < n; j++) {
        int32_t p = j - 1;
        if (!chain)
            while (p >= 0 && test_rng_u64(r) % 3 == 0) p = parent[p];
        parent[j] = p;
    }
    for (int32_t j = n - 1; j >= 0; j--) dfs_end[j] = j;
    for (int32_t j = n - 1; j >= 0; j--)
        if (parent[j] >= 0 && dfs_end[j] > dfs_end[parent[j]]) dfs_end[parent[j]] = dfs_end[j];
    free(parent);
}

/* Depth of node j of a DFS pre-order batch: its ancestors are the i < j whose subtree holds j. */
static inline int32_t tree_depth(const int32_t *dfs_end, int32_t j) {
    int32_t d = 0;
    for (int32_t i = 0; i < j; i++) d += dfs_end[i] >= j;
    return d;
}

#endif
