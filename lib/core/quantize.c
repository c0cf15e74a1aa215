/* quantize.c: es_quantize(), a GGUF model file rewritten with its weight matrices in another type
 * (`edgespec quantize`). Every key is copied byte for byte (general.file_type and, for the block
 * types, general.quantization_version are set as llama.cpp writes them); every 2-D "*.weight"
 * tensor in f32, f16 or bf16 is converted row by row through f32 with the reference quantisers
 * (quant.c, quant_k.c); every other tensor (norms, 1-D tensors) is copied unchanged.
 * The mixes "q4_K_M" and "q5_K_M" follow llama.cpp's recipe for them (mix_type).
 * Deliberately not here: importance matrices, the other mixes (_S, _L, the IQ recipes),
 * requantising a file that is already quantised (its rounding would compound: refused). */
#include "common.h"
#include "gguf.h"
#include "platform.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static uint32_t file_type_of(es__dtype t) { /* llama.cpp's general.file_type for "all matrices t" */
    switch (t) {
    case ES__DTYPE_F32: return 0;
    case ES__DTYPE_F16: return 1;
    case ES__DTYPE_Q4_0: return 2;
    case ES__DTYPE_Q4_1: return 3;
    case ES__DTYPE_Q5_0: return 8;
    case ES__DTYPE_Q5_1: return 9;
    case ES__DTYPE_Q8_0: return 7;
    case ES__DTYPE_Q2_K: return 10;
    case ES__DTYPE_Q3_K: return 11; /* Q3_K_S */
    case ES__DTYPE_Q4_K: return 14;
    case ES__DTYPE_Q5_K: return 16;
    case ES__DTYPE_Q6_K: return 18;
    case ES__DTYPE_IQ4_NL: return 25;
    case ES__DTYPE_IQ4_XS: return 30;
    case ES__DTYPE_BF16: return 32;
    }
    return 0;
}

/* A target: every matrix in base, or llama.cpp's Q4_K_M / Q5_K_M mix over it (mix_type). */
typedef struct quant_target {
    es__dtype base;
    bool mix;
    int32_t n_layer;   /* blocks in the file (1 + the largest N of "blk.N.")            */
    bool has_output;   /* an output.weight; else token_embd.weight is also the head     */
} quant_target;

static bool is_float(es__dtype t) {
    return t == ES__DTYPE_F32 || t == ES__DTYPE_F16 || t == ES__DTYPE_BF16;
}

static bool ends_with(es__str s, const char *suffix) {
    const size_t n = strlen(suffix);
    return s.len >= n && memcmp(s.ptr + s.len - n, suffix, n) == 0;
}

static bool is_matrix(const es__gguf_tensor *t) {
    return t->n_dims == 2 && t->name.len > 7 && ends_with(t->name, ".weight");
}

/* The type a matrix with rows of ne0 elements gets: the target, or when its rows are not whole
 * blocks of it the type with blocks of 32 llama.cpp falls back to: IQ4_NL for Q2_K, Q3_K and IQ4_XS,
 * Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K; f16 for rows that are not whole blocks of 32
 * either. */
static es__dtype type_for(es__dtype target, int64_t ne0) {
    es__dtype_traits tr;
    es__dtype_info(target, &tr);
    if (ne0 % tr.block_elems == 0) return target;
    if (ne0 % 32 != 0) return ES__DTYPE_F16;
    switch (target) {
    case ES__DTYPE_Q2_K:
    case ES__DTYPE_Q3_K:
    case ES__DTYPE_IQ4_XS: return ES__DTYPE_IQ4_NL;
    case ES__DTYPE_Q4_K: return ES__DTYPE_Q5_0;
    case ES__DTYPE_Q5_K: return ES__DTYPE_Q5_1;
    default: return ES__DTYPE_Q8_0;
    }
}

/* The block index N of a "blk.N.*" tensor name, or -1. */
static int32_t layer_of(es__str name) {
    static const char pre[] = "blk.";
    const size_t n = sizeof pre - 1;
    if (name.len <= n || memcmp(name.ptr, pre, n) != 0) return -1;
    int32_t v = 0;
    size_t i = n;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && v < (1 << 20); i++)
        v = v * 10 + (name.ptr[i] - '0');
    return i > n && i < name.len && name.ptr[i] == '.' ? v : -1;
}

