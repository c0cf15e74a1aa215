/* mkmodel.c: builds random-weights llama GGUF models (see mkmodel.h): hyperparameter keys as
 * llama.cpp names them, tensors in llama.cpp's order, a synthetic SentencePiece vocabulary or one
 * copied from another file. Not here: the command line (main.c). */
#include "mkmodel.h"

#include "arch.h"
#include "platform.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

es_mk_params es_mk_default_params(void) {
    es_mk_params p;
    memset(&p, 0, sizeof p);
    p.n_vocab = 512;
    p.n_embd = 64;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_ff = 128;
    p.n_ctx = 256;
    p.type = ES__DTYPE_F32;
    p.rope = ES_ROPE_NORM;
    p.freq_base = 10000.0f;
    p.rms_eps = 1e-5f;
    p.seed = 1;
    return p;
}

bool es_mk_preset(const char *name, es_mk_params *p) {
    /* the benchmark shapes of docs/formats.md: vocabulary 32000, context 2048, separate output */
    static const struct {
        const char *name;
        int32_t n_embd, n_layer, n_head, n_head_kv, n_ff;
    } presets[] = {
        {"24m", 288, 6, 6, 6, 768},
        {"134m", 768, 12, 12, 12, 2048},
        {"853m", 2048, 16, 32, 8, 5632},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(presets); i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        p->n_vocab = 32000;
        p->n_ctx = 2048;
        p->n_embd = presets[i].n_embd;
        p->n_layer = presets[i].n_layer;
        p->n_head = presets[i].n_head;
        p->n_head_kv = presets[i].n_head_kv;
        p->n_ff = presets[i].n_ff;
        p->tied = false;
        return true;
    }
    return false;
}

/* ---- random numbers: splitmix64 streams keyed by (seed, tensor index) */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static rng rng_for(uint64_t seed, uint64_t stream) {
    rng r = {seed ^ (stream * 0xD1B54A32D192ED03ull)};
    rng_next(&r);
    return r;
}

