/* test_gguf_roundtrip.c: the GGUF writer and reader together: every value type (scalars and
 * arrays, string arrays with empty and multi-byte strings), every tensor type in 1..4 dimensions
 * with odd shapes, default and custom alignment. Each file is read back and compared value by
 * value and byte by byte; the layout (aligned data section, aligned consecutive tensor offsets,
 * zero padding) is checked against the llama.cpp convention; copying a parsed file through the
 * writer reproduces it byte for byte; memory and file output agree. */
#include "gguf.h"

#include "../test.h"

#include <stdint.h>
#include <unistd.h>

#define N_TYPES 8
static const es__dtype all_types[N_TYPES] = {ES__DTYPE_F32,  ES__DTYPE_F16,  ES__DTYPE_BF16, ES__DTYPE_Q8_0,
                                             ES__DTYPE_Q4_0, ES__DTYPE_Q4_K, ES__DTYPE_Q5_K, ES__DTYPE_Q6_K};

static const char *const strs[] = {"", "a", "\xe2\x96\x81the", "<0x0A>", "tab\there", "long string with spaces"};

typedef struct expect_tensor {
    char name[32];
    es__dtype type;
    uint32_t n_dims;
    int64_t ne[4];
    uint8_t *data;
    uint64_t nbytes;
} expect_tensor;

static expect_tensor tens[2 * N_TYPES];
static int n_tens;

