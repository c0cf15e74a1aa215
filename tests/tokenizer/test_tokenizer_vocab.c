/* test_tokenizer_vocab.c: the real vocabularies in ../shared/vocab-tests (SentencePiece
 * llama-spm, byte-level gpt-2): every expected id of their .inp/.out vectors, decoding back to the
 * input, and thousands of random and tricky strings encoded both by the library and by plain
 * quadratic reference implementations written here from the algorithms' definitions (no heap, no
 * pair table, no input cutting), which must agree id for id. Also the loader's GGUF wiring. */
#include "gguf.h"
#include "tvocab.h"

#include "../test.h"

/* ---- Files. */

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 > cap) {
            cap = (n + 65536) * 2;
            char *b = realloc(buf, cap + 1);
            if (!b) break;
            buf = b;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    if (buf) buf[n] = 0;
    *size = n;
    return buf;
}

static const char *shared_dir(void) {
    static char dir[4096];
    const char *d = getenv("ES_SHARED_DIR");
    if (d && *d) return d;
    const char *root = getenv("ES_SOURCE_ROOT");
    snprintf(dir, sizeof dir, "%s/../shared", root && *root ? root : ".");
    return dir;
}

/* A vocabulary file, parsed, with its vectors. */
typedef struct vfile {
    char *bytes;
    size_t size;
    es__gguf *g;
    es__vocab *v;
    char *inp, *out;
    size_t inp_len, out_len;
} vfile;

static int open_vocab(const char *name, vfile *f) {
    char path[4200];
    memset(f, 0, sizeof *f);
    snprintf(path, sizeof path, "%s/vocab-tests/%s", shared_dir(), name);
    f->bytes = read_file(path, &f->size);
    CHECKF(f->bytes != NULL, "cannot read %s (set ES_SHARED_DIR)", path);
    if (!f->bytes) return 0;
    es__err err;
    CHECK_OK(es__gguf_parse((const uint8_t *)f->bytes, f->size, NULL, &err, &f->g));
    if (!f->g) return 0;
    CHECK_OK(es__vocab_load(f->g, NULL, &err, &f->v));
    snprintf(path, sizeof path, "%s/vocab-tests/%s.inp", shared_dir(), name);
    f->inp = read_file(path, &f->inp_len);
    snprintf(path, sizeof path, "%s/vocab-tests/%s.out", shared_dir(), name);
    f->out = read_file(path, &f->out_len);
    CHECK(f->inp && f->out);
    return f->v && f->inp && f->out;
}

static void close_vocab(vfile *f) {
    es__vocab_free(f->v);
    es__gguf_free(f->g);
    free(f->bytes);
    free(f->inp);
    free(f->out);
}

/* ---- The .inp/.out vectors. */

static int decode_matches(const es__vocab *v, const int32_t *ids, size_t n, bool spm, const char *want, size_t want_len) {
    size_t cap = want_len * 4 + 64, len = 0;
    char *buf = malloc(cap);
    es_status s = es__detokenize(v, ids, n, spm, false, buf, cap, &len, NULL);
    int ok = s == ES_OK && len == want_len && memcmp(buf, want, len) == 0;
    if (!ok) fprintf(stderr, "decoded \"%.*s\", want \"%.*s\"\n", (int)len, buf, (int)want_len, want);
    free(buf);
    return ok;
}

