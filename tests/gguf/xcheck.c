/* xcheck.c: the C side of the C <-> Python (tools/pygguf) GGUF cross-check, driven by
 * test_pygguf.py:
 *   xcheck write-all OUT      write the shared reference content (below) with the C writer
 *   xcheck read-all FILE      read FILE (written by pygguf), check every value and tensor, and
 *                             require it to equal, byte for byte, what the C writer makes
 *   xcheck check-quant FILE   FILE holds f32 tensors "src.N" and, per type T (f16, bf16, q8_0,
 *                             q4_0, q4_1, q5_0, q5_1), "T.N" quantised by
 *                             pygguf and "deq.T.N" (its dequantisation); C must quantise src.N to
 *                             exactly T.N and dequantise T.N to exactly deq.T.N
 *   xcheck kquant IN OUT      for test_kquant.py: OUT gets "deq.NAME", the C dequantisation (f32)
 *                             of every K-quant tensor NAME of IN, and "T.N", the C quantisation of
 *                             every f32 tensor "src.N" of IN to each K-quant type T
 * The reference content is defined twice, here and in test_pygguf.py, on purpose. */
#include "gguf.h"

#include "../common/test_file.h"
#include "../test.h"

#include <stdint.h>

static const es__dtype types[5] = {ES__DTYPE_F32, ES__DTYPE_F16, ES__DTYPE_BF16, ES__DTYPE_Q8_0, ES__DTYPE_Q4_0};
static const char *const strs[4] = {"", "a", "\xe2\x96\x81the", "<0x0A>"};

/* Element i of tensor k: exact in float32 on both sides. */
static float ref_value(int k, int i) {
    return (float)(((i * 7919 + k * 13) % 2001) - 1000) / 64.0f;
}

static es__gguf_writer *reference_content(void) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -(1ll << 50);
    double f64 = -3.25e300;
    es__gguf_set_str(w, "general.architecture", "llama");
    es__gguf_set_str(w, "general.name", "xcheck");
    es__gguf_set_scalar(w, "s.u8", ES__GGUF_UINT8, &u8);
    es__gguf_set_scalar(w, "s.i8", ES__GGUF_INT8, &i8);
    es__gguf_set_scalar(w, "s.u16", ES__GGUF_UINT16, &u16);
    es__gguf_set_scalar(w, "s.i16", ES__GGUF_INT16, &i16);
    es__gguf_set_u32(w, "s.u32", 4000000000u);
    es__gguf_set_i32(w, "s.i32", -2000000000);
    es__gguf_set_f32(w, "s.f32", 0.1f);
    es__gguf_set_bool(w, "s.bool", true);
    es__gguf_set_u64(w, "s.u64", (1ull << 63) + 5);
    es__gguf_set_scalar(w, "s.i64", ES__GGUF_INT64, &i64);
    es__gguf_set_scalar(w, "s.f64", ES__GGUF_FLOAT64, &f64);
    es__gguf_set_str(w, "s.str", "h\xc3\xa9llo");
    uint8_t a8[3] = {0, 128, 255};
    int8_t ai8[3] = {-128, 0, 127};
    uint16_t a16[2] = {1, 65535};
    int16_t ai16[2] = {-32768, 32767};
    uint32_t a32[2] = {0, 4294967295u};
    int32_t ai32[3] = {-1, 0, 2147483647};
    float af[3] = {1.5f, -0.0f, 1e30f};
    bool ab[3] = {true, false, true};
    uint64_t a64[2] = {0, UINT64_MAX};
    int64_t ai64[2] = {INT64_MIN, 5};
    double ad[2] = {1e-300, -2.0};
    es__gguf_set_arr(w, "a.u8", ES__GGUF_UINT8, a8, 3);
    es__gguf_set_arr(w, "a.i8", ES__GGUF_INT8, ai8, 3);
    es__gguf_set_arr(w, "a.u16", ES__GGUF_UINT16, a16, 2);
    es__gguf_set_arr(w, "a.i16", ES__GGUF_INT16, ai16, 2);
    es__gguf_set_arr(w, "a.u32", ES__GGUF_UINT32, a32, 2);
    es__gguf_set_arr(w, "a.i32", ES__GGUF_INT32, ai32, 3);
    es__gguf_set_arr(w, "a.f32", ES__GGUF_FLOAT32, af, 3);
    es__gguf_set_arr(w, "a.bool", ES__GGUF_BOOL, ab, 3);
    es__gguf_set_arr(w, "a.u64", ES__GGUF_UINT64, a64, 2);
    es__gguf_set_arr(w, "a.i64", ES__GGUF_INT64, ai64, 2);
    es__gguf_set_arr(w, "a.f64", ES__GGUF_FLOAT64, ad, 2);
    es__gguf_set_arr(w, "a.empty", ES__GGUF_FLOAT32, NULL, 0);
    es__gguf_set_arr_str(w, "a.str", strs, 4);
    es__gguf_set_u32(w, "general.alignment", 64);
    /* one (3, 64) tensor per type, plus a 3-d f32 one */
    float x[192];
    for (int k = 0; k < 5; k++) {
        es__dtype_traits tr;
        es__dtype_info(types[k], &tr);
        for (int i = 0; i < 192; i++) x[i] = ref_value(k, i);
        uint8_t q[192 * 4];
        es__quantize_row(types[k], x, q, 192);
        char name[32];
        snprintf(name, sizeof name, "t.%s", tr.name);
        int64_t ne[2] = {64, 3};
        es__gguf_add_tensor(w, name, types[k], 2, ne, q);
    }
    for (int i = 0; i < 60; i++) x[i] = ref_value(5, i);
    int64_t ne3[3] = {5, 4, 3};
    es__gguf_add_tensor(w, "t.3d", ES__DTYPE_F32, 3, ne3, x);
    return w;
}

