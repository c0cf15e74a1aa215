/* gguf.h: GGUF v2/v3 reader and writer (internal).
 *
 * The reader validates the whole header up front (every length and offset checked against the
 * file size before use) and then hands out views into the caller's bytes; it never copies tensor
 * data. Errors name the field and its file offset. It knows nothing about llama models: model.c
 * checks keys and shapes against the hyperparameters.
 * The writer builds a file in memory order (header, metadata, tensor infos, aligned data) the way
 * llama.cpp's gguf writer lays it out; it is for tools and tests.
 */
#ifndef ES_CORE_GGUF_H
#define ES_CORE_GGUF_H

#include "common.h"

#define ES__GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define ES__GGUF_DEFAULT_ALIGNMENT 32
#define ES__GGUF_MAX_DIMS 4

typedef enum es__gguf_vtype {
    ES__GGUF_UINT8 = 0,
    ES__GGUF_INT8 = 1,
    ES__GGUF_UINT16 = 2,
    ES__GGUF_INT16 = 3,
    ES__GGUF_UINT32 = 4,
    ES__GGUF_INT32 = 5,
    ES__GGUF_FLOAT32 = 6,
    ES__GGUF_BOOL = 7,
    ES__GGUF_STRING = 8,
    ES__GGUF_ARRAY = 9,
    ES__GGUF_UINT64 = 10,
    ES__GGUF_INT64 = 11,
    ES__GGUF_FLOAT64 = 12,
    ES__GGUF_VTYPE_COUNT
} es__gguf_vtype;

/* Tensor element types: values are ggml's, as stored in files. */
typedef enum es__dtype {
    ES__DTYPE_F32 = 0,
    ES__DTYPE_F16 = 1,
    ES__DTYPE_Q4_0 = 2,
    ES__DTYPE_Q4_1 = 3, /* 32-element blocks with a min or a fifth bit (quant_q5.c) */
    ES__DTYPE_Q5_0 = 6,
    ES__DTYPE_Q5_1 = 7,
    ES__DTYPE_Q8_0 = 8,
    ES__DTYPE_Q2_K = 10, /* 256-element super-blocks (quant_k.c) */
    ES__DTYPE_Q3_K = 11,
    ES__DTYPE_Q4_K = 12,
    ES__DTYPE_Q5_K = 13,
    ES__DTYPE_Q6_K = 14,
    ES__DTYPE_IQ4_NL = 20, /* 32-element blocks on a fixed non-uniform grid (quant_iq4.c) */
    ES__DTYPE_IQ4_XS = 23, /* eight such blocks with 6-bit scales under one f16 (quant_iq4.c) */
    ES__DTYPE_BF16 = 30,
} es__dtype;

/* A string inside the file: not NUL-terminated. */
typedef struct es__str {
    const char *ptr;
    uint64_t len;
} es__str;

typedef struct es__gguf_kv {
    es__str key;
    es__gguf_vtype type;     /* value type                                        */
    es__gguf_vtype arr_type; /* element type when type == ARRAY                   */
    uint64_t arr_n;          /* element count when type == ARRAY                  */
    const uint8_t *value;    /* scalar value bytes, or first array element        */
    const es__str *strs;     /* [arr_n] when an array of strings (validated views) */
    uint64_t offset;         /* file offset of the key-value pair (for messages)  */
} es__gguf_kv;

