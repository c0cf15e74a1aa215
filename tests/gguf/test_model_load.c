/* test_model_load.c: es_model_load and the info calls on models made by tools/mkmodel: every
 * weight type, tied and separate heads, GQA, NeOX ordering, mmap and read; the llama.cpp
 * vocabulary files (vocab_only); every kind of bad model (missing key or tensor, wrong shape or
 * type, inconsistent hyperparameters, unsupported features) rebuilt from a good one with the
 * writer, each with its status and message; progress and cancellation; allocation failure at
 * every allocation; and a forward pass on the CPU backend to show mkmodel's weights keep
 * activations O(1). */
#include "mkmodel.h"
#include "model.h"
#include "rope.h"

#include "../common/test_alloc.h"
#include "../common/test_file.h"
#include "../test.h"

#include <inttypes.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static const char *tmp(const char *name) {
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

static void make(const es_mk_params *p, const char *path) {
    es__err err = {ES_OK, ""};
    CHECKF(es_mk_write(p, path, &err) == ES_OK, "mkmodel: %s", err.msg);
}

/* Parameters per weight element: the formula the info call must reproduce. */
static uint64_t expected_params(const es_mk_params *p, int32_t n_vocab) {
    uint64_t d = (uint64_t)p->n_embd, hd = d / (uint64_t)p->n_head;
    uint64_t kv = hd * (uint64_t)(p->n_head_kv ? p->n_head_kv : p->n_head);
    uint64_t layer = 2 * d + 2 * d * d + 2 * d * kv + 3 * d * (uint64_t)p->n_ff;
    return d * (uint64_t)n_vocab * (p->tied ? 1 : 2) + d + (uint64_t)p->n_layer * layer;
}

static void test_good(es__dtype type, bool tied, int32_t n_head_kv, es_rope_type rope, bool mmap) {
    es_mk_params p = es_mk_default_params();
    p.type = type;
    p.tied = tied;
    p.n_head_kv = n_head_kv;
    p.rope = rope;
    p.n_layer = 3;
    p.seed = (uint64_t)type * 7 + tied;
    const char *path = tmp("good.gguf");
    make(&p, path);
    es_model_params mp = es_model_default_params();
    mp.no_mmap = !mmap;
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, &mp, &m));
    if (!m) return;
    es_model_info i;
    CHECK_OK(es_model_get_info(m, &i));
    CHECK(!strcmp(i.architecture, "llama") && !strcmp(i.name, "edgespec-random") && i.gguf_version == 3);
    CHECK(i.n_vocab == 512 && i.n_ctx_train == 256 && i.n_embd == 64 && i.n_layer == 3 && i.n_head == 4);
    CHECK(i.n_head_kv == (n_head_kv ? n_head_kv : 4) && i.n_ff == 128 && i.head_dim == 16 && i.n_rot == 16);
    CHECK(i.rope_freq_base == 10000.0f && i.rope_freq_scale == 1.0f && i.rms_norm_eps == 1e-5f);
    CHECK(i.rope_type == rope && i.tied_output == tied && i.has_weights && !i.has_ss_adapter);
    CHECK(i.tokenizer == ES_TOKENIZER_LLAMA && !strcmp(i.tokenizer_pre, "default") && i.bos_id == 1 && i.eos_id == 2);
    CHECKF(i.n_params == expected_params(&p, 512), "n_params %" PRIu64 ", expected %" PRIu64, i.n_params,
           expected_params(&p, 512));
    CHECK(i.n_tensors == 2 + 9 * 3 + (tied ? 0 : 1));
    /* the internal view the backends read */
    CHECK(m->tok_embd && m->output_norm && m->output && (m->output == m->tok_embd) == tied);
    CHECK(m->tok_embd->type == type && m->output_norm->type == ES__DTYPE_F32);
    uint64_t bytes = 0;
    for (int32_t t = 0; t < i.n_tensors; t++) {
        es_tensor_info ti;
        CHECK_OK(es_model_tensor_info(m, t, &ti));
        bytes += ti.nbytes;
        CHECK(ti.offset % 32 == 0 && m->tensors[t].data != NULL);
        CHECK(m->tensors[t].nbytes == ti.nbytes && !strcmp(ti.name, m->tensors[t].name));
    }
    CHECK(bytes == i.weight_bytes);
    for (int32_t l = 0; l < 3; l++) {
        const es__layer *ly = &m->layers[l];
        CHECK(ly->attn_norm && ly->wq && ly->wk && ly->wv && ly->wo && ly->ffn_norm && ly->ffn_gate && ly->ffn_up &&
              ly->ffn_down);
        CHECK(ly->wk->ne[1] == 16 * i.n_head_kv && ly->ffn_down->ne[0] == 128 && ly->wq->type == type);
    }
    es_tensor_info ti;
    CHECK_OK(es_model_tensor_info(m, 0, &ti));
    es__dtype_traits tr;
    es__dtype_info(type, &tr);
    CHECK(!strcmp(ti.name, "token_embd.weight") && !strcmp(ti.type, tr.name) && ti.n_dims == 2 && ti.ne[0] == 64 &&
          ti.ne[1] == 512);
    CHECK_FAILS(es_model_tensor_info(m, i.n_tensors, &ti), ES_ERR_INVALID_ARGUMENT, "outside");
    /* metadata as text */
    char buf[256];
    CHECK_OK(es_model_meta_str(m, "general.architecture", buf, sizeof buf));
    CHECK(!strcmp(buf, "llama"));
    CHECK_OK(es_model_meta_str(m, "llama.block_count", buf, sizeof buf));
    CHECK(!strcmp(buf, "3"));
    CHECK_OK(es_model_meta_str(m, "llama.attention.layer_norm_rms_epsilon", buf, sizeof buf));
    CHECK(strtof(buf, NULL) == 1e-5f);
    CHECK_OK(es_model_meta_str(m, "tokenizer.ggml.add_bos_token", buf, sizeof buf));
    CHECK(!strcmp(buf, "true"));
    CHECK_OK(es_model_meta_str(m, "tokenizer.ggml.tokens", buf, sizeof buf));
    const char *prefix = "[512 string: \"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", ";
    CHECKF(!strncmp(buf, prefix, strlen(prefix)) && strstr(buf, ", ...]"), "%s", buf);
    CHECK_OK(es_model_meta_str(m, "tokenizer.ggml.token_type", buf, sizeof buf));
    CHECK(!strcmp(buf, "[512 int32: 2, 3, 3, 6, 6, 6, 6, 6, ...]"));
    CHECK_FAILS(es_model_meta_str(m, "general.architecture", buf, 3), ES_ERR_BUFFER_TOO_SMALL, "needs 6 bytes");
    CHECK(!strcmp(buf, "ll"));
    CHECK_FAILS(es_model_meta_str(m, "no.such.key", buf, sizeof buf), ES_ERR_INVALID_ARGUMENT, "no.such.key");
    /* the tokenizer came along */
    int32_t toks[16];
    size_t n = 0;
    CHECK_OK(es_tokenize(m, "the", 3, true, false, toks, 16, &n));
    CHECK(n >= 2 && toks[0] == 1);
    es_model_free(m);
}

