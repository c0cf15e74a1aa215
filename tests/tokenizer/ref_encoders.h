/* ref_encoders.h: reference encoders for tests and the fuzz target, written plainly from the
 * algorithms' definitions with none of the library's machinery (no string ids, no pair table, no
 * heap, no cutting of the input): quadratic, slow, obviously right. Also random test strings.
 *   SentencePiece: merge the adjacent pair whose concatenation is the piece (a normal, user-defined
 *   or unused token) of highest score, the leftmost of equals, until none is; what is left and no
 *   piece becomes byte tokens (else one unknown token). Byte-level BPE: per pre-tokenizer word, the bytes' mapped characters merge by
 *   lowest "left right" rank, the leftmost of equals. Invalid UTF-8 bytes are characters of their own.
 * The pre-tokenizer split itself is taken from the library (pretok_ref.py checks it). */
#ifndef ES_TEST_REF_ENCODERS_H
#define ES_TEST_REF_ENCODERS_H

#include "tvocab.h"

typedef struct ref_tok {
    const char *s;
    size_t n;
    int32_t id;
} ref_tok;

typedef struct ref_vocab {
    ref_tok *toks; /* sorted by text, then id */
    size_t n_toks;
    float *scores;
    int32_t *types;
    ref_tok *merges; /* "left right" lines sorted by text, then rank (id) */
    size_t n_merges;
    int32_t unk;
} ref_vocab;