/* llama.cpp's layers that get more bits in its _M mixes: the first and last eighth, and every
 * third one between. */
static bool more_bits(int32_t i, int32_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* A matrix's type under target tg, before the fallback for rows that are not whole blocks
 * (type_for). The _M mixes, as llama.cpp makes them: the output head (token_embd.weight where
 * there is no output.weight) in Q6_K; attn_v and ffn_down in Q6_K in the layers of more_bits; a
 * fused attn_qkv one type up (Q4_K_M: Q5_K, Q5_K_M: Q6_K); every other matrix in the base. */
static es__dtype mix_type(const quant_target *tg, es__str name) {
    if (!tg->mix) return tg->base;
    if (es__str_eq(name, "output.weight") || (!tg->has_output && es__str_eq(name, "token_embd.weight")))
        return ES__DTYPE_Q6_K;
    const int32_t il = layer_of(name);
    if (il < 0) return tg->base;
    if ((ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) && more_bits(il, tg->n_layer))
        return ES__DTYPE_Q6_K;
    if (ends_with(name, ".attn_qkv.weight")) return tg->base == ES__DTYPE_Q4_K ? ES__DTYPE_Q5_K : ES__DTYPE_Q6_K;
    return tg->base;
}

/* Converts t to type into a new buffer (*out, freed by the caller). */
static es_status convert(const es__gguf_tensor *t, es__dtype type, const es_allocator *a, es__err *err, void **out) {
    const int64_t ne0 = t->ne[0], rows = t->ne[1];
    uint64_t rb_in, rb_out;
    es__dtype_row_bytes(t->type, (uint64_t)ne0, &rb_in);
    ES_RETURN_IF(!es__dtype_row_bytes(type, (uint64_t)ne0, &rb_out) || rb_out * (uint64_t)rows > SIZE_MAX, err,
                 ES_ERR_INVALID_ARGUMENT, "tensor '%.*s' is too large", (int)t->name.len, t->name.ptr);
    uint8_t *dst = es__malloc(a, (size_t)(rb_out * (uint64_t)rows));
    float *row = es__malloc(a, (size_t)ne0 * sizeof(float));
    if (!dst || !row) {
        es__free(a, dst);
        es__free(a, row);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "out of memory converting '%.*s'", (int)t->name.len,
                        t->name.ptr);
    }
    for (int64_t r = 0; r < rows; r++) {
        es__dequantize_row(t->type, t->data + rb_in * (uint64_t)r, row, ne0);
        es__quantize_row(type, row, dst + rb_out * (uint64_t)r, ne0);
    }
    es__free(a, row);
    *out = dst;
    return ES_OK;
}

static es_status check_input(const es__gguf *g, const char *path, es__err *err) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const es__gguf_tensor *t = &g->tensors[i];
        es__dtype_traits tr;
        es__dtype_info(t->type, &tr);
        ES_RETURN_IF(is_matrix(t) && !is_float(t->type), err, ES_ERR_UNSUPPORTED,
                     "'%s': tensor '%.*s' is already %s; quantize reads f32, f16 or bf16 weights (requantising "
                     "would add a second rounding)",
                     path, (int)t->name.len, t->name.ptr, tr.name);
    }
    return ES_OK;
}