/* ---- rebuilding a good file with edits */

typedef struct edit {
    const char *drop_key;
    const char *drop_tensor;
    void (*extra)(es__gguf_writer *w);
} edit;

static es_model *load_edit(edit e);

static void rebuild(const char *src, const char *dst, edit e) {
    size_t n = 0;
    uint8_t *data = test_read_file(src, 0, &n);
    CHECKF(data != NULL, "cannot read %s", src);
    es__gguf *g = NULL;
    es__err err;
    CHECK_OK(es__gguf_parse(data, (uint64_t)n, NULL, &err, &g));
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    for (uint64_t i = 0; g && i < g->n_kv; i++)
        if (!e.drop_key || !es__str_eq(g->kv[i].key, e.drop_key)) CHECK_OK(es__gguf_copy_kv(w, &g->kv[i]));
    for (uint64_t i = 0; g && i < g->n_tensors; i++) {
        const es__gguf_tensor *t = &g->tensors[i];
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (e.drop_tensor && !strcmp(name, e.drop_tensor)) continue;
        CHECK_OK(es__gguf_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data));
    }
    if (e.extra) e.extra(w);
    CHECK_OK(es__gguf_write_file(w, dst, &err));
    es__gguf_writer_free(w);
    es__gguf_free(g);
    free(data);
}

static void add_f(es__gguf_writer *w, const char *name, es__dtype type, int64_t ne0, int64_t ne1) {
    uint64_t nb = 0;
    es__dtype_row_bytes(type, (uint64_t)ne0, &nb);
    uint8_t *data = calloc((size_t)(nb * (uint64_t)ne1), 1);
    int64_t ne[2] = {ne0, ne1};
    CHECK_OK(es__gguf_add_tensor(w, name, type, ne1 > 1 ? 2 : 1, ne, data));
    free(data);
}

static const char *base_path;

static void arch_nul(es__gguf_writer *w);

/* Replaces the first \x01 byte of the file at path with a NUL (strings the writer cannot take). */
static void patch_nul(const char *path) {
    size_t n = 0;
    uint8_t *data = test_read_file(path, 0, &n);
    uint8_t *at = data ? memchr(data, 1, n) : NULL;
    CHECK(at != NULL);
    if (at) {
        *at = 0;
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(data, 1, n, f) == n);
        if (f) fclose(f);
    }
    free(data);
}

static void expect_load(const char *label, edit e, es_status want, const char *needle) {
    const char *path = tmp("bad.gguf");
    rebuild(base_path, path, e);
    if (e.extra == arch_nul) patch_nul(path);
    es_model *m = (es_model *)&e; /* poison */
    es_status s = es_model_load(path, NULL, &m);
    const char *msg = es_last_error();
    bool ok = s == want && (want == ES_OK ? m != NULL : m == NULL) && strstr(msg, needle);
    CHECKF(ok, "%s: got %s \"%s\", expected %s with \"%s\"", label, es_status_str(s), msg, es_status_str(want), needle);
    if (s == ES_OK) es_model_free(m);
}

static es_model_info load_info(edit e) {
    const char *path = tmp("edit.gguf");
    rebuild(base_path, path, e);
    es_model *m = NULL;
    es_model_info i;
    memset(&i, 0, sizeof i);
    CHECK_OK(es_model_load(path, NULL, &m));
    if (m) es_model_get_info(m, &i);
    es_model_free(m); /* the info's strings are not used after this */
    return i;
}

#define SET_U32(fn, key, v)                                                                                            \
    static void fn(es__gguf_writer *w) { CHECK_OK(es__gguf_set_u32(w, key, v)); }
#define SET_STR(fn, key, v)                                                                                            \
    static void fn(es__gguf_writer *w) { CHECK_OK(es__gguf_set_str(w, key, v)); }
#define SET_F32(fn, key, v)                                                                                            \
    static void fn(es__gguf_writer *w) { CHECK_OK(es__gguf_set_f32(w, key, v)); }
SET_U32(kv3, "llama.attention.head_count_kv", 3)
SET_U32(rot15, "llama.rope.dimension_count", 15)
SET_U32(rot32, "llama.rope.dimension_count", 32)
SET_U32(rot8, "llama.rope.dimension_count", 8)
SET_U32(klen8, "llama.attention.key_length", 8)
SET_U32(layers0, "llama.block_count", 0)
SET_U32(vocab100, "llama.vocab_size", 100)
SET_U32(layers1, "llama.block_count", 1)
SET_STR(arch_gpt2, "general.architecture", "gpt2")
SET_STR(arch_nul, "general.architecture", "llama\x01x") /* the \x01 becomes a NUL in the file */
SET_STR(tok_none, "tokenizer.ggml.model", "none")
SET_STR(yarn, "llama.rope.scaling.type", "yarn")
SET_STR(dynamic, "llama.rope.scaling.type", "dynamic")
SET_STR(neox, "edgespec.rope.ordering", "neox")
SET_STR(bogus_order, "edgespec.rope.ordering", "sideways")
SET_STR(layers_str, "llama.block_count", "two")
SET_F32(eps_neg, "llama.attention.layer_norm_rms_epsilon", -1.0f)
SET_F32(scale_linear, "llama.rope.scale_linear", 2.0f)
SET_F32(base_nan, "llama.rope.freq_base", NAN)
static void linear4(es__gguf_writer *w) {
    CHECK_OK(es__gguf_set_str(w, "llama.rope.scaling.type", "linear"));
    CHECK_OK(es__gguf_set_f32(w, "llama.rope.scaling.factor", 4.0f));
}
static void linear_nofactor(es__gguf_writer *w) { CHECK_OK(es__gguf_set_str(w, "llama.rope.scaling.type", "linear")); }
static void yarn4(es__gguf_writer *w); /* below, with the other scalings of test_rope_scaling */
static void k_narrow(es__gguf_writer *w) { add_f(w, "blk.0.attn_k.weight", ES__DTYPE_F32, 64, 32); }
static void k_wide(es__gguf_writer *w) { add_f(w, "blk.0.attn_k.weight", ES__DTYPE_F32, 32, 64); }
static void norm_short(es__gguf_writer *w) { add_f(w, "blk.1.ffn_norm.weight", ES__DTYPE_F32, 32, 1); }
static void norm_f16(es__gguf_writer *w) { add_f(w, "blk.0.attn_norm.weight", ES__DTYPE_F16, 64, 1); }
static void norm_2d(es__gguf_writer *w) { add_f(w, "output_norm.weight", ES__DTYPE_F32, 64, 2); }
static void emb_vocab(es__gguf_writer *w) { add_f(w, "token_embd.weight", ES__DTYPE_F32, 64, 511); }
static void out_q4(es__gguf_writer *w) { add_f(w, "output.weight", ES__DTYPE_Q4_0, 64, 512); }
static void extra_tensor(es__gguf_writer *w) { add_f(w, "adapter.extra.weight", ES__DTYPE_F32, 8, 8); }

