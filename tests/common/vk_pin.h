/* vk_pin.h: a test that runs Vulkan holds one VkInstance for the whole process. Mesa's lavapipe
 * makes one-time libstdc++ allocations when the loader first loads it, and the loader unloads
 * the driver with the last VkInstance, which leaves those allocations unreachable and
 * LeakSanitizer (the ASan CI build) reporting the driver's leak as ours; a pinned instance keeps
 * the driver loaded and its allocations reachable. A no-op unless ES_TEST_VULKAN is 1 (the
 * Vulkan tests, and the others when the build has Vulkan: tests/spec, tests/bench). */
#ifndef ES_TEST_VK_PIN_H
#define ES_TEST_VK_PIN_H

#if ES_TEST_VULKAN
#include "loader.h"
static inline void test_pin_vulkan(void) {
    static VkInstance pinned;
    if (pinned) return;
    /* the library's own table of entry points (loader.h): the test links no libvulkan */
    if (es__vk_load(NULL) != ES_OK) return;
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    if (vkCreateInstance(&ci, NULL, &pinned) != VK_SUCCESS) pinned = VK_NULL_HANDLE;
}
#else
static inline void test_pin_vulkan(void) {}
#endif

#endif