typedef struct es__gguf_tensor {
    es__str name;
    uint32_t n_dims;
    int64_t ne[ES__GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    es__dtype type;
    uint64_t rel_offset;           /* offset within the data section       */
    uint64_t nbytes;
    const uint8_t *data;           /* view into the file                   */
    uint64_t info_offset;          /* file offset of the tensor info       */
} es__gguf_tensor;

typedef struct es__gguf {
    const uint8_t *base; /* the file's bytes (not owned) */
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* file offset of the data section */
    uint64_t n_kv;
    es__gguf_kv *kv;
    uint64_t n_tensors;
    es__gguf_tensor *tensors;
    const es_allocator *alloc;
} es__gguf;

/* Element type facts. Returns false for types edgespec does not support. */
typedef struct es__dtype_traits {
    const char *name;     /* "f32", "q8_0", ... */
    uint32_t block_elems; /* elements per block (1 for float types) */
    uint32_t block_bytes;
} es__dtype_traits;
bool es__dtype_info(uint32_t type, es__dtype_traits *out);

/* Bytes for n elements of type (n a multiple of the block size). False on overflow/bad type. */
bool es__dtype_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

/* Parses and validates data[size] (not owned; must outlive the result). On failure returns the
 * status, fills err and leaves *out NULL. */
es_status es__gguf_parse(const uint8_t *data, uint64_t size, const es_allocator *alloc, es__err *err,
                         es__gguf **out);
void es__gguf_free(es__gguf *g);

const es__gguf_kv *es__gguf_find(const es__gguf *g, const char *key);
const es__gguf_tensor *es__gguf_find_tensor(const es__gguf *g, const char *name);
bool es__str_eq(es__str s, const char *cstr);

/* Typed getters. Each fails with ES_ERR_FORMAT naming the key and its offset when the value has
 * another type (integer getters accept any integer type whose value fits). A missing key returns
 * ES_ERR_MODEL when required, else leaves *out untouched and returns ES_OK. */
es_status es__gguf_get_u32(const es__gguf *g, const char *key, bool required, uint32_t *out, es__err *err);
es_status es__gguf_get_i32(const es__gguf *g, const char *key, bool required, int32_t *out, es__err *err);
es_status es__gguf_get_f32(const es__gguf *g, const char *key, bool required, float *out, es__err *err);
es_status es__gguf_get_bool(const es__gguf *g, const char *key, bool required, bool *out, es__err *err);
es_status es__gguf_get_str(const es__gguf *g, const char *key, bool required, es__str *out, es__err *err);
/* An array of elem_type; *out points at the kv. */
es_status es__gguf_get_arr(const es__gguf *g, const char *key, es__gguf_vtype elem_type, bool required,
                           const es__gguf_kv **out, es__err *err);

/* ---- Dequantisation (reference, scalar): n elements of src (type) to f32. */
bool es__dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Half and bfloat16 conversions (round to nearest even). */
float es__f16_to_f32(uint16_t h);
uint16_t es__f32_to_f16(float f);
float es__bf16_to_f32(uint16_t h);
uint16_t es__f32_to_bf16(float f);

/* Quantise n floats (n a multiple of the type's block) as llama.cpp's reference quantisers do. */
bool es__quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* K-quants (quant_k.c): nb super-blocks of 256 elements. */
#define ES__QK_K 256
bool es__is_k_quant(uint32_t type);
void es__quantize_k(uint32_t type, const float *x, uint8_t *y, int64_t nb);
void es__dequantize_k(uint32_t type, const uint8_t *x, float *y, int64_t nb);
/* One super-block's integer quants q[256] (Q4_K 0..15, Q5_K 0..31, Q6_K -32..31) and, per
 * sub-block j of 32: Q4_K/Q5_K x = a[j] q + b[j] (b = -dmin m), Q6_K x = a[j] q for its first 16
 * elements and b[j] q for the last 16 (each product and a + b as the dequantiser rounds them). */
void es__k_unpack(uint32_t type, const uint8_t *x, int8_t *q, float *a, float *b);
/* A Q4_K/Q5_K super-block's sub-block j (0..7): its 6-bit scale and min, the integers that
 * a[j] = d sc and b[j] = -(dmin m) above are made from (d and dmin are the block's first two f16). */
void es__k_scale_min(const uint8_t *x, int j, int *sc, int *m);
/* The same for the 16-element sub-blocks of Q2_K and Q3_K: q[256] (Q2_K 0..3, Q3_K -4..3) and,
 * per sub-block i of 16, x = a[i] q + b[i] (Q2_K b = -dmin m; Q3_K b = 0). */
void es__k_unpack16(uint32_t type, const uint8_t *x, int8_t *q, float *a, float *b);

/* IQ4_NL (quant_iq4.c): nb blocks of 32 elements, x = d * es__iq4nl_values[nibble]. */
#define ES__QK_IQ4 32
extern const int8_t es__iq4nl_values[16];
void es__quantize_iq4_nl(const float *x, uint8_t *y, int64_t nb);
void es__dequantize_iq4_nl(const uint8_t *x, float *y, int64_t nb);
/* IQ4_XS: nb super-blocks of 256 (ES__IQ4XS_BYTES each), x = es__iq4_xs_scale(j) * grid value
 * in sub-block j of 32. */
#define ES__IQ4XS_BYTES 136
void es__quantize_iq4_xs(const float *x, uint8_t *y, int64_t nb);
void es__dequantize_iq4_xs(const uint8_t *x, float *y, int64_t nb);
/* Sub-block j's (0..7) scale d (ls_j - 32) of the super-block at x: exact in f32. */
float es__iq4_xs_scale(const uint8_t *x, int j);

/* Q4_1, Q5_0 and Q5_1 (quant_q5.c): nb blocks of 32 elements, x = d q + m (Q5_0: m = 0). */
#define ES__QK_Q5 32
bool es__is_q5_family(uint32_t type);
size_t es__q5_block_bytes(uint32_t type); /* 0 for other types */
/* One block's integer quants q[32] (Q4_1 0..15, Q5_0 -16..15, Q5_1 0..31) and its min (*m, 0
 * for Q5_0); returns its scale d. */
float es__q5_unpack(uint32_t type, const uint8_t *x, int8_t *q, float *m);
void es__quantize_q5(uint32_t type, const float *x, uint8_t *y, int64_t nb);
void es__dequantize_q5(uint32_t type, const uint8_t *x, float *y, int64_t nb);

/* ---- Writer. */
typedef struct es__gguf_writer es__gguf_writer;

es__gguf_writer *es__gguf_writer_create(const es_allocator *alloc);
void es__gguf_writer_free(es__gguf_writer *w);
/* Setters copy their arguments. A later set of the same key replaces the earlier value. */
es_status es__gguf_set_u32(es__gguf_writer *w, const char *key, uint32_t v);
es_status es__gguf_set_i32(es__gguf_writer *w, const char *key, int32_t v);
es_status es__gguf_set_u64(es__gguf_writer *w, const char *key, uint64_t v);
es_status es__gguf_set_f32(es__gguf_writer *w, const char *key, float v);
es_status es__gguf_set_bool(es__gguf_writer *w, const char *key, bool v);
es_status es__gguf_set_str(es__gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements (not strings): n elements of elem_type from data. */
es_status es__gguf_set_arr(es__gguf_writer *w, const char *key, es__gguf_vtype elem_type,
                           const void *data, uint64_t n);
es_status es__gguf_set_arr_str(es__gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Any fixed-size scalar type (uint8 ... float64, bool): value points at a host value of that type. */
es_status es__gguf_set_scalar(es__gguf_writer *w, const char *key, es__gguf_vtype type, const void *value);
/* Copies a key and its value, as parsed from another file, byte for byte (any type). */
es_status es__gguf_copy_kv(es__gguf_writer *w, const es__gguf_kv *kv);
/* Tensor of the given type and shape (ne[0] contiguous); data holds its nbytes, copied. */
es_status es__gguf_add_tensor(es__gguf_writer *w, const char *name, es__dtype type, uint32_t n_dims,
                              const int64_t *ne, const void *data);
/* Serialises to path (version 3, general.alignment honoured if set). */
es_status es__gguf_write_file(es__gguf_writer *w, const char *path, es__err *err);
/* Serialises to a malloc'd (allocator) buffer; the caller frees it with es__free. */
es_status es__gguf_write_mem(es__gguf_writer *w, uint8_t **data, uint64_t *size, es__err *err);

#endif /* ES_CORE_GGUF_H */