static inline int ref_cmp(const void *pa, const void *pb) {
    const ref_tok *a = pa, *b = pb;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = n ? memcmp(a->s, b->s, n) : 0;
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* The entry for s[0..n); for equal texts the last (want_last) or the first. */
static inline const ref_tok *ref_find(const ref_tok *arr, size_t count, const char *s, size_t n, int want_last) {
    ref_tok key = {s, n, want_last ? INT32_MAX : -1};
    size_t lo = 0, hi = count; /* first entry >= key */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ref_cmp(&arr[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (want_last && lo == 0) return NULL;
    size_t i = want_last ? lo - 1 : lo;
    return i < count && arr[i].n == n && memcmp(arr[i].s, s, n) == 0 ? &arr[i] : NULL;
}

/* Token id of a text (the last of equal texts, as llama.cpp resolves them); empty texts never. */
static inline int32_t ref_id(const ref_vocab *r, const char *s, size_t n) {
    const ref_tok *t = n ? ref_find(r->toks, r->n_toks, s, n, 1) : NULL;
    return t ? t->id : -1;
}

/* scores, types: n little-endian floats / int32, possibly unaligned, or NULL (all 0 / normal). */
static inline void ref_init(ref_vocab *r, const es__str *toks, size_t n, const void *scores, const void *types,
                     const es__str *merges, size_t n_merges, int32_t unk) {
    memset(r, 0, sizeof *r);
    r->n_toks = n;
    r->toks = calloc(n + 1, sizeof *r->toks);
    for (size_t i = 0; i < n; i++) r->toks[i] = (ref_tok){toks[i].ptr, toks[i].len, (int32_t)i};
    qsort(r->toks, n, sizeof *r->toks, ref_cmp);
    r->scores = calloc(n + 1, sizeof(float));
    if (scores) memcpy(r->scores, scores, n * sizeof(float));
    r->types = calloc(n + 1, sizeof(int32_t));
    for (size_t i = 0; i < n; i++) r->types[i] = ES__TOK_NORMAL;
    if (types) memcpy(r->types, types, n * sizeof(int32_t));
    r->n_merges = n_merges;
    r->merges = calloc(n_merges + 1, sizeof *r->merges);
    for (size_t i = 0; i < n_merges; i++) r->merges[i] = (ref_tok){merges[i].ptr, merges[i].len, (int32_t)i};
    qsort(r->merges, n_merges, sizeof *r->merges, ref_cmp);
    r->unk = unk;
}

static inline void ref_free(ref_vocab *r) {
    free(r->toks);
    free(r->scores);
    free(r->types);
    free(r->merges);
}

/* Bytes in the character at s[0..n): the length its lead byte announces if those bytes decode to a
 * scalar value whose UTF-8 (re-encoded by tv_utf8) is exactly them; else 1 (an invalid byte). */
static inline size_t ref_char_len(const char *s, size_t n) {
    uint8_t b = (uint8_t)s[0];
    size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len <= 1 || len > n) return 1;
    uint32_t cp = b & (0x7F >> len);
    for (size_t i = 1; i < len; i++) cp = cp << 6 | ((uint8_t)s[i] & 0x3F);
    char again[5];
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
    return (size_t)tv_utf8(cp, again) == len && memcmp(again, s, len) == 0 ? len : 1;
}

/* A SentencePiece piece: a token that is not control, unknown or byte. */
static inline int32_t ref_piece(const ref_vocab *r, const char *s, size_t n) {
    int32_t id = ref_id(r, s, n);
    if (id < 0) return -1;
    int32_t t = r->types[id];
    return t == ES__TOK_CONTROL || t == ES__TOK_UNKNOWN || t == ES__TOK_BYTE ? -1 : id;
}

typedef struct ref_sym {
    char *s;
    size_t n;
} ref_sym;

static inline int ref_push(int32_t *out, size_t *n, size_t cap, int32_t id) {
    if (*n >= cap) return 0;
    out[(*n)++] = id;
    return 1;
}

/* Merges sym[0..*n) while best() finds a pair: best returns the index of the pair to merge or SIZE_MAX. */
static inline void ref_merge_at(ref_sym *sym, size_t *n, size_t i) {
    sym[i].s = realloc(sym[i].s, sym[i].n + sym[i + 1].n + 1);
    memcpy(sym[i].s + sym[i].n, sym[i + 1].s, sym[i + 1].n);
    sym[i].n += sym[i + 1].n;
    free(sym[i + 1].s);
    memmove(&sym[i + 1], &sym[i + 2], (*n - i - 2) * sizeof *sym);
    (*n)--;
}

/* Returns 0 when a character has neither a token, nor byte tokens, nor an unknown token. */
static inline int ref_spm(const ref_vocab *r, const char *text, size_t len, bool prefix, int32_t *out, size_t *n_out,
                   size_t cap) {
    if (len == 0) return 1; /* no text, no prefix */
    char *esc = malloc(len * 3 + 4);
    size_t m = 0;
    if (prefix) {
        memcpy(esc, "\xE2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + m, "\xE2\x96\x81", 3);
            m += 3;
        } else {
            esc[m++] = text[i];
        }
    }
    ref_sym *sym = malloc((m + 1) * sizeof *sym);
    size_t n = 0;
    for (size_t i = 0; i < m;) {
        size_t cl = ref_char_len(esc + i, m - i);
        sym[n].s = malloc(cl + 1);
        memcpy(sym[n].s, esc + i, cl);
        sym[n++].n = cl;
        i += cl;
    }
    char *cat = malloc(m + 1);
    for (;;) {
        size_t best = SIZE_MAX;
        float best_score = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            memcpy(cat, sym[i].s, sym[i].n);
            memcpy(cat + sym[i].n, sym[i + 1].s, sym[i + 1].n);
            int32_t id = ref_piece(r, cat, sym[i].n + sym[i + 1].n);
            if (id >= 0 && (best == SIZE_MAX || r->scores[id] > best_score)) {
                best = i;
                best_score = r->scores[id];
            }
        }
        if (best == SIZE_MAX) break;
        ref_merge_at(sym, &n, best);
    }
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ref_piece(r, sym[i].s, sym[i].n), bytes[4];
        int have_bytes = 1;
        for (size_t k = 0; k < sym[i].n && id < 0; k++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (uint8_t)sym[i].s[k]);
            bytes[k] = ref_id(r, name, 6);
            have_bytes &= bytes[k] >= 0;
        }
        if (id >= 0)
            ok &= ref_push(out, n_out, cap, id);
        else if (have_bytes)
            for (size_t k = 0; k < sym[i].n; k++) ok &= ref_push(out, n_out, cap, bytes[k]);
        else if (r->unk >= 0)
            ok &= ref_push(out, n_out, cap, r->unk);
        else
            ok = 0;
        free(sym[i].s);
    }
    free(cat);
    free(sym);
    free(esc);
    return ok;
}