static es_status run(const es__gguf *g, const char *in_path, const char *out_path, quant_target tg,
                     const es_quantize_params *p, es__err *err) {
    const es_allocator *a = p->allocator;
    const es__log log = {p->log_fn, p->log_user, es__log_level(p->log_level)};
    ES_TRY(check_input(g, in_path, err));
    es__gguf_writer *w = es__gguf_writer_create(a);
    ES_RETURN_IF(!w, err, ES_ERR_OUT_OF_MEMORY, "out of memory");
    es_status s = ES_OK;
    for (uint64_t i = 0; s == ES_OK && i < g->n_kv; i++) {
        const es__gguf_kv *kv = &g->kv[i];
        if (es__str_eq(kv->key, "general.file_type") || es__str_eq(kv->key, "general.quantization_version")) continue;
        s = es__gguf_copy_kv(w, kv);
    }
    /* llama.cpp's file types of the mixes: MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17 */
    const uint32_t ftype = tg.mix ? (tg.base == ES__DTYPE_Q4_K ? 15 : 17) : file_type_of(tg.base);
    if (s == ES_OK) s = es__gguf_set_u32(w, "general.file_type", ftype);
    if (s == ES_OK && !is_float(tg.base)) s = es__gguf_set_u32(w, "general.quantization_version", 2);
    uint64_t total = 0, done = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        total += g->tensors[i].nbytes;
        tg.n_layer = ES__MAX(tg.n_layer, layer_of(g->tensors[i].name) + 1);
        tg.has_output = tg.has_output || es__str_eq(g->tensors[i].name, "output.weight");
    }
    for (uint64_t i = 0; s == ES_OK && i < g->n_tensors; i++) {
        const es__gguf_tensor *t = &g->tensors[i];
        char name[512];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (!is_matrix(t)) {
            s = es__gguf_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
        } else {
            const es__dtype want = mix_type(&tg, t->name), type = type_for(want, t->ne[0]);
            if (type != want) {
                es__dtype_traits tt, tf;
                es__dtype_info(want, &tt);
                es__dtype_info(type, &tf);
                es__logf(&log, ES_LOG_WARN, "'%s': rows of %" PRId64 " are not whole %s blocks: stored as %s",
                         name, t->ne[0], tt.name, tf.name);
            }
            void *buf = NULL;
            s = convert(t, type, a, err, &buf);
            if (s == ES_OK) s = es__gguf_add_tensor(w, name, type, t->n_dims, t->ne, buf);
            es__free(a, buf);
        }
        done += t->nbytes;
        if (s == ES_OK && p->progress_fn && !p->progress_fn(total ? (float)((double)done / (double)total) : 1.0f,
                                                             p->progress_user))
            s = es__fail(err, ES_ERR_CANCELLED, "cancelled by the progress callback");
    }
    if (s == ES_OK) {
        s = es__gguf_write_file(w, out_path, err);
    } else if (err->status == ES_OK) {
        s = es__fail(err, s, "writing '%s': %s", out_path, es_status_str(s));
    }
    es__gguf_writer_free(w);
    return s;
}

es_quantize_params es_quantize_default_params(void) {
    es_quantize_params p;
    memset(&p, 0, sizeof p);
    return p;
}

es_status es_quantize(const char *in_path, const char *out_path, const char *type, const es_quantize_params *params) {
    es__err err;
    es__err_clear(&err);
    const es_quantize_params def = es_quantize_default_params(), *p = params ? params : &def;
    ES_RETURN_IF(!in_path || !out_path || !type, &err, ES_ERR_INVALID_ARGUMENT,
                 "es_quantize: input path, output path and type are required");
    ES_TRY(ES__CHECK_RESERVED(p, "es_quantize_params", &err));
    quant_target tg = {ES__DTYPE_F32, false, 0, false};
    bool found = false;
    if (strcmp(type, "q4_K_M") == 0 || strcmp(type, "q5_K_M") == 0) {
        tg = (quant_target){type[1] == '4' ? ES__DTYPE_Q4_K : ES__DTYPE_Q5_K, true, 0, false};
        found = true;
    }
    for (uint32_t t = 0; t < 64 && !found; t++) {
        es__dtype_traits tr;
        if (es__dtype_info(t, &tr) && strcmp(tr.name, type) == 0) tg.base = (es__dtype)t, found = true;
    }
    ES_RETURN_IF(!found, &err, ES_ERR_INVALID_ARGUMENT,
                 "unknown type '%s' (known: q4_K_M, q5_K_M, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, "
                 "q4_K, q5_K, q6_K, iq4_nl, iq4_xs)",
                 type);
    es__file_map map;
    const int e = es__file_map_open(in_path, true, &map);
    ES_RETURN_IF(e != 0, &err, ES_ERR_IO, "'%s': %s", in_path, es__file_strerror(e));
    es__gguf *g = NULL;
    es_status s = es__gguf_parse(map.data, map.size, p->allocator, &err, &g);
    if (s != ES_OK) {
        char msg[ES__ERRMSG_SIZE];
        memcpy(msg, err.msg, sizeof msg);
        es__fail(&err, s, "'%s': %s", in_path, msg);
    } else {
        s = run(g, in_path, out_path, tg, p, &err);
    }
    es__gguf_free(g);
    es__file_map_close(&map);
    return s;
}
