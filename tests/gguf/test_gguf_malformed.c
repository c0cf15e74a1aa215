/* test_gguf_malformed.c: every malformed-file case the reader must reject, each built by patching
 * bytes of a valid file made with the writer. Each case requires the expected status, a message
 * naming the field, and the file offset of that field (computed here from the layout, not taken
 * from the reader's message); the reader must leave *out NULL. Also: allocation failure at every
 * allocation of a parse, and harmless variations (trailing bytes, version 2) that must load. */
#include "gguf.h"

#include "../common/test_alloc.h"
#include "../test.h"

#include <inttypes.h>
#include <stdint.h>

static uint8_t *base;
static uint64_t base_size;
static es__gguf *layout; /* the valid file, parsed: offsets of every field */

/* kv indices and tensor indices in the base file */
enum { KV_ARCH, KV_STR, KV_U32, KV_ARR, KV_STRS, KV_BOOL, KV_ALIGN, KV_DUP1, KV_DUP2, N_KV };
enum { T_A, T_B, T_C, N_T };

static void build_base(void) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    char longstr[301];
    memset(longstr, 'x', 300);
    longstr[300] = '\0';
    es__gguf_set_str(w, "general.architecture", "llama");
    es__gguf_set_str(w, "k.str", longstr);
    es__gguf_set_u32(w, "k.u32", 7);
    int32_t arr[3] = {1, 2, 3};
    es__gguf_set_arr(w, "k.arr", ES__GGUF_INT32, arr, 3);
    const char *strs[2] = {"ab", "cd"};
    es__gguf_set_arr_str(w, "k.strs", strs, 2);
    es__gguf_set_bool(w, "k.bool", true);
    es__gguf_set_u32(w, "general.alignment", 256);
    es__gguf_set_u32(w, "k.dup1", 1);
    es__gguf_set_u32(w, "k.dup2", 2);
    float data[128];
    for (int i = 0; i < 128; i++) data[i] = (float)i;
    int64_t ne_a[2] = {8, 2}, ne_b[1] = {64}, ne_c[1] = {4};
    uint8_t q[2 * 34];
    es__quantize_row(ES__DTYPE_Q8_0, data, q, 64);
    CHECK_OK(es__gguf_add_tensor(w, "t.a", ES__DTYPE_F32, 2, ne_a, data));
    CHECK_OK(es__gguf_add_tensor(w, "t.b", ES__DTYPE_Q8_0, 1, ne_b, q));
    CHECK_OK(es__gguf_add_tensor(w, "t.c", ES__DTYPE_F32, 1, ne_c, data));
    es__err err;
    CHECK_OK(es__gguf_write_mem(w, &base, &base_size, &err));
    es__gguf_writer_free(w);
    CHECK_OK(es__gguf_parse(base, base_size, NULL, &err, &layout));
}

/* ---- field offsets in the base file */
static uint64_t kv_off(int i) { return layout->kv[i].offset; }
static uint64_t kv_type_off(int i) { return kv_off(i) + 8 + layout->kv[i].key.len; }
static uint64_t kv_value_off(int i) { return kv_type_off(i) + 4; } /* scalar value, string length, array elem type */
static uint64_t t_off(int i) { return layout->tensors[i].info_offset; }
static uint64_t t_ndims_off(int i) { return t_off(i) + 8 + layout->tensors[i].name.len; }
static uint64_t t_ne_off(int i, int d) { return t_ndims_off(i) + 4 + 8 * (uint64_t)d; }
static uint64_t t_type_off(int i) { return t_ne_off(i, (int)layout->tensors[i].n_dims); }
static uint64_t t_offset_off(int i) { return t_type_off(i) + 4; }

static void p32(uint8_t *b, uint64_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) b[at + i] = (uint8_t)(v >> (8 * i));
}
static void p64(uint8_t *b, uint64_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b[at + i] = (uint8_t)(v >> (8 * i));
}

static uint8_t *work;

/* Fresh copy of the base file to patch. */
static uint8_t *fresh(void) {
    memcpy(work, base, base_size);
    return work;
}

/* Parses work[0..n) and requires status, both needles, and "offset <at>" in the message. */
static void expect(const char *label, uint64_t n, es_status want, const char *needle, const char *needle2,
                   uint64_t at) {
    es__gguf *g = (es__gguf *)work; /* poison: the reader must set NULL */
    es__err err = {ES_OK, ""};
    es_status s = es__gguf_parse(work, n, NULL, &err, &g);
    char at_text[64];
    snprintf(at_text, sizeof at_text, "offset %" PRIu64, at);
    bool ok = s == want && g == NULL && err.status == want && strstr(err.msg, needle) &&
              (!needle2 || strstr(err.msg, needle2)) && strstr(err.msg, at_text);
    CHECKF(ok, "%s: got %s \"%s\"; expected %s with \"%s\", \"%s\" and \"%s\"", label, es_status_str(s), err.msg,
           es_status_str(want), needle, needle2 ? needle2 : "", at_text);
    if (s == ES_OK) es__gguf_free(g);
}

