/* gguf_read.c: the GGUF v2/v3 reader: parses and validates a whole file image up front, then hands
 * out views into it, plus the typed metadata getters and the element-type table.
 *
 * Every length and offset is checked against the bytes that remain before it is used, and every
 * message names the field (key, tensor name, index) and its file offset. Values are decoded
 * byte by byte as little-endian, so the host's byte order and alignment do not matter.
 * Deliberately not here: anything about llama models (model.c), tensor data conversion (quant.c),
 * writing files (gguf_write.c). GGUF v1 (32-bit counts) is rejected as unsupported, and so are
 * nested arrays (an array whose elements are arrays): no model format uses them.
 *
 * For a kv, `value` points at the serialised value: a scalar's bytes, a scalar string's u64 length
 * prefix (its text follows), or an array's first element; arrays of strings also get `strs`.
 */
#include "gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smallest possible encodings, used to reject counts that cannot fit in the file before any
 * allocation is sized by them. */
#define MIN_KV_BYTES 14     /* key length (8) + 1 key byte + value type (4) + 1 value byte */
#define MIN_TENSOR_BYTES 33 /* name length (8) + 1 byte + n_dims (4) + 1 dim (8) + type (4) + offset (8) */

/* ---- element types */

static const es__dtype_traits dtype_table[] = {
    [ES__DTYPE_F32] = {"f32", 1, 4},
    [ES__DTYPE_F16] = {"f16", 1, 2},
    [ES__DTYPE_Q4_0] = {"q4_0", 32, 18},
    [ES__DTYPE_Q4_1] = {"q4_1", 32, 20},
    [ES__DTYPE_Q5_0] = {"q5_0", 32, 22},
    [ES__DTYPE_Q5_1] = {"q5_1", 32, 24},
    [ES__DTYPE_Q8_0] = {"q8_0", 32, 34},
    [ES__DTYPE_Q2_K] = {"q2_K", 256, 84},
    [ES__DTYPE_Q3_K] = {"q3_K", 256, 110},
    [ES__DTYPE_Q4_K] = {"q4_K", 256, 144},
    [ES__DTYPE_Q5_K] = {"q5_K", 256, 176},
    [ES__DTYPE_Q6_K] = {"q6_K", 256, 210},
    [ES__DTYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [ES__DTYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [ES__DTYPE_BF16] = {"bf16", 1, 2},
};

bool es__dtype_info(uint32_t type, es__dtype_traits *out) {
    if (type >= ES__ARRAY_LEN(dtype_table) || !dtype_table[type].name) return false;
    if (out) *out = dtype_table[type];
    return true;
}

bool es__dtype_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes) {
    es__dtype_traits t;
    if (!es__dtype_info(type, &t) || n % t.block_elems != 0) return false;
    return es__mul_u64(n / t.block_elems, t.block_bytes, bytes);
}

/* Names of ggml types edgespec does not support, so messages can say what a file holds. */
static const char *ggml_type_name(uint32_t type) {
    static const char *const names[] = {
        "f32", "f16", "q4_0", "q4_1", "q4_2", "q4_3", "q5_0", "q5_1", "q8_0", "q8_1",
        "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
        "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m",
        "bf16", "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0",
    };
    return type < ES__ARRAY_LEN(names) ? names[type] : "unknown";
}

static const char *vtype_name(uint32_t t) {
    static const char *const names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                        "bool", "string", "array", "uint64", "int64", "float64"};
    return t < ES__ARRAY_LEN(names) ? names[t] : "unknown";
}

