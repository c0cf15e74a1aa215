/* tokenizer_pretok.h: the matchers of the pre-tokenizer expressions (tokenizer_pretok_match.c), for
 * the splitting driver in tokenizer_pretok.c only. Each returns the length in bytes of its
 * expression's match at t[pos] (pos < end), seeing t[0..end) as the whole text (a lookahead or $
 * stops at end), or 0 when the expression does not match there. The expressions are listed at the
 * top of tokenizer_pretok.c. */
#ifndef ES_CORE_TOKENIZER_PRETOK_H
#define ES_CORE_TOKENIZER_PRETOK_H

#include <stddef.h>
#include <stdint.h>

size_t es__pm_gpt2(const uint8_t *t, size_t end, size_t pos);
size_t es__pm_llama3(const uint8_t *t, size_t end, size_t pos);
size_t es__pm_qwen2(const uint8_t *t, size_t end, size_t pos);
size_t es__pm_crlf(const uint8_t *t, size_t end, size_t pos);          /* [\r\n]                   */
size_t es__pm_ds_cased(const uint8_t *t, size_t end, size_t pos);      /* \s?[LC]+                 */
size_t es__pm_ds_punct(const uint8_t *t, size_t end, size_t pos);      /* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
size_t es__pm_ds_cjk(const uint8_t *t, size_t end, size_t pos);        /* [一-龥ࠀ-一가-퟿]+          */
size_t es__pm_num_run(const uint8_t *t, size_t end, size_t pos);       /* \p{N}+                   */
size_t es__pm_num1(const uint8_t *t, size_t end, size_t pos);          /* \p{N}                    */
size_t es__pm_num3(const uint8_t *t, size_t end, size_t pos);          /* \p{N}{1,3}               */
size_t es__pm_space_letters(const uint8_t *t, size_t end, size_t pos); /* \s?\p{L}+                */
size_t es__pm_space_punct(const uint8_t *t, size_t end, size_t pos);   /* \s?\p{P}+                */
size_t es__pm_ds3_kana(const uint8_t *t, size_t end, size_t pos);      /* [一-龥぀-ゟ゠-ヿ]+         */
size_t es__pm_ds3_main(const uint8_t *t, size_t end, size_t pos);      /* deepseek-v3's third      */
size_t es__pm_falcon_punct(const uint8_t *t, size_t end, size_t pos);  /* [\p{P}\$\+<=>\^~\|`]+    */
size_t es__pm_digits3(const uint8_t *t, size_t end, size_t pos);       /* [0-9][0-9][0-9]          */
size_t es__pm_poro(const uint8_t *t, size_t end, size_t pos);          /*  ?[^(\s|.,!?…。，、।۔،)]+ */
size_t es__pm_tekken(const uint8_t *t, size_t end, size_t pos);
size_t es__pm_gpt4o(const uint8_t *t, size_t end, size_t pos);

/* \s+$: the first match in [pos, end) is the whitespace run that ends the piece, if any: its length,
 * its start in *at; 0 = none. A finder rather than a matcher, which would rescan a run from every
 * character in it. */
size_t es__pf_ws_end(const uint8_t *t, size_t end, size_t pos, size_t *at);

#endif /* ES_CORE_TOKENIZER_PRETOK_H */
