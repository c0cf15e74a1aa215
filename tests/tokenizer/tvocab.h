/* tvocab.h: building small vocabularies in memory for tokenizer tests (no GGUF involved), and a
 * GPT-2 byte map written from its Python definition, independent of the library's. */
#ifndef ES_TEST_TVOCAB_H
#define ES_TEST_TVOCAB_H

#include "tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TV_MAX 1024

typedef struct tvocab {
    char *toks[TV_MAX];
    float scores[TV_MAX];
    int32_t types[TV_MAX];
    int n;
    const char *merges[TV_MAX];
    int n_merges;
    int omit_tokens, empty_tokens; /* for validation tests */
    es__vocab_desc d; /* model, pre, specials and flags; arrays are filled by tv_build */
} tvocab;

static inline void tv_init(tvocab *t, const char *model, const char *pre) {
    memset(t, 0, sizeof *t);
    es__vocab_desc_init(&t->d);
    if (model) t->d.model = (es__str){model, strlen(model)};
    if (pre) t->d.pre = (es__str){pre, strlen(pre)};
}

static inline int tv_add(tvocab *t, const char *text, float score, int32_t type) {
    t->toks[t->n] = strdup(text);
    t->scores[t->n] = score;
    t->types[t->n] = type;
    return t->n++;
}

static inline void tv_merge(tvocab *t, const char *line) { t->merges[t->n_merges++] = line; }

/* Builds t into *out; the arrays live only during the call, as a GGUF file's would not. */
static inline es_status tv_build(tvocab *t, es__vocab **out) {
    static es__str toks[TV_MAX], merges[TV_MAX];
    for (int i = 0; i < t->n; i++) toks[i] = (es__str){t->toks[i], strlen(t->toks[i])};
    for (int i = 0; i < t->n_merges; i++) merges[i] = (es__str){t->merges[i], strlen(t->merges[i])};
    es__vocab_desc d = t->d;
    if (!d.tokens && !t->omit_tokens) d.tokens = toks, d.n_tokens = t->empty_tokens ? 0 : (uint64_t)t->n;
    if (!d.scores) d.scores = t->scores, d.n_scores = (uint64_t)t->n;
    if (!d.types) d.types = t->types, d.n_types = (uint64_t)t->n;
    if (!d.merges && t->n_merges) d.merges = merges, d.n_merges = (uint64_t)t->n_merges;
    es__err err;
    es_status s = es__vocab_build(&d, NULL, &err, out);
    memset(toks, 0xAB, sizeof toks); /* the vocabulary must not keep pointers into the description */
    return s;
}

static inline void tv_free(tvocab *t) {
    for (int i = 0; i < t->n; i++) free(t->toks[i]);
    t->n = 0;
}

/* bytes_to_unicode() of GPT-2's encoder.py, literally: printable bytes first, the rest get 256+n. */
static inline void tv_byte_map(uint32_t map[256]) {
    int is_printable[256] = {0};
    for (int b = '!'; b <= '~'; b++) is_printable[b] = 1;
    for (int b = 0xA1; b <= 0xAC; b++) is_printable[b] = 1;
    for (int b = 0xAE; b <= 0xFF; b++) is_printable[b] = 1;
    int n = 0;
    for (int b = 0; b < 256; b++) map[b] = is_printable[b] ? (uint32_t)b : (uint32_t)(256 + n++);
}

/* UTF-8 of a code point, written out here so tests do not trust the library's encoder. */
static inline int tv_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        out[3] = 0;
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    out[4] = 0;
    return 4;
}

/* ../shared: $ES_SHARED_DIR (tests/meson.build sets it), else $ES_SOURCE_ROOT/../shared, else ../shared. */
static inline const char *tv_shared_dir(void) {
    static char dir[4096];
    const char *d = getenv("ES_SHARED_DIR");
    if (d && *d) return d;
    const char *root = getenv("ES_SOURCE_ROOT");
    snprintf(dir, sizeof dir, "%s/../shared", root && *root ? root : ".");
    return dir;
}

/* Encodes text (NUL-terminated) and compares with the expected ids; prints both on mismatch. */
static inline int tv_expect(const es__vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                            const int32_t *want, size_t n_want) {
    int32_t got[512];
    size_t n = 0;
    es__err err;
    es_status s = es__tokenize(v, text, len, add_special, parse_special, got, 512, &n, &err);
    int ok = s == ES_OK && n == n_want && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
    if (!ok) {
        fprintf(stderr, "encoding \"%.*s\": status %d (%s)\n  got ", (int)len, text, (int)s, s ? err.msg : "");
        for (size_t i = 0; s == ES_OK && i < n; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n want");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

#define EXPECT_IDS(v, text, add_special, parse_special, ...)                                                     \
    do {                                                                                                         \
        const int32_t want_[] = {__VA_ARGS__};                                                                   \
        CHECK(tv_expect((v), (text), strlen(text), (add_special), (parse_special), want_,                        \
                        sizeof want_ / sizeof want_[0]));                                                        \
    } while (0)

#endif /* ES_TEST_TVOCAB_H */
