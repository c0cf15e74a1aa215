/* tokenizer_load.c: es__vocab_load: reads the tokenizer.ggml.* keys of a parsed GGUF file into an
 * es__vocab_desc and builds the vocabulary. Type errors come from the GGUF getters (key and file
 * offset); content errors from es__vocab_build (key and index). It checks nothing else. */
#include "tokenizer_impl.h"

static es_status get_flag(const es__gguf *g, const char *key, int8_t *out, es__err *err) {
    bool b;
    if (!es__gguf_find(g, key)) return ES_OK;
    ES_TRY(es__gguf_get_bool(g, key, true, &b, err));
    *out = b ? 1 : 0;
    return ES_OK;
}

/* An array of elem type, or absent: *kv NULL. */
static es_status get_array(const es__gguf *g, const char *key, es__gguf_vtype elem, const es__gguf_kv **kv,
                           es__err *err) {
    *kv = NULL;
    return es__gguf_get_arr(g, key, elem, false, kv, err);
}

es_status es__vocab_load(const es__gguf *g, const es_allocator *alloc, es__err *err, es__vocab **out) {
    *out = NULL;
    es__vocab_desc d;
    es__vocab_desc_init(&d);
    ES_TRY(es__gguf_get_str(g, "tokenizer.ggml.model", false, &d.model, err));
    ES_TRY(es__gguf_get_str(g, "tokenizer.ggml.pre", false, &d.pre, err));
    const es__gguf_kv *kv;
    ES_TRY(get_array(g, "tokenizer.ggml.tokens", ES__GGUF_STRING, &kv, err));
    if (kv) d.tokens = kv->strs, d.n_tokens = kv->arr_n;
    ES_TRY(get_array(g, "tokenizer.ggml.scores", ES__GGUF_FLOAT32, &kv, err));
    if (kv) d.scores = kv->value, d.n_scores = kv->arr_n;
    ES_TRY(get_array(g, "tokenizer.ggml.token_type", ES__GGUF_INT32, &kv, err));
    if (kv) d.types = kv->value, d.n_types = kv->arr_n;
    ES_TRY(get_array(g, "tokenizer.ggml.merges", ES__GGUF_STRING, &kv, err));
    if (kv) d.merges = kv->strs, d.n_merges = kv->arr_n;
    for (int i = 0; i < ES__SPECIAL_COUNT; i++) {
        int32_t id = -1;
        ES_TRY(es__gguf_get_i32(g, es__special_keys[i], false, &id, err));
        d.special[i] = id;
    }
    ES_TRY(get_flag(g, "tokenizer.ggml.add_bos_token", &d.add_bos, err));
    ES_TRY(get_flag(g, "tokenizer.ggml.add_eos_token", &d.add_eos, err));
    ES_TRY(get_flag(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix, err));
    return es__vocab_build(&d, alloc, err, out);
}