/* Fills the writer with every value type and one tensor per type and shape. */
static void fill(es__gguf_writer *w, test_rng *r, uint32_t alignment) {
    CHECK_OK(es__gguf_set_str(w, "general.architecture", "llama"));
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -(1ll << 50);
    double f64 = -3.25e300;
    bool b = true;
    CHECK_OK(es__gguf_set_scalar(w, "s.u8", ES__GGUF_UINT8, &u8));
    CHECK_OK(es__gguf_set_scalar(w, "s.i8", ES__GGUF_INT8, &i8));
    CHECK_OK(es__gguf_set_scalar(w, "s.u16", ES__GGUF_UINT16, &u16));
    CHECK_OK(es__gguf_set_scalar(w, "s.i16", ES__GGUF_INT16, &i16));
    CHECK_OK(es__gguf_set_u32(w, "s.u32", 4000000000u));
    CHECK_OK(es__gguf_set_i32(w, "s.i32", -2000000000));
    CHECK_OK(es__gguf_set_f32(w, "s.f32", 0.1f));
    CHECK_OK(es__gguf_set_bool(w, "s.bool", false));
    CHECK_OK(es__gguf_set_scalar(w, "s.bool2", ES__GGUF_BOOL, &b));
    CHECK_OK(es__gguf_set_str(w, "s.str", "h\xc3\xa9llo"));
    CHECK_OK(es__gguf_set_str(w, "s.empty", ""));
    CHECK_OK(es__gguf_set_u64(w, "s.u64", UINT64_MAX));
    CHECK_OK(es__gguf_set_scalar(w, "s.i64", ES__GGUF_INT64, &i64));
    CHECK_OK(es__gguf_set_scalar(w, "s.f64", ES__GGUF_FLOAT64, &f64));
    /* arrays of every fixed type */
    uint8_t a8[5] = {0, 1, 127, 128, 255};
    uint16_t a16[3] = {1, 0x8000, 0xffff};
    uint32_t a32[4] = {0, 1, 0x80000000u, 0xffffffffu};
    uint64_t a64[2] = {1, 0x8000000000000001ull};
    float af[3] = {1.5f, -0.0f, 1e30f};
    double ad[2] = {1e-300, -2.0};
    bool ab[3] = {true, false, true};
    CHECK_OK(es__gguf_set_arr(w, "a.u8", ES__GGUF_UINT8, a8, 5));
    CHECK_OK(es__gguf_set_arr(w, "a.i8", ES__GGUF_INT8, a8, 5));
    CHECK_OK(es__gguf_set_arr(w, "a.u16", ES__GGUF_UINT16, a16, 3));
    CHECK_OK(es__gguf_set_arr(w, "a.i16", ES__GGUF_INT16, a16, 3));
    CHECK_OK(es__gguf_set_arr(w, "a.u32", ES__GGUF_UINT32, a32, 4));
    CHECK_OK(es__gguf_set_arr(w, "a.i32", ES__GGUF_INT32, a32, 4));
    CHECK_OK(es__gguf_set_arr(w, "a.f32", ES__GGUF_FLOAT32, af, 3));
    CHECK_OK(es__gguf_set_arr(w, "a.bool", ES__GGUF_BOOL, ab, 3));
    CHECK_OK(es__gguf_set_arr(w, "a.u64", ES__GGUF_UINT64, a64, 2));
    CHECK_OK(es__gguf_set_arr(w, "a.i64", ES__GGUF_INT64, a64, 2));
    CHECK_OK(es__gguf_set_arr(w, "a.f64", ES__GGUF_FLOAT64, ad, 2));
    CHECK_OK(es__gguf_set_arr(w, "a.empty", ES__GGUF_FLOAT32, NULL, 0));
    CHECK_OK(es__gguf_set_arr_str(w, "a.str", strs, ES__ARRAY_LEN(strs)));
    CHECK_OK(es__gguf_set_arr_str(w, "a.str_empty", NULL, 0));
    if (alignment) CHECK_OK(es__gguf_set_u32(w, "general.alignment", alignment));
    /* replacing a key keeps its place and takes the new value and type */
    CHECK_OK(es__gguf_set_u32(w, "s.replaced", 1));
    CHECK_OK(es__gguf_set_str(w, "s.replaced", "second"));

    /* tensors: each type twice, with odd shapes in 1..4 dims */
    n_tens = 0;
    for (int k = 0; k < 2 * N_TYPES; k++) {
        expect_tensor *t = &tens[n_tens++];
        es__dtype_traits tr;
        es__dtype_info(all_types[k % N_TYPES], &tr);
        t->type = all_types[k % N_TYPES];
        snprintf(t->name, sizeof t->name, "blk.%d.%s", k, tr.name);
        t->n_dims = (uint32_t)(k % 4) + 1;
        int64_t shapes[4] = {tr.block_elems * (1 + k % 3), 3 + k % 2, 5, 2};
        if (tr.block_elems == 1) shapes[0] = 7 + k;
        uint64_t n = 1;
        for (int d = 0; d < 4; d++) {
            t->ne[d] = d < (int)t->n_dims ? shapes[d] : 1;
            n *= (uint64_t)t->ne[d];
        }
        es__dtype_row_bytes(t->type, n, &t->nbytes);
        t->data = malloc(t->nbytes);
        for (uint64_t i = 0; i < t->nbytes; i++) t->data[i] = (uint8_t)test_rng_u64(r);
        CHECK_OK(es__gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
}

static uint64_t rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void check_read(const uint8_t *file, uint64_t size, uint32_t alignment) {
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(file, size, NULL, &err, &g));
    if (!g) return;
    uint64_t align = alignment ? alignment : 32;
    CHECK(g->version == 3 && g->alignment == align && g->n_tensors == (uint64_t)n_tens);
    CHECK(g->n_kv == 30 + (alignment ? 1 : 0));
    /* first key stays first; the replaced key sits where it was first set, last */
    CHECK(es__str_eq(g->kv[0].key, "general.architecture"));
    CHECK(es__str_eq(g->kv[g->n_kv - 1].key, "s.replaced") && g->kv[g->n_kv - 1].type == ES__GGUF_STRING);
    es__str s;
    CHECK_OK(es__gguf_get_str(g, "s.replaced", true, &s, &err));
    CHECK(es__str_eq(s, "second"));
    CHECK_OK(es__gguf_get_str(g, "s.str", true, &s, &err));
    CHECK(es__str_eq(s, "h\xc3\xa9llo"));
    CHECK_OK(es__gguf_get_str(g, "s.empty", true, &s, &err));
    CHECK(s.len == 0);

    /* scalars, byte for byte */
    struct {
        const char *key;
        es__gguf_vtype type;
        const char *bytes;
        int n;
    } sc[] = {
        {"s.u8", ES__GGUF_UINT8, "\xc8", 1},
        {"s.i8", ES__GGUF_INT8, "\x9c", 1},
        {"s.u16", ES__GGUF_UINT16, "\x60\xea", 2},
        {"s.i16", ES__GGUF_INT16, "\xd0\x8a", 2},
        {"s.u32", ES__GGUF_UINT32, "\x00\x28\x6b\xee", 4},
        {"s.i32", ES__GGUF_INT32, "\x00\x6c\xca\x88", 4},
        {"s.f32", ES__GGUF_FLOAT32, "\xcd\xcc\xcc\x3d", 4},
        {"s.bool", ES__GGUF_BOOL, "\x00", 1},
        {"s.bool2", ES__GGUF_BOOL, "\x01", 1},
        {"s.u64", ES__GGUF_UINT64, "\xff\xff\xff\xff\xff\xff\xff\xff", 8},
        {"s.i64", ES__GGUF_INT64, "\x00\x00\x00\x00\x00\x00\xfc\xff", 8},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(sc); i++) {
        const es__gguf_kv *kv = es__gguf_find(g, sc[i].key);
        CHECKF(kv && kv->type == sc[i].type && memcmp(kv->value, sc[i].bytes, (size_t)sc[i].n) == 0, "%s", sc[i].key);
    }
    const es__gguf_kv *kv = es__gguf_find(g, "s.f64");
    double f64 = 0;
    if (kv) memcpy(&f64, kv->value, 8); /* little-endian host */
    CHECK(kv && kv->type == ES__GGUF_FLOAT64 && f64 == -3.25e300);

    /* arrays */
    struct {
        const char *key;
        es__gguf_vtype et;
        uint64_t n;
        const char *bytes;
        int nb;
    } ar[] = {
        {"a.u8", ES__GGUF_UINT8, 5, "\x00\x01\x7f\x80\xff", 5},
        {"a.i8", ES__GGUF_INT8, 5, "\x00\x01\x7f\x80\xff", 5},
        {"a.u16", ES__GGUF_UINT16, 3, "\x01\x00\x00\x80\xff\xff", 6},
        {"a.i16", ES__GGUF_INT16, 3, "\x01\x00\x00\x80\xff\xff", 6},
        {"a.u32", ES__GGUF_UINT32, 4, "\0\0\0\0\x01\0\0\0\0\0\0\x80\xff\xff\xff\xff", 16},
        {"a.i32", ES__GGUF_INT32, 4, "\0\0\0\0\x01\0\0\0\0\0\0\x80\xff\xff\xff\xff", 16},
        {"a.f32", ES__GGUF_FLOAT32, 3, "\0\0\xc0\x3f\0\0\0\x80\xca\xf2\x49\x71", 12},
        {"a.bool", ES__GGUF_BOOL, 3, "\x01\x00\x01", 3},
        {"a.u64", ES__GGUF_UINT64, 2, "\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\x80", 16},
        {"a.i64", ES__GGUF_INT64, 2, "\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\x80", 16},
        {"a.empty", ES__GGUF_FLOAT32, 0, "", 0},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(ar); i++) {
        kv = NULL;
        CHECK_OK(es__gguf_get_arr(g, ar[i].key, ar[i].et, true, &kv, &err));
        CHECKF(kv && kv->arr_n == ar[i].n && memcmp(kv->value, ar[i].bytes, (size_t)ar[i].nb) == 0, "%s", ar[i].key);
    }
    kv = NULL;
    CHECK_OK(es__gguf_get_arr(g, "a.f64", ES__GGUF_FLOAT64, true, &kv, &err));
    double ad[2] = {0, 0};
    if (kv) memcpy(ad, kv->value, 16);
    CHECK(ad[0] == 1e-300 && ad[1] == -2.0);
    kv = NULL;
    CHECK_OK(es__gguf_get_arr(g, "a.str", ES__GGUF_STRING, true, &kv, &err));
    CHECK(kv && kv->arr_n == ES__ARRAY_LEN(strs));
    for (size_t i = 0; kv && i < ES__ARRAY_LEN(strs); i++) CHECKF(es__str_eq(kv->strs[i], strs[i]), "a.str[%zu]", i);
    kv = NULL;
    CHECK_OK(es__gguf_get_arr(g, "a.str_empty", ES__GGUF_STRING, true, &kv, &err));
    CHECK(kv && kv->arr_n == 0);

    /* layout: data section at the first aligned offset after the infos, tensors consecutive at
     * aligned offsets in insertion order, zero padding everywhere in between */
    const es__gguf_tensor *last = &g->tensors[g->n_tensors - 1];
    uint64_t infos_end = last->info_offset + 8 + last->name.len + 4 + 8 * last->n_dims + 4 + 8;
    CHECK(g->data_offset % align == 0 && g->data_offset >= infos_end && g->data_offset - infos_end < align);
    for (uint64_t i = infos_end; i < g->data_offset; i++) CHECK(file[i] == 0);
    uint64_t off = 0;
    for (int k = 0; k < n_tens; k++) {
        const expect_tensor *e = &tens[k];
        const es__gguf_tensor *t = &g->tensors[k];
        CHECKF(es__str_eq(t->name, e->name) && t->type == e->type && t->n_dims == e->n_dims, "tensor %d", k);
        CHECK(memcmp(t->ne, e->ne, sizeof e->ne) == 0 && t->nbytes == e->nbytes);
        CHECKF(t->rel_offset == off, "tensor %d at %llu, expected %llu", k, (unsigned long long)t->rel_offset,
               (unsigned long long)off);
        CHECK(memcmp(t->data, e->data, e->nbytes) == 0);
        CHECK(rd64(file + t->info_offset + 8 + t->name.len + 4 + 8 * t->n_dims + 4) == t->rel_offset);
        uint64_t end = off + e->nbytes;
        off = (end + align - 1) / align * align;
        for (uint64_t i = end; i < off; i++) CHECK(file[g->data_offset + i] == 0);
        CHECK(es__gguf_find_tensor(g, e->name) == t);
    }
    CHECK(size == g->data_offset + off); /* the file ends aligned, after the last padding */

    /* copying every kv and tensor through a new writer reproduces the file exactly */
    es__gguf_writer *w2 = es__gguf_writer_create(NULL);
    for (uint64_t i = 0; i < g->n_kv; i++) CHECK_OK(es__gguf_copy_kv(w2, &g->kv[i]));
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const es__gguf_tensor *t = &g->tensors[i];
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        CHECK_OK(es__gguf_add_tensor(w2, name, t->type, t->n_dims, t->ne, t->data));
    }
    uint8_t *copy = NULL;
    uint64_t copy_size = 0;
    CHECK_OK(es__gguf_write_mem(w2, &copy, &copy_size, &err));
    CHECK(copy && copy_size == size && memcmp(copy, file, size) == 0);
    es__free(NULL, copy);
    es__gguf_writer_free(w2);
    es__gguf_free(g);
}