static void check_vectors(vfile *f, bool spm) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    char *p = f->inp, *o = f->out;
    int n_cases = 0, n_ids = 0;
    for (;;) {
        char *e = strstr(p, sep);
        char *eol = strchr(o, '\n');
        if (!e || !eol) break;
        size_t len = (size_t)(e - p);
        int32_t want[4096], got[4096];
        size_t n_want = 0, n_got = 0;
        for (char *q = o; q < eol && n_want < 4096;) {
            char *end;
            long id = strtol(q, &end, 10);
            if (end == q) break;
            want[n_want++] = (int32_t)id;
            q = end;
        }
        es_status s = es__tokenize(f->v, p, len, false, false, got, 4096, &n_got, NULL);
        int ok = s == ES_OK && n_got == n_want && memcmp(got, want, n_want * sizeof *got) == 0;
        CHECKF(ok, "vector %d \"%.*s\": %zu ids, want %zu", n_cases, (int)len, p, n_got, n_want);
        if (!ok) {
            for (size_t i = 0; i < n_got; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        CHECK(decode_matches(f->v, got, n_got, spm, p, len));
        n_cases++;
        n_ids += (int)n_want;
        p = e + sep_len;
        o = eol + 1;
    }
    CHECKF(n_cases >= 40 && *p == 0 && *o == 0, "%d vectors read, rest of files: %zu / %zu bytes", n_cases,
           strlen(p), strlen(o));
    printf("%d vectors, %d ids\n", n_cases, n_ids);
}

/* ---- Reference encoders. */

/* token text -> id, from the file's own array (the last of equal texts wins, as in llama.cpp) */
typedef struct ref_tok {
    const char *s;
    size_t n;
    int32_t id;
} ref_tok;

typedef struct ref_vocab {
    ref_tok *toks; /* sorted by text */
    size_t n_toks;
    const float *scores; /* unaligned in the file: copied */
    float *score_copy;
    ref_tok *merges; /* "left right" lines, sorted; id = rank */
    size_t n_merges;
    int32_t unk;
} ref_vocab;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_tok *a = pa, *b = pb;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->s, b->s, n);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* The entry for s[0..n); for equal texts the last (want_last) or the first. */
static const ref_tok *ref_find(const ref_tok *arr, size_t count, const char *s, size_t n, int want_last) {
    ref_tok key = {s, n, want_last ? INT32_MAX : -1};
    size_t lo = 0, hi = count; /* first entry >= key */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ref_cmp(&arr[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t i = want_last ? lo - 1 : lo;
    if (want_last && lo == 0) return NULL;
    return i < count && arr[i].n == n && memcmp(arr[i].s, s, n) == 0 ? &arr[i] : NULL;
}

static int32_t ref_id(const ref_vocab *r, const char *s, size_t n) {
    const ref_tok *t = ref_find(r->toks, r->n_toks, s, n, 1);
    return t ? t->id : -1;
}

static void ref_init(ref_vocab *r, const es__gguf *g) {
    memset(r, 0, sizeof *r);
    const es__gguf_kv *kv = es__gguf_find(g, "tokenizer.ggml.tokens");
    r->n_toks = kv->arr_n;
    r->toks = calloc(r->n_toks, sizeof *r->toks);
    for (size_t i = 0; i < r->n_toks; i++) r->toks[i] = (ref_tok){kv->strs[i].ptr, kv->strs[i].len, (int32_t)i};
    qsort(r->toks, r->n_toks, sizeof *r->toks, ref_cmp);
    kv = es__gguf_find(g, "tokenizer.ggml.scores");
    if (kv) {
        r->score_copy = malloc(kv->arr_n * sizeof(float));
        memcpy(r->score_copy, kv->value, kv->arr_n * sizeof(float));
        r->scores = r->score_copy;
    }
    kv = es__gguf_find(g, "tokenizer.ggml.merges");
    if (kv) {
        r->n_merges = kv->arr_n;
        r->merges = calloc(r->n_merges, sizeof *r->merges);
        for (size_t i = 0; i < r->n_merges; i++) r->merges[i] = (ref_tok){kv->strs[i].ptr, kv->strs[i].len, (int32_t)i};
        qsort(r->merges, r->n_merges, sizeof *r->merges, ref_cmp);
    }
    r->unk = -1;
    kv = es__gguf_find(g, "tokenizer.ggml.unknown_token_id");
    if (kv) memcpy(&r->unk, kv->value, 4);
}

static void ref_free(ref_vocab *r) {
    free(r->toks);
    free(r->score_copy);
    free(r->merges);
}

/* Length of the UTF-8 character at s (valid input only: the random strings are built from code points). */
static size_t ref_char_len(const char *s) {
    uint8_t b = (uint8_t)*s;
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

typedef struct ref_sym {
    char *s; /* malloc'd text */
    size_t n;
} ref_sym;

static void push(int32_t *out, size_t *n, int32_t id) {
    if (*n < 8192) out[(*n)++] = id;
}

/* SentencePiece by definition: merge the adjacent pair whose concatenation is the token of highest
 * score, the leftmost of equals, until none is; then byte tokens for what is left unknown. */
static void ref_spm(const ref_vocab *r, const char *text, size_t len, int32_t *out, size_t *n_out) {
    if (len == 0) return; /* no text, no prefix */
    char *esc = malloc(len * 3 + 4);
    size_t m = 0;
    memcpy(esc, "\xE2\x96\x81", 3); /* the space prefix */
    m = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ')
            memcpy(esc + m, "\xE2\x96\x81", 3), m += 3;
        else
            esc[m++] = text[i];
    }
    ref_sym *sym = malloc((m + 1) * sizeof *sym);
    size_t n = 0;
    for (size_t i = 0; i < m;) {
        size_t cl = ref_char_len(esc + i);
        sym[n].s = malloc(cl);
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
            int32_t id = ref_id(r, cat, sym[i].n + sym[i + 1].n);
            if (id >= 0 && (best == SIZE_MAX || r->scores[id] > best_score)) {
                best = i;
                best_score = r->scores[id];
            }
        }
        if (best == SIZE_MAX) break;
        sym[best].s = realloc(sym[best].s, sym[best].n + sym[best + 1].n);
        memcpy(sym[best].s + sym[best].n, sym[best + 1].s, sym[best + 1].n);
        sym[best].n += sym[best + 1].n;
        free(sym[best + 1].s);
        memmove(&sym[best + 1], &sym[best + 2], (n - best - 2) * sizeof *sym);
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = ref_id(r, sym[i].s, sym[i].n);
        if (id >= 0) {
            push(out, n_out, id);
        } else {
            for (size_t k = 0; k < sym[i].n; k++) {
                char name[8];
                snprintf(name, sizeof name, "<0x%02X>", (uint8_t)sym[i].s[k]);
                push(out, n_out, ref_id(r, name, 6));
            }
        }
        free(sym[i].s);
    }
    free(cat);
    free(sym);
    free(esc);
}

/* Byte-level BPE by definition, per pre-tokenizer word: bytes as their mapped characters, merge the
 * adjacent pair whose "left right" line has the lowest rank, the leftmost of equals. */
static void ref_bpe_word(const ref_vocab *r, const uint32_t map[256], const uint8_t *w, size_t len, int32_t *out,
                         size_t *n_out) {
    ref_sym *sym = malloc(len * sizeof *sym);
    for (size_t i = 0; i < len; i++) {
        sym[i].s = malloc(5);
        sym[i].n = (size_t)tv_utf8(map[w[i]], sym[i].s);
    }
    size_t n = len, cap = 0;
    char *line = NULL;
    for (;;) {
        size_t best = SIZE_MAX;
        int32_t best_rank = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            size_t ln = sym[i].n + 1 + sym[i + 1].n;
            if (ln > cap) line = realloc(line, cap = ln * 2);
            memcpy(line, sym[i].s, sym[i].n);
            line[sym[i].n] = ' ';
            memcpy(line + sym[i].n + 1, sym[i + 1].s, sym[i + 1].n);
            const ref_tok *m = ref_find(r->merges, r->n_merges, line, ln, 0);
            if (m && (best == SIZE_MAX || m->id < best_rank)) {
                best = i;
                best_rank = m->id;
            }
        }
        if (best == SIZE_MAX) break;
        sym[best].s = realloc(sym[best].s, sym[best].n + sym[best + 1].n);
        memcpy(sym[best].s + sym[best].n, sym[best + 1].s, sym[best + 1].n);
        sym[best].n += sym[best + 1].n;
        free(sym[best + 1].s);
        memmove(&sym[best + 1], &sym[best + 2], (n - best - 2) * sizeof *sym);
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        push(out, n_out, ref_id(r, sym[i].s, sym[i].n));
        free(sym[i].s);
    }
    free(line);
    free(sym);
}

