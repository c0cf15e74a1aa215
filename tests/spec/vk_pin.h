/* vk_pin.h: the spec tests' Vulkan runs hold one VkInstance for the whole process, as the Vulkan
 * tests do (tests/vulkan/vk_test.h): lavapipe's one-time allocations then stay reachable instead
 * of being reported by LeakSanitizer when the loader unloads the driver. A no-op without Vulkan. */
#ifndef ES_TEST_VK_PIN_H
#define ES_TEST_VK_PIN_H

#if ES_TEST_VULKAN
#include <vulkan/vulkan.h>
static void spec_pin_vulkan(void) {
    static VkInstance pinned;
    if (pinned) return;
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    if (vkCreateInstance(&ci, NULL, &pinned) != VK_SUCCESS) pinned = VK_NULL_HANDLE;
}
#else
static void spec_pin_vulkan(void) {}
#endif

#endif
