/* push.h: push-constant blocks, one X-macro per kernel family, shared by the GLSL kernels and
 * the C host code so the two layouts cannot drift apart. Every member is a 32-bit scalar, so the
 * std430 push-constant layout and the C struct agree member for member; lib/vulkan/kernels.c
 * checks the sizes with _Static_assert and every pipeline's reflected block size at creation.
 * U(x) declares a uint, F(x) a float. Units: "texels" are 16-byte vec4/uvec4 elements. */
#ifndef ES_SHADERS_PUSH_H
#define ES_SHADERS_PUSH_H

/* mul_mat: Y[t][y_off + r] (=, +=, or SwiGLU of row pairs) = sum_k W[r][k] * X[t][k],
 * r < M, t < n. W row r starts at texel w_off + r * (K / elements-per-texel). With the RoPE
 * epilogue the rows are Q, K and V of attention and the results are rotated and written to QKV
 * (Q) and the KV cache (K, V). */
#define ES_PC_MUL_MAT(U, F)                                                                        \
    U(M)        /* rows of W                                                 */                    \
    U(K)        /* elements per row, a multiple of 32                         */                   \
    U(n)        /* tokens                                                     */                   \
    U(x_off)    /* texel of token 0's row in X                                */                   \
    U(x_stride) /* texels between token rows of X                             */                   \
    U(y_off)    /* float offset of row 0 in token 0's row of Y               */                    \
    U(y_stride) /* floats between token rows of Y                             */                   \
    U(w_off)    /* texel of row 0 in the W view                               */                   \
    U(s_off)    /* texel of row 0's first scales in the S view                */                   \
    U(row0)     /* RoPE: fused row of this part's row 0                       */                   \
    U(n_head)   /* RoPE: query heads (rows n_head * hd are Q, then K, then V) */                   \
    U(n_head_kv)                                                                                   \
    U(hd)       /* RoPE: head dimension                                       */                   \
    U(n_rot)    /* RoPE: rotated dimensions per head                          */                   \
    U(neox)     /* RoPE: 1 = pairs (i, i + n_rot/2), rows permuted to adjacency */                 \
    U(n_ctx)    /* RoPE: cache slots per head                                 */                   \
    U(perm_rows) /* rows (from fused row 0) permuted for NEOX (0 = none): the    */                  \
                 /* store epilogue writes them back in head-dimension order      */                  \
    U(lora_r)   /* LoRA variant: values per row of R (the rank, summed over fused targets) */ \
    U(lora_stride) /* LoRA variant: texels between tokens' rows of R          */ \
    U(ss_t0)    /* Speculative Streaming: tokens t >= ss_t0 are stream rows: the LoRA */ \
                /* variant adds B R[t - ss_t0] to them only (0: to every token)      */ \
    U(ss_g)     /* streams per node when stream rows ride in the forward (else 0):   */ \
                /* the RoPE epilogue rotates row t >= ss_t0 at the position of node  */ \
                /* (t - ss_t0) / ss_g and writes its Q, K, V to Y, not the cache     */ \
    U(bias_off) /* RoPE: float offset in ROPE of the fused rows' biases, in head   */ \
                /* order (qwen2, lib/core/arch.h); 0 = no biases                    */ \
    F(softcap)  /* store epilogue: Y = softcap tanh(WX / softcap) (0 = plain)      */ \
    U(rope_off) /* RoPE: float offset in ROPE of the layer's table (its kind of     */ \
                /* rotation, lib/core/rope.h es__rope_table_of; 0 = the model's)   */ \
    F(scale)    /* store and add epilogues: WX (with its LoRA term) times it first: */ \
                /* the head's logit multiplier before the soft-capping, a residual  */ \
                /* branch's scale before its add (granite, lib/core/model.h; 0: 1)  */ \
    U(rope_stride) /* RoPE: floats between positions in the layer's table: n_rot,  */ \
                /* or 0 for the identity's one row (model_vk.h es__vk_rope_stride) */

/* Step data: 32-bit ints the host writes before each forward submission. A header of
 * ES_STEP_HDR ints, then arrays of nb = n_batch + 1 entries, array k at
 * ES_STEP_HDR + k * nb. After the arrays: the attention dispatches' indirect arguments,
 * 4 uints (heads, splits, tokens, 0) per dispatch. */
#define ES_STEP_N_PAST 0  /* committed tokens                                    */
#define ES_STEP_NB 1      /* entries per array: n_batch + 1                       */
#define ES_STEP_N_KEEP 2  /* kv_move: slots kept                                 */
#define ES_STEP_CHAIN 3   /* 1: the batch is a chain, so position q is in slot q */
/* Slot 4: ss_push.h. Slots 5, 6: only for tests/bench's dense-mask build of attn.comp (DENSE_MASK):
 * where its N x N byte mask starts (in ints, after the arrays) and N. */
