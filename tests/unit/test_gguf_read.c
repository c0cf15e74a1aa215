/* test_gguf_read.c: the GGUF reader on files assembled byte by byte here (independent of the
 * writer): every value type, string arrays, alignment, tensor views, typed getters and their
 * type/range errors, v2 and v3, every truncated prefix; and on the real llama.cpp vocabulary
 * files in ../shared/vocab-tests. */
#include "gguf.h"

#include "../common/test_file.h"
#include "../test.h"

#include <stdint.h>

typedef struct buf {
    uint8_t b[4096];
    size_t n;
} buf;

static void put(buf *f, const void *p, size_t n) {
    memcpy(f->b + f->n, p, n);
    f->n += n;
}
static void put_u32(buf *f, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(f, b, 4);
}
static void put_u64(buf *f, uint64_t v) {
    put_u32(f, (uint32_t)v);
    put_u32(f, (uint32_t)(v >> 32));
}
static void put_str(buf *f, const char *s) {
    put_u64(f, strlen(s));
    put(f, s, strlen(s));
}
static void put_key(buf *f, const char *k, uint32_t type) {
    put_str(f, k);
    put_u32(f, type);
}

/* A v3 (or v2) file with 16 kvs and two tensors: "a" f32 (4, 2) and "b" q8_0 (32, 1, 1, 2). */
static size_t build(buf *f, uint32_t version, uint32_t alignment) {
    f->n = 0;
    put_u32(f, 0x46554747u);
    put_u32(f, version);
    put_u64(f, 2);  /* tensors */
    put_u64(f, 16); /* kvs */
    put_key(f, "general.architecture", 8);
    put_str(f, "llama");
    put_key(f, "t.u8", 0);
    put(f, "\xfe", 1);
    put_key(f, "t.i8", 1);
    put(f, "\xfe", 1); /* -2 */
    put_key(f, "t.u16", 2);
    put(f, "\x34\x12", 2);
    put_key(f, "t.i16", 3);
    put(f, "\xff\xff", 2);
    put_key(f, "t.u32", 4);
    put_u32(f, 4000000000u);
    put_key(f, "t.i32", 5);
    put_u32(f, (uint32_t)-123456);
    put_key(f, "t.f32", 6);
    float fv = 1.5f;
    put(f, &fv, 4);
    put_key(f, "t.bool", 7);
    put(f, "\x01", 1);
    put_key(f, "t.u64", 10);
    put_u64(f, 1ull << 40);
    put_key(f, "t.i64", 11);
    put_u64(f, (uint64_t)-5);
    put_key(f, "t.f64", 12);
    double dv = 0.25;
    put(f, &dv, 8);
    put_key(f, "t.arr_i32", 9);
    put_u32(f, 5);
    put_u64(f, 3);
    put_u32(f, 7);
    put_u32(f, (uint32_t)-8);
    put_u32(f, 9);
    put_key(f, "t.arr_str", 9);
    put_u32(f, 8);
    put_u64(f, 3);
    put_str(f, "x");
    put_str(f, "");
    put_str(f, "\xe2\x96\x81hi");
    put_key(f, "t.empty_arr", 9);
    put_u32(f, 6);
    put_u64(f, 0);
    put_key(f, "general.alignment", 4);
    put_u32(f, alignment);
    /* tensor infos */
    put_str(f, "a");
    put_u32(f, 2);
    put_u64(f, 4);
    put_u64(f, 2);
    put_u32(f, 0);
    put_u64(f, 0);
    put_str(f, "b");
    put_u32(f, 4);
    put_u64(f, 32);
    put_u64(f, 1);
    put_u64(f, 1);
    put_u64(f, 2);
    put_u32(f, 8);
    put_u64(f, alignment > 32 ? alignment : 32);
    size_t data = (f->n + alignment - 1) / alignment * alignment;
    while (f->n < data) f->b[f->n++] = 0;
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        put(f, &v, 4);
    }
    while (f->n < data + (alignment > 32 ? alignment : 32)) f->b[f->n++] = 0;
    for (int i = 0; i < 68; i++) f->b[f->n++] = (uint8_t)i;
    return data;
}

