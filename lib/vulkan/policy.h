/* policy.h: per-device choices that are measurements rather than facts about the device: how
 * many rows a forward may carry with Speculative Streaming's streams fused into its own
 * dispatches (measured by each context, forward.c, unless overridden), how many rows a matrix
 * workgroup serves, and below which row length a weight row is walked by one invocation instead
 * of a team. Chosen once per device from a table of profiles (policy.c) when the backend is
 * created, each value overridable through es_backend_params.vk_tuning. Deliberately data: no kernel or
 * forward pass decides these by itself, and nothing here reads the environment. */
#ifndef ES_VULKAN_POLICY_H
#define ES_VULKAN_POLICY_H

#include "edgespec.h"

#include "loader.h"

typedef struct es__vk_policy {
    const char *profile;         /* the table entry the values came from (static text)          */
    uint32_t fused_stream_rows;  /* most rows n (1 + g) of a forward of n tokens with g streams
                                    each whose streams ride in its dispatches; 0 = never       */
    bool measure_fused;          /* no override: each context with an adapter measures that cap
                                    instead (forward.c), fused against a stream pass          */
    uint32_t solo_row_elements;  /* weight rows shorter than this many elements are walked by
                                    one invocation (their team's reduction would cost as much
                                    as the row's arithmetic); 0 = never                        */
    uint32_t team_lane_units;    /* a weight row gets a team only with at least this many units
                                    (4 f32, 8 f16 elements or a 32-element block) per lane: below
                                    that one invocation walks it; 0 = a team however few     */
    uint32_t mm_tile_tokens;     /* the most rows of a call one column of matrix workgroups serves
                                    (in passes; ops.c, at most ES__VK_TILE_TOK): a call of up to
                                    this many rows reads each weight from memory once; 0 = one
                                    pass per workgroup                                          */
    uint32_t mv_rows;            /* weight rows per team in a one-token call (even: SwiGLU and
                                    RoPE take row pairs; lavapipe 8: each activation fetch
                                    serves more rows); 0 = 8                                  */
    uint32_t norm_wg;            /* invocations per workgroup of rmsnorm (one row each); 0 = the
                                    device's usual workgroup (ops.c)                         */
    uint32_t attn_split;         /* key positions per split of attn.comp (flash decoding: one
                                    invocation walks a split, attn_merge.comp folds them): a
                                    power of two dividing ES__ATTN_SPLIT, so that ALSpec's
                                    chunks (multiples of it) stay whole splits                */
    bool attn_team;              /* attention gives each (token, head, split), and the streams'
                                    attention each (stream row, head), a subgroup rather than
                                    an invocation (with subgroup arithmetic; ops.h)           */
    bool warm_up;                /* the driver compiles a kernel at its first dispatch, not at
                                    pipeline creation (llvmpipe): a context runs each forward
                                    variant once when it is made, not in its first steps       */
} es__vk_policy;

/* The profile for a device of this type, with the caller's overrides applied. */
es__vk_policy es__vk_policy_choose(VkPhysicalDeviceType type, const es_vk_tuning *override);

#endif /* ES_VULKAN_POLICY_H */
