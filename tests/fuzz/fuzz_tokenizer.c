/* fuzz_tokenizer.c: fuzz target for the tokenizers, for libFuzzer and as a deterministic standalone
 * driver (meson suite 'fuzz'). Input byte 0 picks the operation; the rest is its data:
 *   - encode: with one of five vocabularies (the real llama-spm and gpt-2 ones from
 *     $ES_SHARED_DIR/vocab-tests, two small ones built here, gpt2 with the Llama-3 split), or (op bits
 *     5..7 odd) the small gpt2 one under each other split (qwen2, deepseek-*, falcon, ...); every
 *     id must be in range, the count must match a count-only call, decoding must give the text back
 *     (U+2581 as a space for SentencePiece) where every byte has a token, and up to 512 bytes the ids must equal the reference
 *     encoders' (tests/tokenizer/ref_encoders.h);
 *   - build: the data describes a vocabulary (tokens, merges, types, ids); building must succeed
 *     or fail with a validation status, and a built one must encode and decode without crashing.
 * A failed invariant aborts (what libFuzzer reports as a crash).
 *
 * libFuzzer (clang 14), from the repository root (-Dfuzzer=true instruments the library):
 *   CC=clang meson setup build-fuzz -Dfuzzer=true -Db_sanitize=address,undefined -Db_lundef=false
 *   ninja -C build-fuzz tests/fuzz/fuzz_tokenizer_libfuzzer
 *   mkdir -p corpus && ES_SHARED_DIR=../shared UBSAN_OPTIONS=halt_on_error=1 \
 *       build-fuzz/tests/fuzz/fuzz_tokenizer_libfuzzer -max_len=4096 -max_total_time=300 corpus
 * Standalone: fuzz_tokenizer [FILE|DIR...] runs the given inputs (every file of a directory, such
 * as corpus/tokenizer), then a fixed pseudo-random set of inputs. */
#include "gguf.h"
#include "../common/test_file.h"
#include "../tokenizer/ref_encoders.h"

#include <stdio.h>
#include <stdlib.h>

#define REF_MAX_LEN 512 /* the reference encoders are quadratic */

#define REQUIRE(cond, ...)                                                                                     \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            fprintf(stderr, "fuzz_tokenizer: %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                                      \
            fputc('\n', stderr);                                                                               \
            abort();                                                                                           \
        }                                                                                                      \
    } while (0)

typedef struct fvocab {
    es__vocab *v;
    ref_vocab ref;
    bool spm;
    es__pretok pretok;
    bool ignore_merges;
    bool lossless; /* every byte has a token: decoding gives the text back */
    char *file;   /* GGUF bytes (real vocabularies) */
    es__gguf *g;
} fvocab;

#define N_VOCABS 5
static fvocab vocabs[N_VOCABS];
static tvocab small_spm, small_bpe, small_llama3;

/* The small byte-level vocabulary under each of the other splits. */
static const char *const split_names[] = {"qwen2", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
                                          "starcoder", "poro-chat", "viking", "tekken", "gpt-4o"};
#define N_SPLITS (sizeof split_names / sizeof split_names[0])
static fvocab split_vocabs[N_SPLITS];
static tvocab small_splits[N_SPLITS];

static void load_real(fvocab *fv, const char *name, bool spm) {
    char path[4200];
    snprintf(path, sizeof path, "%s/vocab-tests/%s", tv_shared_dir(), name);
    size_t size = 0;
    fv->file = test_read_file(path, 0, &size);
    REQUIRE(fv->file, "cannot read %s (set ES_SHARED_DIR)", path);
    es__err err;
    REQUIRE(es__gguf_parse((const uint8_t *)fv->file, size, NULL, &err, &fv->g) == ES_OK, "%s", err.msg);
    REQUIRE(es__vocab_load(fv->g, NULL, &err, &fv->v) == ES_OK, "%s", err.msg);
    const es__gguf_kv *toks = es__gguf_find(fv->g, "tokenizer.ggml.tokens");
    const es__gguf_kv *scores = es__gguf_find(fv->g, "tokenizer.ggml.scores");
    const es__gguf_kv *merges = es__gguf_find(fv->g, "tokenizer.ggml.merges");
    const es__gguf_kv *types = es__gguf_find(fv->g, "tokenizer.ggml.token_type");
    ref_init(&fv->ref, toks->strs, toks->arr_n, scores ? scores->value : NULL, types ? types->value : NULL,
             merges ? merges->strs : NULL, merges ? merges->arr_n : 0, spm ? 0 : -1);
    fv->spm = spm;
    fv->lossless = true;
    fv->pretok = spm ? ES__PRETOK_NONE : ES__PRETOK_GPT2;
}

