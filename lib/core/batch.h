/* batch.h: validation of a public es_batch into the backend's es__fwd form. */
#ifndef ES_CORE_BATCH_H
#define ES_CORE_BATCH_H

#include "common.h"

/* Scratch the caller owns, each [cap] entries. */
typedef struct es__batch_scratch {
    int32_t *pos, *dfs_start, *dfs_end, *parent, *out_rows;
    int32_t cap;
} es__batch_scratch;

/* Checks b against the context's state and fills s with explicit positions, DFS intervals
 * (filled in for a chain when b leaves them NULL), parents and the rows that want logits.
 * Rules: 1 <= n <= n_batch; n_past + n <= n_ctx; tokens in [0, n_vocab); the batch is in DFS
 * pre-order (dfs_start[i] == i); intervals nest (i < j <= dfs_end[i] implies dfs_end[j] <=
 * dfs_end[i]); positions are n_past + depth. */
es_status es__batch_validate(const es_batch *b, int32_t n_past, int32_t n_ctx, int32_t n_batch,
                             int32_t n_vocab, es__batch_scratch *s, int32_t *n_out, es__err *err);

#endif /* ES_CORE_BATCH_H */
