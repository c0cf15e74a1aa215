/* gguf_write.c: the GGUF writer half of gguf.h, for tools (edgespec-mkmodel, exporters) and tests.
 *
 * Files are version 3, laid out as llama.cpp's writer lays them out: header, metadata in the
 * order keys were first set, tensor infos in the order tensors were added, zero padding to the
 * alignment, then each tensor's data at the next aligned offset (zero padded after it, so the
 * file ends aligned). The alignment is general.alignment when set (a uint32 power of two), else 32.
 * Deliberately not here: reading (gguf_read.c) and quantisation (quant.c); the writer stores the
 * bytes it is given. It keeps everything in memory until it serialises.
 */
#include "gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct wkv {
    char *key;
    uint32_t type;  /* value type */
    uint8_t *value; /* the serialised value as it follows the type field */
    uint64_t size;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[ES__GGUF_MAX_DIMS];
    uint8_t *data;
    uint64_t nbytes;
} wtensor;

struct es__gguf_writer {
    const es_allocator *alloc;
    es_allocator alloc_copy;
    es__err err;
    wkv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
};

es__gguf_writer *es__gguf_writer_create(const es_allocator *alloc) {
    es__gguf_writer *w = es__calloc(alloc, 1, sizeof *w);
    if (!w) return NULL;
    if (alloc) {
        w->alloc_copy = *alloc;
        w->alloc = &w->alloc_copy;
    }
    return w;
}

void es__gguf_writer_free(es__gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        es__free(w->alloc, w->kv[i].key);
        es__free(w->alloc, w->kv[i].value);
    }
    for (uint64_t i = 0; i < w->n_t; i++) {
        es__free(w->alloc, w->t[i].name);
        es__free(w->alloc, w->t[i].data);
    }
    es__free(w->alloc, w->kv);
    es__free(w->alloc, w->t);
    es_allocator copy;
    const es_allocator *a = NULL;
    if (w->alloc) {
        copy = *w->alloc;
        a = &copy;
    }
    es__free(a, w);
}

static void st_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void st_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Grows an array of elem-sized items to hold one more; false when out of memory. */
static bool grow(const es_allocator *a, void **arr, uint64_t n, uint64_t *cap, size_t elem) {
    if (n < *cap) return true;
    uint64_t nc = *cap ? *cap * 2 : 16;
    size_t bytes;
    if (!es__mul_size((size_t)nc, elem, &bytes)) return false;
    void *p = es__realloc(a, *arr, bytes);
    if (!p) return false;
    *arr = p;
    *cap = nc;
    return true;
}

/* Stores (key, type, value bytes), taking ownership of value; replaces an existing key's value in
 * place so the key keeps its position. */
static es_status set_kv(es__gguf_writer *w, const char *key, uint32_t type, uint8_t *value, uint64_t size) {
    if (!w || !key || !key[0] || !value) {
        if (w) es__free(w->alloc, value);
        return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT, "gguf writer: NULL writer or empty key");
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            es__free(w->alloc, w->kv[i].value);
            w->kv[i].type = type;
            w->kv[i].value = value;
            w->kv[i].size = size;
            return ES_OK;
        }
    }
    char *k = es__strndup(w->alloc, key, strlen(key));
    if (!k || !grow(w->alloc, (void **)&w->kv, w->n_kv, &w->cap_kv, sizeof *w->kv)) {
        es__free(w->alloc, k);
        es__free(w->alloc, value);
        return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory adding key '%s'", key);
    }
    w->kv[w->n_kv++] = (wkv){k, type, value, size};
    return ES_OK;
}

static es_status set_scalar(es__gguf_writer *w, const char *key, uint32_t type, const void *le_bytes, size_t n) {
    uint8_t *v = w ? es__malloc(w->alloc, n) : NULL;
    if (w && !v) return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
    if (v) memcpy(v, le_bytes, n);
    return set_kv(w, key, type, v, n);
}

es_status es__gguf_set_u32(es__gguf_writer *w, const char *key, uint32_t v) {
    uint8_t b[4];
    st_u32(b, v);
    return set_scalar(w, key, ES__GGUF_UINT32, b, 4);
}