static void test_valid(uint32_t version, uint32_t alignment) {
    buf f;
    size_t data = build(&f, version, alignment);
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(f.b, f.n, NULL, &err, &g));
    if (!g) return;
    CHECK(g->version == version && g->n_kv == 16 && g->n_tensors == 2);
    CHECK(g->alignment == alignment && g->data_offset == data);
    const es__gguf_tensor *a = es__gguf_find_tensor(g, "a"), *b = es__gguf_find_tensor(g, "b");
    CHECK(a && b && !es__gguf_find_tensor(g, "c") && !es__gguf_find_tensor(g, "aa"));
    if (a && b) {
        CHECK(a->n_dims == 2 && a->ne[0] == 4 && a->ne[1] == 2 && a->ne[2] == 1 && a->type == ES__DTYPE_F32);
        CHECK(a->nbytes == 32 && a->data == f.b + data);
        float v;
        memcpy(&v, (const uint8_t *)a->data + 12, 4);
        CHECK(v == 3.0f);
        CHECK(b->n_dims == 4 && b->ne[3] == 2 && b->type == ES__DTYPE_Q8_0 && b->nbytes == 68);
        CHECK(b->data[0] == 0 && b->data[67] == 67);
    }
    uint32_t u32 = 0;
    int32_t i32 = 0;
    float f32 = 0;
    bool bl = false;
    es__str s = {0};
    CHECK_OK(es__gguf_get_u32(g, "t.u8", true, &u32, &err));
    CHECK(u32 == 254);
    CHECK_OK(es__gguf_get_i32(g, "t.i8", true, &i32, &err));
    CHECK(i32 == -2);
    CHECK_OK(es__gguf_get_u32(g, "t.u16", true, &u32, &err));
    CHECK(u32 == 0x1234);
    CHECK_OK(es__gguf_get_i32(g, "t.i16", true, &i32, &err));
    CHECK(i32 == -1);
    CHECK_OK(es__gguf_get_u32(g, "t.u32", true, &u32, &err));
    CHECK(u32 == 4000000000u);
    CHECK_OK(es__gguf_get_i32(g, "t.i32", true, &i32, &err));
    CHECK(i32 == -123456);
    CHECK_OK(es__gguf_get_i32(g, "t.i64", true, &i32, &err));
    CHECK(i32 == -5);
    CHECK_OK(es__gguf_get_f32(g, "t.f32", true, &f32, &err));
    CHECK(f32 == 1.5f);
    CHECK_OK(es__gguf_get_f32(g, "t.f64", true, &f32, &err));
    CHECK(f32 == 0.25f);
    CHECK_OK(es__gguf_get_bool(g, "t.bool", true, &bl, &err));
    CHECK(bl);
    CHECK_OK(es__gguf_get_str(g, "general.architecture", true, &s, &err));
    CHECK(es__str_eq(s, "llama") && !es__str_eq(s, "llam") && !es__str_eq(s, "llamas"));
    const es__gguf_kv *kv = NULL;
    CHECK_OK(es__gguf_get_arr(g, "t.arr_str", ES__GGUF_STRING, true, &kv, &err));
    CHECK(kv && kv->arr_n == 3 && kv->strs && es__str_eq(kv->strs[0], "x") && kv->strs[1].len == 0 &&
          es__str_eq(kv->strs[2], "\xe2\x96\x81hi"));
    CHECK_OK(es__gguf_get_arr(g, "t.arr_i32", ES__GGUF_INT32, true, &kv, &err));
    CHECK(kv && kv->arr_n == 3 && kv->value[4] == 0xf8 && kv->value[8] == 9);
    CHECK_OK(es__gguf_get_arr(g, "t.empty_arr", ES__GGUF_FLOAT32, true, &kv, &err));
    CHECK(kv && kv->arr_n == 0);

    /* type and range errors name the key and its offset */
    CHECK_FAILS(es__gguf_get_u32(g, "t.i8", true, &u32, &err), ES_ERR_FORMAT, "'t.i8'");
    CHECK_FAILS(es__gguf_get_u32(g, "t.i8", true, &u32, &err), ES_ERR_FORMAT, "does not fit");
    CHECK_FAILS(es__gguf_get_i32(g, "t.u32", true, &i32, &err), ES_ERR_FORMAT, "value 4000000000 does not fit");
    CHECK_FAILS(es__gguf_get_u32(g, "t.u64", true, &u32, &err), ES_ERR_FORMAT, "'t.u64' (offset ");
    CHECK_FAILS(es__gguf_get_u32(g, "t.f32", true, &u32, &err), ES_ERR_FORMAT, "expected an integer, found float32");
    CHECK_FAILS(es__gguf_get_f32(g, "t.u8", true, &f32, &err), ES_ERR_FORMAT, "expected float32, found uint8");
    CHECK_FAILS(es__gguf_get_str(g, "t.arr_str", true, &s, &err), ES_ERR_FORMAT, "found array of string");
    CHECK_FAILS(es__gguf_get_arr(g, "t.arr_str", ES__GGUF_INT32, true, &kv, &err), ES_ERR_FORMAT,
                "expected array of int32");
    CHECK_FAILS(es__gguf_get_bool(g, "t.u8", true, &bl, &err), ES_ERR_FORMAT, "expected bool");
    CHECK(err.status == ES_ERR_FORMAT && strstr(err.msg, "t.u8"));
    CHECK_FAILS(es__gguf_get_u32(g, "nope", true, &u32, &err), ES_ERR_MODEL, "missing required metadata key 'nope'");
    u32 = 77;
    CHECK_OK(es__gguf_get_u32(g, "nope", false, &u32, &err));
    CHECK(u32 == 77);
    es__gguf_free(g);
}