static void load_small(fvocab *fv, tvocab *t) {
    static es__str toks[TV_MAX], merges[TV_MAX];
    REQUIRE(tv_build(t, &fv->v) == ES_OK, "small vocabulary: %s", es_last_error());
    for (int i = 0; i < t->n; i++) toks[i] = (es__str){t->toks[i], strlen(t->toks[i])};
    for (int i = 0; i < t->n_merges; i++) merges[i] = (es__str){t->merges[i], strlen(t->merges[i])};
    /* the reference keeps pointers to the texts, which t owns; the es__str arrays are copied here */
    es__str *tc = malloc(sizeof(es__str) * (size_t)(t->n + 1)), *mc = malloc(sizeof(es__str) * (size_t)(t->n_merges + 1));
    memcpy(tc, toks, sizeof(es__str) * (size_t)t->n);
    memcpy(mc, merges, sizeof(es__str) * (size_t)t->n_merges);
    ref_init(&fv->ref, tc, (size_t)t->n, t->scores, t->types, mc, (size_t)t->n_merges,
             (int32_t)t->d.special[ES__SPECIAL_UNK]);
    free(tc);
    free(mc);
}

/* A small byte-level vocabulary with the given split: every byte, overlapping merges, merge results
 * that are no token. */
static void small_gpt2(tvocab *t, const char *pre) {
    uint32_t map[256];
    tv_byte_map(map);
    tv_init(t, "gpt2", pre);
    for (int b = 0; b < 256; b++) {
        char s[5];
        tv_utf8(map[b], s);
        tv_add(t, s, 0, ES__TOK_NORMAL);
    }
    static const char *const merges[] = {"a b", "b c", "ab c", "\xC4\xA0 a", "\xC4\xA0" "a b", "x y", "a a",
                                         "aa a", "\xC4\xA0 \xC4\xA0", "1 2", "12 3", "' s", "t h", "th e",
                                         "\xC4\xA0 th", "\xC4\xA0" "t he"};
    static const char *const results[] = {"ab", "bc", "abc", "\xC4\xA0" "a", "\xC4\xA0" "ab", "aa", "aaa",
                                          "\xC4\xA0\xC4\xA0", "12", "123", "'s", "th", "the", "\xC4\xA0th",
                                          "hello"};
    for (size_t i = 0; i < ES__ARRAY_LEN(merges); i++) tv_merge(t, merges[i]);
    for (size_t i = 0; i < ES__ARRAY_LEN(results); i++) tv_add(t, results[i], 0, ES__TOK_NORMAL);
    tv_add(t, "<|endoftext|>", 0, ES__TOK_CONTROL);
    t->d.special[ES__SPECIAL_EOS] = t->n - 1;
}

/* Small vocabularies with overlapping merges, ties, a missing byte token and merge results that are
 * no token, so the fallbacks run. No user-defined tokens: the reference knows no special tokens. */
static void init_small(void) {
    tv_init(&small_spm, "llama", NULL);
    tv_add(&small_spm, "<unk>", 0, ES__TOK_UNKNOWN);
    tv_add(&small_spm, "<s>", 0, ES__TOK_CONTROL);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if (b != 0xE9) tv_add(&small_spm, name, 0, ES__TOK_BYTE);
    }
    static const char *const pieces[] = {"\xE2\x96\x81", "a", "b", "c", "ab", "bc", "abc", "\xE2\x96\x81" "a",
                                         "\xE2\x96\x81\xE2\x96\x81", "aa", "aaa", "ba", "cab", "\xC3\xA9", "\xC3\xA9" "a",
                                         "1", "12", "23", "123", "\xE6\x88\x91", "<s", "s>"};
    for (size_t i = 0; i < ES__ARRAY_LEN(pieces); i++)
        tv_add(&small_spm, pieces[i], -(float)(i % 5) - (float)i * 0.25f, ES__TOK_NORMAL);
    small_spm.d.special[ES__SPECIAL_UNK] = 0;
    small_spm.d.special[ES__SPECIAL_BOS] = 1;

    small_gpt2(&small_bpe, "gpt-2");
    small_gpt2(&small_llama3, "llama3");
}