/* Serialised size of a fixed-size value type; 0 for string, array and unknown types. */
static uint64_t vtype_size(uint32_t t) {
    static const uint8_t sizes[ES__GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < ES__GGUF_VTYPE_COUNT ? sizes[t] : 0;
}

/* ---- little-endian loads */

static uint16_t ld_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld_u64(const uint8_t *p) {
    return (uint64_t)ld_u32(p) | ((uint64_t)ld_u32(p + 4) << 32);
}

/* A printable, truncated copy of a name from the file for messages. */
typedef struct shown {
    char s[72];
} shown;
static shown show(es__str str) {
    shown out;
    size_t o = 0;
    for (uint64_t i = 0; i < str.len; i++) {
        unsigned char ch = (unsigned char)str.ptr[i];
        if (o + 8 >= sizeof out.s) {
            memcpy(out.s + o, "...", 4);
            return out;
        }
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            out.s[o++] = (char)ch;
        else
            o += (size_t)snprintf(out.s + o, sizeof out.s - o, "\\x%02x", ch);
    }
    out.s[o] = '\0';
    return out;
}

/* ---- cursor over the file image */

typedef struct cur {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    es__err *err;
} cur;

static uint64_t left(const cur *c) {
    return c->size - c->pos;
}

/* Fails with a truncation message unless n bytes remain; `what` names the field. */
static es_status need(const cur *c, uint64_t n, const char *what) {
    if (n <= left(c)) return ES_OK;
    return es__fail(c->err, ES_ERR_FORMAT,
                    "truncated file: %s at offset %" PRIu64 " needs %" PRIu64 " bytes, found %" PRIu64
                    " (file size %" PRIu64 ")",
                    what, c->pos, n, left(c), c->size);
}

static es_status rd_u32(cur *c, const char *what, uint32_t *v) {
    ES_TRY(need(c, 4, what));
    *v = ld_u32(c->base + c->pos);
    c->pos += 4;
    return ES_OK;
}

static es_status rd_u64(cur *c, const char *what, uint64_t *v) {
    ES_TRY(need(c, 8, what));
    *v = ld_u64(c->base + c->pos);
    c->pos += 8;
    return ES_OK;
}

/* A length-prefixed string; a view into the file. */
static es_status rd_str(cur *c, const char *what, es__str *s) {
    uint64_t at = c->pos;
    uint64_t len;
    ES_TRY(rd_u64(c, what, &len));
    if (len > left(c))
        return es__fail(c->err, ES_ERR_FORMAT,
                        "%s at offset %" PRIu64 ": string length %" PRIu64
                        " runs past the end of the file (%" PRIu64 " bytes left)",
                        what, at, len, left(c));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return ES_OK;
}

/* Keys and tensor names: nonempty and free of NUL bytes, so they convert to C strings safely. */
static es_status check_name(const cur *c, es__str s, uint64_t at, const char *what) {
    if (s.len == 0) return es__fail(c->err, ES_ERR_FORMAT, "%s at offset %" PRIu64 " is empty", what, at);
    if (memchr(s.ptr, '\0', (size_t)s.len))
        return es__fail(c->err, ES_ERR_FORMAT, "%s '%s' at offset %" PRIu64 " contains a NUL byte", what,
                        show(s).s, at);
    return ES_OK;
}

/* ---- metadata */

static es_status parse_array(cur *c, es__gguf_kv *kv, const char *what, const es_allocator *alloc) {
    uint32_t et;
    uint64_t at = c->pos;
    ES_TRY(rd_u32(c, what, &et));
    if (et == ES__GGUF_ARRAY)
        return es__fail(c->err, ES_ERR_UNSUPPORTED,
                        "%s at offset %" PRIu64 ": nested arrays (array of arrays) are not supported", what, at);
    if (et >= ES__GGUF_VTYPE_COUNT)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "%s at offset %" PRIu64 ": unknown array element type %" PRIu32 " (expected 0..%d)", what,
                        at, et, ES__GGUF_VTYPE_COUNT - 1);
    kv->arr_type = (es__gguf_vtype)et;
    at = c->pos;
    ES_TRY(rd_u64(c, what, &kv->arr_n));
    kv->value = c->base + c->pos;
    uint64_t esz = vtype_size(et);
    if (esz) {
        if (kv->arr_n > left(c) / esz)
            return es__fail(c->err, ES_ERR_FORMAT,
                            "%s at offset %" PRIu64 ": array of %" PRIu64 " %s elements needs %s bytes, found %" PRIu64
                            " left in the file",
                            what, at, kv->arr_n, vtype_name(et), kv->arr_n > UINT64_MAX / esz ? "more than 2^64" : "more",
                            left(c));
        if (et == ES__GGUF_BOOL)
            for (uint64_t j = 0; j < kv->arr_n; j++)
                if (c->base[c->pos + j] > 1)
                    return es__fail(c->err, ES_ERR_FORMAT,
                                    "%s: bool element #%" PRIu64 " at offset %" PRIu64 " is %u (expected 0 or 1)", what,
                                    j, c->pos + j, c->base[c->pos + j]);
        c->pos += kv->arr_n * esz;
        return ES_OK;
    }
    /* strings: each at least its 8-byte length */
    if (kv->arr_n > left(c) / 8)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "%s at offset %" PRIu64 ": array of %" PRIu64 " strings cannot fit in the %" PRIu64
                        " bytes left in the file",
                        what, at, kv->arr_n, left(c));
    es__str *strs = es__calloc(alloc, (size_t)(kv->arr_n ? kv->arr_n : 1), sizeof *strs);
    if (!strs)
        return es__fail(c->err, ES_ERR_OUT_OF_MEMORY, "%s: out of memory for %" PRIu64 " strings", what, kv->arr_n);
    kv->strs = strs;
    char ewhat[256];
    for (uint64_t j = 0; j < kv->arr_n; j++) {
        snprintf(ewhat, sizeof ewhat, "%s, string #%" PRIu64, what, j);
        ES_TRY(rd_str(c, ewhat, &strs[j]));
    }
    return ES_OK;
}

