/* fake_vulkan.c: a stand-in Vulkan loader that exports one entry point of the many edgespec needs
 * (loaded through no_vulkan_shim.c's ES_SHIM_VULKAN): the library must refuse it whole, naming
 * what is missing, and never call into it. */
void vkCreateInstance(void);
void vkCreateInstance(void) {
}