static char logged[4096];
static int log_calls[ES_LOG_DEBUG + 2]; /* per level; the last counts levels out of range */
static void log_fn(es_log_level level, const char *msg, void *user) {
    (void)user;
    log_calls[level >= ES_LOG_DEFAULT && level <= ES_LOG_DEBUG ? level : ES_LOG_DEBUG + 1]++;
    if (level == ES_LOG_DEBUG && strlen(logged) + strlen(msg) + 2 < sizeof logged) {
        strcat(logged, msg);
        strcat(logged, "\n");
    }
}

static void test_bad(void) {
    es_mk_params p = es_mk_default_params();
    p.n_layer = 2;
    base_path = tmp("base.gguf");
    static char keep[512];
    snprintf(keep, sizeof keep, "%s", base_path);
    base_path = keep;
    make(&p, base_path);

    /* missing keys */
    const char *required[] = {"llama.context_length", "llama.embedding_length", "llama.block_count",
                              "llama.feed_forward_length", "llama.attention.head_count",
                              "llama.attention.layer_norm_rms_epsilon", "general.architecture"};
    for (size_t k = 0; k < ES__ARRAY_LEN(required); k++) {
        char needle[128];
        snprintf(needle, sizeof needle, "missing required metadata key '%s'", required[k]);
        expect_load(required[k], (edit){required[k], NULL, NULL}, ES_ERR_MODEL, needle);
    }
    expect_load("no tokenizer", (edit){"tokenizer.ggml.tokens", NULL, NULL}, ES_ERR_MODEL, "tokenizer.ggml.tokens");
    /* missing tensors; a missing output.weight means a tied head */
    expect_load("no ffn_up", (edit){NULL, "blk.1.ffn_up.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'blk.1.ffn_up.weight'");
    expect_load("no output_norm", (edit){NULL, "output_norm.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'output_norm.weight'");
    expect_load("no token_embd", (edit){NULL, "token_embd.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'token_embd.weight'");
    es_model_info i = load_info((edit){NULL, "output.weight", NULL});
    CHECK(i.tied_output && i.n_tensors == 2 + 9 * 2);
    /* shapes and types */
    expect_load("narrow k", (edit){NULL, "blk.0.attn_k.weight", k_narrow}, ES_ERR_MODEL,
                "tensor 'blk.0.attn_k.weight' has shape [64, 32], expected [64, 64] (n_embd, n_head_kv * head_dim)");
    expect_load("wide k", (edit){NULL, "blk.0.attn_k.weight", k_wide}, ES_ERR_MODEL, "has shape [32, 64], expected [64, 64]");
    expect_load("short norm", (edit){NULL, "blk.1.ffn_norm.weight", norm_short}, ES_ERR_MODEL,
                "tensor 'blk.1.ffn_norm.weight' has shape [32], expected [64] (n_embd)");
    expect_load("2-d norm", (edit){NULL, "output_norm.weight", norm_2d}, ES_ERR_MODEL, "has shape [64, 2], expected [64]");
    expect_load("vocab mismatch", (edit){NULL, "token_embd.weight", emb_vocab}, ES_ERR_MODEL,
                "tensor 'token_embd.weight' has shape [64, 511], expected [64, 512]");
    expect_load("f16 norm", (edit){NULL, "blk.0.attn_norm.weight", norm_f16}, ES_ERR_UNSUPPORTED,
                "tensor 'blk.0.attn_norm.weight' (file offset");
    expect_load("f16 norm message", (edit){NULL, "blk.0.attn_norm.weight", norm_f16}, ES_ERR_UNSUPPORTED,
                "has type f16: norm weights and biases must be f32");
    expect_load("q4_0 head", (edit){NULL, "output.weight", out_q4}, ES_OK, "");
    /* hyperparameters */
    expect_load("kv heads", (edit){NULL, NULL, kv3}, ES_ERR_MODEL,
                "llama.attention.head_count 4 is not a multiple of llama.attention.head_count_kv 3");
    expect_load("odd rot", (edit){NULL, NULL, rot15}, ES_ERR_MODEL, "llama.rope.dimension_count 15: expected an even");
    expect_load("rot > head", (edit){NULL, NULL, rot32}, ES_ERR_MODEL, "2..head size 16");
    expect_load("key length", (edit){NULL, NULL, klen8}, ES_ERR_UNSUPPORTED,
                "llama.attention.key_length 8 differs from llama.attention.value_length 16");
    expect_load("0 layers", (edit){NULL, NULL, layers0}, ES_ERR_MODEL, "'llama.block_count' (offset");
    expect_load("0 layers range", (edit){NULL, NULL, layers0}, ES_ERR_MODEL, "is 0: expected 1..1024");
    expect_load("vocab_size", (edit){NULL, NULL, vocab100}, ES_ERR_MODEL,
                "llama.vocab_size 100 disagrees with tokenizer.ggml.tokens, which has 512 tokens");
    expect_load("arch", (edit){NULL, NULL, arch_gpt2}, ES_ERR_UNSUPPORTED, "general.architecture is 'gpt2'");
    /* a NUL inside the name: not 'llama' (the C string), and said so */
    expect_load("arch with a NUL", (edit){NULL, NULL, arch_nul}, ES_ERR_FORMAT,
                "general.architecture (offset");
    expect_load("arch with a NUL message", (edit){NULL, NULL, arch_nul}, ES_ERR_FORMAT,
                "has a NUL byte after 'llama'");
    /* the tokenizer's absence is named, not blamed on the token count */
    expect_load("no tokenizer.ggml.model", (edit){"tokenizer.ggml.model", NULL, NULL}, ES_ERR_MODEL,
                "tokenizer.ggml.model is missing");
    expect_load("tokenizer.ggml.model none", (edit){NULL, NULL, tok_none}, ES_ERR_MODEL,
                "tokenizer.ggml.model is 'none'");
    /* layers the hyperparameters do not count */
    expect_load("block_count below the tensors", (edit){NULL, NULL, layers1}, ES_ERR_MODEL,
                "tensor 'blk.1.attn_norm.weight' (file offset");
    expect_load("block_count below the tensors message", (edit){NULL, NULL, layers1}, ES_ERR_MODEL,
                "is for block 1, but llama.block_count is 1");
    expect_load("yarn without factor", (edit){NULL, NULL, yarn}, ES_ERR_MODEL,
                "missing required metadata key 'llama.rope.scaling.factor'");
    expect_load("dynamic", (edit){NULL, NULL, dynamic}, ES_ERR_UNSUPPORTED,
                "RoPE scaling 'dynamic' is not supported (none, linear, yarn, longrope)");
    expect_load("linear without factor", (edit){NULL, NULL, linear_nofactor}, ES_ERR_MODEL,
                "missing required metadata key 'llama.rope.scaling.factor'");
    expect_load("ordering", (edit){NULL, NULL, bogus_order}, ES_ERR_UNSUPPORTED,
                "'edgespec.rope.ordering' (offset");
    expect_load("type", (edit){NULL, NULL, layers_str}, ES_ERR_FORMAT, "'llama.block_count' (offset");
    expect_load("eps", (edit){NULL, NULL, eps_neg}, ES_ERR_MODEL, "layer_norm_rms_epsilon' (offset");
    expect_load("freq base", (edit){NULL, NULL, base_nan}, ES_ERR_MODEL, "expected a positive finite number");
    /* accepted variations */
    i = load_info((edit){NULL, NULL, linear4});
    CHECK(i.rope_freq_scale == 0.25f && !strcmp(i.rope_scaling, "linear") && i.rope_attn_factor == 1.0f);
    i = load_info((edit){NULL, NULL, scale_linear});
    CHECK(i.rope_freq_scale == 0.5f);
    i = load_info((edit){NULL, NULL, yarn4});
    CHECK(!strcmp(i.rope_scaling, "yarn") && i.rope_n_ctx_orig == 4096);
    i = load_info((edit){NULL, NULL, NULL});
    CHECK(!strcmp(i.rope_scaling, "none") && i.rope_n_ctx_orig == i.n_ctx_train);
    i = load_info((edit){NULL, NULL, neox});
    CHECK(i.rope_type == ES_ROPE_NEOX);
    i = load_info((edit){NULL, NULL, rot8});
    CHECK(i.n_rot == 8 && i.head_dim == 16);
    i = load_info((edit){"llama.attention.head_count_kv", NULL, NULL});
    CHECK(i.n_head_kv == i.n_head);
    i = load_info((edit){"llama.rope.freq_base", NULL, NULL});
    CHECK(i.rope_freq_base == 10000.0f);
    /* an extra tensor is allowed and logged at debug level */
    const char *path = tmp("extra.gguf");
    rebuild(base_path, path, (edit){NULL, NULL, extra_tensor});
    es_model_params mp = es_model_default_params();
    mp.log_fn = log_fn;
    mp.log_level = ES_LOG_DEBUG;
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, &mp, &m));
    CHECK(strstr(logged, "tensor 'adapter.extra.weight' is not used"));
    if (m) {
        es_model_get_info(m, &i);
        CHECK(i.n_params == expected_params(&p, 512)); /* the extra tensor is not a model parameter */
    }
    es_model_free(m);
    /* log_level 0 is ES_LOG_WARN: the debug and info lines of that load are dropped, a failed
     * load's error comes through; the callback never sees ES_LOG_DEFAULT or a level out of range */
    CHECK(log_calls[ES_LOG_INFO] == 1 && log_calls[ES_LOG_DEBUG] >= 1);
    memset(log_calls, 0, sizeof log_calls);
    mp.log_level = ES_LOG_DEFAULT;
    m = NULL;
    CHECK_OK(es_model_load(path, &mp, &m));
    es_model_free(m);
    CHECK(es_model_load(tmp("missing.gguf"), &mp, &m) == ES_ERR_IO);
    CHECK(log_calls[ES_LOG_INFO] == 0 && log_calls[ES_LOG_DEBUG] == 0 && log_calls[ES_LOG_ERROR] == 1);
    CHECK(log_calls[ES_LOG_DEFAULT] == 0 && log_calls[ES_LOG_DEBUG + 1] == 0);
}

static void test_files(void) {
    es_model *m = (es_model *)dir;
    CHECK_FAILS(es_model_load(tmp("missing.gguf"), NULL, &m), ES_ERR_IO, "missing.gguf");
    CHECK(m == NULL);
    const char *path = tmp("garbage.gguf");
    FILE *fp = fopen(path, "wb");
    fputs("this is not a gguf file", fp);
    fclose(fp);
    CHECK_FAILS(es_model_load(path, NULL, &m), ES_ERR_FORMAT, "garbage.gguf': bad magic at offset 0");
    CHECK_FAILS(es_model_load(NULL, NULL, &m), ES_ERR_INVALID_ARGUMENT, "path is NULL");
    /* files that are not regular files: refused by type, before anything blocks on them (a FIFO
     * with no writer would block an open for reading forever; the alarm turns that into a
     * failure instead of a hung test) */
    const char *fifo = tmp("model.fifo");
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(10);
    CHECK_FAILS(es_model_load(fifo, NULL, &m), ES_ERR_IO, "is a FIFO, not a regular file");
    es_model_params nm = es_model_default_params();
    nm.no_mmap = true;
    CHECK_FAILS(es_model_load(fifo, &nm, &m), ES_ERR_IO, "model.fifo");
    alarm(0);
    CHECK(m == NULL);
    unlink(fifo);
    CHECK_FAILS(es_model_load("/dev/null", NULL, &m), ES_ERR_IO, "'/dev/null': is a character device, not a regular file");
    CHECK_FAILS(es_model_load(dir, NULL, &m), ES_ERR_IO, "is a directory");
    /* the path appears once in the message */
    CHECK_FAILS(es_model_load(path, NULL, &m), ES_ERR_FORMAT, "bad magic");
    const char *first = strstr(es_last_error(), "garbage.gguf");
    CHECKF(first && !strstr(first + 1, "garbage.gguf"), "the path twice: %s", es_last_error());
    CHECK_FAILS(es_model_load(tmp("missing.gguf"), NULL, &m), ES_ERR_IO, "missing.gguf");
    first = strstr(es_last_error(), "missing.gguf");
    CHECKF(first && !strstr(first + 1, "missing.gguf"), "the path twice: %s", es_last_error());
    CHECK_FAILS(es_model_load(path, NULL, NULL), ES_ERR_INVALID_ARGUMENT, "out is NULL");
    es_model_free(NULL);

    /* the llama.cpp vocabulary files: tokenizer and hyperparameters without weights */
    const char *shared = getenv("ES_SHARED_DIR");
    char vpath[1024];
    es_model_params mp = es_model_default_params();
    mp.vocab_only = true;
    snprintf(vpath, sizeof vpath, "%s/vocab-tests/ggml-vocab-llama-spm.gguf", shared ? shared : "../shared");
    CHECK_OK(es_model_load(vpath, &mp, &m));
    es_model_info i;
    if (m) {
        CHECK_OK(es_model_get_info(m, &i));
        CHECK(!i.has_weights && i.n_vocab == 32000 && i.n_layer == 32 && i.n_embd == 4096 && i.n_tensors == 0);
        CHECK(i.tokenizer == ES_TOKENIZER_LLAMA && i.bos_id == 1 && i.n_params == 0);
    }
    es_model_free(m);
    CHECK_FAILS(es_model_load(vpath, NULL, &m), ES_ERR_MODEL, "missing tensor 'token_embd.weight'");
    snprintf(vpath, sizeof vpath, "%s/vocab-tests/ggml-vocab-gpt-2.gguf", shared ? shared : "../shared");
    CHECK_OK(es_model_load(vpath, &mp, &m));
    if (m) {
        CHECK_OK(es_model_get_info(m, &i));
        CHECK(!strcmp(i.architecture, "gpt2") && i.n_vocab == 50257 && i.tokenizer == ES_TOKENIZER_GPT2);
        CHECK(!strcmp(i.tokenizer_pre, "gpt-2"));
    }
    es_model_free(m);
    CHECK_FAILS(es_model_load(vpath, NULL, &m), ES_ERR_UNSUPPORTED, "general.architecture is 'gpt2'");
}

/* ---- progress, cancellation, allocation failure */

typedef struct prog {
    float last;
    int calls;
    bool monotonic;
    int cancel_at;
} prog;

static bool progress(float f, void *user) {
    prog *p = user;
    if (f < p->last || f < 0 || f > 1) p->monotonic = false;
    p->last = f;
    return ++p->calls != p->cancel_at;
}

static void test_progress(void) {
    const char *path = tmp("good.gguf");
    es_mk_params p = es_mk_default_params();
    make(&p, path);
    prog pr = {0, 0, true, -1};
    es_model_params mp = es_model_default_params();
    mp.progress_fn = progress;
    mp.progress_user = &pr;
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, &mp, &m));
    CHECK(pr.calls >= 3 && pr.monotonic && pr.last == 1.0f);
    es_model_free(m);
    for (int k = 1; k <= 3; k++) {
        pr = (prog){0, 0, true, k};
        CHECK_FAILS(es_model_load(path, &mp, &m), ES_ERR_CANCELLED, "cancelled by the progress callback");
        CHECK(m == NULL);
    }
}