static void test_truncation(void) {
    buf f;
    build(&f, 3, 32);
    size_t full = f.n;
    int bad = 0;
    /* every proper prefix is malformed (the last tensor's data runs to the end) */
    for (size_t n = 0; n < full; n++) {
        es__gguf *g = (es__gguf *)&f; /* poison: must be reset to NULL */
        es__err err = {ES_OK, ""};
        es_status s = es__gguf_parse(f.b, n, NULL, &err, &g);
        bool ok = s == ES_ERR_FORMAT && g == NULL && err.status == ES_ERR_FORMAT && strstr(err.msg, "offset");
        if (!ok && bad++ < 5) CHECKF(ok, "prefix %zu: %s: %s", n, es_status_str(s), err.msg);
    }
    CHECK(bad == 0);
    es__gguf *g = NULL;
    es__err err;
    CHECK_FAILS(es__gguf_parse(f.b, 20, NULL, &err, &g), ES_ERR_FORMAT, "truncated file: metadata count at offset 16");
    CHECK_FAILS(es__gguf_parse(f.b, full - 1, NULL, &err, &g), ES_ERR_FORMAT, "tensor #1 'b'");
    CHECK_FAILS(es__gguf_parse(NULL, 0, NULL, &err, &g), ES_ERR_FORMAT, "magic at offset 0");
    /* magic and version */
    f.b[0] = 'g';
    CHECK_FAILS(es__gguf_parse(f.b, full, NULL, &err, &g), ES_ERR_FORMAT, "bad magic at offset 0");
    f.b[0] = 'G';
    f.b[4] = 1;
    CHECK_FAILS(es__gguf_parse(f.b, full, NULL, &err, &g), ES_ERR_UNSUPPORTED, "GGUF version 1");
    f.b[4] = 4;
    CHECK_FAILS(es__gguf_parse(f.b, full, NULL, &err, &g), ES_ERR_UNSUPPORTED, "version 4 at offset 4");
    f.b[4] = 0;
    f.b[7] = 3;
    CHECK_FAILS(es__gguf_parse(f.b, full, NULL, &err, &g), ES_ERR_UNSUPPORTED, "big-endian");
}

static void test_vocab_file(const char *name, const char *model, uint64_t n_tokens) {
    const char *dir = getenv("ES_SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab-tests/%s", dir ? dir : "../shared", name);
    size_t n = 0;
    uint8_t *p = test_read_file(path, 0, &n);
    CHECKF(p != NULL, "cannot read %s", path);
    if (!p) return;
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(p, n, NULL, &err, &g));
    if (g) {
        const es__gguf_kv *kv = NULL;
        es__str s = {0};
        CHECK(g->n_tensors == 0);
        CHECK_OK(es__gguf_get_str(g, "tokenizer.ggml.model", true, &s, &err));
        CHECK(es__str_eq(s, model));
        CHECK_OK(es__gguf_get_arr(g, "tokenizer.ggml.tokens", ES__GGUF_STRING, true, &kv, &err));
        CHECKF(kv && kv->arr_n == n_tokens, "%s: %llu tokens", name, kv ? (unsigned long long)kv->arr_n : 0ull);
        es__gguf_free(g);
    }
    free(p);
}

int main(void) {
    test_valid(3, 32);
    test_valid(2, 32);
    test_valid(3, 64);
    test_valid(3, 8);
    test_truncation();
    test_vocab_file("ggml-vocab-llama-spm.gguf", "llama", 32000);
    test_vocab_file("ggml-vocab-gpt-2.gguf", "gpt2", 50257);
    TEST_MAIN_END();
}