es_status es__gguf_set_i32(es__gguf_writer *w, const char *key, int32_t v) {
    uint8_t b[4];
    st_u32(b, (uint32_t)v);
    return set_scalar(w, key, ES__GGUF_INT32, b, 4);
}

es_status es__gguf_set_u64(es__gguf_writer *w, const char *key, uint64_t v) {
    uint8_t b[8];
    st_u64(b, v);
    return set_scalar(w, key, ES__GGUF_UINT64, b, 8);
}

es_status es__gguf_set_f32(es__gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint8_t b[4];
    st_u32(b, u);
    return set_scalar(w, key, ES__GGUF_FLOAT32, b, 4);
}

es_status es__gguf_set_bool(es__gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, ES__GGUF_BOOL, &b, 1);
}

es_status es__gguf_set_str(es__gguf_writer *w, const char *key, const char *v) {
    if (!w || !v) return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT, "gguf writer: NULL argument");
    size_t len = strlen(v);
    uint8_t *b = len <= SIZE_MAX - 8 ? es__malloc(w->alloc, len + 8) : NULL;
    if (!b) return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory for key '%s'", key);
    st_u64(b, len);
    memcpy(b + 8, v, len);
    return set_kv(w, key, ES__GGUF_STRING, b, len + 8);
}

/* Serialised element size of a fixed-size type, 0 for others. */
static size_t elem_size(uint32_t t) {
    switch (t) {
    case ES__GGUF_UINT8: case ES__GGUF_INT8: case ES__GGUF_BOOL: return 1;
    case ES__GGUF_UINT16: case ES__GGUF_INT16: return 2;
    case ES__GGUF_UINT32: case ES__GGUF_INT32: case ES__GGUF_FLOAT32: return 4;
    case ES__GGUF_UINT64: case ES__GGUF_INT64: case ES__GGUF_FLOAT64: return 8;
    }
    return 0;
}

es_status es__gguf_set_scalar(es__gguf_writer *w, const char *key, es__gguf_vtype type, const void *value) {
    size_t esz = elem_size(type);
    if (!w || !value || !esz)
        return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT,
                        "gguf writer: key '%s': set_scalar needs a fixed-size type and a value", key ? key : "");
    uint64_t v = 0;
    switch (esz) {
    case 1: v = *(const uint8_t *)value; break;
    case 2: { uint16_t x; memcpy(&x, value, 2); v = x; break; }
    case 4: { uint32_t x; memcpy(&x, value, 4); v = x; break; }
    default: memcpy(&v, value, 8); break;
    }
    if (type == ES__GGUF_BOOL) v = v != 0;
    uint8_t b[8];
    st_u64(b, v);
    return set_scalar(w, key, type, b, esz);
}

es_status es__gguf_copy_kv(es__gguf_writer *w, const es__gguf_kv *kv) {
    if (!w || !kv) return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT, "gguf writer: copy_kv: NULL argument");
    char key[4096];
    if (kv->key.len >= sizeof key)
        return es__fail(&w->err, ES_ERR_INVALID_ARGUMENT, "gguf writer: copy_kv: key of %" PRIu64 " bytes", kv->key.len);
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = '\0';
    uint64_t n; /* serialised value bytes from kv->value on */
    size_t head = 0;
    if (kv->type == ES__GGUF_ARRAY) {
        head = 12;
        if (kv->arr_type == ES__GGUF_STRING)
            n = kv->arr_n ? (uint64_t)((const uint8_t *)kv->strs[kv->arr_n - 1].ptr - kv->value) +
                                kv->strs[kv->arr_n - 1].len
                          : 0;
        else
            n = kv->arr_n * elem_size(kv->arr_type);
    } else if (kv->type == ES__GGUF_STRING) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)kv->value[i] << (8 * i);
        n = 8 + len;
    } else {
        n = elem_size(kv->type);
    }
    if (n > SIZE_MAX - head || (n == 0 && kv->type != ES__GGUF_ARRAY))
        return es__fail(&w->err, ES_ERR_INVALID_ARGUMENT, "gguf writer: copy_kv: key '%s' has an invalid value", key);
    uint8_t *b = es__malloc(w->alloc, (size_t)(head + n));
    if (!b) return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory copying key '%s'", key);
    if (head) {
        st_u32(b, kv->arr_type);
        st_u64(b + 4, kv->arr_n);
    }
    if (n) memcpy(b + head, kv->value, (size_t)n);
    return set_kv(w, key, kv->type, b, head + n);
}

