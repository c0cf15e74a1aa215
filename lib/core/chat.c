/* chat.c: conversations as the prompt text a chat model was trained on. GGUF files carry their
 * template as a Jinja program (tokenizer.chat_template); running Jinja is out of scope for a
 * dependency-light library, so the common families are recognised by the markers their templates
 * write (llama.cpp does the same) and rendered here from their documented formats. A model
 * without a template gets the plain one (the shipped KJV models: turns are lines of text).
 * Deliberately not here: tokenizing the result (es_tokenize with parse_special: the rendered
 * text spells the control tokens, BOS included where the format has one). */
#include "model.h"

#include <stdio.h>
#include <string.h>

/* One family: its name, what recognises it in a template, how a turn is written, and the text
 * that ends an assistant's turn. */
typedef struct chat_family {
    es_chat_template id;
    const char *name;
    const char *markers[2];      /* all must occur in the template; NULL ends the list         */
    const char *absent;          /* must not occur (NULL: none)                                 */
    const char *end_of_turn;     /* what the model writes to end its turn ("" : EOS only)       */
} chat_family;

static const chat_family families[] = {
    {ES_CHAT_PLAIN, "plain", {NULL, NULL}, NULL, ""},
    {ES_CHAT_LLAMA3, "llama3", {"<|start_header_id|>", "<|eot_id|>"}, NULL, "<|eot_id|>"},
    {ES_CHAT_CHATML, "chatml", {"<|im_start|>", NULL}, NULL, "<|im_end|>"},
    {ES_CHAT_PHI3, "phi3", {"<|user|>", "<|end|>"}, NULL, "<|end|>"},
    {ES_CHAT_GEMMA, "gemma", {"<start_of_turn>", NULL}, NULL, "<end_of_turn>"},
    {ES_CHAT_LLAMA2, "llama2", {"[INST]", "<<SYS>>"}, NULL, "</s>"},
    {ES_CHAT_MISTRAL, "mistral", {"[INST]", NULL}, "<<SYS>>", "</s>"},
};

static const chat_family *family_of(es_chat_template t) {
    for (size_t i = 0; i < ES__ARRAY_LEN(families); i++)
        if (families[i].id == t) return &families[i];
    return NULL;
}

const char *es_chat_template_name(es_chat_template t) {
    const chat_family *f = family_of(t);
    return f ? f->name : "unknown";
}

const char *es_chat_end_of_turn(es_chat_template t) {
    const chat_family *f = family_of(t);
    return f ? f->end_of_turn : "";
}