static inline int ref_bpe_word(const ref_vocab *r, const uint8_t *w, size_t len, bool ignore_merges, int32_t *out,
                        size_t *n_out, size_t cap) {
    uint32_t map[256];
    tv_byte_map(map);
    ref_sym *sym = malloc((len + 1) * sizeof *sym);
    char *whole = malloc(len * 2 + 1);
    size_t whole_n = 0;
    for (size_t i = 0; i < len; i++) {
        sym[i].s = malloc(5);
        sym[i].n = (size_t)tv_utf8(map[w[i]], sym[i].s);
        memcpy(whole + whole_n, sym[i].s, sym[i].n);
        whole_n += sym[i].n;
    }
    size_t n = len, line_cap = 0;
    char *line = NULL;
    int32_t whole_id = ignore_merges ? ref_id(r, whole, whole_n) : -1;
    for (; whole_id < 0;) {
        size_t best = SIZE_MAX;
        int32_t best_rank = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            size_t ln = sym[i].n + 1 + sym[i + 1].n;
            if (ln > line_cap) line = realloc(line, line_cap = ln * 2);
            memcpy(line, sym[i].s, sym[i].n);
            line[sym[i].n] = ' ';
            memcpy(line + sym[i].n + 1, sym[i + 1].s, sym[i + 1].n);
            const ref_tok *mg = ref_find(r->merges, r->n_merges, line, ln, 0);
            if (mg && (best == SIZE_MAX || mg->id < best_rank)) {
                best = i;
                best_rank = mg->id;
            }
        }
        if (best == SIZE_MAX) break;
        ref_merge_at(sym, &n, best);
    }
    int ok = 1;
    if (whole_id >= 0) ok &= ref_push(out, n_out, cap, whole_id);
    size_t byte_pos = 0; /* bytes of the word covered so far, for symbols that are no token */
    for (size_t i = 0; i < n; i++) {
        /* a symbol's source bytes: count its mapped characters */
        size_t chars = 0;
        for (size_t k = 0; k < sym[i].n; k += ref_char_len(sym[i].s + k, sym[i].n - k)) chars++;
        int32_t id = whole_id >= 0 ? -2 : ref_id(r, sym[i].s, sym[i].n);
        if (id >= 0) {
            ok &= ref_push(out, n_out, cap, id);
        } else if (id == -1) {
            for (size_t k = 0; k < chars; k++) {
                char c[5];
                int32_t b = ref_id(r, c, (size_t)tv_utf8(map[w[byte_pos + k]], c));
                if (b < 0) b = r->unk;
                if (b < 0) ok = 0;
                else ok &= ref_push(out, n_out, cap, b);
            }
        }
        byte_pos += chars;
        free(sym[i].s);
    }
    free(line);
    free(whole);
    free(sym);
    return ok;
}

static inline int ref_bpe(const ref_vocab *r, es__pretok kind, bool ignore_merges, const char *text, size_t len, int32_t *out,
                   size_t *n_out, size_t cap) {
    int ok = 1;
    es__pretok_iter it;
    es__pretok_begin(&it, kind, (const uint8_t *)text, len);
    for (size_t pos = 0, n; (n = es__pretok_next(&it)) > 0; pos += n)
        ok &= ref_bpe_word(r, (const uint8_t *)text + pos, n, ignore_merges, out, n_out, cap);
    return ok;
}

/* ---- Random test strings: characters from every class the splits and merges care about. */

static const uint32_t ref_pool[] = {
    ' ', ' ', ' ', ' ', '\n', '\t', '\r', 'a', 'e', 't', 'h', 'e', 'o', 'n', 's', 'T', 'I', 'x', 'z', 'q', '0', '1',
    '3', '7', '9', '\'', '\'', '.', ',', '!', '?', '-', '(', ')', '"', '<', '>', '/', '|', '_', '#', 0xE9, 0xFC, 0xDF,
    0x3B1, 0x3C9, 0x416, 0x44F, 0x5D0, 0x627, 0x915, 0x93F, 0xE01, 0x1780, 0x17D2, 0x3042, 0x30AB, 0x4E00, 0x6211,
    0x597D, 0xAC00, 0xD55C, 0x2581, 0x2014, 0x20AC, 0x2764, 0xFE0F, 0x200D, 0x1F600, 0x1F389, 0x1F44D, 0x301, 0x3000,
    0xA0, 0x2028, 0x660, 0xB2, 0x1D7CE, 0xFFFD, 0x10FFFF, 0x17F,
};

static const char *const ref_fragments[] = {
    "'s", "'ll", "'re", "'ve", "'d", "'m", "'t", "n't", "<s>", "</s>", "<unk>", "<|endoftext|>", "   ", "\n\n",
    "1234567", "Hello", " world", "the", "ing", "tion", "  \n ", "\xF0\x9F\x98\x80\xE2\x80\x8D\xF0\x9F\x8C\xAB",
};

/* splitmix64 */
static inline uint64_t ref_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Up to max_chars characters or fragments into buf (room for 16 * max_chars + 1 bytes). */
static inline size_t ref_random_text(uint64_t *rng, char *buf, size_t max_chars) {
    size_t n = 0, chars = (size_t)(ref_rand(rng) % (max_chars + 1));
    for (size_t i = 0; i < chars; i++) {
        if (ref_rand(rng) % 8 == 0) {
            const char *f = ref_fragments[ref_rand(rng) % ES__ARRAY_LEN(ref_fragments)];
            memcpy(buf + n, f, strlen(f));
            n += strlen(f);
        } else {
            n += (size_t)tv_utf8(ref_pool[ref_rand(rng) % ES__ARRAY_LEN(ref_pool)], buf + n);
        }
    }
    buf[n] = 0;
    return n;
}

/* SentencePiece decodes U+2581 in the input as a space: what a round trip gives back. */
static inline size_t ref_spm_roundtrip(const char *text, size_t len, char *out) {
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 2 < len && memcmp(text + i, "\xE2\x96\x81", 3) == 0) {
            out[w++] = ' ';
            i += 2;
        } else {
            out[w++] = text[i];
        }
    }
    return w;
}

#endif /* ES_TEST_REF_ENCODERS_H */