/* Uniform in [-1, 1). */
static float rng_unit(rng *r) {
    return (float)((int64_t)(rng_next(r) >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
}

/* ---- synthetic llama vocabulary */

#define N_BYTES 256
static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "was", "that", "for", "it", "with", "as", "on", "he", "be", "at", "by",
    "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were", "her",
    "all", "she", "there", "would", "their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if",
    "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only", "other", "new",
    "some", "could", "time", "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like",
    "our", "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must",
    "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each",
    "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own",
    "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day",
    "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since",
    "against", "go", "came", "right", "used", "take", "three", "house", "light", "water", "model", "token",
};

typedef struct vocab {
    char **tok;
    float *score;
    int32_t *type;
    int32_t n, cap;
    int32_t *slot; /* hash set of token indices + 1, for duplicate pieces */
    uint32_t n_slots;
} vocab;

static uint32_t hash(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

/* Appends s unless it is already there; false when the vocabulary is full. */
static bool v_add(vocab *v, const char *s, float score, int32_t type) {
    if (v->n >= v->cap) return false;
    uint32_t h = hash(s) & (v->n_slots - 1);
    for (; v->slot[h]; h = (h + 1) & (v->n_slots - 1))
        if (strcmp(v->tok[v->slot[h] - 1], s) == 0) return true;
    v->tok[v->n] = strdup(s);
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->slot[h] = ++v->n;
    return true;
}

static bool v_init(vocab *v, int32_t cap) {
    memset(v, 0, sizeof *v);
    v->cap = cap;
    v->n_slots = 1u << 17; /* more than twice the most pieces build_vocab makes */
    v->tok = calloc((size_t)cap, sizeof *v->tok);
    v->score = calloc((size_t)cap, sizeof *v->score);
    v->type = calloc((size_t)cap, sizeof *v->type);
    v->slot = calloc(v->n_slots, sizeof *v->slot);
    return v->tok && v->score && v->type && v->slot;
}

static void v_free(vocab *v) {
    for (int32_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->score);
    free(v->type);
    free(v->slot);
}

#define SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */

/* Appends pieces in a fixed order until cap: controls, bytes, single characters, word starts,
 * whole words with all their prefixes (so merges can reach them), then letter pairs and triples
 * with and without a word start. Scores fall with the index, as SentencePiece's do. */
static void build_vocab(vocab *v) {
    char buf[64];
    v_add(v, "<unk>", 0.0f, 2);
    v_add(v, "<s>", 0.0f, 3);
    v_add(v, "</s>", 0.0f, 3);
    for (int b = 0; b < N_BYTES; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        v_add(v, buf, 0.0f, 6);
    }
#define PIECE(s) v_add(v, (s), -(float)(v->n - 259), 1)
    PIECE(SPACE);
    for (int c = 0x21; c < 0x7f; c++) {
        buf[0] = (char)c;
        buf[1] = '\0';
        PIECE(buf);
    }
    for (int c = 0x21; c < 0x7f; c++) {
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) continue;
        snprintf(buf, sizeof buf, SPACE "%c", c);
        PIECE(buf);
    }
    for (size_t w = 0; w < ES__ARRAY_LEN(words); w++) {
        size_t len = strlen(words[w]);
        for (size_t k = 2; k <= len; k++) {
            snprintf(buf, sizeof buf, SPACE "%.*s", (int)k, words[w]);
            PIECE(buf);
        }
    }
    for (int pass = 0; pass < 4; pass++) {
        int n = pass < 2 ? 2 : 3;
        bool start = pass % 2 == 1;
        int total = n == 2 ? 26 * 26 : 26 * 26 * 26;
        for (int i = 0; i < total; i++) {
            char s[4] = {(char)('a' + (n == 3 ? i / 676 : i / 26)), (char)('a' + (n == 3 ? i / 26 % 26 : i % 26)),
                         (char)(n == 3 ? 'a' + i % 26 : '\0'), '\0'};
            snprintf(buf, sizeof buf, "%s%s", start ? SPACE : "", s);
            if (!PIECE(buf)) return;
        }
    }
#undef PIECE
}

int32_t es_mk_max_vocab(void) {
    vocab v;
    int32_t max = 0;
    if (v_init(&v, 1 << 16)) {
        build_vocab(&v);
        max = v.n;
    }
    v_free(&v);
    return max;
}

static es_status add_synthetic_vocab(es__gguf_writer *w, int32_t n_vocab, es__err *err) {
    int32_t max = es_mk_max_vocab();
    if (n_vocab < 260 || n_vocab > max)
        return es__fail(err, ES_ERR_INVALID_ARGUMENT,
                        "mkmodel: n_vocab %d outside 260..%d for the synthetic vocabulary (use a vocabulary file)",
                        n_vocab, max);
    vocab v;
    es_status s = ES_OK;
    if (!v_init(&v, n_vocab)) s = es__fail(err, ES_ERR_OUT_OF_MEMORY, "mkmodel: out of memory");
    if (s == ES_OK) build_vocab(&v);
    if (s == ES_OK) s = es__gguf_set_str(w, "tokenizer.ggml.model", "llama");
    if (s == ES_OK) s = es__gguf_set_str(w, "tokenizer.ggml.pre", "default");
    if (s == ES_OK) s = es__gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, (uint64_t)v.n);
    if (s == ES_OK) s = es__gguf_set_arr(w, "tokenizer.ggml.scores", ES__GGUF_FLOAT32, v.score, (uint64_t)v.n);
    if (s == ES_OK) s = es__gguf_set_arr(w, "tokenizer.ggml.token_type", ES__GGUF_INT32, v.type, (uint64_t)v.n);
    if (s == ES_OK) s = es__gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (s == ES_OK) s = es__gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (s == ES_OK) s = es__gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (s == ES_OK) s = es__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (s == ES_OK) s = es__gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    if (s != ES_OK && err->status == ES_OK) s = es__fail(err, s, "mkmodel: %s", es_last_error());
    v_free(&v);
    return s;
}

/* Another GGUF file's tokenizer, opened for copying. */
typedef struct vocab_file {
    es__file_map map;
    es__gguf *g;
    int32_t n_tokens;
} vocab_file;