static void read_all(const char *path) {
    size_t n = 0;
    uint8_t *file = test_read_file(path, 0, &n);
    CHECKF(file != NULL, "cannot read %s", path);
    if (!file) return;
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(file, n, NULL, &err, &g));
    if (g) {
        uint32_t u32 = 0;
        int32_t i32 = 0;
        float f = 0;
        bool b = false;
        es__str s = {0};
        const es__gguf_kv *kv = NULL;
        CHECK(g->version == 3 && g->alignment == 64 && g->n_kv == 28 && g->n_tensors == 6);
        CHECK_OK(es__gguf_get_u32(g, "s.u8", true, &u32, &err));
        CHECK(u32 == 200);
        CHECK_OK(es__gguf_get_i32(g, "s.i16", true, &i32, &err));
        CHECK(i32 == -30000);
        CHECK_OK(es__gguf_get_u32(g, "s.u32", true, &u32, &err));
        CHECK(u32 == 4000000000u);
        CHECK_OK(es__gguf_get_f32(g, "s.f32", true, &f, &err));
        CHECK(f == 0.1f);
        CHECK_OK(es__gguf_get_bool(g, "s.bool", true, &b, &err));
        CHECK(b);
        CHECK_OK(es__gguf_get_str(g, "s.str", true, &s, &err));
        CHECK(es__str_eq(s, "h\xc3\xa9llo"));
        CHECK_OK(es__gguf_get_arr(g, "a.str", ES__GGUF_STRING, true, &kv, &err));
        for (int i = 0; kv && i < 4; i++) CHECK(kv->arr_n == 4 && es__str_eq(kv->strs[i], strs[i]));
        const es__gguf_tensor *t = es__gguf_find_tensor(g, "t.q4_0");
        CHECK(t && t->type == ES__DTYPE_Q4_0 && t->ne[0] == 64 && t->ne[1] == 3 && t->nbytes == 6 * 18);
        t = es__gguf_find_tensor(g, "t.3d");
        float v = 0;
        if (t) memcpy(&v, t->data + 4 * 59, 4);
        CHECK(t && t->n_dims == 3 && t->ne[2] == 3 && v == ref_value(5, 59));
        es__gguf_free(g);
    }
    /* and the whole file is what the C writer makes of the same content */
    es__gguf_writer *w = reference_content();
    uint8_t *mem = NULL;
    uint64_t size = 0;
    CHECK_OK(es__gguf_write_mem(w, &mem, &size, &err));
    CHECKF(mem && size == n && memcmp(mem, file, n) == 0, "pygguf's file (%zu bytes) differs from the C writer's (%llu)",
           n, (unsigned long long)size);
    es__free(NULL, mem);
    es__gguf_writer_free(w);
    free(file);
}