static void header_cases(void) {
    uint8_t *b = fresh();
    memcpy(b, "GGUX", 4);
    expect("bad magic", base_size, ES_ERR_FORMAT, "bad magic", "found 47 47 55 58", 0);
    b = fresh();
    p32(b, 4, 1);
    expect("version 1", base_size, ES_ERR_UNSUPPORTED, "GGUF version 1", NULL, 4);
    p32(b, 4, 7);
    expect("version 7", base_size, ES_ERR_UNSUPPORTED, "unsupported GGUF version 7", NULL, 4);
    p32(b, 4, 0x03000000u);
    expect("big-endian", base_size, ES_ERR_UNSUPPORTED, "big-endian", NULL, 4);
    fresh();
    expect("truncated header", 12, ES_ERR_FORMAT, "truncated file: tensor count", NULL, 8);
    expect("truncated magic", 2, ES_ERR_FORMAT, "truncated file: magic", NULL, 0);
    b = fresh();
    p64(b, 16, 1ull << 60);
    expect("absurd n_kv", base_size, ES_ERR_FORMAT, "metadata count 1152921504606846976", "cannot fit", 16);
    b = fresh();
    p64(b, 8, 1ull << 62);
    expect("absurd n_tensors", base_size, ES_ERR_FORMAT, "tensor count 4611686018427387904", "cannot fit", 8);
    b = fresh();
    p64(b, 8, UINT64_MAX);
    expect("n_tensors 2^64-1", base_size, ES_ERR_FORMAT, "tensor count", "cannot fit", 8);
}

static void metadata_cases(void) {
    uint8_t *b = fresh();
    expect("truncated metadata", kv_type_off(KV_U32) + 2, ES_ERR_FORMAT, "truncated file: metadata entry #2 'k.u32'",
           "needs 4 bytes, found 2", kv_type_off(KV_U32));
    /* string lengths past the end: a key, a value, an element of a string array */
    p64(b, kv_off(KV_ARR), 1ull << 63);
    expect("key length", base_size, ES_ERR_FORMAT, "key of metadata entry #3", "string length 9223372036854775808",
           kv_off(KV_ARR));
    b = fresh();
    p64(b, kv_value_off(KV_STR), 1000000);
    expect("string length", base_size, ES_ERR_FORMAT, "metadata entry #1 'k.str'", "string length 1000000 runs past",
           kv_value_off(KV_STR));
    b = fresh();
    uint64_t s1 = kv_value_off(KV_STRS) + 12 + 8 + 2; /* string #1's length */
    p64(b, s1, 99999);
    expect("array string length", base_size, ES_ERR_FORMAT, "'k.strs', string #1", "string length 99999", s1);
    /* array counts past the end */
    b = fresh();
    p64(b, kv_value_off(KV_ARR) + 4, 1ull << 40);
    expect("array count", base_size, ES_ERR_FORMAT, "'k.arr'", "array of 1099511627776 int32 elements",
           kv_value_off(KV_ARR) + 4);
    p64(b, kv_value_off(KV_ARR) + 4, 1ull << 62);
    expect("array bytes overflow", base_size, ES_ERR_FORMAT, "'k.arr'", "more than 2^64", kv_value_off(KV_ARR) + 4);
    b = fresh();
    p64(b, kv_value_off(KV_STRS) + 4, 1ull << 50);
    expect("string array count", base_size, ES_ERR_FORMAT, "'k.strs'", "strings cannot fit", kv_value_off(KV_STRS) + 4);
    /* types */
    b = fresh();
    p32(b, kv_type_off(KV_U32), 13);
    expect("unknown value type", base_size, ES_ERR_FORMAT, "'k.u32'", "unknown value type 13", kv_type_off(KV_U32));
    p32(b, kv_type_off(KV_U32), 0xffffffffu);
    expect("unknown value type max", base_size, ES_ERR_FORMAT, "'k.u32'", "unknown value type 4294967295",
           kv_type_off(KV_U32));
    b = fresh();
    p32(b, kv_value_off(KV_ARR), 77);
    expect("unknown element type", base_size, ES_ERR_FORMAT, "'k.arr'", "unknown array element type 77",
           kv_value_off(KV_ARR));
    p32(b, kv_value_off(KV_ARR), 9);
    expect("nested array", base_size, ES_ERR_UNSUPPORTED, "'k.arr'", "nested arrays", kv_value_off(KV_ARR));
    b = fresh();
    b[kv_value_off(KV_BOOL)] = 2;
    expect("bool value", base_size, ES_ERR_FORMAT, "'k.bool'", "bool value", kv_value_off(KV_BOOL));
    /* names */
    b = fresh();
    memcpy(b + kv_off(KV_DUP2) + 8, "k.dup1", 6);
    char dup_at[64];
    snprintf(dup_at, sizeof dup_at, "repeats entry #7 at offset %" PRIu64, kv_off(KV_DUP1));
    expect("duplicate key", base_size, ES_ERR_FORMAT, "duplicate metadata key 'k.dup1': entry #8", dup_at,
           kv_off(KV_DUP2));
    b = fresh();
    p64(b, kv_off(KV_U32), 0);
    expect("empty key", base_size, ES_ERR_FORMAT, "key of metadata entry #2", "is empty", kv_off(KV_U32));
    b = fresh();
    b[kv_off(KV_U32) + 9] = 0;
    expect("NUL in key", base_size, ES_ERR_FORMAT, "key of metadata entry #2 'k\\x00u32'", "NUL byte", kv_off(KV_U32));
    /* general.alignment */
    b = fresh();
    p32(b, kv_value_off(KV_ALIGN), 0);
    expect("alignment 0", base_size, ES_ERR_FORMAT, "general.alignment", "is 0: expected a nonzero power of two",
           kv_off(KV_ALIGN));
    p32(b, kv_value_off(KV_ALIGN), 48);
    expect("alignment 48", base_size, ES_ERR_FORMAT, "general.alignment", "is 48", kv_off(KV_ALIGN));
    p32(b, kv_value_off(KV_ALIGN), 256);
    p32(b, kv_type_off(KV_ALIGN), ES__GGUF_INT32);
    expect("alignment type", base_size, ES_ERR_FORMAT, "general.alignment", "expected type uint32, found int32",
           kv_off(KV_ALIGN));
}

