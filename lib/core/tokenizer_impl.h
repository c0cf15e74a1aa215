/* tokenizer_impl.h: the vocabulary's internal layout, shared by the tokenizer_*.c files only.
 *
 * Every string the merge engines can meet gets a string id (sid): sids below n_tokens are token ids
 * (for a text that several tokens share, the last of them, as llama.cpp resolves it), higher sids
 * are "extra" strings that are not tokens (single characters inside SentencePiece tokens, parts and
 * results of BPE merges). Both encoders then work on sids only: a pair table maps two adjacent
 * sids to the sid they merge into and the merge's priority, so no string is built or hashed while
 * merging. Nothing here is mutable after es__vocab_build returns: encoders keep their scratch in
 * an es__tok_scratch of their own, which is what makes encoding thread-safe.
 */
#ifndef ES_CORE_TOKENIZER_IMPL_H
#define ES_CORE_TOKENIZER_IMPL_H

#include "tokenizer.h"

#include <string.h>

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    ES__TOK_UNDEFINED = 0,
    ES__TOK_NORMAL = 1,
    ES__TOK_UNKNOWN = 2,
    ES__TOK_CONTROL = 3,
    ES__TOK_USER_DEFINED = 4,
    ES__TOK_UNUSED = 5,
    ES__TOK_BYTE = 6,
    ES__TOK_TYPE_COUNT
};

/* Pre-tokenizer splits for byte-level BPE; their expressions are listed in tokenizer_pretok.c. */
typedef enum es__pretok {
    ES__PRETOK_NONE = 0, /* SentencePiece: no split */
    ES__PRETOK_GPT2,
    ES__PRETOK_LLAMA3,
    ES__PRETOK_QWEN2,
    ES__PRETOK_DEEPSEEK_LLM,
    ES__PRETOK_DEEPSEEK_CODER,
    ES__PRETOK_DEEPSEEK3,
    ES__PRETOK_FALCON,
    ES__PRETOK_STARCODER,
    ES__PRETOK_PORO,
    ES__PRETOK_VIKING,
    ES__PRETOK_TEKKEN,
    ES__PRETOK_GPT4O,
    ES__PRETOK_COUNT
} es__pretok;

/* What a tokenizer.ggml.pre name means: the split, and llama.cpp's defaults that go with it. */
typedef struct es__pretok_info {
    es__pretok kind;
    bool ignore_merges; /* a word that is a token is not merged (Llama 3, Tekken) */
    bool add_bos;       /* default of tokenizer.ggml.add_bos_token                */
} es__pretok_info;

/* Looks a name up; false when edgespec has no split of that name. */
bool es__pretok_lookup(const char *name, size_t len, es__pretok_info *out);

/* Cuts text into words, left to right: es__pretok_next gives the length in bytes of the next word,
 * 0 at the end. Words are never empty and tile the text. The iterator keeps the pieces of the
 * split's stages; it points into text, which must outlive it. */
#define ES__PRETOK_MAX_STAGES 6
typedef struct es__pretok_iter {
    es__pretok kind;
    const uint8_t *text;
    size_t len, pos;
    size_t end[ES__PRETOK_MAX_STAGES]; /* end of each stage's current piece */
} es__pretok_iter;

void es__pretok_begin(es__pretok_iter *it, es__pretok kind, const uint8_t *text, size_t len);
size_t es__pretok_next(es__pretok_iter *it);

/* Special token ids a vocabulary may name, and their keys (es__special_keys). */
enum {
    ES__SPECIAL_BOS,
    ES__SPECIAL_EOS,
    ES__SPECIAL_UNK,
    ES__SPECIAL_SEP,
    ES__SPECIAL_PAD,
    ES__SPECIAL_EOT,
    ES__SPECIAL_EOM,
    ES__SPECIAL_COUNT
};
extern const char *const es__special_keys[ES__SPECIAL_COUNT];

/* What es__vocab_build needs: the tokenizer.ggml.* values, as es__vocab_load reads them from a
 * GGUF file or as a test writes them. Arrays of numbers are little-endian and may be unaligned
 * (they point into the file). */