static void init_once(void) {
    static int done;
    if (done) return;
    done = 1;
    load_real(&vocabs[0], "ggml-vocab-llama-spm.gguf", true);
    load_real(&vocabs[1], "ggml-vocab-gpt-2.gguf", false);
    init_small();
    load_small(&vocabs[2], &small_spm);
    vocabs[2].spm = true;
    load_small(&vocabs[3], &small_bpe);
    vocabs[3].pretok = ES__PRETOK_GPT2;
    vocabs[3].lossless = true;
    load_small(&vocabs[4], &small_llama3);
    vocabs[4].pretok = ES__PRETOK_LLAMA3;
    vocabs[4].ignore_merges = true;
    vocabs[4].lossless = true;
    for (size_t i = 0; i < N_SPLITS; i++) {
        es__pretok_info info;
        REQUIRE(es__pretok_lookup(split_names[i], strlen(split_names[i]), &info), "%s", split_names[i]);
        small_gpt2(&small_splits[i], split_names[i]);
        load_small(&split_vocabs[i], &small_splits[i]);
        split_vocabs[i].pretok = info.kind;
        split_vocabs[i].ignore_merges = info.ignore_merges;
        split_vocabs[i].lossless = true;
    }
}

static void fuzz_encode(const fvocab *fv, const char *text, size_t len, bool add_special, bool parse_special) {
    size_t need = 0;
    es_status s = es__tokenize(fv->v, text, len, add_special, parse_special, NULL, 0, &need, NULL);
    REQUIRE(s == ES_OK || s == ES_ERR_BUFFER_TOO_SMALL, "count: %s", es_last_error());
    REQUIRE((s == ES_OK) == (need == 0), "status %d with %zu tokens", (int)s, need);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    size_t n = 0;
    REQUIRE(es__tokenize(fv->v, text, len, add_special, parse_special, ids, need, &n, NULL) == ES_OK, "%s",
            es_last_error());
    REQUIRE(n == need, "%zu tokens, count said %zu", n, need);
    int32_t n_vocab = es__vocab_n_tokens(fv->v);
    for (size_t i = 0; i < n; i++) REQUIRE(ids[i] >= 0 && ids[i] < n_vocab, "id %d", ids[i]);
    /* decoding gives the text back when no special token was parsed out of it and every byte has a
     * token (the small SentencePiece vocabulary lacks <0xE9>: unknown tokens decode as U+FFFD) */
    size_t cap = len * 4 + 16, dlen = 0;
    char *dec = malloc(cap), *want = malloc(len + 1);
    REQUIRE(es__detokenize(fv->v, ids, n, true, false, dec, cap, &dlen, NULL) == ES_OK, "%s", es_last_error());
    if (!parse_special && fv->lossless) {
        size_t want_len = fv->spm ? ref_spm_roundtrip(text, len, want) : (memcpy(want, text, len), len);
        REQUIRE(dlen == want_len && memcmp(dec, want, dlen) == 0, "round trip of %zu bytes gave %zu", len, dlen);
    }
    /* and the reference encoders agree on plain text */
    if (!parse_special && !add_special && len <= REF_MAX_LEN) {
        int32_t *ref = malloc((4 * len + 8) * sizeof *ref);
        size_t n_ref = 0;
        int ok = fv->spm ? ref_spm(&fv->ref, text, len, true, ref, &n_ref, 4 * len + 8)
                         : ref_bpe(&fv->ref, fv->pretok, fv->ignore_merges, text, len, ref, &n_ref, 4 * len + 8);
        REQUIRE(ok && n_ref == n && memcmp(ref, ids, n * sizeof *ids) == 0, "reference gives %zu ids, library %zu",
                n_ref, n);
        free(ref);
    }
    for (size_t i = 0; i < n; i++) {
        char piece[256];
        size_t plen;
        REQUIRE(es__token_to_piece(fv->v, ids[i], true, piece, sizeof piece, &plen, NULL) == ES_OK, "piece %d",
                ids[i]);
    }
    free(dec);
    free(want);
    free(ids);
}

