/* policy.c: the per-device profiles (policy.h) and their overrides. The numbers and where they
 * come from are in docs/perf.md; a profile without a measurement says so. */
#include "policy.h"

#include <stddef.h>

/* By device type. A CPU implementation of Vulkan (Mesa's lavapipe here) is compute-bound: a row
 * costs arithmetic, a matrix tile holds 4 rows, and fused streams beat the stream pass only while
 * the MSA layers' rows fit one tile (n (1 + g) <= 4; docs/perf.md "Fused streams"); rows of fewer
 * than 320 elements ran 1.5-2x faster solo for 8 tokens (docs/perf.md "short rows"). On a GPU a
 * row is nearly free next to a dispatch, so the paper's one pass per step (every node's streams
 * in the forward) should win for any tree the default 32-node cap allows with γ <= 3; that is a
 * tabled expectation, not a measurement (no GPU was lent to measure it), and the solo threshold
 * is lavapipe's until one is. A GPU's matrix workgroup serves up to 32 rows of a call in passes
 * over its weight rows, which its L1 keeps after the first (a team's 8 rows x 4096 Q8_0 are
 * 32 KiB), so a tree of up to 32 nodes reads its weights from memory once and decodes them in
 * the SMs' spare arithmetic; tabled, not measured. On lavapipe the passes gained nothing (a row
 * costs arithmetic, and main's columns find the weights in the 32 MiB L3 anyway) while the pass
 * wrapper slowed small calls (docs/perf.md "Small batches read each weight once"), so CPU
 * devices keep one pass per workgroup. llvmpipe compiles each kernel at its first dispatch
 * (20-50 ms for a speculative step's new variants; docs/perf.md), so contexts there warm up when
 * made. */
static const struct {
    VkPhysicalDeviceType type;
    es__vk_policy policy;
} profiles[] = {
    {VK_PHYSICAL_DEVICE_TYPE_CPU, {"cpu (measured on lavapipe)", 4, 320, 0, true}},
    {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, {"gpu (tabled, unmeasured)", 128, 320, 32, false}},
    {VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, {"gpu (tabled, unmeasured)", 128, 320, 32, false}},
};

static uint32_t pick(int32_t override, uint32_t profile_value) {
    return override == 0 ? profile_value : override < 0 ? 0u : (uint32_t)override;
}

es__vk_policy es__vk_policy_choose(VkPhysicalDeviceType type, const es_vk_tuning *override) {
    es__vk_policy p = {"other (the gpu table)", 128, 320, 32, false};
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (profiles[i].type == type) p = profiles[i].policy;
    if (override) {
        p.fused_stream_rows = pick(override->fused_stream_rows, p.fused_stream_rows);
        p.solo_row_elements = pick(override->solo_row_elements, p.solo_row_elements);
    }
    return p;
}