static void ref_bpe(const ref_vocab *r, const char *text, size_t len, int32_t *out, size_t *n_out) {
    uint32_t map[256];
    tv_byte_map(map);
    for (size_t pos = 0; pos < len;) {
        size_t n = es__pretok_next(ES__PRETOK_GPT2, (const uint8_t *)text, len, pos);
        ref_bpe_word(r, map, (const uint8_t *)text + pos, n, out, n_out);
        pos += n;
    }
}

/* ---- Random strings. */

static const uint32_t pool[] = {
    ' ', ' ', ' ', ' ', '\n', '\t', '\r', 'a', 'e', 't', 'h', 'e', 'o', 'n', 's', 'T', 'I', 'x', 'z', 'q', '0', '1',
    '3', '7', '9', '\'', '\'', '.', ',', '!', '?', '-', '(', ')', '"', '<', '>', '/', '|', '_', '#', 0xE9, 0xFC, 0xDF,
    0x3B1, 0x3C9, 0x416, 0x44F, 0x5D0, 0x627, 0x915, 0x93F, 0xE01, 0x1780, 0x17D2, 0x3042, 0x30AB, 0x4E00, 0x6211,
    0x597D, 0xAC00, 0xD55C, 0x2581, 0x2014, 0x20AC, 0x2764, 0xFE0F, 0x200D, 0x1F600, 0x1F389, 0x1F44D, 0x301, 0x3000,
    0xA0, 0x2028, 0x660, 0xB2, 0x1D7CE, 0xFFFD, 0x10FFFF,
};