static es_status parse_kv(cur *c, uint64_t i, es__gguf_kv *kv, const es_allocator *alloc) {
    char what[200];
    kv->offset = c->pos;
    snprintf(what, sizeof what, "key of metadata entry #%" PRIu64, i);
    ES_TRY(rd_str(c, what, &kv->key));
    ES_TRY(check_name(c, kv->key, kv->offset, what));
    snprintf(what, sizeof what, "metadata entry #%" PRIu64 " '%s'", i, show(kv->key).s);
    uint32_t t;
    uint64_t at = c->pos;
    ES_TRY(rd_u32(c, what, &t));
    if (t >= ES__GGUF_VTYPE_COUNT)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "%s: unknown value type %" PRIu32 " at offset %" PRIu64 " (expected 0..%d)", what, t, at,
                        ES__GGUF_VTYPE_COUNT - 1);
    kv->type = (es__gguf_vtype)t;
    if (t == ES__GGUF_ARRAY) return parse_array(c, kv, what, alloc);
    kv->value = c->base + c->pos;
    if (t == ES__GGUF_STRING) {
        es__str s;
        return rd_str(c, what, &s);
    }
    ES_TRY(need(c, vtype_size(t), what));
    if (t == ES__GGUF_BOOL && *kv->value > 1)
        return es__fail(c->err, ES_ERR_FORMAT, "%s: bool value at offset %" PRIu64 " is %u (expected 0 or 1)", what,
                        c->pos, *kv->value);
    c->pos += vtype_size(t);
    return ES_OK;
}

/* ---- duplicate names: an open-addressing hash set over the views */

static uint64_t hash_str(es__str s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < s.len; i++) h = (h ^ (unsigned char)s.ptr[i]) * 1099511628211ull;
    return h;
}

/* names[i] is at (const char *)base + i * stride. Returns the index of the first repeated name
 * in *dup and its earlier twin in *first, or false when all differ. */