es_status es__gguf_set_arr(es__gguf_writer *w, const char *key, es__gguf_vtype elem_type, const void *data,
                           uint64_t n) {
    size_t esz = elem_size(elem_type);
    if (!w || (!data && n) || !esz)
        return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT,
                        "gguf writer: key '%s': array needs a fixed-size element type and data", key ? key : "");
    size_t body;
    if (n > SIZE_MAX || !es__mul_size((size_t)n, esz, &body) || body > SIZE_MAX - 12)
        return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: key '%s': array too large", key);
    uint8_t *b = es__malloc(w->alloc, body + 12);
    if (!b) return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory for key '%s'", key);
    st_u32(b, elem_type);
    st_u64(b + 4, n);
    /* elements to little-endian, whatever the host order */
    const uint8_t *src = data;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        switch (esz) {
        case 1: v = src[i]; break;
        case 2: { uint16_t x; memcpy(&x, src + 2 * i, 2); v = x; break; }
        case 4: { uint32_t x; memcpy(&x, src + 4 * i, 4); v = x; break; }
        default: memcpy(&v, src + 8 * i, 8); break;
        }
        for (size_t k = 0; k < esz; k++) b[12 + i * esz + k] = (uint8_t)(v >> (8 * k));
    }
    if (elem_type == ES__GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++) b[12 + i] = b[12 + i] != 0;
    return set_kv(w, key, ES__GGUF_ARRAY, b, body + 12);
}

es_status es__gguf_set_arr_str(es__gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (!w || (!strs && n))
        return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT, "gguf writer: NULL argument for key '%s'",
                        key ? key : "");
    uint64_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) return es__fail(&w->err, ES_ERR_INVALID_ARGUMENT, "gguf writer: key '%s': string %" PRIu64 " is NULL", key, i);
        if (!es__add_u64(total, 8 + (uint64_t)strlen(strs[i]), &total) || total > SIZE_MAX)
            return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: key '%s': strings too large", key);
    }
    uint8_t *b = es__malloc(w->alloc, (size_t)total);
    if (!b) return es__fail(&w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory for key '%s'", key);
    st_u32(b, ES__GGUF_STRING);
    st_u64(b + 4, n);
    uint64_t o = 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = strlen(strs[i]);
        st_u64(b + o, len);
        memcpy(b + o + 8, strs[i], len);
        o += 8 + len;
    }
    return set_kv(w, key, ES__GGUF_ARRAY, b, total);
}

