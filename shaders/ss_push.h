/* ss_push.h: push-constant blocks of the Speculative Streaming kernels (ss_*.comp), shared with
 * lib/vulkan/msa_vk.c like push.h; lib/vulkan/kernels.c checks their sizes. The token whose
 * streams run is read from the step data (ES_STEP_SS_NODE), so the stream pass's command buffer
 * is recorded once and replayed. */
#ifndef ES_SHADERS_SS_PUSH_H
#define ES_SHADERS_SS_PUSH_H

/* Step-data header slot: the batch token whose streams the stream pass computes. */
#define ES_STEP_SS_NODE 4 /* after push.h's header slots 0-3 */

/* ss_rows: row copies and the element-wise steps of the stream pass.
 *   mode 0: Y[r] = X[r]                       (r < n_rows)
 *   mode 1: Y[j] = X[node] + P[j]             (Eq. 3: the streams' start; node from the step)
 *   mode 2: Y[y_row0 + r] = X[r / g] + P[r % g] (the same for every node's g streams, when they
 *                                               ride in the forward's rows after its y_row0 tokens)
 *   mode 3: Y[r] = X[exit_rows[r]]            (the pruning early exit's input: the rows of the
 *                                               tokens with children, listed in the step data)
 * Strides and widths in texels (4 floats). */
#define ES_PC_SS_ROWS(U, F)                                                                        \
    U(mode)                                                                                        \
    U(g)        /* mode 2: streams per node                                   */                   \
    U(y_row0)   /* mode 2: the first stream row of Y                          */                   \
    U(n_rows)                                                                                      \
    U(width)    /* texels written per row                                     */                   \
    U(x_stride) /* texels between rows of X                                   */                   \
    U(p_stride) /* texels between rows of P                                   */                   \
    U(y_stride) /* texels between rows of Y                                   */

/* ss_rope: adds the layer's Q, K, V biases (when it has them) to the stream rows in QKV, then
 * rotates their Q and K heads in place at the position of the step's node; writes nothing to
 * the cache (streams write no KV). */
#define ES_PC_SS_ROPE(U, F)                                                                        \
    U(n)        /* stream rows                                                */                   \
    U(n_head)                                                                                      \
    U(n_head_kv)                                                                                   \
    U(hd)                                                                                          \
    U(n_rot)                                                                                       \
    U(neox)                                                                                        \
    U(qkv_stride) /* floats between rows of QKV                               */                   \
    U(bias_off) /* float offset of the layer's Q, K, V biases in ROPE (qwen2), head order; 0: none */ \
    U(rope_off) /* float offset in ROPE of the layer's table (rope.h es__rope_table_of; 0: the model's) */ \
    U(rope_stride) /* floats between its positions (n_rot; 0: the identity's one row) */

/* ss_attn: multi-stream attention (Eq. 2) of stream j of a node: the keys of positions
 * 0..pos(node) (committed slots, then the node's ancestors and itself) and the keys of the node's
 * stream rows 0..j. One invocation per (stream row, head). g = 0: the stream pass of the step's
 * node, its rows from 0; g > 0: every node's g streams, node i's at rows row0 + i g. */
#define ES_PC_SS_ATTN(U, F)                                                                        \
    U(n_rows)   /* stream rows                                                */                   \
    U(g)                                                                                           \
    U(row0)     /* g > 0: the first stream row of QKV and of the output      */                   \
    U(n_head)                                                                                      \
    U(n_head_kv)                                                                                   \
    U(hd)                                                                                          \
    U(qkv_stride) /* floats between stream rows of QKV                        */                   \
    U(n_ctx)    /* slots per head in the cache                                */                   \
    U(o_stride) /* floats between rows of the output                          */                   \
    U(window)   /* the layer's sliding window: keys at positions <= p - window unseen (0: all) */ \
    F(scale)                                                                                       \
    F(softcap)  /* scores become softcap tanh(s / softcap) (gemma2; 0: not)   */

#endif