static es_status find_duplicate(const void *base, size_t stride, uint64_t n, const es_allocator *alloc, es__err *err,
                                bool *found, uint64_t *first, uint64_t *dup) {
    *found = false;
    if (n < 2) return ES_OK;
    uint64_t cap = 4;
    while (cap < 2 * n) cap *= 2;
    uint64_t *slot = es__calloc(alloc, (size_t)cap, sizeof *slot); /* index + 1; 0 = empty */
    if (!slot) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "out of memory checking %" PRIu64 " names", n);
    for (uint64_t i = 0; i < n && !*found; i++) {
        es__str s = *(const es__str *)((const char *)base + i * stride);
        for (uint64_t h = hash_str(s) & (cap - 1);; h = (h + 1) & (cap - 1)) {
            if (!slot[h]) {
                slot[h] = i + 1;
                break;
            }
            es__str o = *(const es__str *)((const char *)base + (slot[h] - 1) * stride);
            if (o.len == s.len && memcmp(o.ptr, s.ptr, (size_t)s.len) == 0) {
                *found = true;
                *first = slot[h] - 1;
                *dup = i;
                break;
            }
        }
    }
    es__free(alloc, slot);
    return ES_OK;
}

/* ---- tensor infos */

static es_status parse_tensor_info(cur *c, uint64_t i, uint64_t alignment, es__gguf_tensor *t) {
    char what[200];
    t->info_offset = c->pos;
    snprintf(what, sizeof what, "name of tensor info #%" PRIu64, i);
    ES_TRY(rd_str(c, what, &t->name));
    ES_TRY(check_name(c, t->name, t->info_offset, what));
    snprintf(what, sizeof what, "tensor #%" PRIu64 " '%s' (info at offset %" PRIu64 ")", i, show(t->name).s,
             t->info_offset);
    uint64_t at = c->pos;
    ES_TRY(rd_u32(c, what, &t->n_dims));
    if (t->n_dims == 0 || t->n_dims > ES__GGUF_MAX_DIMS)
        return es__fail(c->err, ES_ERR_FORMAT, "%s: n_dims %" PRIu32 " at offset %" PRIu64 " (expected 1..%d)", what,
                        t->n_dims, at, ES__GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < ES__GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        at = c->pos;
        ES_TRY(rd_u64(c, what, &v));
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return es__fail(c->err, ES_ERR_FORMAT, "%s: ne[%" PRIu32 "] = %" PRId64 " at offset %" PRIu64
                            " (expected a positive size)", what, d, (int64_t)v, at);
        if (!es__mul_u64(n_elems, v, &n_elems) || n_elems > (uint64_t)INT64_MAX)
            return es__fail(c->err, ES_ERR_FORMAT,
                            "%s: element count overflows at ne[%" PRIu32 "] = %" PRIu64 " (offset %" PRIu64 ")", what,
                            d, v, at);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    at = c->pos;
    ES_TRY(rd_u32(c, what, &type));
    es__dtype_traits tr;
    if (!es__dtype_info(type, &tr))
        return es__fail(c->err, ES_ERR_UNSUPPORTED,
                        "%s: tensor type %" PRIu32 " (%s) at offset %" PRIu64
                        " is not supported (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K,"
                        " q4_K, q5_K, q6_K, iq4_nl, iq4_xs)",
                        what, type, ggml_type_name(type), at);
    t->type = (es__dtype)type;
    if ((uint64_t)t->ne[0] % tr.block_elems != 0)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "%s: ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32, what, t->ne[0],
                        tr.name, tr.block_elems);
    if (!es__mul_u64(n_elems / tr.block_elems, tr.block_bytes, &t->nbytes))
        return es__fail(c->err, ES_ERR_FORMAT, "%s: byte size overflows (%" PRIu64 " elements of %s)", what, n_elems,
                        tr.name);
    at = c->pos;
    ES_TRY(rd_u64(c, what, &t->rel_offset));
    if (t->rel_offset % alignment != 0)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "%s: data offset %" PRIu64 " (at offset %" PRIu64 ") is not a multiple of the alignment %" PRIu64,
                        what, t->rel_offset, at, alignment);
    return ES_OK;
}

