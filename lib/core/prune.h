/* prune.h: Speculative Streaming's tree pruning (papers/speculative-streaming.txt 3.2.3) decided
 * once, for every backend. A backend computes the early exit output(output_norm(h + up(down(h))))
 * of every tree token that has children at the input of the adapter's prune layer, hands the
 * logits to es__prune_decide, and runs the later layers and the output head on the survivors
 * only, laid out by es__prune_compact (backend.h states the contract). So the backends make the
 * same decisions on the same inputs and skip the same work. Deliberately no arithmetic on
 * weights here: the early exit itself is each backend's. */
#ifndef ES_CORE_PRUNE_H
#define ES_CORE_PRUNE_H

#include "backend.h"

/* The tokens of f that have children (those the early exit runs for), in pre-order, into
 * parents[f->n]; returns how many. */
int32_t es__prune_parents(const es__fwd *f, int32_t *parents);

/* Prunes below parents[0..n_parents) (a pre-order run of es__prune_parents' list; call in
 * pre-order when called in pieces): a child of a parent that is still in the tree goes, with
 * its subtree, when the probability of its token under the parent's early-exit distribution
 * (softmax of the n_vocab logits of row t, t the parent's index in parents, rows row_stride
 * floats apart)
 * is below f->prune_threshold (NaN counts as below). Marks f->pruned, and writes each child's
 * probability to f->exit_p where the caller asked for them. */
void es__prune_decide(const es__fwd *f, const int32_t *parents, int32_t n_parents, const float *logits,
                      size_t row_stride, int32_t n_vocab);


/* The batch that goes on after pruning: the surviving tokens in batch order, renumbered
 * 0..n'-1. Arrays of the caller, each [f->n]: */
typedef struct es__pruned_batch {
    int32_t n;           /* survivors                                                     */
    int32_t *orig;       /* [n] batch index of survivor r                                 */
    int32_t *tokens, *pos, *dfs_start, *dfs_end, *parent;
    int32_t n_out;       /* surviving rows that want logits                               */
    int32_t *out_rows;   /* [n_out] their new indices, ascending                          */
} es__pruned_batch;

/* Fills p from f and f->pruned; whole subtrees go, so a survivor's ancestors survive and its
 * position is unchanged. Returns p->n. */
int32_t es__prune_compact(const es__fwd *f, es__pruned_batch *p);

#endif /* ES_CORE_PRUNE_H */