es_status es_chat_template_from_name(const char *name, es_chat_template *out) {
    if (!name || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_chat_template_from_name: NULL argument");
    for (size_t i = 0; i < ES__ARRAY_LEN(families); i++)
        if (strcmp(families[i].name, name) == 0) {
            *out = families[i].id;
            return ES_OK;
        }
    return es__fail(NULL, ES_ERR_INVALID_ARGUMENT,
                    "unknown chat template '%s' (known: plain, llama2, llama3, chatml, phi3, gemma, mistral)", name);
}

static bool contains(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (memcmp(s + i, needle, k) == 0) return true;
    return false;
}

es_status es_chat_template_detect(const es_model *m, es_chat_template *out) {
    if (!m || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_chat_template_detect: NULL argument");
    es__str t = {NULL, 0};
    es__err err = {ES_OK, ""};
    if (m->gguf && es__gguf_get_str(m->gguf, "tokenizer.chat_template", false, &t, &err) != ES_OK)
        return es__fail(NULL, err.status, "%s", err.msg);
    if (!t.ptr) {
        *out = ES_CHAT_PLAIN;
        return ES_OK;
    }
    for (size_t i = 1; i < ES__ARRAY_LEN(families); i++) {
        const chat_family *f = &families[i];
        bool all = true;
        for (int k = 0; k < 2 && f->markers[k]; k++) all = all && contains(t.ptr, t.len, f->markers[k]);
        if (all && !(f->absent && contains(t.ptr, t.len, f->absent))) {
            *out = f->id;
            return ES_OK;
        }
    }
    return es__fail(NULL, ES_ERR_UNSUPPORTED,
                    "model '%s': tokenizer.chat_template (%llu bytes, starting \"%.48s\") is none of the known "
                    "families (llama2, llama3, chatml, phi3, gemma, mistral); name one instead "
                    "(es_chat_template_from_name)", m->path, (unsigned long long)t.len, t.ptr);
}

/* ---- rendering into a bounded buffer that counts what it could not hold */

typedef struct out_buf {
    char *p;
    size_t cap, len;
} out_buf;

static void put(out_buf *o, const char *s) {
    const size_t n = strlen(s);
    if (o->len + n < o->cap) memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void put3(out_buf *o, const char *a, const char *b, const char *c) {
    put(o, a);
    put(o, b);
    put(o, c);
}

/* Formats whose turns are "header + content + end": llama3, chatml, phi3, gemma. The system
 * message of a family without a system role joins the first user turn. */
static void render_headed(out_buf *o, es_chat_template t, const es_chat_message *m, size_t n, bool open) {
    const char *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role, *text = m[i].content;
        switch (t) {
        case ES_CHAT_LLAMA3:
            if (i == 0) put(o, "<|begin_of_text|>");
            put3(o, "<|start_header_id|>", role, "<|end_header_id|>\n\n");
            put3(o, text, "<|eot_id|>", "");
            break;
        case ES_CHAT_CHATML: put3(o, "<|im_start|>", role, "\n"), put3(o, text, "<|im_end|>\n", ""); break;
        case ES_CHAT_PHI3: put3(o, "<|", role, "|>\n"), put3(o, text, "<|end|>\n", ""); break;
        default: /* gemma: user and model turns only */
            if (i == 0) put(o, "<bos>");
            if (strcmp(role, "system") == 0) {
                sys = text;
                continue;
            }
            put3(o, "<start_of_turn>", strcmp(role, "assistant") == 0 ? "model" : role, "\n");
            if (sys) put3(o, sys, "\n\n", ""), sys = NULL;
            put3(o, text, "<end_of_turn>\n", "");
            break;
        }
    }
    if (!open) return;
    if (t == ES_CHAT_LLAMA3) put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    else if (t == ES_CHAT_CHATML) put(o, "<|im_start|>assistant\n");
    else if (t == ES_CHAT_PHI3) put(o, "<|assistant|>\n");
    else put(o, "<start_of_turn>model\n");
}

/* llama2 and mistral: [INST] user [/INST] answer</s> pairs; llama2 wraps the system message in
 * <<SYS>> inside the first instruction, mistral prepends it to the first user message. */
static void render_inst(out_buf *o, es_chat_template t, const es_chat_message *m, size_t n) {
    const char *sys = NULL;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role, *text = m[i].content;
        if (strcmp(role, "system") == 0) {
            sys = text;
        } else if (strcmp(role, "user") == 0) {
            put(o, t == ES_CHAT_LLAMA2 || first ? "<s>[INST] " : "[INST] ");
            if (sys && t == ES_CHAT_LLAMA2) put3(o, "<<SYS>>\n", sys, "\n<</SYS>>\n\n");
            else if (sys) put3(o, sys, "\n\n", "");
            sys = NULL;
            put3(o, text, " [/INST]", "");
            first = false;
        } else {
            put3(o, t == ES_CHAT_LLAMA2 ? " " : "", text, t == ES_CHAT_LLAMA2 ? " </s>" : "</s>");
        }
    }
}

es_status es_chat_render(es_chat_template t, const es_chat_message *messages, size_t n_messages,
                         bool add_assistant, char *buf, size_t buf_size, size_t *len) {
    if (!len || (!buf && buf_size) || (!messages && n_messages))
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_chat_render: NULL argument");
    ES_RETURN_IF(!family_of(t), NULL, ES_ERR_INVALID_ARGUMENT, "es_chat_render: unknown template %d", (int)t);
    for (size_t i = 0; i < n_messages; i++) {
        const char *r = messages[i].role;
        ES_RETURN_IF(!r || !messages[i].content, NULL, ES_ERR_INVALID_ARGUMENT,
                     "es_chat_render: message %zu has no role or no content", i);
        ES_RETURN_IF(strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"), NULL, ES_ERR_INVALID_ARGUMENT,
                     "es_chat_render: message %zu: role '%s' is none of system, user, assistant", i, r);
    }
    out_buf o = {buf, buf_size, 0};
    if (t == ES_CHAT_PLAIN) {
        for (size_t i = 0; i < n_messages; i++) put3(&o, messages[i].content, "\n", "");
    } else if (t == ES_CHAT_LLAMA2 || t == ES_CHAT_MISTRAL) {
        render_inst(&o, t, messages, n_messages);
    } else {
        render_headed(&o, t, messages, n_messages, add_assistant);
    }
    *len = o.len;
    if (o.len >= buf_size)
        return es__fail(NULL, ES_ERR_BUFFER_TOO_SMALL, "es_chat_render: %zu bytes needed, the buffer holds %zu",
                        o.len + 1, buf_size);
    buf[o.len] = '\0';
    return ES_OK;
}
