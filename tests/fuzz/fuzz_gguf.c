/* fuzz_gguf.c: fuzz target for the GGUF reader and model loading (LLVMFuzzerTestOneInput). Any
 * input must either parse, with every view inside the input, or fail with a message; never crash,
 * hang or leak. A parsed file is exercised further: every metadata value through the typed
 * getters, the first row of every tensor dequantised (each data byte touched, so sanitizers see
 * bad views), then es_model_load's validation (full and vocab-only, through es__model_load_mem)
 * and on success the info, tensor, metadata and tokenizer calls.
 * Built two ways (tests/fuzz/meson.build): linked with libFuzzer (-Dfuzzer=true, clang), and in
 * every build with driver.c, which replays seeds and deterministic mutations as a meson test. */
#include "gguf.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const es__gguf *g) {
    es__err err;
    char key[256];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const es__gguf_kv *kv = &g->kv[i];
        size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.ptr, n);
        key[n] = '\0';
        uint32_t u;
        int32_t s;
        float f;
        bool b;
        es__str str;
        const es__gguf_kv *arr;
        es__gguf_get_u32(g, key, true, &u, &err);
        es__gguf_get_i32(g, key, false, &s, &err);
        es__gguf_get_f32(g, key, true, &f, &err);
        es__gguf_get_bool(g, key, true, &b, &err);
        if (es__gguf_get_str(g, key, true, &str, &err) == ES_OK && str.len) {
            volatile char c = str.ptr[str.len - 1]; /* the view must be inside the input */
            (void)c;
        }
        if (es__gguf_get_arr(g, key, kv->arr_type, true, &arr, &err) == ES_OK && arr->arr_n &&
            arr->arr_type == ES__GGUF_STRING && arr->strs[arr->arr_n - 1].len) {
            volatile char c = arr->strs[arr->arr_n - 1].ptr[arr->strs[arr->arr_n - 1].len - 1];
            (void)c;
        }
    }
    float row[256];
    for (uint64_t i = 0; i < g->n_tensors && i < 64; i++) {
        const es__gguf_tensor *t = &g->tensors[i];
        char name[256];
        if (t->name.len < sizeof name) {
            memcpy(name, t->name.ptr, (size_t)t->name.len);
            name[t->name.len] = '\0';
            if (es__gguf_find_tensor(g, name) != t) abort(); /* names are unique and NUL-free */
        }
        int64_t n = t->ne[0] < 256 ? t->ne[0] : 256;
        es__dtype_traits tr;
        if (!es__dtype_info(t->type, &tr)) abort(); /* the reader admits supported types only */
        n -= n % tr.block_elems;
        if (n > 0) es__dequantize_row(t->type, t->data, row, n);
        volatile uint8_t last = t->data[t->nbytes - 1];
        (void)last;
    }
}

static void exercise_model(const uint8_t *data, size_t size, const es__gguf *g, bool vocab_only) {
    es_model_params p = es_model_default_params();
    p.vocab_only = vocab_only;
    es_model *m = NULL;
    es_status s = es__model_load_mem(data, size, "fuzz.gguf", &p, &m);
    if (s != ES_OK) {
        if (m || (s != ES_ERR_FORMAT && s != ES_ERR_UNSUPPORTED && s != ES_ERR_MODEL && s != ES_ERR_OUT_OF_MEMORY))
            abort();
        return;
    }
    es_model_info info;
    if (es_model_get_info(m, &info) != ES_OK || info.n_tensors != (int32_t)g->n_tensors) abort();
    for (int32_t i = 0; i < info.n_tensors; i++) {
        es_tensor_info ti;
        if (es_model_tensor_info(m, i, &ti) != ES_OK || !ti.name || !ti.type) abort();
    }
    char key[256], buf[48];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (g->kv[i].key.len >= sizeof key) continue;
        memcpy(key, g->kv[i].key.ptr, (size_t)g->kv[i].key.len);
        key[g->kv[i].key.len] = '\0';
        es_status ms = es_model_meta_str(m, key, buf, sizeof buf);
        if ((ms != ES_OK && ms != ES_ERR_BUFFER_TOO_SMALL) || strlen(buf) >= sizeof buf) abort();
    }
    int32_t toks[64];
    size_t n = 0;
    if (es_tokenize(m, "Hello world, <s> \xe2\x96\x81x\xff", 20, true, true, toks, 64, &n) == ES_OK) {
        char text[256];
        size_t len = 0;
        es_detokenize(m, toks, n, true, false, text, sizeof text, &len);
    }
    es_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    es__gguf *g = NULL;
    es__err err;
    es_status s = es__gguf_parse(data, size, NULL, &err, &g);
    if (s == ES_OK) {
        if (!g) abort();
        exercise(g);
        exercise_model(data, size, g, false);
        exercise_model(data, size, g, true);
        es__gguf_free(g);
    } else if (g || err.msg[0] == '\0' || (s != ES_ERR_FORMAT && s != ES_ERR_UNSUPPORTED && s != ES_ERR_OUT_OF_MEMORY)) {
        abort(); /* a failure must leave no result, say why, and use a status meant for files */
    }
    return 0;
}