static void test_roundtrip(uint32_t alignment, const char *path) {
    test_rng r = {alignment + 1};
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    CHECK(w != NULL);
    if (!w) return;
    fill(w, &r, alignment);
    uint8_t *mem = NULL;
    uint64_t size = 0;
    es__err err;
    CHECK_OK(es__gguf_write_mem(w, &mem, &size, &err));
    if (mem) check_read(mem, size, alignment);
    /* the file output is the same bytes */
    CHECK_OK(es__gguf_write_file(w, path, &err));
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (fp && mem) {
        uint8_t *back = malloc(size + 1);
        size_t n = fread(back, 1, size + 1, fp);
        CHECK(n == size && memcmp(back, mem, size) == 0);
        free(back);
    }
    if (fp) fclose(fp);
    remove(path);
    es__free(NULL, mem);
    es__gguf_writer_free(w);
    for (int k = 0; k < n_tens; k++) free(tens[k].data);
}

static void test_writer_errors(void) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    float data[64] = {0};
    int64_t ne[4] = {33, 1, 1, 1};
    CHECK_FAILS(es__gguf_add_tensor(w, "q", ES__DTYPE_Q8_0, 1, ne, data), ES_ERR_INVALID_ARGUMENT,
                "not a multiple of the q8_0 block size 32");
    ne[0] = 0;
    CHECK_FAILS(es__gguf_add_tensor(w, "z", ES__DTYPE_F32, 1, ne, data), ES_ERR_INVALID_ARGUMENT, "ne[0] = 0");
    ne[0] = 4;
    CHECK_FAILS(es__gguf_add_tensor(w, "d", ES__DTYPE_F32, 5, ne, data), ES_ERR_INVALID_ARGUMENT, "n_dims 5");
    CHECK_FAILS(es__gguf_add_tensor(w, "t", (es__dtype)21, 1, ne, data), ES_ERR_UNSUPPORTED, "unsupported type 21");
    CHECK_FAILS(es__gguf_add_tensor(w, "q3", ES__DTYPE_Q3_K, 1, ne, data), ES_ERR_INVALID_ARGUMENT,
                "not a multiple of the q3_K block size 256");
    CHECK_FAILS(es__gguf_add_tensor(w, "iq", ES__DTYPE_IQ4_NL, 1, ne, data), ES_ERR_INVALID_ARGUMENT,
                "not a multiple of the iq4_nl block size 32");
    CHECK_FAILS(es__gguf_add_tensor(w, "k", ES__DTYPE_Q4_K, 1, ne, data), ES_ERR_INVALID_ARGUMENT,
                "not a multiple of the q4_K block size 256");
    CHECK_OK(es__gguf_add_tensor(w, "x", ES__DTYPE_F32, 1, ne, data));
    CHECK_FAILS(es__gguf_add_tensor(w, "x", ES__DTYPE_F32, 1, ne, data), ES_ERR_INVALID_ARGUMENT, "duplicate tensor name 'x'");
    CHECK_FAILS(es__gguf_set_u32(w, "", 1), ES_ERR_INVALID_ARGUMENT, "empty key");
    CHECK_FAILS(es__gguf_set_arr(w, "k", ES__GGUF_STRING, data, 1), ES_ERR_INVALID_ARGUMENT, "fixed-size");
    es__err err;
    uint8_t *mem = NULL;
    uint64_t size = 0;
    CHECK_OK(es__gguf_set_u32(w, "general.alignment", 48));
    CHECK_FAILS(es__gguf_write_mem(w, &mem, &size, &err), ES_ERR_INVALID_ARGUMENT, "not a nonzero power of two");
    CHECK(err.status == ES_ERR_INVALID_ARGUMENT && mem == NULL);
    CHECK_OK(es__gguf_set_str(w, "general.alignment", "64"));
    CHECK_FAILS(es__gguf_write_mem(w, &mem, &size, &err), ES_ERR_INVALID_ARGUMENT, "must be a uint32");
    CHECK_OK(es__gguf_set_u32(w, "general.alignment", 1));
    CHECK_OK(es__gguf_write_mem(w, &mem, &size, &err));
    es__free(NULL, mem);
    CHECK_FAILS(es__gguf_write_file(w, "/nonexistent-dir/x.gguf", &err), ES_ERR_IO, "cannot create '/nonexistent-dir/x.gguf'");
    es__gguf_writer_free(w);
    es__gguf_writer_free(NULL);
}

int main(void) {
    char path[256];
    snprintf(path, sizeof path, "roundtrip-%ld.gguf", (long)getpid());
    test_roundtrip(0, path);
    test_roundtrip(64, path);
    test_roundtrip(1, path);
    test_roundtrip(4096, path);
    test_writer_errors();
    TEST_MAIN_END();
}