/* The data as a vocabulary: [model][pre][flags] then NUL-separated sections: tokens ('\n'-separated),
 * merges ('\n'-separated), token types (one byte each), special ids (two bytes each). */
static void fuzz_build(const uint8_t *data, size_t size) {
    if (size < 3) return;
    static const char *const models[] = {"llama", "gpt2", "none", "bert"};
    static const char *const pres[] = {"default", "gpt-2", "llama3", "llama-bpe", "qwen2", "deepseek-llm",
                                       "deepseek-coder", "deepseek-v3", "falcon", "starcoder", "poro-chat",
                                       "viking", "tekken", "gpt-4o", "smollm", "kimi-k2"};
    es__vocab_desc d;
    es__vocab_desc_init(&d);
    const char *model = models[data[0] % 4], *pre = pres[data[1] % ES__ARRAY_LEN(pres)];
    d.model = (es__str){model, strlen(model)};
    d.pre = (es__str){pre, strlen(pre)};
    d.add_bos = (int8_t)((data[2] & 3) == 3 ? -1 : (data[2] & 1));
    d.add_eos = (int8_t)((data[2] >> 2 & 3) == 3 ? -1 : (data[2] >> 2 & 1));
    d.add_space_prefix = (int8_t)((data[2] >> 4 & 3) == 3 ? -1 : (data[2] >> 4 & 1));
    data += 3, size -= 3;
    const uint8_t *sec[4] = {data, NULL, NULL, NULL};
    size_t sec_len[4] = {size, 0, 0, 0};
    for (int k = 1; k < 4; k++) {
        const uint8_t *z = memchr(sec[k - 1], 0, sec_len[k - 1]);
        if (!z) break;
        sec[k] = z + 1;
        sec_len[k] = sec_len[k - 1] - (size_t)(z + 1 - sec[k - 1]);
        sec_len[k - 1] = (size_t)(z - sec[k - 1]);
    }
    es__str *toks = calloc(size + 1, sizeof *toks), *merges = calloc(size + 1, sizeof *merges);
    size_t n_toks = 0, n_merges = 0;
    for (int k = 0; k < 2; k++) {
        const uint8_t *p = sec[k], *end = p ? p + sec_len[k] : NULL;
        while (p && p <= end) {
            const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) nl = end;
            es__str s = {(const char *)p, (uint64_t)(nl - p)};
            if (k == 0)
                toks[n_toks++] = s;
            else
                merges[n_merges++] = s;
            p = nl + 1;
        }
    }
    int32_t *types = calloc(n_toks + 1, sizeof *types);
    for (size_t i = 0; i < n_toks; i++) types[i] = sec[2] && i < sec_len[2] ? sec[2][i] % 8 : ES__TOK_NORMAL;
    for (int i = 0; i < ES__SPECIAL_COUNT && sec[3] && (size_t)(2 * i + 1) < sec_len[3]; i++)
        d.special[i] = (int64_t)(sec[3][2 * i] | sec[3][2 * i + 1] << 8) - 2;
    d.tokens = n_toks ? toks : NULL;
    d.n_tokens = n_toks;
    d.types = types;
    d.n_types = n_toks;
    d.merges = merges;
    d.n_merges = n_merges;
    es__vocab *v = NULL;
    es__err err;
    es_status s = es__vocab_build(&d, NULL, &err, &v);
    REQUIRE(s == ES_OK || s == ES_ERR_FORMAT || s == ES_ERR_MODEL || s == ES_ERR_UNSUPPORTED, "status %d: %s",
            (int)s, err.msg);
    REQUIRE((s == ES_OK) == (v != NULL), "status %d, vocabulary %p", (int)s, (void *)v);
    if (v) {
        static const char *const texts[] = {"", "a", "hello world", "  \n\t x", "<s>a</s>", ("\xC3\xA9\xFF\xE2\x96\x81" " 1234"),
                                            "'s 'LL \xF0\x9F\x98\x80"};
        for (size_t t = 0; t < ES__ARRAY_LEN(texts) + n_toks; t++) {
            const char *text = t < ES__ARRAY_LEN(texts) ? texts[t] : toks[t - ES__ARRAY_LEN(texts)].ptr;
            size_t len = t < ES__ARRAY_LEN(texts) ? strlen(text) : (size_t)toks[t - ES__ARRAY_LEN(texts)].len;
            int32_t ids[1024];
            size_t n = 0;
            es_status e = es__tokenize(v, text, len, true, t % 2 == 0, ids, 1024, &n, NULL);
            REQUIRE(e == ES_OK || e == ES_ERR_INVALID_ARGUMENT || e == ES_ERR_BUFFER_TOO_SMALL, "encode: %s",
                    es_last_error());
            for (size_t i = 0; e == ES_OK && i < n; i++) REQUIRE(ids[i] >= 0 && ids[i] < es__vocab_n_tokens(v), "id");
            char buf[4096];
            size_t blen;
            if (e == ES_OK) {
                e = es__detokenize(v, ids, n, true, true, buf, sizeof buf, &blen, NULL);
                REQUIRE(e == ES_OK || e == ES_ERR_BUFFER_TOO_SMALL, "decode: %s", es_last_error());
            }
            (void)es__token_is_eog(v, (int32_t)t);
        }
        es__vocab_free(v);
    }
    free(toks);
    free(merges);
    free(types);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init_once();
    if (size == 0) return 0;
    uint8_t op = data[0];
    if ((op >> 5) >= 6) {
        fuzz_build(data + 1, size - 1);
        return 0;
    }
    /* bits 5..7 odd: the small vocabulary under one of the other splits */
    unsigned hi = op >> 5;
    const fvocab *fv = hi & 1 ? &split_vocabs[((op & 7) + 8 * (hi >> 1)) % N_SPLITS] : &vocabs[(op & 7) % N_VOCABS];
    fuzz_encode(fv, (const char *)data + 1, size - 1, op & 8, op & 16);
    return 0;
}

