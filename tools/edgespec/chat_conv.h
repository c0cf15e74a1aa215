/* chat_conv.h: the conversation `edgespec chat` holds and keeps in step with a context: the
 * messages, the token sequence the context holds, and what a turn must feed. Each turn renders
 * the whole conversation with the chat template and tokenizes it; the sequence is cut back only
 * where the two part (normally the end of the last answer, whose end-of-turn marker the model
 * wrote in its own way), so only the new turn is read. When the conversation outgrows the
 * context, its oldest exchanges go and the cache shifts down over them (es_context_shift)
 * instead of reading the rest again.
 *
 * The sequence is kept one step ahead of the cache, with plain decoding as with speculation
 * (where it is es_spec's own rule): the cache holds all but the last token, which the next turn
 * reads first. Plain and speculative chats then edit and shift the same cache the same way and
 * write the same text. */
#ifndef EDGESPEC_CLI_CHAT_CONV_H
#define EDGESPEC_CLI_CHAT_CONV_H

#include "cli.h"

typedef struct chat_message {
    char *role;
    char *content;
} chat_message;

typedef struct chat_conv {
    const es_model *model;
    es_context *ctx;
    es_spec *spec;         /* NULL: plain decoding                                              */
    es_chat_template tmpl;
    int32_t bos;           /* the model's BOS id or -1                                          */
    chat_message *msgs;
    size_t n_msgs, msgs_cap;
    int32_t *seq;          /* the sequence: the cache holds seq[0..n_seq - 1)                    */
    size_t n_seq, seq_cap;
    int32_t *next;         /* the rendered conversation, tokenized: what the next turn needs     */
    size_t n_next;
    size_t n_shifts, n_shifted; /* context shifts so far and the tokens they dropped (the report) */
} chat_conv;

void chat_conv_init(chat_conv *c, const es_model *model, es_context *ctx, es_spec *spec, es_chat_template t);
void chat_conv_free(chat_conv *c);

/* Appends a message (copied). CLI_EXIT_OK or a failure already reported. */
int chat_conv_add(chat_conv *c, const char *role, const char *content);
/* Drops the last message (a user turn that could not be answered). */
void chat_conv_pop(chat_conv *c);
/* Forgets every message but a leading system one, and the cache with them. */
int chat_conv_reset(chat_conv *c);
/* Forgets the cache only (after a failed turn): the next turn reads the conversation again. */
int chat_conv_forget_cache(chat_conv *c);

/* Makes the context ready to answer the last message with at most `reserve` new tokens: drops
 * the oldest exchanges while the rendering does not fit (a user message that cannot fit even
 * alone is an error, the message removed), shifts or cuts back the cache to the rendering, and
 * sets *feed, *n_feed to the tokens generation must read (they live in c). CLI_EXIT_OK or a
 * failure already reported. */
int chat_conv_begin_turn(chat_conv *c, int32_t reserve, const int32_t **feed, size_t *n_feed);
/* After generation: the answer's text becomes the assistant message, its tokens (the first
 * n_out of out) join the sequence as far as the context (or es_spec) kept them. */
int chat_conv_end_turn(chat_conv *c, const char *answer, const int32_t *out, size_t n_out);

/* /save and /load: the session file (es_context_save) plus the messages beside it in
 * PATH.messages. CLI_EXIT_OK or a failure already reported; a failed load leaves a reset chat. */
int chat_conv_save(chat_conv *c, const char *path);
int chat_conv_load(chat_conv *c, const char *path);

#endif /* EDGESPEC_CLI_CHAT_CONV_H */