static void test_alloc_failures(void) {
    const char *path = tmp("good.gguf");
    es_mk_params p = es_mk_default_params();
    p.n_layer = 1;
    p.n_vocab = 260; /* every token is an allocation or two: keep the loop short */
    make(&p, path);
    int succeeded_at = -1;
    for (int k = 0; k < 5000 && succeeded_at < 0; k++) {
        test_alloc b; /* k allocations succeed, then every one fails */
        es_allocator a = test_allocator(&b, k, false);
        es_model_params mp = es_model_default_params();
        mp.allocator = &a;
        es_model *m = NULL;
        es_status s = es_model_load(path, &mp, &m);
        if (s == ES_OK) {
            succeeded_at = k;
            es_model_free(m);
        } else {
            CHECKF(s == ES_ERR_OUT_OF_MEMORY && m == NULL, "budget %d: %s: %s", k, es_status_str(s), es_last_error());
        }
        CHECKF(b.live == 0, "budget %d: %ld allocations leaked", k, b.live);
    }
    CHECK(succeeded_at > 5);
}

/* ---- mkmodel's weights keep activations O(1) through depth */

static void test_activations(void) {
    const int depths[2] = {1, 12};
    for (int k = 0; k < 2; k++) {
        es_mk_params p = es_mk_default_params();
        p.n_layer = depths[k];
        p.type = ES__DTYPE_Q8_0;
        const char *path = tmp("deep.gguf");
        make(&p, path);
        es_model *m = NULL;
        CHECK_OK(es_model_load(path, NULL, &m));
        es_context *ctx = NULL;
        es_context_params cp = es_context_default_params();
        cp.n_ctx = 64;
        if (m) CHECK_OK(es_context_create(m, &cp, &ctx));
        if (!ctx) {
            es_model_free(m);
            continue;
        }
        int32_t toks[8] = {1, 300, 301, 302, 303, 304, 305, 306};
        es_batch b = {8, toks, NULL, NULL, NULL, NULL};
        CHECK_OK(es_forward(ctx, &b));
        const float *lg = NULL;
        CHECK_OK(es_logits(ctx, 7, &lg));
        double sum = 0, sq = 0;
        bool finite = lg != NULL;
        for (int i = 0; lg && i < 512; i++) {
            finite = finite && isfinite(lg[i]);
            sum += lg[i];
            sq += (double)lg[i] * lg[i];
        }
        double sd = sqrt(sq / 512 - (sum / 512) * (sum / 512));
        CHECKF(finite && sd > 0.2 && sd < 5.0, "%d layers: logit std %g", depths[k], sd);
        es_context_free(ctx);
        es_model_free(m);
    }
}