static const char *const fragments[] = {
    "'s", "'ll", "'re", "'ve", "'d", "'m", "'t", "n't", "<s>", "</s>", "<unk>", "<|endoftext|>", "   ", "\n\n",
    "1234567", "Hello", " world", "the", "ing", "tion", "  \n ", "\xF0\x9F\x98\x80\xE2\x80\x8D\xF0\x9F\x8C\xAB",
};

static size_t random_text(test_rng *rng, char *buf, size_t max_chars) {
    size_t n = 0, chars = (size_t)(test_rng_u64(rng) % (max_chars + 1));
    for (size_t i = 0; i < chars; i++) {
        if (test_rng_u64(rng) % 8 == 0) {
            const char *f = fragments[test_rng_u64(rng) % ES__ARRAY_LEN(fragments)];
            memcpy(buf + n, f, strlen(f));
            n += strlen(f);
        } else {
            n += (size_t)tv_utf8(pool[test_rng_u64(rng) % ES__ARRAY_LEN(pool)], buf + n);
        }
    }
    buf[n] = 0;
    return n;
}

/* SentencePiece decodes U+2581 in the input as a space: what a round trip gives back. */
static size_t spm_expected(const char *text, size_t len, char *out) {
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

static void check_random(vfile *f, bool spm, int count, uint64_t seed) {
    ref_vocab r;
    ref_init(&r, f->g);
    test_rng rng = {seed};
    static char text[8192], want[8192];
    static int32_t ids[8192], ref[8192];
    int agree = 0, round = 0;
    for (int iter = 0; iter < count; iter++) {
        size_t len = random_text(&rng, text, iter % 10 == 0 ? 400 : 40);
        size_t n = 0, n_ref = 0;
        es_status s = es__tokenize(f->v, text, len, false, false, ids, 8192, &n, NULL);
        if (spm)
            ref_spm(&r, text, len, ref, &n_ref);
        else
            ref_bpe(&r, text, len, ref, &n_ref);
        int same = s == ES_OK && n == n_ref && memcmp(ids, ref, n * sizeof *ids) == 0;
        if (!same && agree == iter) { /* report the first disagreement in full */
            fprintf(stderr, "reference disagrees on \"%s\":\n lib", text);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n ref");
            for (size_t i = 0; i < n_ref; i++) fprintf(stderr, " %d", ref[i]);
            fprintf(stderr, "\n");
        }
        agree += same;
        size_t want_len = spm ? spm_expected(text, len, want) : (memcpy(want, text, len), len);
        round += decode_matches(f->v, ids, n, spm, want, want_len);
    }
    CHECKF(agree == count, "%d of %d random strings agree with the reference", agree, count);
    CHECKF(round == count, "%d of %d random strings decode back", round, count);
    ref_free(&r);
}

/* Invalid UTF-8 is encoded as bytes and decodes back exactly (GPT-2) or with U+2581 as space (SPM). */
static void check_invalid_utf8(vfile *f, bool spm, uint64_t seed) {
    test_rng rng = {seed};
    static char text[1024], want[1024];
    static int32_t ids[4096];
    int round = 0, count = 300;
    for (int iter = 0; iter < count; iter++) {
        size_t len = random_text(&rng, text, 30);
        for (int k = 0; k < 3 && len > 0; k++) text[test_rng_u64(&rng) % len] = (char)(0x80 + test_rng_u64(&rng) % 128);
        size_t n = 0;
        es_status s = es__tokenize(f->v, text, len, false, false, ids, 4096, &n, NULL);
        size_t want_len = spm ? spm_expected(text, len, want) : (memcpy(want, text, len), len);
        round += s == ES_OK && decode_matches(f->v, ids, n, spm, want, want_len);
    }
    CHECKF(round == count, "%d of %d strings with invalid UTF-8 decode back", round, count);
}

static void check_specials(vfile *spm, vfile *gpt2) {
    int32_t ids[64];
    size_t n = 0;
    /* Llama: <s> and </s> are control tokens; the text after one gets the space prefix */
    CHECK_OK(es__tokenize(spm->v, "<s>Hello</s>", 12, true, true, ids, 64, &n, NULL));
    CHECK(n == 4 && ids[0] == 1 && ids[1] == 1 && ids[2] == 15043 && ids[3] == 2);
    CHECK_OK(es__tokenize(spm->v, "Hello", 5, true, false, ids, 64, &n, NULL));
    CHECK(n == 2 && ids[0] == 1 && ids[1] == 15043);
    CHECK_OK(es__tokenize(spm->v, "<s>", 3, false, false, ids, 64, &n, NULL));
    CHECK(n > 1 && ids[0] != 1);
    CHECK(es__token_is_eog(spm->v, 2) && !es__token_is_eog(spm->v, 1));
    /* GPT-2: <|endoftext|> */
    CHECK_OK(es__tokenize(gpt2->v, "Hi<|endoftext|>", 15, true, true, ids, 64, &n, NULL));
    CHECK(n == 2 && ids[0] == 17250 && ids[1] == 50256);
    CHECK_OK(es__tokenize(gpt2->v, "Hi<|endoftext|>", 15, true, false, ids, 64, &n, NULL));
    CHECK(n > 2 && ids[n - 1] != 50256);
    char buf[64];
    size_t len;
    CHECK_OK(es__detokenize(gpt2->v, ids, n, false, false, buf, sizeof buf, &len, NULL));
    CHECK(len == 15 && memcmp(buf, "Hi<|endoftext|>", 15) == 0);
    CHECK(es__token_is_eog(gpt2->v, 50256));
}

/* ---- Loader wiring: GGUF type errors name the key. */
static void check_loader_errors(void) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    CHECK_OK(es__gguf_set_str(w, "tokenizer.ggml.model", "llama"));
    int32_t not_strings[3] = {1, 2, 3};
    CHECK_OK(es__gguf_set_arr(w, "tokenizer.ggml.tokens", ES__GGUF_INT32, not_strings, 3));
    uint8_t *data = NULL;
    uint64_t size = 0;
    es__err err;
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    es__gguf *g = NULL;
    es__vocab *v = NULL;
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_FAILS(es__vocab_load(g, NULL, &err, &v), ES_ERR_FORMAT, "tokenizer.ggml.tokens");
        CHECK(v == NULL);
        es__gguf_free(g);
    }
    es__free(NULL, data);
    const char *toks[3] = {"<unk>", "a", "b"};
    CHECK_OK(es__gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3));
    CHECK_OK(es__gguf_set_i32(w, "tokenizer.ggml.bos_token_id", 3));
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_FAILS(es__vocab_load(g, NULL, &err, &v), ES_ERR_MODEL, "tokenizer.ggml.bos_token_id = 3");
        es__gguf_free(g);
    }
    es__free(NULL, data);
    CHECK_OK(es__gguf_set_i32(w, "tokenizer.ggml.bos_token_id", 0));
    CHECK_OK(es__gguf_set_str(w, "tokenizer.ggml.add_bos_token", "yes"));
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_FAILS(es__vocab_load(g, NULL, &err, &v), ES_ERR_FORMAT, "tokenizer.ggml.add_bos_token");
        es__gguf_free(g);
    }
    es__free(NULL, data);
    CHECK_OK(es__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false));
    CHECK_OK(es__gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", false));
    float scores[3] = {0, -1, -2};
    CHECK_OK(es__gguf_set_arr(w, "tokenizer.ggml.scores", ES__GGUF_FLOAT32, scores, 3));
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_OK(es__vocab_load(g, NULL, &err, &v));
        int32_t ids[4];
        size_t n = 0;
        if (v) {
            CHECK_OK(es__tokenize(v, "ab", 2, true, false, ids, 4, &n, NULL));
            CHECK(n == 2 && ids[0] == 1 && ids[1] == 2);
        }
        es__vocab_free(v);
        es__gguf_free(g);
    }
    es__free(NULL, data);
    es__gguf_writer_free(w);
}

int main(void) {
    vfile spm, gpt2;
    int ok_spm = open_vocab("ggml-vocab-llama-spm.gguf", &spm);
    int ok_gpt2 = open_vocab("ggml-vocab-gpt-2.gguf", &gpt2);
    if (ok_spm) {
        CHECK(es__vocab_type(spm.v) == ES_TOKENIZER_LLAMA && es__vocab_n_tokens(spm.v) == 32000);
        check_vectors(&spm, true);
        check_random(&spm, true, 1500, 1);
        check_invalid_utf8(&spm, true, 2);
    }
    if (ok_gpt2) {
        CHECK(es__vocab_type(gpt2.v) == ES_TOKENIZER_GPT2 && es__vocab_n_tokens(gpt2.v) == 50257);
        CHECK(strcmp(es__vocab_pre(gpt2.v), "gpt-2") == 0);
        check_vectors(&gpt2, false);
        check_random(&gpt2, false, 1500, 3);
        check_invalid_utf8(&gpt2, false, 4);
    }
    if (ok_spm && ok_gpt2) check_specials(&spm, &gpt2);
    check_loader_errors();
    close_vocab(&spm);
    close_vocab(&gpt2);
    TEST_MAIN_END();
}