static void check_quant(const char *path) {
    size_t n = 0;
    uint8_t *file = test_read_file(path, 0, &n);
    CHECKF(file != NULL, "cannot read %s", path);
    if (!file) return;
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(file, n, NULL, &err, &g));
    int n_src = 0, bad = 0;
    for (uint64_t i = 0; g && i < g->n_tensors; i++) {
        const es__gguf_tensor *src = &g->tensors[i];
        if (src->name.len < 4 || memcmp(src->name.ptr, "src.", 4) != 0) continue;
        n_src++;
        int64_t ne = src->ne[0] * src->ne[1] * src->ne[2] * src->ne[3];
        float *x = malloc((size_t)ne * sizeof(float)), *y = malloc((size_t)ne * sizeof(float));
        uint8_t *q = malloc((size_t)ne * 4);
        memcpy(x, src->data, (size_t)ne * sizeof(float));
        static const es__dtype qtypes[] = {ES__DTYPE_F16,  ES__DTYPE_BF16, ES__DTYPE_Q8_0, ES__DTYPE_Q4_0,
                                           ES__DTYPE_Q4_1, ES__DTYPE_Q5_0, ES__DTYPE_Q5_1};
        for (size_t k = 0; k < sizeof qtypes / sizeof qtypes[0]; k++) {
            es__dtype_traits tr;
            es__dtype_info(qtypes[k], &tr);
            char name[96];
            snprintf(name, sizeof name, "%s.%.*s", tr.name, (int)(src->name.len - 4), src->name.ptr + 4);
            const es__gguf_tensor *pq = es__gguf_find_tensor(g, name);
            snprintf(name, sizeof name, "deq.%s.%.*s", tr.name, (int)(src->name.len - 4), src->name.ptr + 4);
            const es__gguf_tensor *pd = es__gguf_find_tensor(g, name);
            CHECKF(pq && pd, "missing %s", name);
            if (!pq || !pd) continue;
            CHECK(es__quantize_row(qtypes[k], x, q, ne));
            if (memcmp(q, pq->data, pq->nbytes) != 0) {
                for (uint64_t j = 0; j < pq->nbytes; j++)
                    if (q[j] != pq->data[j]) {
                        if (bad++ < 10)
                            CHECKF(0, "%s: quantised byte %llu: C 0x%02x, pygguf 0x%02x", name + 4,
                                   (unsigned long long)j, q[j], pq->data[j]);
                        break;
                    }
            }
            for (int64_t j = 0; j < ne; j++) y[j] = NAN;
            CHECK(es__dequantize_row(qtypes[k], pq->data, y, ne));
            if (memcmp(y, pd->data, (size_t)ne * sizeof(float)) != 0 && bad++ < 10)
                CHECKF(0, "%s: dequantised values differ", name);
        }
        free(x);
        free(y);
        free(q);
    }
    CHECK(n_src >= 3);
    es__gguf_free(g);
    free(file);
}

static void kquant(const char *in, const char *out) {
    static const es__dtype kt[] = {ES__DTYPE_Q4_K, ES__DTYPE_Q5_K,   ES__DTYPE_Q6_K, ES__DTYPE_Q2_K, ES__DTYPE_Q3_K,
                                   ES__DTYPE_IQ4_NL, ES__DTYPE_IQ4_XS, ES__DTYPE_Q4_1, ES__DTYPE_Q5_0, ES__DTYPE_Q5_1};
    size_t n = 0;
    uint8_t *file = test_read_file(in, 0, &n);
    CHECKF(file != NULL, "cannot read %s", in);
    if (!file) return;
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(file, n, NULL, &err, &g));
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    for (uint64_t i = 0; g && i < g->n_tensors; i++) {
        const es__gguf_tensor *t = &g->tensors[i];
        const int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        char name[96];
        if (es__is_k_quant(t->type) || t->type == ES__DTYPE_IQ4_NL || t->type == ES__DTYPE_IQ4_XS ||
            es__is_q5_family(t->type)) {
            float *y = malloc((size_t)ne * sizeof(float));
            CHECK(es__dequantize_row(t->type, t->data, y, ne));
            snprintf(name, sizeof name, "deq.%.*s", (int)t->name.len, t->name.ptr);
            CHECK_OK(es__gguf_add_tensor(w, name, ES__DTYPE_F32, t->n_dims, t->ne, y));
            free(y);
        } else if (t->type == ES__DTYPE_F32 && t->name.len > 4 && memcmp(t->name.ptr, "src.", 4) == 0) {
            uint8_t *q = malloc((size_t)ne);
            for (size_t k = 0; k < sizeof kt / sizeof kt[0]; k++) {
                es__dtype_traits tr;
                es__dtype_info(kt[k], &tr);
                CHECK(es__quantize_row(kt[k], (const float *)(const void *)t->data, q, ne));
                snprintf(name, sizeof name, "%s.%.*s", tr.name, (int)(t->name.len - 4), t->name.ptr + 4);
                CHECK_OK(es__gguf_add_tensor(w, name, kt[k], t->n_dims, t->ne, q));
            }
            free(q);
        }
    }
    CHECK_OK(es__gguf_write_file(w, out, &err));
    es__gguf_writer_free(w);
    es__gguf_free(g);
    free(file);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "kquant")) {
        kquant(argv[2], argv[3]);
        TEST_MAIN_END();
    }
    if (argc != 3) {
        fprintf(stderr, "usage: xcheck write-all|read-all|check-quant FILE | xcheck kquant IN OUT\n");
        return 2;
    }
    if (!strcmp(argv[1], "write-all")) {
        es__gguf_writer *w = reference_content();
        es__err err;
        CHECK_OK(es__gguf_write_file(w, argv[2], &err));
        es__gguf_writer_free(w);
    } else if (!strcmp(argv[1], "read-all")) {
        read_all(argv[2]);
    } else if (!strcmp(argv[1], "check-quant")) {
        check_quant(argv[2]);
    } else {
        fprintf(stderr, "xcheck: unknown mode %s\n", argv[1]);
        return 2;
    }
    TEST_MAIN_END();
}
