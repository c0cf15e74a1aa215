/* tokenizer.c: encoding and decoding entry points, internal (es__) and public (es_). Encoding cuts
 * special tokens out of the text (leftmost, longest first), adds BOS/EOS, and hands each piece of
 * plain text to the vocabulary's encoder; decoding concatenates the tokens' stored pieces. Output
 * is built in per-call scratch and copied out only when it fits, so a failed call leaves the
 * caller's buffer untouched. Building vocabularies is tokenizer_vocab.c's business. */
#include "model.h"
#include "tokenizer_impl.h"

static void scratch_free(es__tok_scratch *s) {
    es__free(s->alloc, s->out);
    es__free(s->alloc, s->sym);
    es__free(s->alloc, s->heap);
    es__free(s->alloc, s->buf);
}

/* The special token that starts at text[pos], longest first, or -1. Control and unknown tokens
 * count only when parse_special; user-defined tokens always (as llama.cpp and Hugging Face treat
 * added tokens). */
static int32_t match_special(const es__vocab *v, const char *text, size_t len, size_t pos, bool parse_special,
                             size_t *mlen) {
    uint8_t c = (uint8_t)text[pos];
    for (int32_t i = v->special_start[c]; i < v->special_start[c + 1]; i++) {
        int32_t id = v->specials[i];
        if (!parse_special && v->types[id] != ES__TOK_USER_DEFINED) continue;
        size_t n = v->text_off[id + 1] - v->text_off[id];
        if (n <= len - pos && memcmp(text + pos, v->text + v->text_off[id], n) == 0) {
            *mlen = n;
            return id;
        }
    }
    return -1;
}

/* Plain text at the start of the input or right after a special token gets the space prefix. */
static es_status encode_plain(const es__vocab *v, const char *text, size_t len, bool after_special,
                              es__tok_scratch *s, es__err *err) {
    bool prefix = v->add_space_prefix && after_special;
    if (v->type == ES_TOKENIZER_LLAMA) return es__spm_encode(v, text, len, prefix, s, err);
    if (!prefix || text[0] == ' ') return es__bpe_encode(v, text, len, s, err);
    /* byte-level BPE adds the prefix only where the text does not already start with a space */
    char *tmp = es__malloc(v->alloc, len + 1);
    if (!tmp) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    tmp[0] = ' ';
    memcpy(tmp + 1, text, len);
    es_status st = es__bpe_encode(v, tmp, len + 1, s, err);
    es__free(v->alloc, tmp);
    return st;
}

static es_status encode_all(const es__vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                            es__tok_scratch *s, es__err *err) {
    if (add_special && v->add_bos) ES_TRY(es__scratch_push(s, v->special[ES__SPECIAL_BOS], err));
    bool after_special = true;
    size_t start = 0;
    for (size_t pos = 0; pos < len;) {
        size_t mlen;
        int32_t id = v->n_specials ? match_special(v, text, len, pos, parse_special, &mlen) : -1;
        if (id < 0) {
            pos++;
            continue;
        }
        if (pos > start) ES_TRY(encode_plain(v, text + start, pos - start, after_special, s, err));
        ES_TRY(es__scratch_push(s, id, err));
        after_special = true;
        pos += mlen;
        start = pos;
    }
    if (start < len) ES_TRY(encode_plain(v, text + start, len - start, after_special, s, err));
    if (add_special && v->add_eos) ES_TRY(es__scratch_push(s, v->special[ES__SPECIAL_EOS], err));
    return ES_OK;
}

es_status es__tokenize(const es__vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                       int32_t *tokens, size_t cap, size_t *n_tokens, es__err *err) {
    ES_RETURN_IF(!v || !n_tokens || (!text && len) || (!tokens && cap), err, ES_ERR_INVALID_ARGUMENT,
                 "es_tokenize: NULL %s", !v ? "vocabulary" : !n_tokens ? "n_tokens" : !text ? "text" : "tokens");
    ES_RETURN_IF(v->type == ES_TOKENIZER_NONE, err, ES_ERR_INVALID_ARGUMENT,
                 "es_tokenize: the model has no tokenizer (tokenizer.ggml.model absent or 'none')");
    ES_RETURN_IF(len >= UINT32_MAX, err, ES_ERR_INVALID_ARGUMENT,
                 "es_tokenize: text of %zu bytes is longer than the 4 GiB edgespec encodes in one call", len);
    es__tok_scratch s = {.alloc = v->alloc};
    es_status st = encode_all(v, text, len, add_special, parse_special, &s, err);
    if (st == ES_OK) {
        *n_tokens = s.n_out;
        if (s.n_out > cap)
            st = es__fail(err, ES_ERR_BUFFER_TOO_SMALL, "es_tokenize: the text needs %zu tokens, the buffer holds %zu",
                          s.n_out, cap);
        else if (s.n_out)
            memcpy(tokens, s.out, s.n_out * sizeof *tokens);
    }
    scratch_free(&s);
    return st;
}

