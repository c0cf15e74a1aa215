/* chat_conv.c: the conversation of `edgespec chat` and its token sequence (see chat_conv.h). */
#include "chat_conv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CMD "chat"

void chat_conv_init(chat_conv *c, const es_model *model, es_context *ctx, es_spec *spec, es_chat_template t) {
    memset(c, 0, sizeof *c);
    c->model = model;
    c->ctx = ctx;
    c->spec = spec;
    c->tmpl = t;
    es_model_info info;
    c->bos = es_model_get_info(model, &info) == ES_OK ? info.bos_id : -1;
}

static void free_messages(chat_message *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(m[i].role);
        free(m[i].content);
    }
}

void chat_conv_free(chat_conv *c) {
    free_messages(c->msgs, c->n_msgs);
    free(c->msgs);
    free(c->seq);
    free(c->next);
    memset(c, 0, sizeof *c);
}

int chat_conv_add(chat_conv *c, const char *role, const char *content) {
    if (c->n_msgs == c->msgs_cap) {
        const size_t cap = c->msgs_cap ? 2 * c->msgs_cap : 16;
        chat_message *grown = realloc(c->msgs, sizeof *grown * cap);
        if (!grown) return cli_fail(CMD, "out of memory for %zu messages", cap);
        c->msgs = grown;
        c->msgs_cap = cap;
    }
    chat_message m = {strdup(role), strdup(content)};
    if (!m.role || !m.content) {
        free_messages(&m, 1);
        return cli_fail(CMD, "out of memory for a %zu-byte message", strlen(content));
    }
    c->msgs[c->n_msgs++] = m;
    return CLI_EXIT_OK;
}

void chat_conv_pop(chat_conv *c) {
    if (c->n_msgs == 0) return;
    c->n_msgs--;
    free_messages(&c->msgs[c->n_msgs], 1);
}

/* Messages [a, b) leave the list. */
static void remove_messages(chat_conv *c, size_t a, size_t b) {
    free_messages(c->msgs + a, b - a);
    memmove(c->msgs + a, c->msgs + b, sizeof *c->msgs * (c->n_msgs - b));
    c->n_msgs -= b - a;
}

/* The first n messages rendered (open: with the opening of the assistant's turn) and tokenized,
 * in a malloc'd array; NULL after printing why. A template that writes the BOS text itself and a
 * tokenizer that adds one must not make two. */