static void tensor_cases(void) {
    char info[96];
    uint8_t *b = fresh();
    /* truncation inside the infos, before the data section, inside the data */
    expect("truncated tensor info", t_ne_off(T_B, 0) + 3, ES_ERR_FORMAT, "truncated file: tensor #1 't.b'",
           "needs 8 bytes, found 3", t_ne_off(T_B, 0));
    uint64_t infos_end = t_offset_off(T_C) + 8;
    CHECK(layout->data_offset - infos_end > 1); /* alignment 256 leaves padding to cut into */
    expect("truncated before data", infos_end + 1, ES_ERR_FORMAT, "tensor data section should start at offset",
           NULL, layout->data_offset);
    snprintf(info, sizeof info, "tensor #2 't.c' (info at offset %" PRIu64 ")", t_off(T_C));
    const es__gguf_tensor *tc = &layout->tensors[T_C];
    expect("truncated data", layout->data_offset + tc->rel_offset + tc->nbytes - 1, ES_ERR_FORMAT, info,
           "runs past the end of the file", t_off(T_C));
    /* dims */
    snprintf(info, sizeof info, "tensor #0 't.a' (info at offset %" PRIu64 ")", t_off(T_A));
    p32(b, t_ndims_off(T_A), 0);
    expect("n_dims 0", base_size, ES_ERR_FORMAT, info, "n_dims 0", t_ndims_off(T_A));
    p32(b, t_ndims_off(T_A), 5);
    expect("n_dims 5", base_size, ES_ERR_FORMAT, info, "n_dims 5", t_ndims_off(T_A));
    b = fresh();
    p64(b, t_ne_off(T_A, 1), 0);
    expect("zero dim", base_size, ES_ERR_FORMAT, info, "ne[1] = 0", t_ne_off(T_A, 1));
    p64(b, t_ne_off(T_A, 1), (uint64_t)-5);
    expect("negative dim", base_size, ES_ERR_FORMAT, info, "ne[1] = -5", t_ne_off(T_A, 1));
    p64(b, t_ne_off(T_A, 0), 1ull << 32);
    p64(b, t_ne_off(T_A, 1), 1ull << 32);
    expect("element count overflow", base_size, ES_ERR_FORMAT, info, "element count overflows at ne[1]",
           t_ne_off(T_A, 1));
    p64(b, t_ne_off(T_A, 0), 1ull << 31);
    p64(b, t_ne_off(T_A, 1), 1ull << 31);
    expect("byte size overflow", base_size, ES_ERR_FORMAT, info, "byte size overflows", t_off(T_A));
    b = fresh();
    snprintf(info, sizeof info, "tensor #1 't.b' (info at offset %" PRIu64 ")", t_off(T_B));
    p64(b, t_ne_off(T_B, 0), 48);
    expect("block multiple", base_size, ES_ERR_FORMAT, info, "ne[0] = 48 is not a multiple of the q8_0 block size 32",
           t_off(T_B));
    /* types */
    b = fresh();
    p32(b, t_type_off(T_B), 21);
    expect("iq3_s", base_size, ES_ERR_UNSUPPORTED, info, "tensor type 21 (iq3_s)", t_type_off(T_B));
    p32(b, t_type_off(T_B), 12); /* supported, but the row is not whole super-blocks */
    expect("q4_K row", base_size, ES_ERR_FORMAT, info, "is not a multiple of the q4_K block size 256", t_off(T_B));
    p32(b, t_type_off(T_B), 10);
    expect("q2_K row", base_size, ES_ERR_FORMAT, info, "is not a multiple of the q2_K block size 256", t_off(T_B));
    p32(b, t_type_off(T_B), 11);
    expect("q3_K row", base_size, ES_ERR_FORMAT, info, "is not a multiple of the q3_K block size 256", t_off(T_B));
    p32(b, t_type_off(T_B), 99);
    expect("unknown type", base_size, ES_ERR_UNSUPPORTED, info, "tensor type 99 (unknown)", t_type_off(T_B));
    /* offsets: misaligned, out of the file, wrapping around, overlapping */
    b = fresh();
    p64(b, t_offset_off(T_B), 32);
    expect("misaligned", base_size, ES_ERR_FORMAT, info, "data offset 32", t_offset_off(T_B));
    p64(b, t_offset_off(T_B), 1ull << 20);
    expect("out of bounds", base_size, ES_ERR_FORMAT, info, "runs past the end of the file", t_off(T_B));
    p64(b, t_offset_off(T_B), 0ull - 256);
    expect("offset wraps", base_size, ES_ERR_FORMAT, info, "runs past the end of the file", t_off(T_B));
    b = fresh();
    p64(b, t_offset_off(T_B), 0);
    expect("overlap", base_size, ES_ERR_FORMAT, "tensor data overlap: tensor #0 't.a'", "tensor #1 't.b' starts at",
           t_off(T_B));
    b = fresh();
    p64(b, t_offset_off(T_C), layout->tensors[T_B].rel_offset);
    expect("overlap 2", base_size, ES_ERR_FORMAT, "tensor data overlap: tensor #1 't.b'", "tensor #2 't.c'", t_off(T_C));
    /* names */
    b = fresh();
    memcpy(b + t_off(T_C) + 8, "t.a", 3);
    snprintf(info, sizeof info, "repeats tensor #0 (info at offset %" PRIu64 ")", t_off(T_A));
    expect("duplicate tensor", base_size, ES_ERR_FORMAT, "duplicate tensor name 't.a': tensor #2", info, t_off(T_C));
    b = fresh();
    p64(b, t_off(T_A), 0);
    expect("empty tensor name", base_size, ES_ERR_FORMAT, "name of tensor info #0", "is empty", t_off(T_A));
    b = fresh();
    p64(b, t_off(T_A), 1ull << 62);
    expect("tensor name length", base_size, ES_ERR_FORMAT, "name of tensor info #0", "runs past the end", t_off(T_A));
}

