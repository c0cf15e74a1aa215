/* tokenizer_pretok.c: the pre-tokenizer splits of byte-level BPE vocabularies (tokenizer.ggml.pre),
 * written as matchers of their published regular expressions (no regex engine), and the table of
 * pre-tokenizer names. Nothing here knows about vocabularies.
 *
 * A split is one or more stages. A stage is one expression: it cuts each piece of the previous stage
 * (the whole text for the first) into its matches and the gaps between them, each a piece of its own
 * ("isolated"), and the expression sees only that piece (lookaheads and $ stop at its end). Each
 * matcher returns the length of the match its expression's alternatives give at a position, taking
 * the first alternative that matches with the backtracking a regex engine does, or 0 for none.
 *
 *   gpt2:      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   llama3:    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *               ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2:     llama3 with \p{N} for \p{N}{1,3}
 *   deepseek-llm: [\r\n] / \s?[LC]+ / \s?[!-/:-~！-／：-～‘-‟　-。]+ / \s+$ / [一-龥ࠀ-一가-퟿]+ / \p{N}+
 *              (LC: the cased-letter ranges of ds_cased, tokenizer_pretok_match.c)
 *   deepseek-coder: [\r\n] / \s?\p{L}+ / \s?\p{P}+ / [一-龥ࠀ-一가-퟿]+ / \p{N}
 *   deepseek-v3: \p{N}{1,3} / [一-龥぀-ゟ゠-ヿ]+ / [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
 *              [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   falcon:    [\p{P}\$\+<=>\^~\|`]+ / gpt2 / [0-9][0-9][0-9]
 *   starcoder: \p{N} / gpt2
 *   poro:       ?[^(\s|.,!?…。，、।۔،)]+   (the class holds '(', '|' and ')' too, as published)
 *   viking:    poro / \p{N}
 *   tekken:    [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
 *              [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|
 *               ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   gpt-4o:    [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
 *              (?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+
 *              [\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|
 *               ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *              (tiktoken's o200k: tekken with an optional contraction after either letter
 *              alternative, and up to three digits)
 * (gpt2 as a later stage omits the final |\s+ in the published lists; the gap it leaves is that same
 * single character, so the matcher is shared.) \s is the White_Space property. A byte that is not
 * valid UTF-8 counts as one character of its own, in no class and in no listed range. */
#include "tokenizer_impl.h"
#include "tokenizer_pretok.h"
#include "unicode.h"

/* ---- Stages and the splitting driver. */

typedef size_t (*match_fn)(const uint8_t *t, size_t end, size_t pos);
/* The first match in [pos, end): its length, its start in *at; 0 = none. */
typedef size_t (*find_fn)(const uint8_t *t, size_t end, size_t pos, size_t *at);

typedef struct stage {
    match_fn match;
    find_fn find; /* NULL: try match at every character */
} stage;

typedef struct split {
    const stage *stages;
    int n;
} split;

static const stage S_GPT2[] = {{es__pm_gpt2, NULL}};
static const stage S_LLAMA3[] = {{es__pm_llama3, NULL}};
static const stage S_QWEN2[] = {{es__pm_qwen2, NULL}};
static const stage S_DEEPSEEK_LLM[] = {
    {es__pm_crlf, NULL},   {es__pm_ds_cased, NULL}, {es__pm_ds_punct, NULL},
    {NULL, es__pf_ws_end}, {es__pm_ds_cjk, NULL},   {es__pm_num_run, NULL},
};
static const stage S_DEEPSEEK_CODER[] = {
    {es__pm_crlf, NULL},   {es__pm_space_letters, NULL}, {es__pm_space_punct, NULL},
    {es__pm_ds_cjk, NULL}, {es__pm_num1, NULL},
};
static const stage S_DEEPSEEK3[] = {{es__pm_num3, NULL}, {es__pm_ds3_kana, NULL}, {es__pm_ds3_main, NULL}};
static const stage S_FALCON[] = {{es__pm_falcon_punct, NULL}, {es__pm_gpt2, NULL}, {es__pm_digits3, NULL}};
static const stage S_STARCODER[] = {{es__pm_num1, NULL}, {es__pm_gpt2, NULL}};
static const stage S_PORO[] = {{es__pm_poro, NULL}};
static const stage S_VIKING[] = {{es__pm_poro, NULL}, {es__pm_num1, NULL}};
static const stage S_TEKKEN[] = {{es__pm_tekken, NULL}};
static const stage S_GPT4O[] = {{es__pm_gpt4o, NULL}};

