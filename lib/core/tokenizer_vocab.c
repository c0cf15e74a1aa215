/* tokenizer_vocab.c: building a vocabulary from tokenizer.ggml.* values: validation (every message
 * names the key and the index at fault), the string and pair tables the encoders use, the decoded
 * text of every token, the special-token list. It does not read GGUF (tokenizer_load.c does) and
 * does not encode (tokenizer_spm.c, tokenizer_bpe.c). */
#include "tokenizer_impl.h"
#include "unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Build-time state next to the vocabulary under construction. */
typedef struct builder {
    es__vocab *v;
    es__err *err;
    size_t text_cap;    /* bytes allocated for v->text         */
    uint32_t sid_cap;   /* entries allocated for text_off/hash */
    uint32_t n_str;     /* sids in str_slots                   */
    uint32_t n_pairs;
    uint32_t n_adj;
} builder;

#define MAX_SHOWN 48 /* bytes of a token or line quoted in an error message */

static bool str_eq(es__str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static es_status oom(builder *b, const char *what) {
    return es__fail(b->err, ES_ERR_OUT_OF_MEMORY, "tokenizer: out of memory building %s", what);
}

void es__vocab_desc_init(es__vocab_desc *d) {
    memset(d, 0, sizeof *d);
    for (int i = 0; i < ES__SPECIAL_COUNT; i++) d->special[i] = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

static float read_f32(const void *base, uint64_t i) {
    float f;
    memcpy(&f, (const uint8_t *)base + i * 4, 4);
    return f;
}

static int32_t read_i32(const void *base, uint64_t i) {
    int32_t x;
    memcpy(&x, (const uint8_t *)base + i * 4, 4);
    return x;
}

/* ---- String table. */

/* Appends s[0..n) as a new sid (not yet findable). */
static es_status add_string(builder *b, const char *s, size_t n, int32_t *sid) {
    es__vocab *v = b->v;
    uint32_t used = v->text_off[v->n_sids];
    if (n > UINT32_MAX - used || v->n_sids >= INT32_MAX - 1)
        return es__fail(b->err, ES_ERR_UNSUPPORTED, "tokenizer: vocabulary text exceeds 4 GiB or 2^31 strings");
    if (used + n > b->text_cap) {
        size_t cap = b->text_cap ? b->text_cap : 4096;
        while (cap < used + n) cap *= 2;
        char *t = es__realloc(v->alloc, v->text, cap);
        if (!t) return oom(b, "the token texts");
        v->text = t;
        b->text_cap = cap;
    }
    if ((uint32_t)v->n_sids + 1 >= b->sid_cap) {
        uint32_t cap = b->sid_cap ? b->sid_cap * 2 : 1024;
        uint32_t *off = es__realloc(v->alloc, v->text_off, (size_t)cap * sizeof *off);
        if (!off) return oom(b, "the token offsets");
        v->text_off = off;
        uint32_t *hash = es__realloc(v->alloc, v->text_hash, (size_t)cap * sizeof *hash);
        if (!hash) return oom(b, "the token hashes");
        v->text_hash = hash;
        b->sid_cap = cap;
    }
    if (n) memcpy(v->text + used, s, n);
    v->text_hash[v->n_sids] = es__hash_str(s, n);
    v->text_off[v->n_sids + 1] = used + (uint32_t)n;
    *sid = v->n_sids++;
    return ES_OK;
}

static es_status str_table_grow(builder *b) {
    es__vocab *v = b->v;
    uint32_t cap = v->str_slots ? (v->str_mask + 1) * 2 : 1024;
    uint32_t *slots = es__calloc(v->alloc, cap, sizeof *slots);
    if (!slots) return oom(b, "the token table");
    for (uint32_t i = 0; v->str_slots && i <= v->str_mask; i++) {
        uint32_t slot = v->str_slots[i];
        if (!slot) continue;
        uint32_t j = v->text_hash[slot - 1] & (cap - 1);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = slot;
    }
    es__free(v->alloc, v->str_slots);
    v->str_slots = slots;
    v->str_mask = cap - 1;
    return ES_OK;
}

/* Makes sid findable by its text; a sid already holding the same text is replaced (so the last
 * of duplicate tokens wins, as in llama.cpp). */
static es_status str_table_insert(builder *b, int32_t sid) {
    es__vocab *v = b->v;
    if (!v->str_slots || (b->n_str + 1) * 2 > v->str_mask + 1) ES_TRY(str_table_grow(b));
    const char *s = v->text + v->text_off[sid];
    uint32_t n = v->text_off[sid + 1] - v->text_off[sid], h = v->text_hash[sid];
    for (uint32_t i = h & v->str_mask;; i = (i + 1) & v->str_mask) {
        uint32_t slot = v->str_slots[i];
        if (!slot) {
            v->str_slots[i] = (uint32_t)sid + 1;
            b->n_str++;
            return ES_OK;
        }
        int32_t o = (int32_t)slot - 1;
        if (v->text_hash[o] == h && v->text_off[o + 1] - v->text_off[o] == n &&
            memcmp(v->text + v->text_off[o], s, n) == 0) {
            v->str_slots[i] = (uint32_t)sid + 1;
            return ES_OK;
        }
    }
}

/* The sid of s[0..n), added as an extra string when no token has that text. */
static es_status intern(builder *b, const char *s, size_t n, int32_t *sid) {
    *sid = b->v->str_slots ? es__vocab_lookup(b->v, s, n) : -1;
    if (*sid >= 0) return ES_OK;
    ES_TRY(add_string(b, s, n, sid));
    return str_table_insert(b, *sid);
}

/* ---- Pair table and adjacency set. */

static es_status pair_table_grow(builder *b) {
    es__vocab *v = b->v;
    uint32_t cap = v->pairs ? (v->pair_mask + 1) * 2 : 1024;
    if (cap == 0) return es__fail(b->err, ES_ERR_UNSUPPORTED, "tokenizer: too many merges");
    es__pair *pairs = es__calloc(v->alloc, cap, sizeof *pairs);
    if (!pairs) return oom(b, "the merge table");
    for (uint32_t i = 0; v->pairs && i <= v->pair_mask; i++) {
        if (!v->pairs[i].key) continue;
        uint32_t j = (uint32_t)es__hash_mix(v->pairs[i].key) & (cap - 1);
        while (pairs[j].key) j = (j + 1) & (cap - 1);
        pairs[j] = v->pairs[i];
    }
    es__free(v->alloc, v->pairs);
    v->pairs = pairs;
    v->pair_mask = cap - 1;
    return ES_OK;
}

/* Records that (left, right) merges into result; an earlier merge of the same pair wins. */
static es_status pair_insert(builder *b, int32_t left, int32_t right, int32_t result, uint32_t prio) {
    es__vocab *v = b->v;
    if (!v->pairs || (b->n_pairs + 1) * 2 > v->pair_mask + 1) ES_TRY(pair_table_grow(b));
    uint64_t key = es__pair_key(left, right);
    for (uint32_t i = (uint32_t)es__hash_mix(key) & v->pair_mask;; i = (i + 1) & v->pair_mask) {
        es__pair *p = &v->pairs[i];
        if (p->key == key) return ES_OK;
        if (!p->key) {
            p->key = key;
            p->result = result;
            p->prio = prio;
            b->n_pairs++;
            return ES_OK;
        }
    }
}

static es_status adj_insert(builder *b, uint32_t a, uint32_t c) {
    es__vocab *v = b->v;
    if (!v->adj || (b->n_adj + 1) * 2 > v->adj_mask + 1) {
        uint32_t cap = v->adj ? (v->adj_mask + 1) * 2 : 1024;
        uint64_t *adj = es__calloc(v->alloc, cap, sizeof *adj);
        if (!adj) return oom(b, "the adjacency set");
        for (uint32_t i = 0; v->adj && i <= v->adj_mask; i++) {
            if (!v->adj[i]) continue;
            uint32_t j = (uint32_t)es__hash_mix(v->adj[i]) & (cap - 1);
            while (adj[j]) j = (j + 1) & (cap - 1);
            adj[j] = v->adj[i];
        }
        es__free(v->alloc, v->adj);
        v->adj = adj;
        v->adj_mask = cap - 1;
    }
    uint64_t key = es__adj_key(a, c);
    for (uint32_t i = (uint32_t)es__hash_mix(key) & v->adj_mask;; i = (i + 1) & v->adj_mask) {
        if (v->adj[i] == key) return ES_OK;
        if (!v->adj[i]) {
            v->adj[i] = key;
            b->n_adj++;
            return ES_OK;
        }
    }
}

/* ---- Validation of the described values. */

static es_status parse_type(builder *b, const es__vocab_desc *d) {
    es__vocab *v = b->v;
    if (!d->model.ptr || str_eq(d->model, "none") || str_eq(d->model, "no_vocab")) {
        v->type = ES_TOKENIZER_NONE;
    } else if (str_eq(d->model, "llama")) {
        v->type = ES_TOKENIZER_LLAMA;
    } else if (str_eq(d->model, "gpt2")) {
        v->type = ES_TOKENIZER_GPT2;
    } else {
        return es__fail(b->err, ES_ERR_UNSUPPORTED,
                        "tokenizer.ggml.model '%.*s' is not supported (edgespec reads 'llama' and 'gpt2')",
                        (int)ES__MIN(d->model.len, MAX_SHOWN), d->model.ptr);
    }
    es__str pre = d->pre.ptr ? d->pre : (es__str){"default", 7};
    v->pre_name = es__strndup(v->alloc, pre.ptr, (size_t)ES__MIN(pre.len, 256));
    if (!v->pre_name) return oom(b, "the pre-tokenizer name");
    v->pretok = ES__PRETOK_NONE;
    if (v->type != ES_TOKENIZER_GPT2) return ES_OK;
    es__pretok_info info;
    if (!es__pretok_lookup(pre.ptr, pre.len, &info))
        return es__fail(b->err, ES_ERR_UNSUPPORTED,
                        "tokenizer.ggml.pre '%.*s' is not supported for gpt2 vocabularies (edgespec has the "
                        "splits of gpt-2, llama3, qwen2, deepseek-llm, deepseek-coder, deepseek-v3, falcon, "
                        "starcoder, poro-chat, viking, tekken, gpt-4o and their aliases: docs/formats.md)",
                        (int)ES__MIN(pre.len, MAX_SHOWN), pre.ptr);
    v->pretok = info.kind;
    v->ignore_merges = info.ignore_merges;
    v->pretok_add_bos = info.add_bos;
    return ES_OK;
}

static es_status check_arrays(builder *b, const es__vocab_desc *d) {
    if (!d->tokens)
        return es__fail(b->err, ES_ERR_MODEL, "tokenizer.ggml.tokens is missing (tokenizer.ggml.model is '%s')",
                        b->v->type == ES_TOKENIZER_LLAMA ? "llama" : "gpt2");
    if (d->n_tokens == 0) return es__fail(b->err, ES_ERR_MODEL, "tokenizer.ggml.tokens is empty");
    if (d->n_tokens >= INT32_MAX / 4)
        return es__fail(b->err, ES_ERR_UNSUPPORTED, "tokenizer.ggml.tokens has %llu entries, more than edgespec supports",
                        (unsigned long long)d->n_tokens);
    if (d->scores && d->n_scores != d->n_tokens)
        return es__fail(b->err, ES_ERR_FORMAT, "tokenizer.ggml.scores has %llu entries, expected %llu (one per token)",
                        (unsigned long long)d->n_scores, (unsigned long long)d->n_tokens);
    if (d->types && d->n_types != d->n_tokens)
        return es__fail(b->err, ES_ERR_FORMAT,
                        "tokenizer.ggml.token_type has %llu entries, expected %llu (one per token)",
                        (unsigned long long)d->n_types, (unsigned long long)d->n_tokens);
    for (uint64_t i = 0; d->scores && i < d->n_scores; i++)
        if (isnan(read_f32(d->scores, i)))
            return es__fail(b->err, ES_ERR_FORMAT, "tokenizer.ggml.scores[%llu] is NaN", (unsigned long long)i);
    for (uint64_t i = 0; d->types && i < d->n_types; i++) {
        int32_t t = read_i32(d->types, i);
        if (t < 0 || t >= ES__TOK_TYPE_COUNT)
            return es__fail(b->err, ES_ERR_FORMAT, "tokenizer.ggml.token_type[%llu] = %d is not a token type (0..6)",
                            (unsigned long long)i, t);
    }
    if (b->v->type == ES_TOKENIZER_GPT2 && !d->merges)
        return es__fail(b->err, ES_ERR_MODEL, "tokenizer.ggml.merges is missing (required by gpt2 vocabularies)");
    if (d->n_merges >= UINT32_MAX / 4)
        return es__fail(b->err, ES_ERR_UNSUPPORTED, "tokenizer.ggml.merges has %llu entries, more than edgespec supports",
                        (unsigned long long)d->n_merges);
    return ES_OK;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Adds every token's text, checks it, and makes the canonical ones findable. */
static es_status add_tokens(builder *b, const es__vocab_desc *d) {
    es__vocab *v = b->v;
    v->n_tokens = (int32_t)d->n_tokens;
    v->scores = es__calloc(v->alloc, d->n_tokens, sizeof *v->scores);
    v->types = es__calloc(v->alloc, d->n_tokens, sizeof *v->types);
    if (!v->scores || !v->types) return oom(b, "the token scores");
    v->text_off = es__calloc(v->alloc, 1024, sizeof *v->text_off);
    v->text_hash = es__calloc(v->alloc, 1024, sizeof *v->text_hash);
    v->text = es__malloc(v->alloc, 4096); /* never NULL, even when every token is empty */
    if (!v->text_off || !v->text_hash || !v->text) return oom(b, "the token offsets");
    b->sid_cap = 1024;
    b->text_cap = 4096;
    for (uint64_t i = 0; i < d->n_tokens; i++) {
        es__str t = d->tokens[i];
        size_t bad;
        if (!es__utf8_valid((const uint8_t *)t.ptr, (size_t)t.len, &bad))
            return es__fail(b->err, ES_ERR_FORMAT, "tokenizer.ggml.tokens[%llu]: invalid UTF-8 at byte %zu of %llu",
                            (unsigned long long)i, bad, (unsigned long long)t.len);
        v->scores[i] = d->scores ? read_f32(d->scores, i) : 0.0f;
        v->types[i] = (uint8_t)(d->types ? read_i32(d->types, i) : ES__TOK_NORMAL);
        if (v->type == ES_TOKENIZER_LLAMA && v->types[i] == ES__TOK_BYTE &&
            (t.len != 6 || memcmp(t.ptr, "<0x", 3) != 0 || t.ptr[5] != '>' || hex_digit(t.ptr[3]) < 0 ||
             hex_digit(t.ptr[4]) < 0))
            return es__fail(b->err, ES_ERR_FORMAT, "tokenizer.ggml.tokens[%llu]: byte token '%.*s' is not of the form <0xXX>",
                            (unsigned long long)i, (int)ES__MIN(t.len, MAX_SHOWN), t.ptr);
        int32_t sid;
        ES_TRY(add_string(b, t.ptr, (size_t)t.len, &sid));
        if (t.len) ES_TRY(str_table_insert(b, sid));
    }
    if (!v->str_slots) ES_TRY(str_table_grow(b)); /* every token empty: keep lookups valid */
    return ES_OK;
}

const char *const es__special_keys[ES__SPECIAL_COUNT] = {
    [ES__SPECIAL_BOS] = "tokenizer.ggml.bos_token_id",
    [ES__SPECIAL_EOS] = "tokenizer.ggml.eos_token_id",
    [ES__SPECIAL_UNK] = "tokenizer.ggml.unknown_token_id",
    [ES__SPECIAL_SEP] = "tokenizer.ggml.seperator_token_id", /* sic: llama.cpp's spelling */
    [ES__SPECIAL_PAD] = "tokenizer.ggml.padding_token_id",
    [ES__SPECIAL_EOT] = "tokenizer.ggml.eot_token_id",
    [ES__SPECIAL_EOM] = "tokenizer.ggml.eom_token_id",
};

static es_status check_specials(builder *b, const es__vocab_desc *d) {
    es__vocab *v = b->v;
    for (int i = 0; i < ES__SPECIAL_COUNT; i++) {
        int64_t id = d->special[i];
        if (id < -1 || id >= v->n_tokens)
            return es__fail(b->err, ES_ERR_MODEL, "%s = %lld is outside the vocabulary [0, %d)", es__special_keys[i],
                            (long long)id, v->n_tokens);
        v->special[i] = (int32_t)id;
    }
    int32_t bos = v->special[ES__SPECIAL_BOS], eos = v->special[ES__SPECIAL_EOS];
    if (d->add_bos == 1 && bos < 0)
        return es__fail(b->err, ES_ERR_MODEL, "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is absent");
    if (d->add_eos == 1 && eos < 0)
        return es__fail(b->err, ES_ERR_MODEL, "tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is absent");
    /* Defaults as llama.cpp has them: SentencePiece adds BOS and a space prefix, byte-level BPE
     * neither, except that Llama 3 and Tekken add BOS. */
    bool llama = v->type == ES_TOKENIZER_LLAMA;
    v->add_bos = d->add_bos >= 0 ? d->add_bos == 1 : bos >= 0 && (llama || v->pretok_add_bos);
    v->add_eos = d->add_eos == 1;
    v->add_space_prefix = d->add_space_prefix >= 0 ? d->add_space_prefix == 1 : llama;
    return ES_OK;
}

/* ---- Merge tables. */

/* SentencePiece: every split of a token into two strings that can be symbols (tokens, or single
 * characters) is a merge with the token's score. As in SentencePiece, control, unknown and byte
 * tokens are never the result of a merge. Two adjacent characters that appear together in no
 * token can never be merged across, which lets the encoder cut its input there. */
static es_status build_spm_pairs(builder *b) {
    es__vocab *v = b->v;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *t = v->text + v->text_off[id];
        size_t n = v->text_off[id + 1] - v->text_off[id];
        if (n == 0 || es__vocab_lookup(v, t, n) != id) continue; /* empty, or a shadowed duplicate */
        if (!es__spm_piece(v, id)) continue;
        uint32_t prio = es__score_prio(v->scores[id]), prev_cp = 0;
        size_t first_len = 0;
        for (size_t off = 0; off < n;) {
            uint32_t cp;
            size_t len = es__utf8_decode((const uint8_t *)t + off, n - off, &cp);
            if (off > 0) ES_TRY(adj_insert(b, prev_cp, cp));
            else first_len = len;
            prev_cp = cp;
            off += len;
            if (off >= n) break;
            /* split at off: left t[0..off), right t[off..n) */
            int32_t left = es__vocab_lookup(v, t, off), right = es__vocab_lookup(v, t + off, n - off);
            char ch[4]; /* intern may move v->text: single characters are copied first */
            if (left < 0 && off == first_len) {
                memcpy(ch, t, off);
                ES_TRY(intern(b, ch, off, &left));
            }
            uint32_t cp2;
            if (right < 0 && es__utf8_decode((const uint8_t *)t + off, n - off, &cp2) == n - off) {
                memcpy(ch, t + off, n - off);
                ES_TRY(intern(b, ch, n - off, &right));
            }
            t = v->text + v->text_off[id];
            if (left >= 0 && right >= 0) ES_TRY(pair_insert(b, left, right, id, prio));
        }
    }
    return v->pairs ? ES_OK : pair_table_grow(b); /* no merges: keep lookups valid */
}

/* Byte-level BPE: merges line i, "left right", has rank i. */
static es_status build_bpe_pairs(builder *b, const es__vocab_desc *d) {
    es__vocab *v = b->v;
    char *cat = NULL;
    size_t cat_cap = 0;
    es_status s = ES_OK;
    for (uint64_t i = 0; i < d->n_merges && s == ES_OK; i++) {
        es__str m = d->merges[i];
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', (size_t)m.len - 1) : NULL;
        size_t bad;
        if (!sp || sp + 1 == m.ptr + m.len) {
            s = es__fail(b->err, ES_ERR_FORMAT,
                         "tokenizer.ggml.merges[%llu]: '%.*s' is not two strings separated by a space",
                         (unsigned long long)i, (int)ES__MIN(m.len, MAX_SHOWN), m.ptr);
            break;
        }
        if (!es__utf8_valid((const uint8_t *)m.ptr, (size_t)m.len, &bad)) {
            s = es__fail(b->err, ES_ERR_FORMAT, "tokenizer.ggml.merges[%llu]: invalid UTF-8 at byte %zu",
                         (unsigned long long)i, bad);
            break;
        }
        size_t nl = (size_t)(sp - m.ptr), nr = (size_t)m.len - nl - 1;
        if (nl + nr > cat_cap) {
            size_t cap = ES__MAX(nl + nr, 2 * cat_cap);
            char *c = es__realloc(v->alloc, cat, cap);
            if (!c) {
                s = oom(b, "the merges");
                break;
            }
            cat = c;
            cat_cap = cap;
        }
        memcpy(cat, m.ptr, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t left, right, result;
        if ((s = intern(b, m.ptr, nl, &left)) != ES_OK) break;
        if ((s = intern(b, sp + 1, nr, &right)) != ES_OK) break;
        if ((s = intern(b, cat, nl + nr, &result)) != ES_OK) break;
        s = pair_insert(b, left, right, result, (uint32_t)i);
    }
    es__free(v->alloc, cat);
    if (s == ES_OK && !v->pairs) s = pair_table_grow(b); /* no merges: keep lookups valid */
    return s;
}

/* ---- Decoding tables, byte tables, special tokens. */

/* Writes the decoded text of token id to out and returns its length: never more than the token's
 * text, or 3 bytes (U+FFFD for the unknown token), which is what build_pieces allows for. */
static size_t decode_token(const es__vocab *v, int32_t id, char *out) {
    const char *t = v->text + v->text_off[id];
    size_t n = v->text_off[id + 1] - v->text_off[id], w = 0;
    switch (v->types[id]) {
    case ES__TOK_CONTROL:
    case ES__TOK_UNUSED: return 0;
    case ES__TOK_UNKNOWN: memcpy(out, "\xEF\xBF\xBD", 3); return 3;
    case ES__TOK_USER_DEFINED: memcpy(out, t, n); return n;
    case ES__TOK_BYTE:
        if (v->type == ES_TOKENIZER_LLAMA) {
            out[0] = (char)(hex_digit(t[3]) * 16 + hex_digit(t[4]));
            return 1;
        }
        break;
    default: break;
    }
    for (size_t off = 0; off < n;) {
        uint32_t cp;
        size_t len = es__utf8_decode((const uint8_t *)t + off, n - off, &cp);
        if (v->type == ES_TOKENIZER_LLAMA && cp == 0x2581) {
            out[w++] = ' ';
        } else if (v->type == ES_TOKENIZER_GPT2 && es__cp_to_byte(cp) >= 0) {
            out[w++] = (char)es__cp_to_byte(cp);
        } else {
            memcpy(out + w, t + off, len);
            w += len;
        }
        off += len;
    }
    return w;
}

static es_status build_pieces(builder *b) {
    es__vocab *v = b->v;
    size_t total = (size_t)v->text_off[v->n_tokens] + 3 * (size_t)v->n_tokens;
    if (total > UINT32_MAX)
        return es__fail(b->err, ES_ERR_UNSUPPORTED, "tokenizer: decoded token texts exceed 4 GiB");
    v->piece = es__malloc(v->alloc, total);
    v->piece_off = es__calloc(v->alloc, (size_t)v->n_tokens + 1, sizeof *v->piece_off);
    if (!v->piece || !v->piece_off) return oom(b, "the decoded pieces");
    size_t used = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        used += decode_token(v, id, v->piece + used);
        v->piece_off[id + 1] = (uint32_t)used;
    }
    return ES_OK;
}

static void build_byte_tables(es__vocab *v) {
    for (int c = 0; c < 256; c++) {
        v->byte_token[c] = v->byte_sid[c] = -1;
        if (v->type == ES_TOKENIZER_LLAMA) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", c);
            int32_t id = es__vocab_lookup(v, name, 6);
            v->byte_token[c] = id < v->n_tokens ? id : -1;
            char ch = (char)c;
            if (c < 128) v->ascii_sid[c] = c == ' ' ? es__vocab_lookup(v, "\xE2\x96\x81", 3) : es__vocab_lookup(v, &ch, 1);
        } else if (v->type == ES_TOKENIZER_GPT2) {
            uint8_t u[4];
            size_t n = es__utf8_encode(es__byte_to_cp((uint8_t)c), u);
            int32_t sid = es__vocab_lookup(v, (const char *)u, n);
            v->byte_sid[c] = sid;
            v->byte_token[c] = sid < v->n_tokens ? sid : -1;
        }
    }
}

typedef struct special_entry {
    uint8_t first;
    uint32_t len;
    int32_t id;
} special_entry;

static int special_cmp(const void *pa, const void *pb) {
    const special_entry *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static es_status build_specials(builder *b) {
    es__vocab *v = b->v;
    int32_t n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t t = v->types[id];
        if (t == ES__TOK_CONTROL || t == ES__TOK_UNKNOWN || t == ES__TOK_USER_DEFINED) n++;
    }
    special_entry *e = es__calloc(v->alloc, (size_t)n + 1, sizeof *e);
    v->specials = es__calloc(v->alloc, (size_t)n + 1, sizeof *v->specials);
    if (!e || !v->specials) {
        es__free(v->alloc, e);
        return oom(b, "the special tokens");
    }
    int32_t k = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t t = v->types[id];
        if (t != ES__TOK_CONTROL && t != ES__TOK_UNKNOWN && t != ES__TOK_USER_DEFINED) continue;
        const char *s = v->text + v->text_off[id];
        uint32_t len = v->text_off[id + 1] - v->text_off[id];
        if (len == 0 || es__vocab_lookup(v, s, len) != id) continue;
        e[k++] = (special_entry){(uint8_t)s[0], len, id};
    }
    qsort(e, (size_t)k, sizeof *e, special_cmp);
    for (int32_t i = 0; i < k; i++) v->specials[i] = e[i].id;
    v->n_specials = k;
    for (int c = 0, i = 0; c <= 256; c++) {
        while (i < k && e[i].first < c) i++;
        v->special_start[c] = i;
    }
    es__free(v->alloc, e);
    return ES_OK;
}