typedef struct es__vocab_desc {
    es__str model;              /* tokenizer.ggml.model; ptr NULL = absent                     */
    es__str pre;                /* tokenizer.ggml.pre; ptr NULL = absent ("default")           */
    const es__str *tokens;      /* [n_tokens] tokenizer.ggml.tokens; NULL = absent             */
    uint64_t n_tokens;
    const void *scores;         /* [n_scores] f32; NULL = absent (all 0)                       */
    uint64_t n_scores;
    const void *types;          /* [n_types] i32; NULL = absent (all normal)                   */
    uint64_t n_types;
    const es__str *merges;      /* [n_merges] "left right" lines; NULL = absent                */
    uint64_t n_merges;
    int64_t special[ES__SPECIAL_COUNT]; /* ids; -1 = absent                                    */
    int8_t add_bos, add_eos, add_space_prefix; /* 0/1; -1 = absent (per-type default)          */
} es__vocab_desc;

void es__vocab_desc_init(es__vocab_desc *d);

/* Validates d and builds the vocabulary (d is not referenced afterwards). Messages name the
 * tokenizer.ggml.* key and the index at fault. */
es_status es__vocab_build(const es__vocab_desc *d, const es_allocator *alloc, es__err *err,
                          es__vocab **out);

/* One entry of the pair table: the sids (left, right) merge into result with priority prio
 * (lower merges first). key == 0 marks an empty slot. */
typedef struct es__pair {
    uint64_t key;
    int32_t result;
    uint32_t prio;
} es__pair;

struct es__vocab {
    es_allocator alloc_copy;
    const es_allocator *alloc;   /* &alloc_copy or NULL                                        */
    es_tokenizer_type type;
    es__pretok pretok;
    char *pre_name;              /* tokenizer.ggml.pre or "default"                            */
    int32_t n_tokens;
    int32_t n_sids;              /* n_tokens + extra strings                                   */
    char *text;                  /* texts of all sids, back to back                            */
    uint32_t *text_off;          /* [n_sids + 1]                                               */
    uint32_t *text_hash;         /* [n_sids]                                                   */
    uint32_t *str_slots;         /* open addressing: sid + 1, 0 = empty                        */
    uint32_t str_mask;
    es__pair *pairs;             /* open addressing on key                                     */
    uint32_t pair_mask;
    uint64_t *adj;               /* SentencePiece: code point pairs adjacent in some token     */
    uint32_t adj_mask;
    float *scores;               /* [n_tokens]                                                 */
    uint8_t *types;              /* [n_tokens]                                                 */
    char *piece;                 /* decoded text of every token (control tokens: empty)        */
    uint32_t *piece_off;         /* [n_tokens + 1]                                             */
    int32_t *specials;           /* tokens matched in text: by first byte, then longest first  */
    int32_t n_specials;
    int32_t special_start[257];  /* specials[special_start[b] .. special_start[b + 1]) start with b */
    int32_t byte_token[256];     /* token for a raw byte: <0xXX> (llama) or its mapped char (gpt2) */
    int32_t byte_sid[256];       /* gpt2: sid of the byte's mapped char, -1 = none             */
    int32_t ascii_sid[128];      /* llama: sid of each ASCII char (space escaped to U+2581)    */
    int32_t special[ES__SPECIAL_COUNT];
    int32_t eog[16];             /* end-of-generation tokens                                    */
    int32_t n_eog;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges;          /* Llama 3, Tekken: a word that is a token is not merged        */
    bool pretok_add_bos;         /* the pre-tokenizer name's default for add_bos (gpt2 models)     */
};

/* SentencePiece segments text into normal, user-defined and unused pieces only; control, unknown
 * and byte tokens are reserved (they come from special-token matching and byte fallback). */
static inline bool es__spm_piece(const es__vocab *v, int32_t id) {
    uint8_t t = v->types[id];
    return t != ES__TOK_CONTROL && t != ES__TOK_UNKNOWN && t != ES__TOK_BYTE;
}

