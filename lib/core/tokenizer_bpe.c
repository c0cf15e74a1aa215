/* tokenizer_bpe.c: byte-level BPE (tokenizer.ggml.model "gpt2"): the text is cut into words by the
 * pre-tokenizer, every byte of a word is a symbol (its printable stand-in from GPT-2's byte map is
 * what the vocabulary and merges are written in), and the merges are applied by rank. Every byte
 * sequence is encodable, valid UTF-8 or not, and decodes back to the same bytes. It does not
 * handle special tokens (tokenizer.c cuts them out first). */
#include "tokenizer_impl.h"
#include "unicode.h"

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the other 68 (0x00..0x20,
 * 0x7F..0xA0, 0xAD) map in order to U+0100.. U+0143. */
uint32_t es__byte_to_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 33 + 34; /* 0xAD */
}

int32_t es__cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE) ? (int32_t)cp : -1;
    if (cp < 0x100 + 33) return (int32_t)(cp - 0x100);
    if (cp < 0x100 + 33 + 34) return (int32_t)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 33 + 34) return 0xAD;
    return -1;
}

/* Emits the bytes of a symbol that is not a token: each byte's own token, else the unknown token. */
static es_status emit_bytes(const es__vocab *v, const uint8_t *w, size_t n, es__tok_scratch *s, es__err *err) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_token[w[i]];
        if (id < 0) id = v->special[ES__SPECIAL_UNK];
        if (id < 0)
            return es__fail(err, ES_ERR_INVALID_ARGUMENT,
                            "tokenizer: byte 0x%02X has no token and the vocabulary has no unknown token", w[i]);
        ES_TRY(es__scratch_push(s, id, err));
    }
    return ES_OK;
}

static es_status encode_word(const es__vocab *v, const uint8_t *w, size_t n, es__tok_scratch *s, es__err *err) {
    if (n == 1) {
        int32_t sid = v->byte_sid[w[0]];
        return sid >= 0 && sid < v->n_tokens ? es__scratch_push(s, sid, err) : emit_bytes(v, w, 1, s, err);
    }
    if (v->ignore_merges) {
        ES_TRY(es__scratch_reserve_buf(s, 2 * n, err));
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += es__utf8_encode(es__byte_to_cp(w[i]), (uint8_t *)s->buf + m);
        int32_t id = es__vocab_lookup(v, s->buf, m);
        if (id >= 0 && id < v->n_tokens) return es__scratch_push(s, id, err);
    }
    ES_TRY(es__scratch_reserve_sym(s, n, err));
    for (size_t i = 0; i < n; i++)
        s->sym[i] = (es__sym){v->byte_sid[w[i]], 1, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, (uint32_t)i, 1};
    ES_TRY(es__merge_symbols(v, s, (int32_t)n, err));
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const es__sym *y = &s->sym[i];
        if (y->sid >= 0 && y->sid < v->n_tokens)
            ES_TRY(es__scratch_push(s, y->sid, err));
        else
            ES_TRY(emit_bytes(v, w + y->src, y->len, s, err));
    }
    return ES_OK;
}

es_status es__bpe_encode(const es__vocab *v, const char *text, size_t len, es__tok_scratch *s, es__err *err) {
    const uint8_t *t = (const uint8_t *)text;
    es__pretok_iter it;
    es__pretok_begin(&it, v->pretok, t, len);
    for (size_t pos = 0, n; (n = es__pretok_next(&it)) > 0; pos += n) ES_TRY(encode_word(v, t + pos, n, s, err));
    return ES_OK;
}