#define ES_STEP_MASK 5
#define ES_STEP_MASK_N 6
#define ES_STEP_HDR 8
#define ES_STEP_TOKENS 0  /* [n] token ids                                       */
#define ES_STEP_POS 1     /* [n] absolute positions                              */
#define ES_STEP_DFS_END 2 /* [n] last pre-order index of each token's subtree    */
#define ES_STEP_OUT_ROWS 3 /* [n_out] tokens whose logits are wanted             */
#define ES_STEP_ORDER 4   /* [n] batch indices sorted by depth (stable)          */
#define ES_STEP_LEVEL 5   /* [depth + 2] start of each depth in ORDER            */
#define ES_STEP_KEEP 6    /* [n_keep] kv_move sources (relative to n_past)       */
#define ES_STEP_EXIT_ROWS 7 /* [n_parents] rows the pruning early exit reads     */
#define ES_STEP_ARRAYS 8

/* rmsnorm: Y[t] = X[row(t)] / rms(X[row(t)]) * G for t < n; row(t) = t, or out_rows[t] of
 * the step data when gather is set (the final norm before the output head). With add and norm2
 * a post-branch norm and the norm after it in one dispatch: Y[t] += add X[t] / rms(X[t]) * G,
 * then Z[t] = Y[t] / rms(Y[t]) * G2, Z bound to X's rows (the branch's output is replaced). */
#define ES_PC_RMSNORM(U, F)                                                                        \
    U(E)        /* elements per row                                           */                   \
    U(n)        /* rows to normalise                                          */                   \
    U(x_stride) /* floats between rows of X (and of Y, Z)                     */                   \
    U(g_off)    /* float offset of the weight vector in G                     */                   \
    U(gather)   /* 1: read row out_rows[t] of X (not with norm2)              */                   \
    F(eps)                                                                                         \
    F(add)      /* not 0: Y[t] += add times the normalised row (gemma2's post-  */                 \
                /* branch norms; add is the residual scale, 1 but for granite-  */                 \
                /* like models, lib/core/model.h)                               */                 \
    U(norm2)    /* 1 (with add): then Z[t] = rmsnorm(Y[t]) * G2 (0: no Z)      */                 \
    U(g2_off)   /* norm2: float offset of G2 in G                             */

/* get_rows: X[t] = dequantised row tokens[t] of the embedding matrix, for the tokens whose row
 * lies in this part [row0, row0 + rows). */
#define ES_PC_GET_ROWS(U, F)                                                                       \
    U(K)        /* elements per row (padded)                                  */                   \
    U(E)        /* elements to write                                          */                   \
    U(n)        /* tokens                                                     */                   \
    U(row0)     /* first row of this part                                     */                   \
    U(rows)     /* rows in this part                                          */                   \
    U(x_stride) /* floats between rows of X                                   */                   \
    U(team)     /* lanes per team the scales were interleaved for (weights.glsl) */                 \
    F(scale)    /* every element is multiplied by it (gemma's sqrt(n_embd))  */

/* attn: one (head, split) of tree attention for a tile of tokens, online softmax; attn.comp. */
#define ES_PC_ATTN(U, F)                                                                           \
    U(t0)       /* first token of this dispatch (grid z counts tiles from it)  */                  \
    U(n_tok)    /* tokens in this dispatch                                     */                  \
    U(n_head)                                                                                      \
    U(n_head_kv)                                                                                   \
    U(hd)                                                                                          \
    U(qkv_stride) /* floats between token rows of QKV (q at offset 0)         */                   \
    U(n_ctx)    /* slots per head in the cache                                */                   \
    U(split)    /* positions per split (a multiple of the tile)               */                   \
    U(max_splits) /* splits per (token, head) in the partials buffer, which   */                   \
                  /* holds the tokens t0.. of one dispatch                    */                   \
    U(o_stride) /* floats between token rows of the output                    */                   \
    F(scale)    /* 1 / sqrt(hd)                                               */                   \
    U(window)   /* keys at positions <= pos - window are not seen (0: all)   */                   \
    F(softcap)  /* scores become softcap tanh(score / softcap) (0: not)       */                   \
    U(part_mode) /* ALSpec's two parts (es__alspec_part): 0 every split, 1 all */                  \
                 /* but the middle [mid_lo, mid_hi) (the speculation), 2 the  */                   \
                 /* middle alone (the exact output's rest)                    */                   \
    U(mid_lo)                                                                                      \
    U(mid_hi)

/* attn_merge: combines the splits of each (head, token) that needed more than one. */
#define ES_PC_ATTN_MERGE(U, F)                                                                     \
    U(t0)       /* first token of this dispatch                               */                   \
    U(n_head)                                                                                      \
    U(hd)                                                                                          \
    U(split)                                                                                       \
    U(max_splits)                                                                                  \
    U(o_stride)

/* attn_spec: ALSpec's reducer of a decode token's split partials: the speculation, the exact
 * output and their check, over all heads (attn_spec.comp; lib/core/spec_attn.h). */
#define ES_PC_ATTN_SPEC(U, F)                                                                      \
    U(t0)       /* first token of this dispatch                               */                   \
    U(n_head)                                                                                      \
    U(hd)                                                                                          \
    U(split)                                                                                       \
    U(max_splits)                                                                                  \
    U(o_stride)                                                                                    \
    U(chunk)    /* S: positions per chunk, a multiple of split                */                   \
    U(v_slot)   /* the verdict slot of the dispatch's first token             */                   \
    U(spec_only) /* 1: the speculation alone (ALSpec's first part, before the */                   \
                 /* middle splits exist): SPEC and VERD.valid only            */