static es_status vocab_file_open(vocab_file *f, const char *path, es__err *err) {
    memset(f, 0, sizeof *f);
    int e = es__file_map_open(path, true, &f->map);
    if (e) return es__fail(err, ES_ERR_IO, "mkmodel: cannot open vocabulary '%s': %s", path, strerror(e));
    const es__gguf_kv *tokens = NULL;
    es_status s = es__gguf_parse(f->map.data, f->map.size, NULL, err, &f->g);
    if (s == ES_OK) s = es__gguf_get_arr(f->g, "tokenizer.ggml.tokens", ES__GGUF_STRING, true, &tokens, err);
    if (s == ES_OK && (tokens->arr_n < 1 || tokens->arr_n > INT32_MAX))
        s = es__fail(err, ES_ERR_MODEL, "mkmodel: '%s' has %" PRIu64 " tokens", path, tokens->arr_n);
    if (s != ES_OK) return es__fail(err, s, "mkmodel: vocabulary '%s': %s", path, es_last_error());
    f->n_tokens = (int32_t)tokens->arr_n;
    return ES_OK;
}

static void vocab_file_close(vocab_file *f) {
    es__gguf_free(f->g);
    es__file_map_close(&f->map);
}

/* Copies every tokenizer.ggml.* key, in the file's order. */
static es_status copy_vocab(es__gguf_writer *w, const vocab_file *f, es__err *err) {
    for (uint64_t i = 0; i < f->g->n_kv; i++) {
        const es__gguf_kv *kv = &f->g->kv[i];
        if (kv->key.len > 15 && memcmp(kv->key.ptr, "tokenizer.ggml.", 15) == 0 && es__gguf_copy_kv(w, kv) != ES_OK)
            return es__fail(err, ES_ERR_OUT_OF_MEMORY, "mkmodel: %s", es_last_error());
    }
    return ES_OK;
}

/* ---- weights */

typedef struct builder {
    const es_mk_params *p;
    es__gguf_writer *w;
    es__err *err;
    uint64_t stream; /* tensor index: keys its random stream */
    uint64_t done, total; /* parameters, for progress */
    double last_report;
    bool finished;
} builder;

static void report(builder *b, const char *name) {
    if (!b->p->progress || b->finished) return;
    double now = es__time_now();
    if (now - b->last_report < 0.25 && b->done < b->total) return;
    b->last_report = now;
    fprintf(stderr, "\redgespec-mkmodel: %5.1f%% %-32s", 100.0 * (double)b->done / (double)b->total, name);
    if (b->done >= b->total) {
        fputc('\n', stderr);
        b->finished = true;
    }
    fflush(stderr);
}

/* A tensor of n_out rows of n_in values: center + scale * uniform(-sqrt3, sqrt3), stored in type. */
static es_status add_weight(builder *b, const char *name, es__dtype type, int64_t n_in, int64_t n_out, float center,
                            float std) {
    uint64_t row_bytes;
    if (!es__dtype_row_bytes(type, (uint64_t)n_in, &row_bytes))
        return es__fail(b->err, ES_ERR_INVALID_ARGUMENT, "mkmodel: tensor '%s': row of %" PRId64 " is not a "
                        "multiple of the block size of the chosen type", name, n_in);
    uint8_t *data = malloc((size_t)(row_bytes * (uint64_t)n_out));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    if (!data || !row) {
        free(data);
        free(row);
        return es__fail(b->err, ES_ERR_OUT_OF_MEMORY, "mkmodel: out of memory for '%s'", name);
    }
    rng r = rng_for(b->p->seed, b->stream++);
    const float a = std * 1.7320508f; /* uniform(-a, a) has standard deviation std */
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = center + a * rng_unit(&r);
        es__quantize_row(type, row, data + (size_t)o * row_bytes, n_in);
        b->done += (uint64_t)n_in;
        if ((o & 255) == 255) report(b, name);
    }
    int64_t ne[2] = {n_in, n_out};
    es_status s = es__gguf_add_tensor(b->w, name, type, n_out > 1 ? 2 : 1, ne, data);
    free(data);
    free(row);
    if (s != ES_OK) return es__fail(b->err, s, "mkmodel: %s", es_last_error());
    report(b, name);
    return ES_OK;
}

