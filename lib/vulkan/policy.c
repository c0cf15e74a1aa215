/* policy.c: the per-device profiles (policy.h) and their overrides. The numbers and where they
 * come from are in docs/perf.md; a profile without a measurement says so. */
#include "policy.h"

#include <stddef.h>

/* By device type. Whether streams fuse into the forward is measured by each context (forward.c:
 * a fused forward against a forward and a stream pass, for trees of 1 to 8 tokens): on lavapipe
 * rows cost arithmetic and a matrix tile holds 4 rows, so fusing wins only for the smallest trees
 * (docs/perf.md "Fused streams"), on a GPU rows are nearly free next to a dispatch, but neither is
 * assumed. Rows of fewer than 320 elements ran 1.5-2x faster solo for 8 tokens on lavapipe
 * (docs/perf.md "short rows"); on a GPU that threshold is lavapipe's until one is measured.
 * A GPU's matrix workgroup serves up to 32 rows of a call in passes over its weight rows, which
 * its L1 keeps after the first (a team's 8 rows x 4096 Q8_0 are 32 KiB), so a tree of up to 32
 * nodes reads its weights from memory once and decodes them in the SMs' spare arithmetic;
 * tabled, not measured. On lavapipe the passes gained nothing (a row costs arithmetic, and the
 * columns of one-pass workgroups find the weights in the 32 MiB L3 anyway) while the pass wrapper
 * slowed small calls (docs/perf.md "Small batches read each weight once"), so CPU devices keep
 * one pass per workgroup. llvmpipe compiles each kernel at its first dispatch (20-50 ms for a
 * speculative step's new variants; docs/perf.md), so contexts there warm up when made. */
static const struct {
    VkPhysicalDeviceType type;
    es__vk_policy policy;
} profiles[] = {
    {VK_PHYSICAL_DEVICE_TYPE_CPU,
     {.profile = "cpu (measured on lavapipe)", .solo_row_elements = 320, .warm_up = true, .measure_fused = true}},
    {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
     {.profile = "gpu (tabled, unmeasured)", .solo_row_elements = 320, .mm_tile_tokens = 32, .measure_fused = true}},
    {VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
     {.profile = "gpu (tabled, unmeasured)", .solo_row_elements = 320, .mm_tile_tokens = 32, .measure_fused = true}},
};

static uint32_t pick(int32_t override, uint32_t profile_value) {
    return override == 0 ? profile_value : override < 0 ? 0u : (uint32_t)override;
}

es__vk_policy es__vk_policy_choose(VkPhysicalDeviceType type, const es_vk_tuning *override) {
    es__vk_policy p = {.profile = "other (the gpu table)", .solo_row_elements = 320, .mm_tile_tokens = 32,
                       .measure_fused = true};
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (profiles[i].type == type) p = profiles[i].policy;
    if (override) {
        p.fused_stream_rows = pick(override->fused_stream_rows, p.fused_stream_rows);
        p.measure_fused = override->fused_stream_rows == 0;
        p.solo_row_elements = pick(override->solo_row_elements, p.solo_row_elements);
    }
    return p;
}
