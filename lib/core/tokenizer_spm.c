/* tokenizer_spm.c: SentencePiece BPE (tokenizer.ggml.model "llama") as llama.cpp runs it: spaces
 * become U+2581, every character is a symbol, adjacent symbols merge into the token of highest
 * score, the leftmost on ties, and a character left that is no piece (normal, user-defined or
 * unused token) falls back to its <0xXX> byte tokens. Invalid UTF-8 bytes are characters of their own and always fall back to bytes, so
 * every input is encodable and decodes back to itself (U+2581 in the input decodes as a space).
 * The text is cut where two adjacent characters appear together in no token: no merge can cross
 * such a point, so the pieces encode independently to exactly what the whole would give, in
 * scratch memory bounded by the longest piece. Special tokens are tokenizer.c's business. */
#include "tokenizer_impl.h"
#include "unicode.h"

#define PREFIX_SRC UINT32_MAX /* src of the space prefix symbol, which is in no source text */
#define SPACE_MARK 0x2581u    /* U+2581 LOWER ONE EIGHTH BLOCK */

static bool adjacent_in_vocab(const es__vocab *v, uint32_t a, uint32_t b) {
    if (!v->adj) return false;
    uint64_t key = es__adj_key(a, b);
    for (uint32_t i = (uint32_t)es__hash_mix(key) & v->adj_mask;; i = (i + 1) & v->adj_mask) {
        if (v->adj[i] == key) return true;
        if (!v->adj[i]) return false;
    }
}

/* A character that is no token: its byte tokens, else one unknown token. */
static es_status fallback(const es__vocab *v, const uint8_t *c, size_t n, es__tok_scratch *s, es__err *err) {
    bool bytes = true;
    for (size_t i = 0; i < n; i++) bytes = bytes && v->byte_token[c[i]] >= 0;
    if (bytes) {
        for (size_t i = 0; i < n; i++) ES_TRY(es__scratch_push(s, v->byte_token[c[i]], err));
        return ES_OK;
    }
    int32_t unk = v->special[ES__SPECIAL_UNK];
    if (unk < 0)
        return es__fail(err, ES_ERR_INVALID_ARGUMENT,
                        "tokenizer: character 0x%02X... has no token, no byte tokens and the vocabulary has no "
                        "unknown token", c[0]);
    return es__scratch_push(s, unk, err);
}

static es_status encode_piece(const es__vocab *v, const uint8_t *t, int32_t n, es__tok_scratch *s, es__err *err) {
    static const uint8_t mark[3] = {0xE2, 0x96, 0x81};
    ES_TRY(es__merge_symbols(v, s, n, err));
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const es__sym *y = &s->sym[i];
        if (y->sid >= 0 && y->sid < v->n_tokens && es__spm_piece(v, y->sid)) {
            ES_TRY(es__scratch_push(s, y->sid, err));
        } else if (y->src == PREFIX_SRC || t[y->src] == ' ') {
            ES_TRY(fallback(v, mark, 3, s, err));
        } else {
            ES_TRY(fallback(v, t + y->src, y->len, s, err));
        }
    }
    return ES_OK;
}

es_status es__spm_encode(const es__vocab *v, const char *text, size_t len, bool space_prefix, es__tok_scratch *s,
                         es__err *err) {
    const uint8_t *t = (const uint8_t *)text;
    int32_t n = 0;
    uint32_t prev = 0;
    if (space_prefix) {
        ES_TRY(es__scratch_reserve_sym(s, 1, err));
        s->sym[n++] = (es__sym){v->ascii_sid[' '], 1, -1, -1, PREFIX_SRC, 3};
        prev = SPACE_MARK;
    }
    for (size_t pos = 0; pos < len;) {
        uint32_t cp;
        size_t cl = es__utf8_decode(t + pos, len - pos, &cp);
        if (cp == ' ') cp = SPACE_MARK;
        if (n > 0 && !adjacent_in_vocab(v, prev, cp)) {
            ES_TRY(encode_piece(v, t, n, s, err));
            n = 0;
        }
        int32_t sid;
        if (cp < 128)
            sid = v->ascii_sid[cp];
        else if (cp == SPACE_MARK && cl == 1)
            sid = v->ascii_sid[' '];
        else
            sid = cp >= ES__UTF8_BAD ? -1 : es__vocab_lookup(v, text + pos, cl);
        ES_TRY(es__scratch_reserve_sym(s, (size_t)n + 1, err));
        s->sym[n] = (es__sym){sid, 1, n - 1, -1, (uint32_t)pos, (uint32_t)cl};
        if (n > 0) s->sym[n - 1].next = n;
        n++;
        prev = cp;
        pos += cl;
    }
    if (n > 0) ES_TRY(encode_piece(v, t, n, s, err));
    return ES_OK;
}