static void accepted_variations(void) {
    es__err err;
    es__gguf *g = NULL;
    /* trailing bytes after the last tensor are allowed */
    memcpy(work, base, base_size);
    memset(work + base_size, 0xee, 100);
    CHECK_OK(es__gguf_parse(work, base_size + 100, NULL, &err, &g));
    es__gguf_free(g);
    /* the same layout as version 2 */
    fresh();
    p32(work, 4, 2);
    g = NULL;
    CHECK_OK(es__gguf_parse(work, base_size, NULL, &err, &g));
    CHECK(g && g->version == 2 && g->n_tensors == 3);
    es__gguf_free(g);
}

static void allocation_failures(void) {
    int n_ok = -1;
    for (int k = 0; k < 64 && n_ok < 0; k++) {
        test_alloc bud; /* k allocations succeed, then every one fails */
        es_allocator a = test_allocator(&bud, k, false);
        es__gguf *g = NULL;
        es__err err = {ES_OK, ""};
        es_status s = es__gguf_parse(base, base_size, &a, &err, &g);
        if (s == ES_OK) {
            n_ok = k;
            es__gguf_free(g);
        } else {
            CHECKF(s == ES_ERR_OUT_OF_MEMORY && g == NULL && strstr(err.msg, "out of memory"), "budget %d: %s", k,
                   err.msg);
        }
        CHECKF(bud.live == 0, "budget %d: %ld allocations leaked", k, bud.live);
    }
    CHECK(n_ok > 0);
}

int main(void) {
    build_base();
    if (!layout) TEST_MAIN_END();
    work = malloc(base_size + 128);
    header_cases();
    metadata_cases();
    tensor_cases();
    accepted_variations();
    allocation_failures();
    es__gguf_free(layout);
    es__free(NULL, base);
    free(work);
    TEST_MAIN_END();
}
