/* batch.c: turns a caller's es_batch into validated arrays for the backends. A bad tree is
 * rejected here, once, so no backend ever sees one. */
#include "batch.h"

static es_status check_tree(const es_batch *b, int32_t n_past, es__batch_scratch *s, es__err *err) {
    const int32_t n = b->n_tokens;
    /* stack of open ancestors: indices whose subtree (dfs_end) still covers the current index */
    int32_t *stack = s->out_rows; /* borrowed: out_rows is filled after this check */
    int32_t depth = 0;
    for (int32_t j = 0; j < n; j++) {
        int32_t st = b->dfs_start[j], en = b->dfs_end[j];
        ES_RETURN_IF(st != j, err, ES_ERR_INVALID_TREE,
                     "batch token %d: dfs_start %d, expected %d (tokens must be in DFS pre-order)", j, st, j);
        ES_RETURN_IF(en < j || en >= n, err, ES_ERR_INVALID_TREE,
                     "batch token %d: dfs_end %d outside [%d, %d]", j, en, j, n - 1);
        while (depth > 0 && b->dfs_end[stack[depth - 1]] < j) depth--;
        int32_t parent = depth > 0 ? stack[depth - 1] : -1;
        ES_RETURN_IF(parent >= 0 && en > b->dfs_end[parent], err, ES_ERR_INVALID_TREE,
                     "batch token %d: interval [%d, %d] overlaps its parent %d's [%d, %d] without nesting",
                     j, st, en, parent, parent, b->dfs_end[parent]);
        int32_t want = n_past + depth;
        int32_t pos = b->pos ? b->pos[j] : want;
        ES_RETURN_IF(pos != want, err, ES_ERR_INVALID_TREE,
                     "batch token %d: position %d, expected n_past + depth = %d", j, pos, want);
        s->pos[j] = pos;
        s->dfs_start[j] = st;
        s->dfs_end[j] = en;
        s->parent[j] = parent;
        stack[depth++] = j;
    }
    return ES_OK;
}

es_status es__batch_validate(const es_batch *b, int32_t n_past, int32_t n_ctx, int32_t n_batch,
                             int32_t n_vocab, es__batch_scratch *s, int32_t *n_out, es__err *err) {
    ES_RETURN_IF(!b || !b->tokens, err, ES_ERR_INVALID_ARGUMENT, "batch or batch.tokens is NULL");
    const int32_t n = b->n_tokens;
    ES_RETURN_IF(n < 1 || n > n_batch, err, ES_ERR_INVALID_ARGUMENT,
                 "batch of %d tokens, expected 1..%d (n_batch)", n, n_batch);
    ES_RETURN_IF(n > s->cap, err, ES_ERR_INVALID_ARGUMENT, "batch of %d tokens exceeds scratch %d", n, s->cap);
    ES_RETURN_IF((int64_t)n_past + n > n_ctx, err, ES_ERR_CONTEXT_FULL,
                 "batch of %d tokens after %d committed exceeds n_ctx %d", n, n_past, n_ctx);
    ES_RETURN_IF((b->dfs_start == NULL) != (b->dfs_end == NULL), err, ES_ERR_INVALID_ARGUMENT,
                 "batch: dfs_start and dfs_end must both be given or both be NULL");
    for (int32_t i = 0; i < n; i++)
        ES_RETURN_IF(b->tokens[i] < 0 || b->tokens[i] >= n_vocab, err, ES_ERR_INVALID_ARGUMENT,
                     "batch token %d: id %d outside [0, %d)", i, b->tokens[i], n_vocab);
    if (b->dfs_start) {
        ES_TRY(check_tree(b, n_past, s, err));
    } else {
        for (int32_t i = 0; i < n; i++) {
            int32_t want = n_past + i;
            ES_RETURN_IF(b->pos && b->pos[i] != want, err, ES_ERR_INVALID_TREE,
                         "batch token %d: position %d, expected %d for a chain", i, b->pos[i], want);
            s->pos[i] = want;
            s->dfs_start[i] = i;
            s->dfs_end[i] = n - 1;
            s->parent[i] = i - 1;
        }
    }
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (b->logits ? b->logits[i] != 0 : i == n - 1) s->out_rows[k++] = i;
    *n_out = k;
    return ES_OK;
}