es_status es__gguf_add_tensor(es__gguf_writer *w, const char *name, es__dtype type, uint32_t n_dims,
                              const int64_t *ne, const void *data) {
    if (!w || !name || !name[0] || !ne || !data)
        return es__fail(w ? &w->err : NULL, ES_ERR_INVALID_ARGUMENT, "gguf writer: add_tensor: NULL or empty argument");
    es__err *err = &w->err;
    es__dtype_traits tr;
    ES_RETURN_IF(!es__dtype_info(type, &tr), err, ES_ERR_UNSUPPORTED, "gguf writer: tensor '%s': unsupported type %d",
                 name, (int)type);
    ES_RETURN_IF(n_dims < 1 || n_dims > ES__GGUF_MAX_DIMS, err, ES_ERR_INVALID_ARGUMENT,
                 "gguf writer: tensor '%s': n_dims %" PRIu32 " outside 1..%d", name, n_dims, ES__GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        ES_RETURN_IF(ne[d] <= 0, err, ES_ERR_INVALID_ARGUMENT, "gguf writer: tensor '%s': ne[%" PRIu32 "] = %" PRId64,
                     name, d, ne[d]);
        ES_RETURN_IF(!es__mul_u64(n, (uint64_t)ne[d], &n) || n > INT64_MAX, err, ES_ERR_INVALID_ARGUMENT,
                     "gguf writer: tensor '%s': element count overflows", name);
    }
    ES_RETURN_IF(ne[0] % tr.block_elems != 0, err, ES_ERR_INVALID_ARGUMENT,
                 "gguf writer: tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32, name,
                 ne[0], tr.name, tr.block_elems);
    uint64_t nbytes;
    ES_RETURN_IF(!es__dtype_row_bytes(type, n, &nbytes) || nbytes > SIZE_MAX, err, ES_ERR_INVALID_ARGUMENT,
                 "gguf writer: tensor '%s': byte size overflows", name);
    for (uint64_t i = 0; i < w->n_t; i++)
        ES_RETURN_IF(strcmp(w->t[i].name, name) == 0, err, ES_ERR_INVALID_ARGUMENT,
                     "gguf writer: duplicate tensor name '%s'", name);
    char *nm = es__strndup(w->alloc, name, strlen(name));
    uint8_t *copy = es__malloc(w->alloc, (size_t)nbytes);
    if (!nm || !copy || !grow(w->alloc, (void **)&w->t, w->n_t, &w->cap_t, sizeof *w->t)) {
        es__free(w->alloc, nm);
        es__free(w->alloc, copy);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory for tensor '%s' (%" PRIu64 " bytes)",
                        name, nbytes);
    }
    memcpy(copy, data, (size_t)nbytes);
    wtensor t = {nm, (uint32_t)type, n_dims, {1, 1, 1, 1}, copy, nbytes};
    for (uint32_t d = 0; d < n_dims; d++) t.ne[d] = ne[d];
    w->t[w->n_t++] = t;
    return ES_OK;
}

/* ---- serialisation: one pass that either counts bytes or writes them to a sink */

typedef struct sink {
    uint8_t *mem; /* write here when non-NULL */
    FILE *fp;     /* else here when non-NULL; else only count */
    uint64_t pos;
    bool io_error;
} sink;

static void emit(sink *s, const void *p, uint64_t n) {
    if (s->mem)
        memcpy(s->mem + s->pos, p, (size_t)n);
    else if (s->fp && !s->io_error && n && fwrite(p, 1, (size_t)n, s->fp) != n)
        s->io_error = true;
    s->pos += n;
}
static void emit_u32(sink *s, uint32_t v) {
    uint8_t b[4];
    st_u32(b, v);
    emit(s, b, 4);
}
static void emit_u64(sink *s, uint64_t v) {
    uint8_t b[8];
    st_u64(b, v);
    emit(s, b, 8);
}
static void emit_zeros(sink *s, uint64_t n) {
    static const uint8_t z[64];
    while (n) {
        uint64_t k = n < sizeof z ? n : sizeof z;
        emit(s, z, k);
        n -= k;
    }
}

static uint64_t pad_to(uint64_t x, uint64_t a) {
    return (a - x % a) % a;
}

static es_status writer_alignment(es__gguf_writer *w, uint64_t *alignment) {
    *alignment = ES__GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        ES_RETURN_IF(w->kv[i].type != ES__GGUF_UINT32, &w->err, ES_ERR_INVALID_ARGUMENT,
                     "gguf writer: general.alignment must be a uint32");
        uint32_t a = (uint32_t)w->kv[i].value[0] | (uint32_t)w->kv[i].value[1] << 8 |
                     (uint32_t)w->kv[i].value[2] << 16 | (uint32_t)w->kv[i].value[3] << 24;
        ES_RETURN_IF(a == 0 || (a & (a - 1)), &w->err, ES_ERR_INVALID_ARGUMENT,
                     "gguf writer: general.alignment %" PRIu32 " is not a nonzero power of two", a);
        *alignment = a;
    }
    return ES_OK;
}

