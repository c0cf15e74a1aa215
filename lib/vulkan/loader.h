/* loader.h: the Vulkan loader, opened at run time rather than linked, so that libedgespec loads
 * (and its CPU backend runs) on a system without one. Every Vulkan call in lib/vulkan and the
 * tests goes through the pointers below, which es__vk_load() fills from the loader library's
 * exports (the same entry points linking with -lvulkan binds to). The build defines
 * VK_NO_PROTOTYPES, so a call to a function missing from ES__VK_FUNCS fails to compile: add it
 * there. Extension functions are still looked up per instance with vkGetInstanceProcAddr.
 * Include this instead of <vulkan/vulkan.h>. */
#ifndef ES_VULKAN_LOADER_H
#define ES_VULKAN_LOADER_H

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include "common.h"

/* Vulkan 1.0 and 1.1 core entry points, all exported by the loader library. */
#define ES__VK_FUNCS(X) \
    X(vkAllocateCommandBuffers) \
    X(vkAllocateDescriptorSets) \
    X(vkAllocateMemory) \
    X(vkBeginCommandBuffer) \
    X(vkBindBufferMemory) \
    X(vkCmdBindDescriptorSets) \
    X(vkCmdBindPipeline) \
    X(vkCmdCopyBuffer) \
    X(vkCmdDispatch) \
    X(vkCmdDispatchIndirect) \
    X(vkCmdFillBuffer) \
    X(vkCmdPipelineBarrier) \
    X(vkCmdPushConstants) \
    X(vkCmdResetQueryPool) \
    X(vkCmdWriteTimestamp) \
    X(vkCreateBuffer) \
    X(vkCreateBufferView) \
    X(vkCreateCommandPool) \
    X(vkCreateComputePipelines) \
    X(vkCreateDescriptorPool) \
    X(vkCreateDescriptorSetLayout) \
    X(vkCreateDevice) \
    X(vkCreateFence) \
    X(vkCreateInstance) \
    X(vkCreatePipelineCache) \
    X(vkCreatePipelineLayout) \
    X(vkCreateQueryPool) \
    X(vkCreateSemaphore) \
    X(vkCreateShaderModule) \
    X(vkDestroyBuffer) \
    X(vkDestroyBufferView) \
    X(vkDestroyCommandPool) \
    X(vkDestroyDescriptorPool) \
    X(vkDestroyDescriptorSetLayout) \
    X(vkDestroyDevice) \
    X(vkDestroyFence) \
    X(vkDestroyInstance) \
    X(vkDestroyPipeline) \
    X(vkDestroyPipelineCache) \
    X(vkDestroyPipelineLayout) \
    X(vkDestroyQueryPool) \
    X(vkDestroySemaphore) \
    X(vkDestroyShaderModule) \
    X(vkDeviceWaitIdle) \
    X(vkEndCommandBuffer) \
    X(vkEnumerateDeviceExtensionProperties) \
    X(vkEnumerateInstanceLayerProperties) \
    X(vkEnumeratePhysicalDevices) \
    X(vkFlushMappedMemoryRanges) \
    X(vkFreeCommandBuffers) \
    X(vkFreeMemory) \
    X(vkGetBufferMemoryRequirements) \
    X(vkGetDeviceProcAddr) \
    X(vkGetDeviceQueue) \
    X(vkGetInstanceProcAddr) \
    X(vkGetPhysicalDeviceFeatures) \
    X(vkGetPhysicalDeviceFeatures2) \
    X(vkGetPhysicalDeviceFormatProperties) \
    X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkGetPipelineCacheData) \
    X(vkGetQueryPoolResults) \
    X(vkInvalidateMappedMemoryRanges) \
    X(vkMapMemory) \
    X(vkQueueSubmit) \
    X(vkQueueWaitIdle) \
    X(vkResetCommandBuffer) \
    X(vkResetFences) \
    X(vkUnmapMemory) \
    X(vkUpdateDescriptorSets) \
    X(vkWaitForFences)

#define ES__VK_DECLARE(name) extern PFN_##name es__##name;
ES__VK_FUNCS(ES__VK_DECLARE)
#undef ES__VK_DECLARE

/* Call sites keep the Vulkan names; the pointers are library-internal (hidden) symbols, so they
 * never interpose on a loader the application links itself. */