/* The documented benchmark shapes (docs/formats.md), parameter counts computed by hand. */
static void test_presets(void) {
    const struct {
        const char *name;
        uint64_t params;
    } want[] = {{"24m", 24407712ull}, {"134m", 134105856ull}, {"853m", 852559872ull}};
    for (size_t k = 0; k < ES__ARRAY_LEN(want); k++) {
        es_mk_params p = es_mk_default_params();
        CHECK(es_mk_preset(want[k].name, &p) && p.n_vocab == 32000 && p.n_ctx == 2048 && !p.tied);
        CHECKF(expected_params(&p, 32000) == want[k].params, "%s: %" PRIu64, want[k].name, expected_params(&p, 32000));
    }
    es_mk_params p = es_mk_default_params();
    CHECK(!es_mk_preset("7b", &p));
    /* --rope-scaling specs */
    CHECK(es_mk_parse_rope_scaling("yarn,4,4096", &p) && !strcmp(p.rope_scaling, "yarn") && p.rope_factor == 4.0f &&
          p.rope_orig_ctx == 4096);
    CHECK(es_mk_parse_rope_scaling("linear,2.5", &p) && !strcmp(p.rope_scaling, "linear") && p.rope_factor == 2.5f);
    CHECK(es_mk_parse_rope_scaling("longrope,64", &p) && p.longrope && p.rope_orig_ctx == 64);
    const char *bad_specs[] = {"yarn,4", "yarn,0,64", "linear,-1", "linear,2,3", "longrope,0", "longrope,", "ntk,2"};
    for (size_t k = 0; k < sizeof bad_specs / sizeof *bad_specs; k++) {
        es_mk_params q = es_mk_default_params();
        CHECKF(!es_mk_parse_rope_scaling(bad_specs[k], &q), "rope scaling spec '%s' accepted", bad_specs[k]);
    }
    CHECK(es_mk_max_vocab() >= 32000);
}