typedef struct span {
    uint64_t start, end, index;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Bounds (every tensor inside the file) and overlap (sorted by start, neighbours disjoint). */
static es_status check_tensor_data(es__gguf *g, es__err *err) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        es__gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        if (!es__add_u64(g->data_offset, t->rel_offset, &start) || !es__add_u64(start, t->nbytes, &end) ||
            end > g->size)
            return es__fail(err, ES_ERR_FORMAT,
                            "tensor #%" PRIu64 " '%s' (info at offset %" PRIu64 "): data at file offset %" PRIu64
                            " (data section %" PRIu64 " + %" PRIu64 ") with %" PRIu64
                            " bytes runs past the end of the file (size %" PRIu64 ")",
                            i, show(t->name).s, t->info_offset, g->data_offset + t->rel_offset, g->data_offset,
                            t->rel_offset, t->nbytes, g->size);
        t->data = g->base + start;
    }
    if (g->n_tensors < 2) return ES_OK;
    span *s = es__calloc(g->alloc, (size_t)g->n_tensors, sizeof *s);
    if (!s) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "out of memory checking %" PRIu64 " tensors", g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        s[i] = (span){g->tensors[i].rel_offset, g->tensors[i].rel_offset + g->tensors[i].nbytes, i};
    qsort(s, (size_t)g->n_tensors, sizeof *s, span_cmp);
    es_status st = ES_OK;
    for (uint64_t k = 1; k < g->n_tensors && st == ES_OK; k++) {
        if (s[k].start >= s[k - 1].end) continue;
        const es__gguf_tensor *a = &g->tensors[s[k - 1].index], *b = &g->tensors[s[k].index];
        st = es__fail(err, ES_ERR_FORMAT,
                      "tensor data overlap: tensor #%" PRIu64 " '%s' occupies file offsets [%" PRIu64 ", %" PRIu64
                      ") and tensor #%" PRIu64 " '%s' starts at %" PRIu64 " (info at offset %" PRIu64 ")",
                      s[k - 1].index, show(a->name).s, g->data_offset + s[k - 1].start, g->data_offset + s[k - 1].end,
                      s[k].index, show(b->name).s, g->data_offset + s[k].start, b->info_offset);
    }
    es__free(g->alloc, s);
    return st;
}

/* ---- header and whole file */

static es_status parse_header(cur *c, es__gguf *g) {
    ES_TRY(need(c, 4, "magic"));
    if (ld_u32(c->base) != ES__GGUF_MAGIC) {
        const uint8_t *m = c->base;
        return es__fail(c->err, ES_ERR_FORMAT,
                        "bad magic at offset 0: expected 47 47 55 46 (\"GGUF\"), found %02x %02x %02x %02x", m[0], m[1],
                        m[2], m[3]);
    }
    c->pos = 4;
    ES_TRY(rd_u32(c, "version", &g->version));
    if (g->version != 2 && g->version != 3) {
        if (g->version == 1)
            return es__fail(c->err, ES_ERR_UNSUPPORTED,
                            "GGUF version 1 (at offset 4) is not supported: expected version 2 or 3 "
                            "(convert the file with a current llama.cpp)");
        if ((g->version & 0xffff) == 0 && (g->version >> 24) >= 2 && (g->version >> 24) <= 3)
            return es__fail(c->err, ES_ERR_UNSUPPORTED,
                            "version field at offset 4 reads %" PRIu32 ": this looks like a big-endian GGUF file, "
                            "which is not supported (expected little-endian version 2 or 3)",
                            g->version);
        return es__fail(c->err, ES_ERR_UNSUPPORTED,
                        "unsupported GGUF version %" PRIu32 " at offset 4 (expected 2 or 3)", g->version);
    }
    ES_TRY(rd_u64(c, "tensor count", &g->n_tensors));
    ES_TRY(rd_u64(c, "metadata count", &g->n_kv));
    /* Counts that cannot fit in what is left are rejected before anything is allocated by them. */
    if (g->n_kv > left(c) / MIN_KV_BYTES)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "metadata count %" PRIu64 " at offset 16 cannot fit in the %" PRIu64
                        " bytes after the header (each entry needs at least %d)",
                        g->n_kv, left(c), MIN_KV_BYTES);
    uint64_t kv_min = g->n_kv * MIN_KV_BYTES;
    if (g->n_tensors > (left(c) - kv_min) / MIN_TENSOR_BYTES)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "tensor count %" PRIu64 " at offset 8 cannot fit in the %" PRIu64
                        " bytes after the header (each tensor info needs at least %d)",
                        g->n_tensors, left(c), MIN_TENSOR_BYTES);
    return ES_OK;
}

