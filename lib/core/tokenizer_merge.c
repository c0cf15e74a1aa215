/* tokenizer_merge.c: the merge loop both encoders share, and the per-call scratch it runs in.
 * Symbols form a doubly linked list; candidate merges of adjacent symbols wait in a binary
 * min-heap ordered by (priority, left position), so the best merge, the leftmost on ties, is
 * applied first, as SentencePiece and BPE define it. Entries are not removed when a neighbour
 * changes: an entry whose symbols no longer cover the units they covered when it was pushed is
 * skipped when popped. It knows nothing about texts: symbols carry sids. */
#include "tokenizer_impl.h"

static es_status grow(es__tok_scratch *s, void **ptr, size_t *cap, size_t need, size_t elem, es__err *err) {
    if (need <= *cap) return ES_OK;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2 / elem) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "tokenizer: text too large");
        cap2 *= 2;
    }
    void *p = es__realloc(s->alloc, *ptr, cap2 * elem);
    if (!p) return es__fail(err, ES_ERR_OUT_OF_MEMORY, "tokenizer: out of memory (%zu bytes of scratch)", cap2 * elem);
    *ptr = p;
    *cap = cap2;
    return ES_OK;
}

es_status es__scratch_push(es__tok_scratch *s, int32_t id, es__err *err) {
    if (s->n_out == s->cap_out) ES_TRY(grow(s, (void **)&s->out, &s->cap_out, s->n_out + 1, sizeof *s->out, err));
    s->out[s->n_out++] = id;
    return ES_OK;
}

es_status es__scratch_reserve_sym(es__tok_scratch *s, size_t n, es__err *err) {
    return grow(s, (void **)&s->sym, &s->cap_sym, n, sizeof *s->sym, err);
}

es_status es__scratch_reserve_buf(es__tok_scratch *s, size_t n, es__err *err) {
    return grow(s, (void **)&s->buf, &s->cap_buf, n, 1, err);
}

static inline bool before(const es__bigram *a, const es__bigram *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static es_status heap_push(es__tok_scratch *s, es__bigram e, es__err *err) {
    if (s->n_heap == s->cap_heap)
        ES_TRY(grow(s, (void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap, err));
    es__bigram *h = s->heap;
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
    return ES_OK;
}

static es__bigram heap_pop(es__tok_scratch *s) {
    es__bigram *h = s->heap, top = h[0], last = h[--s->n_heap];
    size_t n = s->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

/* Queues the merge of symbols left and right (adjacent) if the vocabulary has one. */
static es_status try_pair(const es__vocab *v, es__tok_scratch *s, int32_t left, int32_t right, es__err *err) {
    if (left < 0 || right < 0) return ES_OK;
    const es__sym *l = &s->sym[left], *r = &s->sym[right];
    if (l->sid < 0 || r->sid < 0) return ES_OK;
    const es__pair *p = es__vocab_pair(v, l->sid, r->sid);
    if (!p) return ES_OK;
    return heap_push(s, (es__bigram){p->prio, left, right, p->result, l->n + r->n}, err);
}

es_status es__merge_symbols(const es__vocab *v, es__tok_scratch *s, int32_t n, es__err *err) {
    s->n_heap = 0;
    for (int32_t i = 0; i + 1 < n; i++) ES_TRY(try_pair(v, s, i, i + 1, err));
    while (s->n_heap) {
        es__bigram e = heap_pop(s);
        es__sym *l = &s->sym[e.left], *r = &s->sym[e.right];
        /* symbols only grow, so unchanged sizes mean both are still the ones queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != e.size) continue;
        l->sid = e.result;
        l->n += r->n;
        l->len += r->len;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = e.left;
        ES_TRY(try_pair(v, s, l->prev, e.left, err));
        ES_TRY(try_pair(v, s, e.left, l->next, err));
    }
    return ES_OK;
}