#define SPLIT(s) {s, (int)ES__ARRAY_LEN(s)}
static const split SPLITS[ES__PRETOK_COUNT] = {
    [ES__PRETOK_NONE] = {NULL, 0},
    [ES__PRETOK_GPT2] = SPLIT(S_GPT2),
    [ES__PRETOK_LLAMA3] = SPLIT(S_LLAMA3),
    [ES__PRETOK_QWEN2] = SPLIT(S_QWEN2),
    [ES__PRETOK_DEEPSEEK_LLM] = SPLIT(S_DEEPSEEK_LLM),
    [ES__PRETOK_DEEPSEEK_CODER] = SPLIT(S_DEEPSEEK_CODER),
    [ES__PRETOK_DEEPSEEK3] = SPLIT(S_DEEPSEEK3),
    [ES__PRETOK_FALCON] = SPLIT(S_FALCON),
    [ES__PRETOK_STARCODER] = SPLIT(S_STARCODER),
    [ES__PRETOK_PORO] = SPLIT(S_PORO),
    [ES__PRETOK_VIKING] = SPLIT(S_VIKING),
    [ES__PRETOK_TEKKEN] = SPLIT(S_TEKKEN),
    [ES__PRETOK_GPT4O] = SPLIT(S_GPT4O),
};
_Static_assert(ES__ARRAY_LEN(S_DEEPSEEK_LLM) <= ES__PRETOK_MAX_STAGES, "raise ES__PRETOK_MAX_STAGES");

static size_t find_each(match_fn match, const uint8_t *t, size_t end, size_t pos, size_t *at) {
    for (size_t p = pos; p < end;) {
        size_t n = match(t, end, p);
        if (n) {
            *at = p;
            return n;
        }
        uint32_t cp;
        p += es__utf8_decode(t + p, end - p, &cp);
    }
    return 0;
}

/* The piece of stage s that starts at pos inside its parent piece, which ends at end. */
static size_t stage_piece(const stage *s, const uint8_t *t, size_t end, size_t pos) {
    size_t at = pos;
    size_t n = s->find ? s->find(t, end, pos, &at) : find_each(s->match, t, end, pos, &at);
    if (n == 0) return end - pos; /* a gap to the end */
    return at > pos ? at - pos : n;
}

void es__pretok_begin(es__pretok_iter *it, es__pretok kind, const uint8_t *text, size_t len) {
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->text = text;
    it->len = len;
}

/* Every stage keeps the end of its current piece; a stage whose piece is used up starts its next one
 * at pos, inside the piece of the stage above. Words come out in order, each from its own pieces. */
size_t es__pretok_next(es__pretok_iter *it) {
    size_t pos = it->pos;
    if (pos >= it->len) return 0;
    const split *sp = (unsigned)it->kind < ES__PRETOK_COUNT ? &SPLITS[it->kind] : &SPLITS[ES__PRETOK_NONE];
    size_t end = it->len;
    for (int j = 0; j < sp->n; j++) {
        if (it->end[j] <= pos) it->end[j] = pos + stage_piece(&sp->stages[j], it->text, end, pos);
        end = it->end[j];
    }
    it->pos = end;
    return end - pos;
}

/* ---- Names (tokenizer.ggml.pre), as llama.cpp reads them. */

enum { IGNORE_MERGES = 1, ADD_BOS = 2 };

/* Some names llama.cpp gives pre-tokenizer types of their own whose expressions are, string for
 * string, those of a split here: they are aliases of that split, with the name's own defaults. So
 * gpt-2's (jina-es ... modern-bert; jina-v1-en, jina-v2-code and roberta-bpe also set add_sep, which
 * edgespec has no use for), llama3's (midm-2.0, jina-v5-nano), qwen2's (f2llmv2, solar-open),
 * deepseek-v3's (joyai-llm, hy_v4), starcoder's (mellum2) and gpt-4o's (minimax-m2). */