static es_status parse_alignment(es__gguf *g, es__err *err) {
    g->alignment = ES__GGUF_DEFAULT_ALIGNMENT;
    const es__gguf_kv *kv = es__gguf_find(g, "general.alignment");
    if (!kv) return ES_OK;
    if (kv->type != ES__GGUF_UINT32)
        return es__fail(err, ES_ERR_FORMAT, "general.alignment (offset %" PRIu64 "): expected type uint32, found %s",
                        kv->offset, vtype_name(kv->type));
    uint32_t a = ld_u32(kv->value);
    if (a == 0 || (a & (a - 1)) != 0)
        return es__fail(err, ES_ERR_FORMAT,
                        "general.alignment (offset %" PRIu64 ") is %" PRIu32 ": expected a nonzero power of two",
                        kv->offset, a);
    g->alignment = a;
    return ES_OK;
}

static es_status parse_all(cur *c, es__gguf *g) {
    ES_TRY(parse_header(c, g));
    g->kv = es__calloc(g->alloc, (size_t)(g->n_kv ? g->n_kv : 1), sizeof *g->kv);
    g->tensors = es__calloc(g->alloc, (size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return es__fail(c->err, ES_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " metadata entries and %" PRIu64
                        " tensor infos", g->n_kv, g->n_tensors);
    for (uint64_t i = 0; i < g->n_kv; i++) ES_TRY(parse_kv(c, i, &g->kv[i], g->alloc));
    bool dup;
    uint64_t a, b;
    ES_TRY(find_duplicate(&g->kv[0].key, sizeof *g->kv, g->n_kv, g->alloc, c->err, &dup, &a, &b));
    if (dup)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "duplicate metadata key '%s': entry #%" PRIu64 " at offset %" PRIu64
                        " repeats entry #%" PRIu64 " at offset %" PRIu64,
                        show(g->kv[b].key).s, b, g->kv[b].offset, a, g->kv[a].offset);
    ES_TRY(parse_alignment(g, c->err));
    for (uint64_t i = 0; i < g->n_tensors; i++) ES_TRY(parse_tensor_info(c, i, g->alignment, &g->tensors[i]));
    ES_TRY(find_duplicate(&g->tensors[0].name, sizeof *g->tensors, g->n_tensors, g->alloc, c->err, &dup, &a, &b));
    if (dup)
        return es__fail(c->err, ES_ERR_FORMAT,
                        "duplicate tensor name '%s': tensor #%" PRIu64 " (info at offset %" PRIu64
                        ") repeats tensor #%" PRIu64 " (info at offset %" PRIu64 ")",
                        show(g->tensors[b].name).s, b, g->tensors[b].info_offset, a, g->tensors[a].info_offset);
    /* The data section starts at the first aligned offset after the infos. */
    uint64_t pad = (g->alignment - c->pos % g->alignment) % g->alignment;
    g->data_offset = c->pos + pad;
    if (g->n_tensors > 0 && pad > left(c))
        return es__fail(c->err, ES_ERR_FORMAT,
                        "truncated file: tensor data section should start at offset %" PRIu64
                        " (tensor infos end at %" PRIu64 ", alignment %" PRIu64 ") but the file has %" PRIu64 " bytes",
                        g->data_offset, c->pos, g->alignment, g->size);
    return check_tensor_data(g, c->err);
}

es_status es__gguf_parse(const uint8_t *data, uint64_t size, const es_allocator *alloc, es__err *err,
                         es__gguf **out) {
    if (!out) return es__fail(err, ES_ERR_INVALID_ARGUMENT, "es__gguf_parse: out is NULL");
    *out = NULL;
    if (!data && size) return es__fail(err, ES_ERR_INVALID_ARGUMENT, "es__gguf_parse: data is NULL");
    es__gguf *g = es__calloc(alloc, 1, sizeof *g);
    if (!g) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "out of memory parsing GGUF");
    g->base = data;
    g->size = size;
    g->alloc = alloc;
    static const uint8_t empty[1];
    cur c = {data ? data : empty, size, 0, err};
    es_status s = parse_all(&c, g);
    if (s != ES_OK) {
        es__gguf_free(g);
        return s;
    }
    *out = g;
    return ES_OK;
}