static int32_t *render_tokens(const chat_conv *c, size_t n, bool open, size_t *n_tokens) {
    es_chat_message *m = malloc(sizeof *m * (n ? n : 1));
    if (!m) return cli_fail(CMD, "out of memory"), NULL;
    for (size_t i = 0; i < n; i++) m[i] = (es_chat_message){c->msgs[i].role, c->msgs[i].content};
    size_t len = 0;
    es_status s = es_chat_render(c->tmpl, m, n, open, NULL, 0, &len);
    char *text = s == ES_ERR_BUFFER_TOO_SMALL || s == ES_OK ? malloc(len + 1) : NULL;
    if (text) s = es_chat_render(c->tmpl, m, n, open, text, len + 1, &len);
    free(m);
    int32_t *toks = NULL;
    if (!text || s != ES_OK)
        cli_fail_status(CMD, text ? s : ES_ERR_OUT_OF_MEMORY, "cannot render the conversation");
    else
        toks = cli_tokenize(CMD, c->model, text, len, true, n_tokens);
    free(text);
    if (toks && *n_tokens >= 2 && c->bos >= 0 && toks[0] == c->bos && toks[1] == c->bos) {
        memmove(toks, toks + 1, sizeof *toks * --*n_tokens);
    }
    return toks;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Keeps the first n tokens of the sequence, the cache all but the last of them. */
static int cut(chat_conv *c, size_t n) {
    es_status s = c->spec ? es_spec_truncate(c->spec, n) : es_truncate(c->ctx, n ? (int32_t)n - 1 : 0);
    if (s != ES_OK) return cli_fail(CMD, "cutting the conversation back: %s", c->spec ? es_spec_errmsg(c->spec) : es_context_errmsg(c->ctx));
    c->n_seq = n;
    return CLI_EXIT_OK;
}

/* Drops tokens [keep, keep + n) of the sequence, the cache re-positioned over them. */
static int shift(chat_conv *c, size_t keep, size_t n) {
    es_status s = c->spec ? es_spec_shift(c->spec, (int32_t)keep, (int32_t)n)
                          : es_context_shift(c->ctx, (int32_t)keep, (int32_t)n);
    if (s != ES_OK) {
        cli_fail(CMD, "shifting the context: %s", c->spec ? es_spec_errmsg(c->spec) : es_context_errmsg(c->ctx));
        cut(c, 0); /* whatever the cache kept, the next turn reads the conversation again */
        return CLI_EXIT_FAIL;
    }
    memmove(c->seq + keep, c->seq + keep + n, sizeof *c->seq * (c->n_seq - keep - n));
    c->n_seq -= n;
    c->n_shifts++;
    c->n_shifted += n;
    return CLI_EXIT_OK;
}

/* Messages [a, b) go; the cache shifts over their tokens when the sequence still holds them where
 * the rendering puts them, and is cut back to what precedes them otherwise. */
static int drop_messages(chat_conv *c, size_t a, size_t b) {
    size_t n_a = 0, n_b = 0;
    int32_t *before = render_tokens(c, a, false, &n_a), *upto = before ? render_tokens(c, b, false, &n_b) : NULL;
    int rc = upto ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    if (rc == CLI_EXIT_OK) {
        const size_t in_cache = c->n_seq ? c->n_seq - 1 : 0;
        const size_t keep = common_prefix(c->seq, c->n_seq, before, n_a);
        const bool same = keep == n_a && n_b > n_a && common_prefix(c->seq, c->n_seq, upto, n_b) == n_b;
        if (same && n_b <= in_cache)
            rc = shift(c, n_a, n_b - n_a);
        else if (c->n_seq > keep)
            rc = cut(c, keep);
    }
    free(before);
    free(upto);
    if (rc == CLI_EXIT_OK) remove_messages(c, a, b);
    return rc;
}

/* The rendering with the assistant's turn open, in c->next; false after printing why. */
static bool render_next(chat_conv *c) {
    free(c->next);
    c->next = render_tokens(c, c->n_msgs, true, &c->n_next);
    return c->next != NULL;
}

/* Drops the oldest exchange (the first non-system message up to the next user message) while
 * the rendering and `reserve` answer tokens do not fit. */
static int fit(chat_conv *c, int32_t reserve) {
    const size_t n_ctx = (size_t)es_context_n_ctx(c->ctx);
    for (;;) {
        if (!render_next(c)) return CLI_EXIT_FAIL;
        if (c->n_next + (size_t)reserve <= n_ctx) return CLI_EXIT_OK;
        size_t a = 0;
        while (a < c->n_msgs && strcmp(c->msgs[a].role, "system") == 0) a++;
        if (a + 1 >= c->n_msgs) {
            const size_t n_next = c->n_next;
            chat_conv_pop(c);
            return cli_fail(CMD, "the message makes the conversation %zu tokens; with room for a %d-token answer the "
                            "context holds %zu (raise --ctx-size or lower --n-predict)", n_next, reserve, n_ctx);
        }
        size_t b = a + 1;
        while (b + 1 < c->n_msgs && strcmp(c->msgs[b].role, "user") != 0) b++;
        if (drop_messages(c, a, b) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    }
}

static int ensure_seq(chat_conv *c, size_t n) {
    if (n <= c->seq_cap) return CLI_EXIT_OK;
    int32_t *grown = realloc(c->seq, sizeof *grown * n);
    if (!grown) return cli_fail(CMD, "out of memory for %zu tokens", n);
    c->seq = grown;
    c->seq_cap = n;
    return CLI_EXIT_OK;
}

int chat_conv_begin_turn(chat_conv *c, int32_t reserve, const int32_t **feed, size_t *n_feed) {
    if (fit(c, reserve) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    size_t common = common_prefix(c->seq, c->n_seq, c->next, c->n_next);
    if (common >= c->n_next) common = c->n_next - 1; /* something must be read to answer */
    if (cut(c, common) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    /* plain decoding reads the sequence's last token, which its cache lacks; es_spec holds it */
    const size_t from = c->spec || common == 0 ? common : common - 1;
    *feed = c->next + from;
    *n_feed = c->n_next - from;
    return CLI_EXIT_OK;
}

int chat_conv_end_turn(chat_conv *c, const char *answer, const int32_t *out, size_t n_out) {
    const size_t held = c->spec ? es_spec_n_tokens(c->spec) : (size_t)es_context_n_past(c->ctx);
    size_t n_answer = held > c->n_next ? held - c->n_next : 0;
    if (n_answer > n_out) n_answer = n_out;
    if (ensure_seq(c, c->n_next + n_answer) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    memcpy(c->seq, c->next, sizeof *c->seq * c->n_next);
    memcpy(c->seq + c->n_next, out, sizeof *c->seq * n_answer);
    c->n_seq = held; /* es_spec's sequence and the plain cache, before the cache gives back one */
    if (cut(c, c->n_next + n_answer) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    return chat_conv_add(c, "assistant", answer);
}

int chat_conv_forget_cache(chat_conv *c) {
    return cut(c, 0);
}

int chat_conv_reset(chat_conv *c) {
    size_t keep = c->n_msgs > 0 && strcmp(c->msgs[0].role, "system") == 0 ? 1 : 0;
    remove_messages(c, keep, c->n_msgs);
    return cut(c, 0);
}

/* ---- /save and /load: PATH is the session, PATH.messages the conversation:
 *   edgespec-chat 1\n, then per message: ROLE BYTES\n CONTENT \n */

static char *messages_path(const char *path) {
    char *p = malloc(strlen(path) + sizeof ".messages");
    if (p) strcat(strcpy(p, path), ".messages");
    return p;
}

static bool write_messages(const chat_conv *c, FILE *f) {
    bool ok = fprintf(f, "edgespec-chat 1\n") > 0;
    for (size_t i = 0; ok && i < c->n_msgs; i++) {
        const size_t n = strlen(c->msgs[i].content);
        ok = fprintf(f, "%s %zu\n", c->msgs[i].role, n) > 0 && fwrite(c->msgs[i].content, 1, n, f) == n &&
             fputc('\n', f) != EOF;
    }
    return ok;
}

int chat_conv_save(chat_conv *c, const char *path) {
    const size_t in_cache = c->n_seq ? c->n_seq - 1 : 0;
    if (es_context_save(c->ctx, c->seq, in_cache, path) != ES_OK)
        return cli_fail(CMD, "/save: %s", es_context_errmsg(c->ctx));
    char *mp = messages_path(path);
    FILE *f = mp ? fopen(mp, "wb") : NULL;
    bool ok = f && write_messages(c, f);
    if (f && fclose(f) != 0) ok = false;
    int rc = ok ? CLI_EXIT_OK : cli_fail(CMD, "/save: writing %s: %s", mp ? mp : path, strerror(errno));
    free(mp);
    return rc;
}

/* Reads PATH.messages into a fresh list; false after printing what is wrong and where. */
static bool read_messages(const char *mp, chat_conv *into) {
    FILE *f = fopen(mp, "rb");
    if (!f) return cli_fail(CMD, "/load: %s: %s", mp, strerror(errno)), false;
    char head[32], role[16];
    bool ok = fgets(head, sizeof head, f) && strcmp(head, "edgespec-chat 1\n") == 0;
    if (!ok) cli_fail(CMD, "/load: %s: not an edgespec chat (its first line is not 'edgespec-chat 1')", mp);
    for (size_t n; ok && fscanf(f, "%15s %zu", role, &n) == 2;) {
        char *text = fgetc(f) == '\n' && n < ((size_t)1 << 30) ? malloc(n + 1) : NULL;
        ok = text && fread(text, 1, n, f) == n && fgetc(f) == '\n';
        if (ok) text[n] = '\0';
        ok = ok && (strcmp(role, "system") == 0 || strcmp(role, "user") == 0 || strcmp(role, "assistant") == 0);
        if (!ok) cli_fail(CMD, "/load: %s: message %zu (at byte %ld) is cut short or malformed", mp, into->n_msgs, ftell(f));
        ok = ok && chat_conv_add(into, role, text) == CLI_EXIT_OK;
        free(text);
    }
    if (ok && !feof(f)) ok = false, cli_fail(CMD, "/load: %s: unreadable after message %zu", mp, into->n_msgs);
    fclose(f);
    return ok;
}

int chat_conv_load(chat_conv *c, const char *path) {
    chat_conv loaded;
    chat_conv_init(&loaded, c->model, c->ctx, c->spec, c->tmpl);
    char *mp = messages_path(path);
    const size_t cap = (size_t)es_context_n_ctx(c->ctx);
    size_t n = 0;
    int rc = mp && read_messages(mp, &loaded) && ensure_seq(&loaded, cap) == CLI_EXIT_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    if (rc == CLI_EXIT_OK && es_context_load(c->ctx, path, loaded.seq, cap, &n) != ES_OK)
        rc = cli_fail(CMD, "/load: %s", es_context_errmsg(c->ctx));
    free(mp);
    if (rc != CLI_EXIT_OK) { /* the context is as it was: so is the chat */
        chat_conv_free(&loaded);
        return rc;
    }
    /* the last saved token becomes the one the next turn reads first */
    es_status s = n == 0 ? es_truncate(c->ctx, 0) : es_truncate(c->ctx, (int32_t)n - 1);
    if (s == ES_OK && c->spec) s = n == 0 ? es_spec_truncate(c->spec, 0) : es_spec_resume(c->spec, loaded.seq, n);
    free_messages(c->msgs, c->n_msgs);
    free(c->msgs);
    free(c->seq);
    c->msgs = loaded.msgs, c->n_msgs = loaded.n_msgs, c->msgs_cap = loaded.msgs_cap;
    c->seq = loaded.seq, c->seq_cap = loaded.seq_cap, c->n_seq = n;
    free(loaded.next);
    if (s != ES_OK) {
        cut(c, 0);
        return cli_fail(CMD, "/load: %s", c->spec ? es_spec_errmsg(c->spec) : es_context_errmsg(c->ctx));
    }
    return CLI_EXIT_OK;
}