#define vkAllocateCommandBuffers es__vkAllocateCommandBuffers
#define vkAllocateDescriptorSets es__vkAllocateDescriptorSets
#define vkAllocateMemory es__vkAllocateMemory
#define vkBeginCommandBuffer es__vkBeginCommandBuffer
#define vkBindBufferMemory es__vkBindBufferMemory
#define vkCmdBindDescriptorSets es__vkCmdBindDescriptorSets
#define vkCmdBindPipeline es__vkCmdBindPipeline
#define vkCmdCopyBuffer es__vkCmdCopyBuffer
#define vkCmdDispatch es__vkCmdDispatch
#define vkCmdDispatchIndirect es__vkCmdDispatchIndirect
#define vkCmdFillBuffer es__vkCmdFillBuffer
#define vkCmdPipelineBarrier es__vkCmdPipelineBarrier
#define vkCmdPushConstants es__vkCmdPushConstants
#define vkCmdResetQueryPool es__vkCmdResetQueryPool
#define vkCmdWriteTimestamp es__vkCmdWriteTimestamp
#define vkCreateBuffer es__vkCreateBuffer
#define vkCreateBufferView es__vkCreateBufferView
#define vkCreateCommandPool es__vkCreateCommandPool
#define vkCreateComputePipelines es__vkCreateComputePipelines
#define vkCreateDescriptorPool es__vkCreateDescriptorPool
#define vkCreateDescriptorSetLayout es__vkCreateDescriptorSetLayout
#define vkCreateDevice es__vkCreateDevice
#define vkCreateFence es__vkCreateFence
#define vkCreateInstance es__vkCreateInstance
#define vkCreatePipelineCache es__vkCreatePipelineCache
#define vkCreatePipelineLayout es__vkCreatePipelineLayout
#define vkCreateQueryPool es__vkCreateQueryPool
#define vkCreateSemaphore es__vkCreateSemaphore
#define vkCreateShaderModule es__vkCreateShaderModule
#define vkDestroyBuffer es__vkDestroyBuffer
#define vkDestroyBufferView es__vkDestroyBufferView
#define vkDestroyCommandPool es__vkDestroyCommandPool
#define vkDestroyDescriptorPool es__vkDestroyDescriptorPool
#define vkDestroyDescriptorSetLayout es__vkDestroyDescriptorSetLayout
#define vkDestroyDevice es__vkDestroyDevice
#define vkDestroyFence es__vkDestroyFence
#define vkDestroyInstance es__vkDestroyInstance
#define vkDestroyPipeline es__vkDestroyPipeline
#define vkDestroyPipelineCache es__vkDestroyPipelineCache
#define vkDestroyPipelineLayout es__vkDestroyPipelineLayout
#define vkDestroyQueryPool es__vkDestroyQueryPool
#define vkDestroySemaphore es__vkDestroySemaphore
#define vkDestroyShaderModule es__vkDestroyShaderModule
#define vkDeviceWaitIdle es__vkDeviceWaitIdle
#define vkEndCommandBuffer es__vkEndCommandBuffer
#define vkEnumerateDeviceExtensionProperties es__vkEnumerateDeviceExtensionProperties
#define vkEnumerateInstanceLayerProperties es__vkEnumerateInstanceLayerProperties
#define vkEnumeratePhysicalDevices es__vkEnumeratePhysicalDevices
#define vkFlushMappedMemoryRanges es__vkFlushMappedMemoryRanges
#define vkFreeCommandBuffers es__vkFreeCommandBuffers
#define vkFreeMemory es__vkFreeMemory
#define vkGetBufferMemoryRequirements es__vkGetBufferMemoryRequirements
#define vkGetDeviceProcAddr es__vkGetDeviceProcAddr
#define vkGetDeviceQueue es__vkGetDeviceQueue
#define vkGetInstanceProcAddr es__vkGetInstanceProcAddr
#define vkGetPhysicalDeviceFeatures es__vkGetPhysicalDeviceFeatures
#define vkGetPhysicalDeviceFeatures2 es__vkGetPhysicalDeviceFeatures2
#define vkGetPhysicalDeviceFormatProperties es__vkGetPhysicalDeviceFormatProperties
#define vkGetPhysicalDeviceMemoryProperties es__vkGetPhysicalDeviceMemoryProperties
#define vkGetPhysicalDeviceProperties es__vkGetPhysicalDeviceProperties
#define vkGetPhysicalDeviceProperties2 es__vkGetPhysicalDeviceProperties2
#define vkGetPhysicalDeviceQueueFamilyProperties es__vkGetPhysicalDeviceQueueFamilyProperties
#define vkGetPipelineCacheData es__vkGetPipelineCacheData
#define vkGetQueryPoolResults es__vkGetQueryPoolResults
#define vkInvalidateMappedMemoryRanges es__vkInvalidateMappedMemoryRanges
#define vkMapMemory es__vkMapMemory
#define vkQueueSubmit es__vkQueueSubmit
#define vkQueueWaitIdle es__vkQueueWaitIdle
#define vkResetCommandBuffer es__vkResetCommandBuffer
#define vkResetFences es__vkResetFences
#define vkUnmapMemory es__vkUnmapMemory
#define vkUpdateDescriptorSets es__vkUpdateDescriptorSets
#define vkWaitForFences es__vkWaitForFences

/* Opens the loader and fills the pointers, once per process (later calls return the first
 * result; the library stays open until exit). ES_ERR_UNSUPPORTED, with a message naming the
 * libraries tried and the dynamic linker's reason, when no loader can be opened or one lacks an
 * entry point. err may be NULL (the message then goes to es_last_error only). */
es_status es__vk_load(es__err *err);

#endif /* ES_VULKAN_LOADER_H */