/* ---- the other architectures (lib/core/arch.h): their tensors, keys and messages */

static void qbias_short(es__gguf_writer *w) { add_f(w, "blk.0.attn_q.bias", ES__DTYPE_F32, 32, 1); }
static void qbias_f16(es__gguf_writer *w) { add_f(w, "blk.1.attn_v.bias", ES__DTYPE_F16, 64, 1); }
static void gateup_half(es__gguf_writer *w) { add_f(w, "blk.1.ffn_up.weight", ES__DTYPE_F32, 64, 128); }
static void qkv_short(es__gguf_writer *w) { add_f(w, "blk.0.attn_qkv.weight", ES__DTYPE_F32, 64, 128); }
static void knorm_long(es__gguf_writer *w) { add_f(w, "blk.1.attn_k_norm.weight", ES__DTYPE_F32, 64, 1); }
SET_F32(swa_base_zero, "gemma3.rope.freq_base_swa", 0.0f)
SET_F32(granite_attn_zero, "granite.attention.scale", 0.0f)
SET_F32(granite_attn_negative, "granite.attention.scale", -1.0f)
SET_F32(swa_base_5000, "gemma3.rope.freq_base_swa", 5000.0f)
static void post_norm_short(es__gguf_writer *w) { add_f(w, "blk.1.post_ffw_norm.weight", ES__DTYPE_F32, 32, 1); }
SET_F32(cap_negative, "gemma2.attn_logit_softcapping", -1.0f)
static void swa_zero(es__gguf_writer *w) { CHECK_OK(es__gguf_set_u32(w, "qwen2.attention.sliding_window", 0)); }
SET_STR(arch_mamba, "general.architecture", "mamba")
static void freqs_long(es__gguf_writer *w) { add_f(w, "rope_freqs.weight", ES__DTYPE_F32, 16, 1); }

/* A good file of arch, made the base of the edits after it. */
static void arch_base(const char *arch, int32_t window, float cap) {
    es_mk_params p = es_mk_default_params();
    p.arch = arch;
    p.rope = ES_ROPE_NEOX;
    p.sliding_window = window;
    p.attn_softcap = p.final_softcap = cap;
    static char keep[512];
    snprintf(keep, sizeof keep, "%s", tmp("arch.gguf"));
    base_path = keep;
    make(&p, base_path);
}