static void add_eog(es__vocab *v, int32_t id) {
    if (id < 0 || v->n_eog == (int32_t)ES__ARRAY_LEN(v->eog)) return;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return;
    v->eog[v->n_eog++] = id;
}

/* End of generation: EOS, EOT, EOM, and control tokens that chat formats end a turn with. */
static void build_eog(es__vocab *v) {
    static const char *const names[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>"};
    add_eog(v, v->special[ES__SPECIAL_EOS]);
    add_eog(v, v->special[ES__SPECIAL_EOT]);
    add_eog(v, v->special[ES__SPECIAL_EOM]);
    for (size_t i = 0; i < ES__ARRAY_LEN(names); i++) {
        int32_t id = es__vocab_lookup(v, names[i], strlen(names[i]));
        if (id >= 0 && id < v->n_tokens && v->types[id] == ES__TOK_CONTROL) add_eog(v, id);
    }
}

es_status es__vocab_build(const es__vocab_desc *d, const es_allocator *alloc, es__err *err, es__vocab **out) {
    *out = NULL;
    es__vocab *v = es__calloc(alloc, 1, sizeof *v);
    if (!v) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    if (alloc) {
        v->alloc_copy = *alloc;
        v->alloc = &v->alloc_copy;
    }
    for (int i = 0; i < ES__SPECIAL_COUNT; i++) v->special[i] = -1;
    builder b = {.v = v, .err = err};
    es_status s = parse_type(&b, d);
    if (s == ES_OK && v->type != ES_TOKENIZER_NONE) {
        if (s == ES_OK) s = check_arrays(&b, d);
        if (s == ES_OK) s = add_tokens(&b, d);
        if (s == ES_OK) s = check_specials(&b, d);
        if (s == ES_OK) s = v->type == ES_TOKENIZER_LLAMA ? build_spm_pairs(&b) : build_bpe_pairs(&b, d);
        if (s == ES_OK) s = build_pieces(&b);
        if (s == ES_OK) s = build_specials(&b);
        if (s == ES_OK) {
            build_byte_tables(v);
            build_eog(v);
        }
    }
    if (s != ES_OK) {
        es__vocab_free(v);
        return s;
    }
    *out = v;
    return ES_OK;
}

void es__vocab_free(es__vocab *v) {
    if (!v) return;
    const es_allocator *a = v->alloc;
    es_allocator copy;
    if (a) {
        copy = *a;
        a = &copy;
    }
    es__free(a, v->pre_name);
    es__free(a, v->text);
    es__free(a, v->text_off);
    es__free(a, v->text_hash);
    es__free(a, v->str_slots);
    es__free(a, v->pairs);
    es__free(a, v->adj);
    es__free(a, v->scores);
    es__free(a, v->types);
    es__free(a, v->piece);
    es__free(a, v->piece_off);
    es__free(a, v->specials);
    es__free(a, v);
}

/* ---- Accessors. */

int32_t es__vocab_n_tokens(const es__vocab *v) { return v->n_tokens; }
es_tokenizer_type es__vocab_type(const es__vocab *v) { return v->type; }
const char *es__vocab_pre(const es__vocab *v) { return v->pre_name ? v->pre_name : "default"; }
int32_t es__vocab_bos(const es__vocab *v) { return v->special[ES__SPECIAL_BOS]; }
int32_t es__vocab_eos(const es__vocab *v) { return v->special[ES__SPECIAL_EOS]; }

const char *es__vocab_token_text(const es__vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_tokens) return NULL;
    *len = v->text_off[id + 1] - v->text_off[id];
    return v->text + v->text_off[id];
}