/* llama 3's rope_freqs.weight: divisors from 1 (pair 0, the fastest) rising to 8 (the slowest). */
static es_status add_rope_freqs(builder *b, int64_t half) {
    float *f = malloc(sizeof(float) * (size_t)half);
    if (!f) return es__fail(b->err, ES_ERR_OUT_OF_MEMORY, "mkmodel: out of memory");
    for (int64_t i = 0; i < half; i++) {
        const float t = half > 1 ? (float)i / (float)(half - 1) : 0.0f;
        f[i] = 1.0f + 7.0f * t * t;
    }
    const int64_t ne[1] = {half};
    es_status s = es__gguf_add_tensor(b->w, "rope_freqs.weight", ES__DTYPE_F32, 1, ne, f);
    free(f);
    if (s != ES_OK) return es__fail(b->err, s, "mkmodel: %s", es_last_error());
    return ES_OK;
}

/* phi3 LongRoPE's divisors: short ones near 1 (1 to 1.5), long ones rising from 1 (the fastest
 * pair) to 16 (the slowest), shaped like Phi-3.5-mini's. */
static es_status add_longrope(builder *b, int64_t half) {
    float *f = malloc(sizeof(float) * (size_t)half * 2);
    if (!f) return es__fail(b->err, ES_ERR_OUT_OF_MEMORY, "mkmodel: out of memory");
    for (int64_t i = 0; i < half; i++) {
        const float t = half > 1 ? (float)i / (float)(half - 1) : 0.0f;
        f[i] = 1.0f + 0.5f * t;                  /* short */
        f[half + i] = 1.0f + 15.0f * t * t * t;  /* long  */
    }
    const int64_t ne[1] = {half};
    es_status s = es__gguf_add_tensor(b->w, "rope_factors_long.weight", ES__DTYPE_F32, 1, ne, f + half);
    if (s == ES_OK) s = es__gguf_add_tensor(b->w, "rope_factors_short.weight", ES__DTYPE_F32, 1, ne, f);
    free(f);
    if (s != ES_OK) return es__fail(b->err, s, "mkmodel: %s", es_last_error());
    return ES_OK;
}

/* A count in 1..2^30 that ends the string. */
static bool parse_count(const char *s, int32_t *out) {
    char *end = NULL;
    const long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 1 || v > 1L << 30) return false;
    *out = (int32_t)v;
    return true;
}

bool es_mk_parse_rope_scaling(const char *spec, es_mk_params *p) {
    if (!strncmp(spec, "longrope,", 9)) {
        p->longrope = true;
        return parse_count(spec + 9, &p->rope_orig_ctx);
    }
    const bool yarn = !strncmp(spec, "yarn,", 5);
    if (!yarn && strncmp(spec, "linear,", 7)) return false;
    p->rope_scaling = yarn ? "yarn" : "linear";
    char *end = NULL;
    p->rope_factor = strtof(spec + (yarn ? 5 : 7), &end);
    if (!(p->rope_factor > 0.0f)) return false;
    if (!yarn) return *end == '\0';
    return *end == ',' && parse_count(end + 1, &p->rope_orig_ctx);
}

static es_status check_params(const es_mk_params *p, es__err *err) {
    const int32_t kv = p->n_head_kv ? p->n_head_kv : p->n_head;
    if (p->n_embd < 1 || p->n_layer < 1 || p->n_head < 1 || p->n_ff < 1 || p->n_ctx < 1 || kv < 1)
        return es__fail(err, ES_ERR_INVALID_ARGUMENT, "mkmodel: every size must be positive");
    if (p->head_dim < 0 || (p->head_dim ? p->head_dim % 2 : p->n_embd % p->n_head || (p->n_embd / p->n_head) % 2) ||
        p->n_head % kv)
        return es__fail(err, ES_ERR_INVALID_ARGUMENT,
                        "mkmodel: n_embd %d must split into n_head %d heads of even size, and n_head into n_head_kv %d "
                        "groups", p->n_embd, p->n_head, kv);
    if (p->rope_scaling && ((strcmp(p->rope_scaling, "linear") && strcmp(p->rope_scaling, "yarn")) ||
                            !(p->rope_factor > 0.0f)))
        return es__fail(err, ES_ERR_INVALID_ARGUMENT, "mkmodel: RoPE scaling must be linear or yarn with a positive factor");
    if (p->longrope && (p->rope_orig_ctx < 2 || p->rope_freqs))
        return es__fail(err, ES_ERR_INVALID_ARGUMENT,
                        "mkmodel: LongRoPE needs an original context length of at least 2 and no rope_freqs");
    es__dtype_traits tr;
    if (!es__dtype_info(p->type, &tr))
        return es__fail(err, ES_ERR_INVALID_ARGUMENT, "mkmodel: unsupported weight type %d", (int)p->type);
    if (p->n_embd % (int32_t)tr.block_elems || p->n_ff % (int32_t)tr.block_elems)
        return es__fail(err, ES_ERR_INVALID_ARGUMENT, "mkmodel: n_embd %d and n_ff %d must be multiples of %u for %s",
                        p->n_embd, p->n_ff, tr.block_elems, tr.name);
    return ES_OK;
}