#ifndef ES_LIBFUZZER
#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    size_t size = 0;
    char *buf = test_read_file(path, 0, &size);
    REQUIRE(buf, "cannot read %s", path);
    LLVMFuzzerTestOneInput((const uint8_t *)buf, size);
    free(buf);
    return 1;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every file of a directory (a corpus), in name order so a failure reproduces. */
static int run_dir(const char *path) {
    DIR *d = opendir(path);
    REQUIRE(d, "cannot open %s", path);
    char *names[4096];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 4096;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        char full[4200];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        run_file(full);
        free(names[i]);
    }
    return (int)n;
}

/* Standalone driver: the given files and corpus directories, then a fixed set of generated
 * inputs. */
int main(int argc, char **argv) {
    int given = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        REQUIRE(stat(argv[i], &st) == 0, "cannot stat %s", argv[i]);
        given += S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]);
    }
    if (argc > 1) printf("%d given inputs ran\n", given);
    struct {
        uint64_t s;
    } rng = {20240607};
    static uint8_t buf[1 << 16];
    int runs = 0;
    for (int iter = 0; iter < 6000; iter++) {
        size_t n;
        int kind = iter % 4;
        buf[0] = (uint8_t)ref_rand(&rng.s);
        if (kind < 2 || (buf[0] >> 5) < 6) {
            /* text: characters and fragments, sometimes raw bytes mixed in */
            n = 1 + ref_random_text(&rng.s, (char *)buf + 1, iter % 50 == 0 ? 2000 : 60);
            size_t flips = kind == 1 ? ref_rand(&rng.s) % 4 : 0;
            for (size_t k = 0; k < flips && n > 1; k++) buf[1 + ref_rand(&rng.s) % (n - 1)] = (uint8_t)ref_rand(&rng.s);
            if (kind < 2 && (buf[0] >> 5) >= 6) buf[0] &= 0x9F;
        } else {
            /* raw bytes: vocabulary descriptions and binary text */
            n = 1 + ref_rand(&rng.s) % 300;
            for (size_t k = 1; k < n; k++) {
                uint64_t r = ref_rand(&rng.s);
                buf[k] = r % 5 == 0 ? '\n' : r % 17 == 0 ? 0 : r % 3 == 0 ? (uint8_t)('a' + r % 6) : (uint8_t)(r >> 8);
            }
        }
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
    }
    printf("%d inputs ran\n", runs);
    return 0;
}
#endif