static void test_archs(void) {
    /* qwen2: Q/K/V biases, NEOX by default (no edgespec.rope.ordering key) */
    arch_base("qwen2", 0, 0);
    es_model_info i = load_info((edit){NULL, NULL, NULL});
    CHECKF(i.rope_type == ES_ROPE_NEOX && i.n_tensors == 3 + 12 * 2, "qwen2: rope %d, %d tensors", (int)i.rope_type,
           i.n_tensors);
    expect_load("qwen2 no bias", (edit){NULL, "blk.1.attn_k.bias", NULL}, ES_ERR_MODEL,
                "missing tensor 'blk.1.attn_k.bias' (norm n_head_kv * head_dim)");
    expect_load("qwen2 short bias", (edit){NULL, "blk.0.attn_q.bias", qbias_short}, ES_ERR_MODEL,
                "tensor 'blk.0.attn_q.bias' has shape [32], expected [64] (n_head * head_dim)");
    expect_load("qwen2 f16 bias", (edit){NULL, "blk.1.attn_v.bias", qbias_f16}, ES_ERR_UNSUPPORTED,
                "'blk.1.attn_v.bias' (file offset");
    /* 0 is no window (the phi3 converter writes it so for Phi-4-mini) */
    expect_load("qwen2 window 0", (edit){NULL, NULL, swa_zero}, ES_OK, "");
    /* phi3: fused Q/K/V and gate-up (LongRoPE: test_rope_scaling) */
    arch_base("phi3", 0, 0);
    i = load_info((edit){NULL, NULL, NULL});
    /* the fused matrices hold exactly llama's parameters */
    const es_mk_params same = {.n_embd = 64, .n_layer = 2, .n_head = 4, .n_ff = 128};
    CHECKF(i.n_tensors == 3 + 6 * 2 && i.n_params == expected_params(&same, 512), "phi3: %d tensors, %llu parameters",
           i.n_tensors, (unsigned long long)i.n_params);
    expect_load("phi3 no qkv", (edit){NULL, "blk.0.attn_qkv.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'blk.0.attn_qkv.weight' (matrix n_embd, (n_head + 2 n_head_kv) * head_dim)");
    expect_load("phi3 short qkv", (edit){NULL, "blk.0.attn_qkv.weight", qkv_short}, ES_ERR_MODEL,
                "tensor 'blk.0.attn_qkv.weight' has shape [64, 128], expected [64, 192]");
    expect_load("phi3 half gate-up", (edit){NULL, "blk.1.ffn_up.weight", gateup_half}, ES_ERR_MODEL,
                "tensor 'blk.1.ffn_up.weight' has shape [64, 128], expected [64, 256] (n_embd, 2 n_ff: gate rows, "
                "then up rows)");
    /* qwen3: a norm of head_dim weights for the Q heads and one for the K heads, per layer */
    arch_base("qwen3", 0, 0);
    i = load_info((edit){NULL, NULL, NULL});
    CHECKF(i.n_tensors == 3 + 11 * 2, "qwen3: %d tensors", i.n_tensors);
    expect_load("qwen3 no q norm", (edit){NULL, "blk.0.attn_q_norm.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'blk.0.attn_q_norm.weight' (norm head_dim)");
    expect_load("qwen3 k norm of n_embd", (edit){NULL, "blk.1.attn_k_norm.weight", knorm_long}, ES_ERR_MODEL,
                "tensor 'blk.1.attn_k_norm.weight' has shape [64], expected [16] (head_dim)");
    /* gemma3: gemma2's post norms with qwen3's head norms; the window is required, and the sliding
     * layers' RoPE base is 10000 unless the file says */
    arch_base("gemma3", 4, 0);
    i = load_info((edit){NULL, NULL, NULL});
    CHECKF(i.n_tensors == 3 + 13 * 2, "gemma3: %d tensors", i.n_tensors);
    expect_load("gemma3 no window", (edit){"gemma3.attention.sliding_window", NULL, NULL}, ES_ERR_MODEL,
                "gemma3.attention.sliding_window");
    expect_load("gemma3 swa base 0", (edit){NULL, NULL, swa_base_zero}, ES_ERR_MODEL,
                "metadata key 'gemma3.rope.freq_base_swa' (offset");
    expect_load("gemma3 no k norm", (edit){NULL, "blk.1.attn_k_norm.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'blk.1.attn_k_norm.weight' (norm head_dim)");
    es_model *g3 = load_edit((edit){NULL, NULL, NULL});
    CHECKF(g3 && g3->hp.rope_freq_base_swa == 10000.0f && es__layer_rope_local(&g3->hp, 0) &&
               !es__layer_rope_local(&g3->hp, 5),
           "gemma3: sliding layers' base %g", g3 ? (double)g3->hp.rope_freq_base_swa : 0.0);
    es_model_free(g3);
    g3 = load_edit((edit){NULL, NULL, swa_base_5000});
    CHECKF(g3 && g3->hp.rope_freq_base_swa == 5000.0f, "gemma3: the file's sliding base");
    es_model_free(g3);
    /* granite: four required multipliers; an attention scale of 0 is llama's */
    arch_base("granite", 0, 0);
    es_model *gr = load_edit((edit){NULL, NULL, NULL});
    CHECKF(gr && gr->hp.embd_scale == 12.0f && gr->hp.residual_scale == 0.22f && gr->hp.logit_mul == 1.0f / 8.0f &&
               gr->hp.attn_scale == 1.0f / 16.0f,
           "granite: the file's multipliers");
    es_model_free(gr);
    gr = load_edit((edit){NULL, NULL, granite_attn_zero});
    CHECKF(gr && gr->hp.attn_scale == 0.25f, "granite: attention.scale 0 is 1/sqrt(head_dim)");
    es_model_free(gr);
    expect_load("granite no residual scale", (edit){"granite.residual_scale", NULL, NULL}, ES_ERR_MODEL,
                "granite.residual_scale");
    expect_load("granite no attention scale", (edit){"granite.attention.scale", NULL, NULL}, ES_ERR_MODEL,
                "granite.attention.scale");
    expect_load("granite negative attention scale", (edit){NULL, NULL, granite_attn_negative}, ES_ERR_MODEL,
                "metadata key 'granite.attention.scale' (offset");
    /* gemma2: post-branch norms, soft-capping keys */
    arch_base("gemma2", 4, 2.0f);
    i = load_info((edit){NULL, NULL, NULL});
    CHECKF(i.n_tensors == 3 + 11 * 2, "gemma2: %d tensors", i.n_tensors);
    expect_load("gemma2 no post norm", (edit){NULL, "blk.0.post_attention_norm.weight", NULL}, ES_ERR_MODEL,
                "missing tensor 'blk.0.post_attention_norm.weight' (norm n_embd)");
    expect_load("gemma2 short post norm", (edit){NULL, "blk.1.post_ffw_norm.weight", post_norm_short}, ES_ERR_MODEL,
                "tensor 'blk.1.post_ffw_norm.weight' has shape [32], expected [64] (n_embd)");
    expect_load("gemma2 negative cap", (edit){NULL, NULL, cap_negative}, ES_ERR_MODEL,
                "metadata key 'gemma2.attn_logit_softcapping' (offset");
    expect_load("gemma2 caps default", (edit){"gemma2.final_logit_softcapping", NULL, NULL}, ES_OK, "");
    /* llama 3's rope_freqs.weight: n_rot / 2 divisors, f32 */
    arch_base("llama", 0, 0);
    expect_load("rope_freqs shape", (edit){NULL, NULL, freqs_long}, ES_ERR_MODEL,
                "tensor 'rope_freqs.weight' has shape [16], expected [8] (n_rot / 2)");
    /* an architecture edgespec does not run names the ones it does */
    expect_load("mamba", (edit){NULL, NULL, arch_mamba}, ES_ERR_UNSUPPORTED,
                "general.architecture is 'mamba': edgespec runs llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3, smollm3, granite models");
}

/* ---- RoPE scaling (lib/core/rope.h): YaRN's keys, LongRoPE's factor tensors */

/* n f32 values from lo rising by step (a divisor tensor). */
static void add_vals(es__gguf_writer *w, const char *name, int64_t n, float lo, float step) {
    float v[64];
    for (int64_t i = 0; i < n && i < 64; i++) v[i] = lo + step * (float)i;
    CHECK_OK(es__gguf_add_tensor(w, name, ES__DTYPE_F32, 1, &n, v));
}
static void lr_long(es__gguf_writer *w) { add_vals(w, "rope_factors_long.weight", 8, 1.0f, 2.0f); }
static void lr_both(es__gguf_writer *w) {
    lr_long(w);
    add_vals(w, "rope_factors_short.weight", 8, 1.0f, 0.1f);
    CHECK_OK(es__gguf_set_u32(w, "phi3.rope.scaling.original_context_length", 64));
    CHECK_OK(es__gguf_set_f32(w, "phi3.rope.scaling.attn_factor", 1.25f));
}
static void lr_short_16(es__gguf_writer *w) {
    lr_long(w);
    add_vals(w, "rope_factors_short.weight", 16, 1.0f, 0.1f);
}
static void lr_short_zero(es__gguf_writer *w) {
    lr_long(w);
    add_vals(w, "rope_factors_short.weight", 8, 0.0f, 0.1f);
}
static void lr_short_f16(es__gguf_writer *w) {
    lr_long(w);
    add_f(w, "rope_factors_short.weight", ES__DTYPE_F16, 8, 1);
}
static void lr_and_freqs(es__gguf_writer *w) {
    lr_both(w);
    add_vals(w, "rope_freqs.weight", 8, 1.0f, 1.0f);
}
SET_STR(lr_type_only, "phi3.rope.scaling.type", "longrope")
static void lr_other(es__gguf_writer *w) { add_vals(w, "rope_factors_mid.weight", 8, 1.0f, 1.0f); }
static void freqs_nan(es__gguf_writer *w) { add_vals(w, "rope_freqs.weight", 8, NAN, 1.0f); }
static void yarn4(es__gguf_writer *w) {
    CHECK_OK(es__gguf_set_str(w, "llama.rope.scaling.type", "yarn"));
    CHECK_OK(es__gguf_set_f32(w, "llama.rope.scaling.factor", 4.0f));
    CHECK_OK(es__gguf_set_u32(w, "llama.rope.scaling.original_context_length", 4096));
}
static void yarn_ext2(es__gguf_writer *w) {
    yarn4(w);
    CHECK_OK(es__gguf_set_f32(w, "llama.rope.scaling.yarn_ext_factor", 2.0f));
}
static void yarn_logmul(es__gguf_writer *w) {
    yarn4(w);
    CHECK_OK(es__gguf_set_f32(w, "llama.rope.scaling.yarn_log_multiplier", 0.1f));
}

/* The model of the current base with edit e; NULL (and a failed check) if it does not load. */
static es_model *load_edit(edit e) {
    const char *path = tmp("edit.gguf");
    rebuild(base_path, path, e);
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, NULL, &m));
    return m;
}

static void test_rope_scaling(void) {
    arch_base("llama", 0, 0);
    es_model *m = load_edit((edit){NULL, NULL, yarn4});
    if (m) {
        const es__rope r = es__rope_for(&m->hp, 512);
        /* ramp between the pairs turning 32 and 1 times in 4096 positions: 2.6 -> 2, 5.6 -> 6 */
        CHECKF(m->hp.rope_scaling == ES__ROPE_SCALING_YARN && r.freq_scale == 0.25 && r.ext_factor == 1.0 &&
                   r.corr_lo == 2.0 && r.corr_hi == 6.0 && fabs(r.mscale - (1.0 + 0.1 * log(4.0))) < 1e-12,
               "yarn: scale %g ext %g ramp %g..%g mscale %g", r.freq_scale, r.ext_factor, r.corr_lo, r.corr_hi,
               r.mscale);
        es_model_free(m);
    }
    expect_load("yarn ext factor 2", (edit){NULL, NULL, yarn_ext2}, ES_ERR_MODEL,
                "metadata key 'llama.rope.scaling.yarn_ext_factor' (offset");
    expect_load("yarn log multiplier", (edit){NULL, NULL, yarn_logmul}, ES_ERR_UNSUPPORTED,
                "'llama.rope.scaling.yarn_log_multiplier': YaRN with a log multiplier");
    expect_load("rope_freqs nan", (edit){NULL, NULL, freqs_nan}, ES_ERR_MODEL,
                "tensor 'rope_freqs.weight' (file offset");
    /* phi3 LongRoPE: n_rot / 2 = 8 positive f32 factors each, long and short together */
    arch_base("phi3", 0, 0);
    m = load_edit((edit){NULL, NULL, lr_both});
    if (m) {
        const es__rope lo = es__rope_for(&m->hp, 64), hi = es__rope_for(&m->hp, 65);
        CHECKF(lo.freq_div == m->hp.rope_short && hi.freq_div == m->hp.rope_long && hi.freq_div[1] == 3.0f &&
                   lo.freq_div[1] == 1.1f && lo.mscale == 1.25 && hi.mscale == 1.25 && lo.freq_scale == 1.0,
               "longrope: short/long by context 64/65, attn factor %g", hi.mscale);
        es_model_info mi;
        CHECK_OK(es_model_get_info(m, &mi));
        CHECKF(!strcmp(mi.rope_scaling, "longrope") && mi.rope_attn_factor == 1.25f, "info: %s, factor %g",
               mi.rope_scaling, (double)mi.rope_attn_factor);
        es_model_free(m);
    }
    expect_load("longrope long only", (edit){NULL, NULL, lr_long}, ES_ERR_MODEL,
                "tensor 'rope_factors_long.weight' without 'rope_factors_short.weight'");
    expect_load("longrope short length", (edit){NULL, NULL, lr_short_16}, ES_ERR_MODEL,
                "tensor 'rope_factors_short.weight' has shape [16], expected [8] (n_rot / 2)");
    expect_load("longrope short zero", (edit){NULL, NULL, lr_short_zero}, ES_ERR_MODEL,
                "tensor 'rope_factors_short.weight' (file offset");
    expect_load("longrope short zero element", (edit){NULL, NULL, lr_short_zero}, ES_ERR_MODEL,
                "element 0 is 0: expected a positive finite divisor");
    expect_load("longrope short f16", (edit){NULL, NULL, lr_short_f16}, ES_ERR_UNSUPPORTED,
                "tensor 'rope_factors_short.weight' (file offset");
    expect_load("longrope and rope_freqs", (edit){NULL, NULL, lr_and_freqs}, ES_ERR_MODEL,
                "two sets of per-pair divisors");
    expect_load("longrope type without factors", (edit){NULL, NULL, lr_type_only}, ES_ERR_MODEL,
                "'phi3.rope.scaling.type' is 'longrope' but the file has no rope_factors_long/short.weight");
    expect_load("other rope factors", (edit){NULL, NULL, lr_other}, ES_ERR_UNSUPPORTED,
                "tensor 'rope_factors_mid.weight' (file offset");
    /* Gemma 2: queries scale by head_dim^-1/2, but by (n_embd / n_head)^-1/2 in 27B's 46 layers */
    for (int32_t layers = 45; layers <= 46; layers++) {
        es_mk_params p = es_mk_default_params();
        p.arch = "gemma2";
        p.rope = ES_ROPE_NEOX;
        p.n_layer = layers;
        p.n_embd = 48;
        p.head_dim = 8;
        p.n_ff = 32;
        static char keep[512];
        snprintf(keep, sizeof keep, "%s", tmp("gemma2.gguf"));
        base_path = keep;
        make(&p, base_path);
        m = load_edit((edit){NULL, NULL, NULL});
        const float want = 1.0f / sqrtf(layers == 46 ? 12.0f : 8.0f);
        CHECKF(m && m->hp.attn_scale == want, "gemma2 with %d layers: query scale %g, expected %g", layers,
               m ? (double)m->hp.attn_scale : 0.0, (double)want);
        es_model_free(m);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "model-load-%ld", (long)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK(system(cmd) == 0);
    test_good(ES__DTYPE_F32, false, 0, ES_ROPE_NORM, true);
    test_good(ES__DTYPE_F16, true, 2, ES_ROPE_NEOX, true);
    test_good(ES__DTYPE_BF16, false, 1, ES_ROPE_NORM, false);
    test_good(ES__DTYPE_Q8_0, false, 2, ES_ROPE_NORM, true);
    test_good(ES__DTYPE_Q4_0, true, 4, ES_ROPE_NEOX, false);
    test_bad();
    test_archs();
    test_rope_scaling();
    test_files();
    test_progress();
    test_alloc_failures();
    test_activations();
    test_presets();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    TEST_MAIN_END();
}