/* alspec_copy: ALSpec's two-device token (lib/vulkan/alspec_vk.c): rows x n floats from S to D,
 * row r at src_off + r src_stride and dst_off + r dst_stride (floats, from each binding's start). */
#define ES_PC_ALSPEC_COPY(U, F)                                                                    \
    U(n)                                                                                           \
    U(rows)                                                                                        \
    U(src_off)                                                                                     \
    U(src_stride)                                                                                  \
    U(dst_off)                                                                                     \
    U(dst_stride)

/* alspec_gate: the gating flags of ALSpec's two-device token (alspec_gate.comp). */
#define ES_ALSPEC_GATE_CHECK 0   /* after layer's check: this device's miss flag, its hit published */
#define ES_ALSPEC_GATE_ADVANCE 1 /* after the check's exchange: is this device layer + 1's sender */
#define ES_PC_ALSPEC_GATE(U, F)                                                                    \
    U(mode)                                                                                        \
    U(layer)                                                                                       \
    U(side)     /* this device's side of the link (0 or 1)                    */                   \
    U(n_layer)                                                                                     \
    U(flag_off) /* layer l's verdict from side k: the word flag_off of record */                   \
    U(rec_stride) /* l + 1 of side k, records of rec_stride words, n_layer + 1 */                  \
                  /* a side                                                   */

/* kv_move: for r < n_keep, cache slot n_past + keep[r] moves to n_past + r, in ascending r. */
#define ES_PC_KV_MOVE(U, F)                                                                        \
    U(n_keep)                                                                                      \
    U(n_past)                                                                                      \
    U(row)      /* floats per slot (head dimension)                           */                   \
    U(n_ctx)    /* slots per head                                             */                   \
    U(n_heads)  /* heads per layer in the range (n_head_kv)                   */                   \
    U(step_n_past) /* 1: n_past from the step data (a replayed command buffer) */

/* qk_norm_rope: the Q, K, V biases (when given), the RMSNorm of each Q and K head and RoPE of one
 * row of QKV per workgroup (qk_norm architectures, lib/core/arch.h; qk_norm_rope.comp). Token rows
 * write K and V to cache slot n_past + t; stream rows keep theirs. */
#define ES_PC_QK_NORM_ROPE(U, F)                                                                   \
    U(n)        /* rows                                                       */                   \
    U(n_head)                                                                                      \
    U(n_head_kv)                                                                                   \
    U(hd)                                                                                          \
    U(n_rot)                                                                                       \
    U(neox)     /* 1: pairs (i, i + n_rot/2); 0: (2i, 2i + 1)                 */                   \
    U(qkv_stride) /* floats between rows of QKV                               */                   \
    U(n_ctx)    /* slots per head in the cache                                */                   \
    U(bias_off) /* float offset of the Q, K, V biases in ROPE, head order; 0: none */              \
    U(q_norm)   /* float offset of the Q heads' norm weights in G             */                   \
    U(k_norm)   /* and of the K heads'                                        */                   \
    U(ss_t0)    /* rows t >= ss_t0 are stream rows (n: none)                  */                   \
    U(ss_g)     /* streams per node: stream row t is node (t - ss_t0) / ss_g's; */                 \
                /* 0: every stream row is the step's ES_STEP_SS_NODE's (the    */                  \
                /* stream pass, ss_push.h)                                     */                  \
    F(eps)                                                                                         \
    U(rope_off) /* float offset in ROPE of the layer's table (0: the model's)  */                  \
    U(rope_stride) /* floats between its positions (n_rot; 0: the identity's one row) */

/* kv_shift: a context shift of one layer's cache (kv_shift.comp). */
#define ES_PC_KV_SHIFT(U, F)                                                                       \
    U(n_keep)   /* slots kept in place                                        */                   \
    U(d)        /* slots dropped after them                                   */                   \
    U(n_past)   /* committed slots before the shift                           */                   \
    U(hd)                                                                                          \
    U(n_ctx)    /* slots per head                                             */                   \
    U(n_rot)                                                                                       \
    U(neox)     /* 1: pairs (i, i + n_rot/2); 0: (2i, 2i + 1)                 */                   \
    U(cs_off)   /* float offset in CS of the layer's table's row (its kind of   */                   \
                /* rotation, lib/core/rope.h es__rope_table_of)                 */

/* argmax / top-k over rows of logits: ids (and values) of the k largest, ties to the lower id. */
#define ES_PC_TOPK(U, F)                                                                           \
    U(V)        /* entries per row                                            */                   \
    U(n)        /* rows                                                       */                   \
    U(k)        /* results per row (k <= 64)                                  */                   \
    U(stride)   /* floats between rows                                        */

/* softmax over rows, in place: y = exp(x - max) / sum. */
#define ES_PC_SOFTMAX(U, F)                                                                        \
    U(V)                                                                                           \
    U(n)                                                                                           \
    U(stride)

#endif