/* Sizes are checked against overflow in the counting pass (pos is summed in uint64 from sizes
 * that each fit in size_t; a file image past 2^63 bytes is refused). */
static void serialise(const es__gguf_writer *w, uint64_t alignment, sink *s) {
    emit_u32(s, ES__GGUF_MAGIC);
    emit_u32(s, 3);
    emit_u64(s, w->n_t);
    emit_u64(s, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        uint64_t len = strlen(w->kv[i].key);
        emit_u64(s, len);
        emit(s, w->kv[i].key, len);
        emit_u32(s, w->kv[i].type);
        emit(s, w->kv[i].value, w->kv[i].size);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        emit_u64(s, len);
        emit(s, t->name, len);
        emit_u32(s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) emit_u64(s, (uint64_t)t->ne[d]);
        emit_u32(s, t->type);
        emit_u64(s, off);
        off += t->nbytes + pad_to(t->nbytes, alignment);
    }
    emit_zeros(s, pad_to(s->pos, alignment));
    for (uint64_t i = 0; i < w->n_t; i++) {
        emit(s, w->t[i].data, w->t[i].nbytes);
        emit_zeros(s, pad_to(w->t[i].nbytes, alignment));
    }
}

static es_status prepare(es__gguf_writer *w, uint64_t *alignment, uint64_t *size) {
    ES_TRY(writer_alignment(w, alignment));
    /* Every piece is held in memory, so this bound (padding at most one alignment per tensor)
     * cannot wrap; refusing images past 2^62 bytes keeps the counting pass below from wrapping. */
    uint64_t total = 24 + w->n_kv * 12 + w->n_t * (8 + 4 + 32 + 4 + 8) + *alignment;
    for (uint64_t i = 0; i < w->n_kv; i++) total += strlen(w->kv[i].key) + w->kv[i].size;
    for (uint64_t i = 0; i < w->n_t; i++) total += strlen(w->t[i].name) + w->t[i].nbytes + *alignment;
    ES_RETURN_IF(total > (1ull << 62), &w->err, ES_ERR_OUT_OF_MEMORY, "gguf writer: file image too large");
    sink count = {NULL, NULL, 0, false};
    serialise(w, *alignment, &count);
    *size = count.pos;
    return ES_OK;
}

es_status es__gguf_write_mem(es__gguf_writer *w, uint8_t **data, uint64_t *size, es__err *err) {
    if (!w || !data || !size) return es__fail(err, ES_ERR_INVALID_ARGUMENT, "gguf writer: NULL argument");
    uint64_t alignment, n;
    es_status st = prepare(w, &alignment, &n);
    if (st != ES_OK) return es__err_forward(err, &w->err);
    if (n > SIZE_MAX) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "gguf writer: %" PRIu64 " bytes do not fit in memory", n);
    uint8_t *mem = es__malloc(w->alloc, (size_t)n);
    if (!mem) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "gguf writer: out of memory for %" PRIu64 " bytes", n);
    sink s = {mem, NULL, 0, false};
    serialise(w, alignment, &s);
    ES_ASSERT(s.pos == n);
    *data = mem;
    *size = n;
    return ES_OK;
}

es_status es__gguf_write_file(es__gguf_writer *w, const char *path, es__err *err) {
    if (!w || !path) return es__fail(err, ES_ERR_INVALID_ARGUMENT, "gguf writer: NULL argument");
    uint64_t alignment, n;
    es_status st = prepare(w, &alignment, &n);
    if (st != ES_OK) return es__err_forward(err, &w->err);
    FILE *fp = fopen(path, "wb");
    if (!fp) return es__fail(err, ES_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    sink s = {NULL, fp, 0, false};
    serialise(w, alignment, &s);
    int e = s.io_error ? errno : 0;
    if (fclose(fp) != 0 && !e) e = errno ? errno : EIO;
    if (s.io_error || e) {
        remove(path);
        return es__fail(err, ES_ERR_IO, "writing '%s' failed after %" PRIu64 " of %" PRIu64 " bytes: %s", path, s.pos,
                        n, strerror(e ? e : EIO));
    }
    return ES_OK;
}