static uint32_t file_type(es__dtype t) { /* llama.cpp's general.file_type for "mostly t" */
    switch (t) {
    case ES__DTYPE_F32: return 0;
    case ES__DTYPE_F16: return 1;
    case ES__DTYPE_Q4_0: return 2;
    case ES__DTYPE_Q4_1: return 3;
    case ES__DTYPE_Q5_0: return 8;
    case ES__DTYPE_Q5_1: return 9;
    case ES__DTYPE_Q8_0: return 7;
    case ES__DTYPE_BF16: return 32;
    case ES__DTYPE_Q4_K: return 14; /* llama.cpp's Q4_K_S, Q5_K_S, Q6_K: every matrix that type */
    case ES__DTYPE_Q5_K: return 16;
    case ES__DTYPE_Q6_K: return 18;
    case ES__DTYPE_Q2_K: return 10;
    case ES__DTYPE_Q3_K: return 11;
    case ES__DTYPE_IQ4_NL: return 25;
    case ES__DTYPE_IQ4_XS: return 30;
    }
    return 0;
}

static const char *arch_name(const es_mk_params *p) {
    return p->arch ? p->arch : "llama";
}

static es_status add_keys(const es_mk_params *p, es__gguf_writer *w, int32_t n_vocab) {
    const int32_t kv = p->n_head_kv ? p->n_head_kv : p->n_head;
    const char *a = arch_name(p);
    char key[96];
#define AKEY(name) (snprintf(key, sizeof key, "%s.%s", a, (name)), key)
    ES_TRY(es__gguf_set_str(w, "general.architecture", a));
    ES_TRY(es__gguf_set_str(w, "general.name", p->name ? p->name : "edgespec-random"));
    ES_TRY(es__gguf_set_u32(w, "general.file_type", file_type(p->type)));
    ES_TRY(es__gguf_set_u32(w, AKEY("vocab_size"), (uint32_t)n_vocab));
    ES_TRY(es__gguf_set_u32(w, AKEY("context_length"), (uint32_t)p->n_ctx));
    ES_TRY(es__gguf_set_u32(w, AKEY("embedding_length"), (uint32_t)p->n_embd));
    ES_TRY(es__gguf_set_u32(w, AKEY("block_count"), (uint32_t)p->n_layer));
    ES_TRY(es__gguf_set_u32(w, AKEY("feed_forward_length"), (uint32_t)p->n_ff));
    const int32_t hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    ES_TRY(es__gguf_set_u32(w, AKEY("rope.dimension_count"), (uint32_t)hd));
    if (p->head_dim) {
        ES_TRY(es__gguf_set_u32(w, AKEY("attention.key_length"), (uint32_t)hd));
        ES_TRY(es__gguf_set_u32(w, AKEY("attention.value_length"), (uint32_t)hd));
    }
    ES_TRY(es__gguf_set_u32(w, AKEY("attention.head_count"), (uint32_t)p->n_head));
    ES_TRY(es__gguf_set_u32(w, AKEY("attention.head_count_kv"), (uint32_t)kv));
    ES_TRY(es__gguf_set_f32(w, AKEY("attention.layer_norm_rms_epsilon"), p->rms_eps));
    ES_TRY(es__gguf_set_f32(w, AKEY("rope.freq_base"), p->freq_base));
    if (p->freq_base_swa > 0) ES_TRY(es__gguf_set_f32(w, AKEY("rope.freq_base_swa"), p->freq_base_swa));
    if (es__arch_find(arch_name(p))->mup_scales) { /* granite's multipliers, Granite 3's values (its
                                                       attention scale is 1 / head_dim: 1/64) */
        ES_TRY(es__gguf_set_f32(w, AKEY("embedding_scale"), 12.0f));
        ES_TRY(es__gguf_set_f32(w, AKEY("attention.scale"), 1.0f / (float)hd));
        ES_TRY(es__gguf_set_f32(w, AKEY("residual_scale"), 0.22f));
        ES_TRY(es__gguf_set_f32(w, AKEY("logit_scale"), 8.0f));
    }
    if (p->sliding_window > 0) ES_TRY(es__gguf_set_u32(w, AKEY("attention.sliding_window"), (uint32_t)p->sliding_window));
    if (p->attn_softcap > 0) ES_TRY(es__gguf_set_f32(w, AKEY("attn_logit_softcapping"), p->attn_softcap));
    if (p->final_softcap > 0) ES_TRY(es__gguf_set_f32(w, AKEY("final_logit_softcapping"), p->final_softcap));
    if (p->rope_scaling) {
        ES_TRY(es__gguf_set_str(w, AKEY("rope.scaling.type"), p->rope_scaling));
        ES_TRY(es__gguf_set_f32(w, AKEY("rope.scaling.factor"), p->rope_factor));
    }
    if (p->rope_orig_ctx > 0)
        ES_TRY(es__gguf_set_u32(w, AKEY("rope.scaling.original_context_length"), (uint32_t)p->rope_orig_ctx));
    if (p->longrope) {
        /* the converter's attention factor for LongRoPE: sqrt(1 + ln(s) / ln(original)) for a
         * context extended s times, else 1 */
        const double ext = (double)p->n_ctx / p->rope_orig_ctx;
        ES_TRY(es__gguf_set_f32(w, AKEY("rope.scaling.attn_factor"),
                                ext > 1.0 ? (float)sqrt(1.0 + log(ext) / log((double)p->rope_orig_ctx)) : 1.0f));
    }
#undef AKEY
    /* the pairing key only where it differs from the architecture's own */
    const es__arch *d = es__arch_find(a);
    if (p->rope != (d ? d->rope : ES_ROPE_NORM))
        ES_TRY(es__gguf_set_str(w, "edgespec.rope.ordering", p->rope == ES_ROPE_NEOX ? "neox" : "norm"));
    return ES_OK;
}