/* The bytes token id decodes to. */
static const char *piece_of(const es__vocab *v, int32_t id, bool render_special, size_t *n) {
    uint8_t t = v->types[id];
    if (render_special && (t == ES__TOK_CONTROL || t == ES__TOK_UNKNOWN || t == ES__TOK_UNUSED)) {
        *n = v->text_off[id + 1] - v->text_off[id];
        return v->text + v->text_off[id];
    }
    *n = v->piece_off[id + 1] - v->piece_off[id];
    return v->piece + v->piece_off[id];
}

static es_status check_token(const es__vocab *v, int32_t id, es__err *err) {
    ES_RETURN_IF(id < 0 || id >= v->n_tokens, err, ES_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary [0, %d)",
                 id, v->n_tokens);
    return ES_OK;
}

es_status es__token_to_piece(const es__vocab *v, int32_t token, bool render_special, char *buf, size_t buf_size,
                             size_t *len, es__err *err) {
    ES_RETURN_IF(!v || !len || (!buf && buf_size), err, ES_ERR_INVALID_ARGUMENT, "es_token_to_piece: NULL %s",
                 !v ? "vocabulary" : !len ? "len" : "buf");
    ES_TRY(check_token(v, token, err));
    size_t n;
    const char *p = piece_of(v, token, render_special, &n);
    *len = n;
    ES_RETURN_IF(n > buf_size, err, ES_ERR_BUFFER_TOO_SMALL, "es_token_to_piece: token %d needs %zu bytes, the buffer holds %zu",
                 token, n, buf_size);
    if (n) memcpy(buf, p, n);
    return ES_OK;
}

es_status es__detokenize(const es__vocab *v, const int32_t *tokens, size_t n_tokens, bool remove_leading_space,
                         bool render_special, char *buf, size_t buf_size, size_t *len, es__err *err) {
    ES_RETURN_IF(!v || !len || (!tokens && n_tokens) || (!buf && buf_size), err, ES_ERR_INVALID_ARGUMENT,
                 "es_detokenize: NULL %s", !v ? "vocabulary" : !len ? "len" : !tokens ? "tokens" : "buf");
    /* first pass: check and measure; the leading space goes with the first non-empty piece */
    size_t total = 0, skip_token = SIZE_MAX;
    bool first = remove_leading_space && v->add_space_prefix;
    for (size_t i = 0; i < n_tokens; i++) {
        ES_TRY(check_token(v, tokens[i], err));
        size_t n;
        const char *p = piece_of(v, tokens[i], render_special, &n);
        if (first && n > 0) {
            first = false;
            if (p[0] == ' ') {
                skip_token = i;
                n--;
            }
        }
        ES_RETURN_IF(n > SIZE_MAX - 1 - total, err, ES_ERR_INVALID_ARGUMENT, "es_detokenize: output too long");
        total += n;
    }
    *len = total;
    ES_RETURN_IF(total > buf_size, err, ES_ERR_BUFFER_TOO_SMALL, "es_detokenize: the text needs %zu bytes, the buffer holds %zu",
                 total, buf_size);
    size_t w = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        size_t n;
        const char *p = piece_of(v, tokens[i], render_special, &n);
        if (i == skip_token) p++, n--;
        if (n) memcpy(buf + w, p, n);
        w += n;
    }
    if (w < buf_size) buf[w] = '\0';
    return ES_OK;
}

bool es__token_is_eog(const es__vocab *v, int32_t token) {
    for (int32_t i = 0; v && i < v->n_eog; i++)
        if (v->eog[i] == token) return true;
    return false;
}

/* ---- Public API: the model's vocabulary; errors go to the thread's last-error slot only, since
 * the model is shared and immutable. */

static es_status model_vocab(const es_model *model, const char *fn, const es__vocab **v) {
    ES_RETURN_IF(!model, NULL, ES_ERR_INVALID_ARGUMENT, "%s: NULL model", fn);
    ES_RETURN_IF(!model->vocab, NULL, ES_ERR_INVALID_ARGUMENT, "%s: the model has no vocabulary", fn);
    *v = model->vocab;
    return ES_OK;
}

es_status es_tokenize(const es_model *model, const char *text, size_t len, bool add_special, bool parse_special,
                      int32_t *tokens, size_t cap, size_t *n_tokens) {
    const es__vocab *v = NULL;
    ES_TRY(model_vocab(model, "es_tokenize", &v));
    return es__tokenize(v, text, len, add_special, parse_special, tokens, cap, n_tokens, NULL);
}

es_status es_token_to_piece(const es_model *model, int32_t token, bool render_special, char *buf, size_t buf_size,
                            size_t *len) {
    const es__vocab *v = NULL;
    ES_TRY(model_vocab(model, "es_token_to_piece", &v));
    return es__token_to_piece(v, token, render_special, buf, buf_size, len, NULL);
}

es_status es_detokenize(const es_model *model, const int32_t *tokens, size_t n_tokens, bool remove_leading_space,
                        bool render_special, char *buf, size_t buf_size, size_t *len) {
    const es__vocab *v = NULL;
    ES_TRY(model_vocab(model, "es_detokenize", &v));
    return es__detokenize(v, tokens, n_tokens, remove_leading_space, render_special, buf, buf_size, len, NULL);
}

bool es_token_is_eog(const es_model *model, int32_t token) {
    return model && model->vocab && es__token_is_eog(model->vocab, token);
}