/* ---- Hashing. */
static inline uint64_t es__hash_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline uint32_t es__hash_str(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return (uint32_t)es__hash_mix(h);
}

static inline uint64_t es__pair_key(int32_t left, int32_t right) {
    return (uint64_t)(uint32_t)(left + 1) << 32 | (uint32_t)right;
}

/* Key of the adjacency set: two code points (or undecodable bytes, below 2^21 both). */
static inline uint64_t es__adj_key(uint32_t a, uint32_t b) {
    return ((uint64_t)a << 21 | b) + 1;
}

/* The sid whose text is s[0..n), or -1. */
static inline int32_t es__vocab_lookup(const es__vocab *v, const char *s, size_t n) {
    uint32_t h = es__hash_str(s, n);
    for (uint32_t i = h & v->str_mask;; i = (i + 1) & v->str_mask) {
        uint32_t slot = v->str_slots[i];
        if (slot == 0) return -1;
        int32_t sid = (int32_t)(slot - 1);
        if (v->text_hash[sid] == h && v->text_off[sid + 1] - v->text_off[sid] == n &&
            memcmp(v->text + v->text_off[sid], s, n) == 0)
            return sid;
    }
}

/* The merge of (left, right), or NULL. */
static inline const es__pair *es__vocab_pair(const es__vocab *v, int32_t left, int32_t right) {
    uint64_t key = es__pair_key(left, right);
    for (uint32_t i = (uint32_t)es__hash_mix(key) & v->pair_mask;; i = (i + 1) & v->pair_mask) {
        const es__pair *p = &v->pairs[i];
        if (p->key == key) return p;
        if (p->key == 0) return NULL;
    }
}

/* Higher SentencePiece scores merge first: map -score to an unsigned key that sorts the same. */
static inline uint32_t es__score_prio(float score) {
    uint32_t u;
    float neg = -score;
    memcpy(&u, &neg, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ---- Encoding scratch: owned by one call, never shared. */
typedef struct es__sym {
    int32_t sid;   /* -1: cannot take part in any merge                 */
    int32_t n;     /* units (characters or bytes) covered; 0 = merged away */
    int32_t prev, next;
    uint32_t src;  /* byte offset of the first unit in the source text   */
    uint32_t len;  /* bytes in the source text                           */
} es__sym;

typedef struct es__bigram {
    uint32_t prio;
    int32_t left, right, result, size;
} es__bigram;

typedef struct es__tok_scratch {
    const es_allocator *alloc;
    int32_t *out;        /* encoded ids                                    */
    size_t n_out, cap_out;
    es__sym *sym;
    size_t cap_sym;
    es__bigram *heap;
    size_t n_heap, cap_heap;
    char *buf;           /* byte-level text of a word, escaped text, ...     */
    size_t cap_buf;
} es__tok_scratch;

es_status es__scratch_push(es__tok_scratch *s, int32_t id, es__err *err);
es_status es__scratch_reserve_sym(es__tok_scratch *s, size_t n, es__err *err);
es_status es__scratch_reserve_buf(es__tok_scratch *s, size_t n, es__err *err);

/* Applies the vocabulary's merges to sym[0..n) (linked in order, prev/next set) until none
 * applies, always the pair of lowest prio, the leftmost on ties. */
es_status es__merge_symbols(const es__vocab *v, es__tok_scratch *s, int32_t n, es__err *err);

/* Encoders of one piece of plain text (no special tokens inside), appending to s->out. */
es_status es__spm_encode(const es__vocab *v, const char *text, size_t len, bool space_prefix,
                         es__tok_scratch *s, es__err *err);
es_status es__bpe_encode(const es__vocab *v, const char *text, size_t len, es__tok_scratch *s,
                         es__err *err);

/* GPT-2's reversible map from bytes to printable code points, and its inverse (-1 = unmapped). */
uint32_t es__byte_to_cp(uint8_t b);
int32_t es__cp_to_byte(uint32_t cp);

#endif /* ES_CORE_TOKENIZER_IMPL_H */