es_status es_mk_build(const es_mk_params *p, es__gguf_writer *w, es__err *err) {
    ES_TRY(check_params(p, err));
    /* keys in llama.cpp's order: general, architecture, tokenizer */
    int32_t n_vocab = p->n_vocab;
    vocab_file vf;
    if (p->vocab_path) {
        es_status s = vocab_file_open(&vf, p->vocab_path, err);
        if (s != ES_OK) {
            vocab_file_close(&vf);
            return s;
        }
        n_vocab = vf.n_tokens;
    }
    es_status s = add_keys(p, w, n_vocab);
    if (s != ES_OK) s = es__fail(err, s, "mkmodel: %s", es_last_error());
    if (s == ES_OK) s = p->vocab_path ? copy_vocab(w, &vf, err) : add_synthetic_vocab(w, n_vocab, err);
    if (p->vocab_path) vocab_file_close(&vf);
    ES_TRY(s);

    const int64_t d = p->n_embd, hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    const int64_t qd = hd * p->n_head, kvd = hd * (p->n_head_kv ? p->n_head_kv : p->n_head);
    const float s_d = 1.0f / sqrtf((float)d), s_ff = 1.0f / sqrtf((float)p->n_ff);
    const float s_res = 1.0f / sqrtf(2.0f * (float)p->n_layer); /* residual branches, GPT-2 style */
    builder b = {p, w, err, 0, 0, 0, 0.0, false};
    b.total = (uint64_t)d * (uint64_t)n_vocab * (p->tied ? 1 : 2) + (uint64_t)d +
              (uint64_t)p->n_layer * (uint64_t)(2 * d + 2 * d * d + 2 * d * kvd + 3 * d * p->n_ff);
    b.last_report = es__time_now();
    const es__dtype t = p->type, f32 = ES__DTYPE_F32;
    char name[64];
    const es__arch *a = es__arch_find(arch_name(p));
    if (!a) return es__fail(err, ES_ERR_INVALID_ARGUMENT, "mkmodel: unknown architecture '%s' (%s)", arch_name(p),
                            es__arch_names());
    /* scaled by sqrt(n_embd) in the forward (gemma): drawn that much smaller, so rows stay O(1) */
    ES_TRY(add_weight(&b, "token_embd.weight", t, d, n_vocab, 0.0f, a->embd_scale ? s_d : 1.0f));
    const float s_n = 0.1f / 1.7320508f; /* norms: 1 +- 0.1 */
    for (int32_t il = 0; il < p->n_layer; il++) {
        struct {
            const char *suffix;
            es__dtype type;
            int64_t n_in, n_out;
            float center, std;
            bool on;
        } spec[] = {
            {"attn_norm.weight", f32, d, 1, 1.0f, s_n, true},
            {"attn_q.weight", t, d, qd, 0.0f, s_d, !a->fused_qkv},
            {"attn_k.weight", t, d, kvd, 0.0f, s_d, !a->fused_qkv},
            {"attn_v.weight", t, d, kvd, 0.0f, s_d, !a->fused_qkv},
            {"attn_qkv.weight", t, d, qd + 2 * kvd, 0.0f, s_d, a->fused_qkv},
            {"attn_q.bias", f32, qd, 1, 0.0f, 0.5f, a->qkv_bias},
            {"attn_k.bias", f32, kvd, 1, 0.0f, 0.5f, a->qkv_bias},
            {"attn_v.bias", f32, kvd, 1, 0.0f, 0.5f, a->qkv_bias},
            {"attn_q_norm.weight", f32, hd, 1, 1.0f, 0.3f, a->qk_norm},
            {"attn_k_norm.weight", f32, hd, 1, 1.0f, 0.3f, a->qk_norm},
            {"attn_output.weight", t, qd, d, 0.0f, s_d * s_res, true},
            {"post_attention_norm.weight", f32, d, 1, 1.0f, s_n, a->post_norms},
            {"ffn_norm.weight", f32, d, 1, 1.0f, s_n, true},
            {"ffn_gate.weight", t, d, p->n_ff, 0.0f, s_d, !a->fused_gate_up},
            {"ffn_up.weight", t, d, p->n_ff, 0.0f, s_d, !a->fused_gate_up},
            {"ffn_up.weight", t, d, 2 * (int64_t)p->n_ff, 0.0f, s_d, a->fused_gate_up},
            {"ffn_down.weight", t, p->n_ff, d, 0.0f, s_ff * s_res, true},
            {"post_ffw_norm.weight", f32, d, 1, 1.0f, s_n, a->post_norms},
        };
        for (size_t k = 0; k < ES__ARRAY_LEN(spec); k++) {
            if (!spec[k].on) continue;
            snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].suffix);
            ES_TRY(add_weight(&b, name, spec[k].type, spec[k].n_in, spec[k].n_out, spec[k].center, spec[k].std));
        }
    }
    ES_TRY(add_weight(&b, "output_norm.weight", f32, d, 1, 1.0f, 0.1f / 1.7320508f));
    if (p->rope_freqs) ES_TRY(add_rope_freqs(&b, hd / 2));
    if (p->longrope) ES_TRY(add_longrope(&b, hd / 2));
    if (!p->tied) ES_TRY(add_weight(&b, "output.weight", t, d, n_vocab, 0.0f, s_d));
    return ES_OK;
}

es_status es_mk_write(const es_mk_params *p, const char *path, es__err *err) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    if (!w) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "mkmodel: out of memory");
    es_status s = es_mk_build(p, w, err);
    if (s == ES_OK) s = es__gguf_write_file(w, path, err);
    es__gguf_writer_free(w);
    return s;
}
