/* tokenizer.h: vocabularies from GGUF tokenizer.ggml.* metadata and the two encoders edgespec
 * supports: "llama" (SentencePiece BPE by scores, byte fallback) and "gpt2" (byte-level BPE by
 * merge rank, with the GPT-2 or Llama-3 pre-tokenizer split). The public es_tokenize,
 * es_token_to_piece, es_detokenize and es_token_is_eog are implemented on top of these. */
#ifndef ES_CORE_TOKENIZER_H
#define ES_CORE_TOKENIZER_H

#include "common.h"
#include "gguf.h"

typedef struct es__vocab es__vocab;

/* Reads tokenizer.ggml.* from g. The vocab copies what it needs and does not reference g after. */
es_status es__vocab_load(const es__gguf *g, const es_allocator *alloc, es__err *err, es__vocab **out);
void es__vocab_free(es__vocab *v);

int32_t es__vocab_n_tokens(const es__vocab *v);
es_tokenizer_type es__vocab_type(const es__vocab *v);
const char *es__vocab_pre(const es__vocab *v); /* "default", "gpt-2", "llama3", ... */
int32_t es__vocab_bos(const es__vocab *v);     /* -1 if none */
int32_t es__vocab_eos(const es__vocab *v);
/* The stored text of token id (U+2581 or GPT-2's byte mapping still in it), or NULL when id is out
 * of range. Not NUL-terminated. */
const char *es__vocab_token_text(const es__vocab *v, int32_t id, size_t *len);

es_status es__tokenize(const es__vocab *v, const char *text, size_t len, bool add_special,
                       bool parse_special, int32_t *tokens, size_t cap, size_t *n_tokens, es__err *err);
es_status es__token_to_piece(const es__vocab *v, int32_t token, bool render_special, char *buf,
                             size_t buf_size, size_t *len, es__err *err);
es_status es__detokenize(const es__vocab *v, const int32_t *tokens, size_t n_tokens, bool remove_leading_space,
                         bool render_special, char *buf, size_t buf_size, size_t *len, es__err *err);
bool es__token_is_eog(const es__vocab *v, int32_t token);

#endif /* ES_CORE_TOKENIZER_H */