static const struct {
    const char *name;
    es__pretok kind;
    uint8_t flags;
} NAMES[] = {
    {"default", ES__PRETOK_GPT2, 0},        {"gpt-2", ES__PRETOK_GPT2, 0},
    {"phi-2", ES__PRETOK_GPT2, 0},          {"mpt", ES__PRETOK_GPT2, 0},
    {"olmo", ES__PRETOK_GPT2, 0},           {"jais", ES__PRETOK_GPT2, 0},
    {"trillion", ES__PRETOK_GPT2, 0},       {"exaone4", ES__PRETOK_GPT2, 0},
    {"gigachat", ES__PRETOK_GPT2, 0},       {"granite-docling", ES__PRETOK_GPT2, 0},
    {"jina-es", ES__PRETOK_GPT2, 0},        {"jina-de", ES__PRETOK_GPT2, 0},
    {"jina-v2-es", ES__PRETOK_GPT2, 0},     {"jina-v2-de", ES__PRETOK_GPT2, 0},
    {"a.x-4.0", ES__PRETOK_GPT2, 0},        {"mellum", ES__PRETOK_GPT2, 0},
    {"modern-bert", ES__PRETOK_GPT2, 0},    {"jina-v1-en", ES__PRETOK_GPT2, 0},
    {"jina-v2-code", ES__PRETOK_GPT2, 0},   {"roberta-bpe", ES__PRETOK_GPT2, 0},
    {"llama3", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"llama-v3", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"llama-bpe", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"falcon3", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"falcon-h1", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"pixtral", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"lfm2", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"midm-2.0", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"jina-v5-nano", ES__PRETOK_LLAMA3, IGNORE_MERGES | ADD_BOS},
    {"dbrx", ES__PRETOK_LLAMA3, 0},         {"smaug-bpe", ES__PRETOK_LLAMA3, 0},
    {"chatglm-bpe", ES__PRETOK_LLAMA3, 0},  {"glm4", ES__PRETOK_LLAMA3, 0},
    {"qwen2", ES__PRETOK_QWEN2, 0},         {"deepseek-r1-qwen", ES__PRETOK_QWEN2, 0},
    {"stablelm2", ES__PRETOK_QWEN2, 0},     {"megrez", ES__PRETOK_QWEN2, 0},
    {"hunyuan", ES__PRETOK_QWEN2, 0},       {"grok-2", ES__PRETOK_QWEN2, 0},
    {"kormo", ES__PRETOK_QWEN2, 0},         {"f2llmv2", ES__PRETOK_QWEN2, 0},
    {"solar-open", ES__PRETOK_QWEN2, 0},
    {"deepseek-llm", ES__PRETOK_DEEPSEEK_LLM, 0},
    {"deepseek-coder", ES__PRETOK_DEEPSEEK_CODER, 0},
    {"deepseek-v3", ES__PRETOK_DEEPSEEK3, 0},     {"hunyuan-dense", ES__PRETOK_DEEPSEEK3, 0},
    {"joyai-llm", ES__PRETOK_DEEPSEEK3, 0},       {"hy_v4", ES__PRETOK_DEEPSEEK3, 0},
    {"falcon", ES__PRETOK_FALCON, 0},
    {"starcoder", ES__PRETOK_STARCODER, 0}, {"refact", ES__PRETOK_STARCODER, 0},
    {"command-r", ES__PRETOK_STARCODER, 0}, {"smollm", ES__PRETOK_STARCODER, 0},
    {"codeshell", ES__PRETOK_STARCODER, 0}, {"exaone", ES__PRETOK_STARCODER, 0},
    {"minerva-7b", ES__PRETOK_STARCODER, 0}, {"mellum2", ES__PRETOK_STARCODER, 0},
    {"poro-chat", ES__PRETOK_PORO, 0},      {"bloom", ES__PRETOK_PORO, 0},
    {"gpt3-finnish", ES__PRETOK_PORO, 0},   {"viking", ES__PRETOK_VIKING, 0},
    {"tekken", ES__PRETOK_TEKKEN, IGNORE_MERGES | ADD_BOS},
    /* Phi-4-mini, Llama 4, ...: neither ignore_merges nor add_bos in llama.cpp */
    {"gpt-4o", ES__PRETOK_GPT4O, 0},        {"llama4", ES__PRETOK_GPT4O, 0},
    {"kanana2", ES__PRETOK_GPT4O, 0},       {"talkie", ES__PRETOK_GPT4O, 0},
    {"minimax-m2", ES__PRETOK_GPT4O, 0},
};

bool es__pretok_lookup(const char *name, size_t len, es__pretok_info *out) {
    for (size_t i = 0; i < ES__ARRAY_LEN(NAMES); i++) {
        if (strlen(NAMES[i].name) == len && memcmp(NAMES[i].name, name, len) == 0) {
            out->kind = NAMES[i].kind;
            out->ignore_merges = (NAMES[i].flags & IGNORE_MERGES) != 0;
            out->add_bos = (NAMES[i].flags & ADD_BOS) != 0;
            return true;
        }
    }
    return false;
}