void es__gguf_free(es__gguf *g) {
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) es__free(g->alloc, (void *)g->kv[i].strs);
    es__free(g->alloc, g->kv);
    es__free(g->alloc, g->tensors);
    es__free(g->alloc, g);
}

/* ---- lookups */

bool es__str_eq(es__str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

const es__gguf_kv *es__gguf_find(const es__gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (es__str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const es__gguf_tensor *es__gguf_find_tensor(const es__gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (es__str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

/* ---- typed getters */

/* Finds key; a missing key is an error only when required (*kv NULL and ES_OK otherwise). */
static es_status lookup(const es__gguf *g, const char *key, bool required, const es__gguf_kv **kv, es__err *err) {
    *kv = es__gguf_find(g, key);
    if (!*kv && required) return es__fail(err, ES_ERR_MODEL, "missing required metadata key '%s'", key);
    return ES_OK;
}

static es_status wrong_type(const es__gguf_kv *kv, const char *expected, es__err *err) {
    return es__fail(err, ES_ERR_FORMAT, "metadata key '%s' (offset %" PRIu64 "): expected %s, found %s%s%s",
                    show(kv->key).s, kv->offset, expected, vtype_name(kv->type),
                    kv->type == ES__GGUF_ARRAY ? " of " : "", kv->type == ES__GGUF_ARRAY ? vtype_name(kv->arr_type) : "");
}

/* Reads any integer kv as a sign flag and magnitude pair widened to 64 bits. */
static bool int_value(const es__gguf_kv *kv, bool *neg, uint64_t *mag) {
    int64_t sv = 0;
    *neg = false;
    switch (kv->type) {
    case ES__GGUF_UINT8: *mag = kv->value[0]; return true;
    case ES__GGUF_UINT16: *mag = ld_u16(kv->value); return true;
    case ES__GGUF_UINT32: *mag = ld_u32(kv->value); return true;
    case ES__GGUF_UINT64: *mag = ld_u64(kv->value); return true;
    case ES__GGUF_INT8: sv = (int8_t)kv->value[0]; break;
    case ES__GGUF_INT16: sv = (int16_t)ld_u16(kv->value); break;
    case ES__GGUF_INT32: sv = (int32_t)ld_u32(kv->value); break;
    case ES__GGUF_INT64: sv = (int64_t)ld_u64(kv->value); break;
    default: return false;
    }
    *neg = sv < 0;
    *mag = sv < 0 ? (uint64_t)0 - (uint64_t)sv : (uint64_t)sv;
    return true;
}

static es_status get_int(const es__gguf *g, const char *key, bool required, int64_t lo, uint64_t hi, int64_t *out,
                         bool *found, es__err *err) {
    const es__gguf_kv *kv;
    *found = false;
    ES_TRY(lookup(g, key, required, &kv, err));
    if (!kv) return ES_OK;
    bool neg;
    uint64_t mag;
    if (!int_value(kv, &neg, &mag)) return wrong_type(kv, "an integer", err);
    uint64_t neg_max = lo < 0 ? (uint64_t)(-(lo + 1)) + 1 : 0; /* |lo| without overflow */
    if ((neg && mag > neg_max) || (!neg && mag > hi))
        return es__fail(err, ES_ERR_FORMAT,
                        "metadata key '%s' (offset %" PRIu64 "): value %s%" PRIu64 " does not fit in [%" PRId64
                        ", %" PRIu64 "]",
                        key, kv->offset, neg ? "-" : "", mag, lo, hi);
    *out = neg ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
    *found = true;
    return ES_OK;
}

es_status es__gguf_get_u32(const es__gguf *g, const char *key, bool required, uint32_t *out, es__err *err) {
    int64_t v;
    bool found;
    ES_TRY(get_int(g, key, required, 0, UINT32_MAX, &v, &found, err));
    if (found) *out = (uint32_t)v;
    return ES_OK;
}

es_status es__gguf_get_i32(const es__gguf *g, const char *key, bool required, int32_t *out, es__err *err) {
    int64_t v;
    bool found;
    ES_TRY(get_int(g, key, required, INT32_MIN, INT32_MAX, &v, &found, err));
    if (found) *out = (int32_t)v;
    return ES_OK;
}

es_status es__gguf_get_f32(const es__gguf *g, const char *key, bool required, float *out, es__err *err) {
    const es__gguf_kv *kv;
    ES_TRY(lookup(g, key, required, &kv, err));
    if (!kv) return ES_OK;
    if (kv->type == ES__GGUF_FLOAT32) {
        uint32_t u = ld_u32(kv->value);
        memcpy(out, &u, 4);
    } else if (kv->type == ES__GGUF_FLOAT64) {
        uint64_t u = ld_u64(kv->value);
        double d;
        memcpy(&d, &u, 8);
        *out = (float)d;
    } else {
        return wrong_type(kv, "float32", err);
    }
    return ES_OK;
}

es_status es__gguf_get_bool(const es__gguf *g, const char *key, bool required, bool *out, es__err *err) {
    const es__gguf_kv *kv;
    ES_TRY(lookup(g, key, required, &kv, err));
    if (!kv) return ES_OK;
    if (kv->type != ES__GGUF_BOOL) return wrong_type(kv, "bool", err);
    *out = kv->value[0] != 0;
    return ES_OK;
}

es_status es__gguf_get_str(const es__gguf *g, const char *key, bool required, es__str *out, es__err *err) {
    const es__gguf_kv *kv;
    ES_TRY(lookup(g, key, required, &kv, err));
    if (!kv) return ES_OK;
    if (kv->type != ES__GGUF_STRING) return wrong_type(kv, "string", err);
    out->len = ld_u64(kv->value);
    out->ptr = (const char *)kv->value + 8;
    return ES_OK;
}

es_status es__gguf_get_arr(const es__gguf *g, const char *key, es__gguf_vtype elem_type, bool required,
                           const es__gguf_kv **out, es__err *err) {
    const es__gguf_kv *kv;
    ES_TRY(lookup(g, key, required, &kv, err));
    if (!kv) return ES_OK;
    if (kv->type != ES__GGUF_ARRAY || kv->arr_type != elem_type) {
        char expected[32];
        snprintf(expected, sizeof expected, "array of %s", vtype_name(elem_type));
        return wrong_type(kv, expected, err);
    }
    *out = kv;
    return ES_OK;
}
