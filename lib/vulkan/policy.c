/* policy.c: the per-device profiles (policy.h) and their overrides. The numbers and where they
 * come from are in docs/perf.md; a profile without a measurement says so. */
#include "policy.h"

#include "ops.h"

#include <stddef.h>

/* A GPU (measured on an H100, docs/perf.md "Real GPU, second run"): rows of fewer blocks than
 * lanes still get a team (134m Q8_0's 768-element rows: a one-token call 2.25 ms against 4.94
 * walked by one invocation each), and attention gives each (token, head, split of 256 keys) a
 * subgroup (853m Q8_0, one token: 2.40 ms against 7.70 at 1,400 keys, 2.10 against 3.41 at 64;
 * splits of 32 keys gained nothing more with subgroups; above 8 rows one invocation per split of
 * 32 was 11-15% faster, which a choice by tree size could take). One-token calls give a team two
 * rows, not eight, and rmsnorm a workgroup of 256 (an H200, docs/perf.md "Real GPU, fourth run":
 * a one-token call of 853m Q8_0 2.23-2.25 ms with eight rows and 64, 1.94-1.96 with two rows,
 * 2.12-2.14 with 256; four times the teams keep more of the GPU's loads in flight, and a wider
 * rmsnorm walks a row in one step instead of eight dependent ones). */
#define GPU_POLICY(name)                                                                                        \
    {.profile = name, .solo_row_elements = 320, .team_lane_units = 0, .mv_rows = 2, .norm_wg = 256,             \
     .attn_split = ES__ATTN_SPLIT, .attn_team = true, .measure_fused = true}

/* By device type. Whether streams fuse into the forward is measured by each context (forward.c:
 * a fused forward against a forward and a stream pass, for trees of 1 to 8 tokens): on lavapipe
 * rows cost arithmetic and a matrix tile holds 4 rows, so fusing wins only for the smallest trees
 * (docs/perf.md "Fused streams"); on an H100 each context measured its own cap (5 rows with the
 * passes below, 20-40 without). Rows of fewer than 320 elements ran 1.5-2x faster solo for 8
 * tokens on lavapipe (docs/perf.md "short rows"); on a GPU that threshold is lavapipe's until one
 * is measured. Matrix workgroups that serve up to 32 rows of a call in passes over their weight
 * rows (ops.c) were meant to read a tree's weights from memory once on a GPU; on an H100 they were
 * slower than one pass per workgroup at every size from 2 to 64 rows (853m Q8_0: 32 rows 17.3 ms
 * against 11.8; docs/perf.md "Real GPU"), and on lavapipe they gained nothing while slowing small
 * calls (docs/perf.md "Small batches read each weight once"): every profile keeps one pass per
 * workgroup, the passes stay reachable through the policy for a device that measures them
 * faster. llvmpipe compiles each kernel at its first dispatch (20-50 ms for a speculative step's
 * new variants; docs/perf.md), so contexts there warm up when made. */
static const struct {
    VkPhysicalDeviceType type;
    es__vk_policy policy;
} profiles[] = {
    {VK_PHYSICAL_DEVICE_TYPE_CPU,
     {.profile = "cpu (measured on lavapipe)", .solo_row_elements = 320, .team_lane_units = 2, .mv_rows = 8,
      .attn_split = ES__ATTN_SPLIT,
      .warm_up = true, .measure_fused = true}},
    {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, GPU_POLICY("discrete gpu (measured on an H100)")},
    {VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, GPU_POLICY("integrated gpu (unmeasured: the discrete profile)")},
};

static uint32_t pick(int32_t override, uint32_t profile_value) {
    return override == 0 ? profile_value : override < 0 ? 0u : (uint32_t)override;
}

es__vk_policy es__vk_policy_choose(VkPhysicalDeviceType type, const es_vk_tuning *override) {
    es__vk_policy p = GPU_POLICY("other (the gpu profile)");
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (profiles[i].type == type) p = profiles[i].policy;
    if (override) {
        p.fused_stream_rows = pick(override->fused_stream_rows, p.fused_stream_rows);
        p.measure_fused = override->fused_stream_rows == 0;
        p.solo_row_elements = pick(override->solo_row_elements, p.solo_row_elements);
    }
    return p;
}
