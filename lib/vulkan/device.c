/* device.c: Vulkan instance, physical-device enumeration and selection (index, name or type),
 * feature detection with the ES_VK_* overrides of es_backend_params.vk_flags, the logical device
 * and queue, and the optional Khronos validation layer with a debug messenger (the
 * EDGESPEC_VK_VALIDATION=1 debug switch) that reports every message through the log at error level.
 * It deliberately allocates no buffers and builds no pipelines (memory.c, pipeline.c). */
#include "vk.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *es__vk_result_str(VkResult r) {
    switch (r) {
#define R(x) case x: return #x;
        R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_INCOMPLETE)
        R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED)
        R(VK_ERROR_LAYER_NOT_PRESENT) R(VK_ERROR_EXTENSION_NOT_PRESENT) R(VK_ERROR_FEATURE_NOT_PRESENT)
        R(VK_ERROR_INCOMPATIBLE_DRIVER) R(VK_ERROR_TOO_MANY_OBJECTS) R(VK_ERROR_FORMAT_NOT_SUPPORTED)
        R(VK_ERROR_FRAGMENTED_POOL) R(VK_ERROR_OUT_OF_POOL_MEMORY) R(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        R(VK_ERROR_FRAGMENTATION) R(VK_PIPELINE_COMPILE_REQUIRED) R(VK_ERROR_UNKNOWN)
#undef R
    default: return "VkResult(unknown)";
    }
}

es_status es__vk_fail(es__vk_dev *d, VkResult r, const char *what) {
    es_status s = (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ||
                   r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTATION)
                      ? ES_ERR_DEVICE_MEMORY
                      : ES_ERR_BACKEND;
    if (r == VK_ERROR_DEVICE_LOST && !d->lost_at) d->lost_at = what;
    return es__fail(d->err, s, "vulkan: %s failed: %s (%d)%s", what, es__vk_result_str(r), (int)r,
                    r == VK_ERROR_DEVICE_LOST ? "; the device is lost: free this backend's contexts and the backend, "
                                                "and create a new one"
                                              : "");
}

es_status es__vk_check_lost(es__vk_dev *d) {
    ES_RETURN_IF(d->lost_at, d->err, ES_ERR_BACKEND,
                 "vulkan: device '%s' was lost (%s failed with VK_ERROR_DEVICE_LOST); free this backend's contexts "
                 "and the backend, and create a new one",
                 d->phys.props.deviceName, d->lost_at);
    return ES_OK;
}

/* ---- instance */
static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                               VkDebugUtilsMessageTypeFlagsEXT type,
                                               const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)sev;
    (void)type;
    es__vk_dev *d = user;
    if (d->stats) d->stats->validation_messages++;
    es__logf(d->log, ES_LOG_ERROR, "vulkan validation: %s", data && data->pMessage ? data->pMessage : "(no text)");
    return VK_FALSE;
}

/* The EDGESPEC_VK_VALIDATION debug switch (edgespec.h): set and neither "" nor "0". Named here
 * rather than passed in, so that grep finds every variable the library reads. */
static bool validation_asked(void) {
    const char *v = getenv("EDGESPEC_VK_VALIDATION");
    return v && *v && strcmp(v, "0") != 0;
}

static bool has_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties props[64];
    if (n > 64) n = 64;
    if (vkEnumerateInstanceLayerProperties(&n, props) < 0) return false;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(props[i].layerName, name) == 0) return true;
    return false;
}

/* Creates d->instance (and the messenger when validation is asked for). */
static es_status instance_create(es__vk_dev *d) {
    ES_TRY(es__vk_load(d->err));
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "edgespec";
    app.pEngineName = "edgespec";
    app.apiVersion = VK_API_VERSION_1_1;
    const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[1] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    d->validation = validation_asked();
    if (d->validation)
        ES_RETURN_IF(!has_layer(layers[0]), d->err, ES_ERR_BACKEND,
                     "vulkan: EDGESPEC_VK_VALIDATION is set but %s is not installed (Debian: vulkan-validationlayers)",
                     layers[0]);
    VkDebugUtilsMessengerCreateInfoEXT dbg = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    dbg.pfnUserCallback = debug_cb;
    dbg.pUserData = d;
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    if (d->validation) {
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = layers;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = exts;
        ci.pNext = &dbg; /* also covers instance creation and destruction */
    }
    ES_VK_TRY(d, vkCreateInstance(&ci, NULL, &d->instance));
    if (d->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(d->instance, "vkCreateDebugUtilsMessengerEXT");
        ES_RETURN_IF(!create, d->err, ES_ERR_BACKEND, "vulkan: vkCreateDebugUtilsMessengerEXT is unavailable");
        ES_VK_TRY(d, create(d->instance, &dbg, NULL, &d->messenger));
    }
    return ES_OK;
}

static void instance_destroy(es__vk_dev *d) {
    if (d->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(d->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (destroy) destroy(d->instance, d->messenger, NULL);
        d->messenger = VK_NULL_HANDLE;
    }
    if (d->instance) vkDestroyInstance(d->instance, NULL);
    d->instance = VK_NULL_HANDLE;
}

/* ---- physical devices */
static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0) return true;
    return false;
}

static bool texel_format_ok(VkPhysicalDevice p, VkFormat f) {
    VkFormatProperties fp;
    vkGetPhysicalDeviceFormatProperties(p, f, &fp);
    return (fp.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
}

/* Fills out with what the device offers. Host allocation failure is the only error. */
static es_status phys_query(es__vk_dev *d, VkPhysicalDevice p, es__vk_phys *out) {
    memset(out, 0, sizeof *out);
    out->handle = p;
    vkGetPhysicalDeviceProperties(p, &out->props);
    vkGetPhysicalDeviceMemoryProperties(p, &out->mem);
    for (uint32_t i = 0; i < out->mem.memoryHeapCount; i++)
        if (out->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            out->device_local_bytes += out->mem.memoryHeaps[i].size;

    uint32_t n_ext = 0;
    vkEnumerateDeviceExtensionProperties(p, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = es__calloc(d->alloc, n_ext ? n_ext : 1, sizeof *ext);
    ES_RETURN_IF(!ext, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory listing device extensions");
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n_ext, ext) < 0) n_ext = 0;
    out->has_ext_float16_int8 = has_ext(ext, n_ext, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    out->has_ext_8bit = has_ext(ext, n_ext, VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
    out->has_ext_int_dot = has_ext(ext, n_ext, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    out->has_ext_size_control = has_ext(ext, n_ext, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    out->has_ext_host_import = has_ext(ext, n_ext, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    const bool has_ext_timeline = has_ext(ext, n_ext, VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME);
    const bool has_ext_cond = has_ext(ext, n_ext, VK_EXT_CONDITIONAL_RENDERING_EXTENSION_NAME);
    es__free(d->alloc, ext);

    uint32_t n_q = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n_q, NULL);
    VkQueueFamilyProperties qf[16];
    if (n_q > 16) n_q = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n_q, qf);
    out->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < n_q && out->queue_family == UINT32_MAX; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].timestampValidBits > 0) out->queue_family = i;
    for (uint32_t i = 0; i < n_q && out->queue_family == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) out->queue_family = i;

    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT sgc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    void **ptail = &sg.pNext;
    if (out->has_ext_size_control) { *ptail = &sgc; ptail = &sgc.pNext; }
    if (out->has_ext_host_import) { *ptail = &hostp; ptail = &hostp.pNext; }
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(p, &p2);
    out->host_import_align = hostp.minImportedHostPointerAlignment;
    if (out->host_import_align == 0 || (out->host_import_align & (out->host_import_align - 1)) != 0)
        out->has_ext_host_import = false;
    out->subgroup_size = sg.subgroupSize;
    out->max_subgroup_size = out->has_ext_size_control && sgc.maxSubgroupSize ? sgc.maxSubgroupSize : sg.subgroupSize;
    const bool size_control_compute = out->has_ext_size_control &&
                                      (sgc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                                      sg.subgroupSize >= sgc.minSubgroupSize && sg.subgroupSize <= sgc.maxSubgroupSize;
    out->have.subgroup = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                         (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) && sg.subgroupSize >= 4 &&
                         sg.subgroupSize <= 128;

    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDevice8BitStorageFeaturesKHR s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES_KHR};
    VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR};
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT ssc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    void **tail = &s16.pNext;
    if (out->has_ext_8bit) { *tail = &s8; tail = &s8.pNext; }
    if (out->has_ext_float16_int8) { *tail = &f16; tail = &f16.pNext; }
    if (out->has_ext_int_dot) { *tail = &idot; tail = &idot.pNext; }
    if (out->has_ext_size_control) { *tail = &ssc; tail = &ssc.pNext; }
    VkPhysicalDeviceTimelineSemaphoreFeaturesKHR tl = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES_KHR};
    if (has_ext_timeline) { *tail = &tl; tail = &tl.pNext; }
    VkPhysicalDeviceConditionalRenderingFeaturesEXT cr = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_CONDITIONAL_RENDERING_FEATURES_EXT};
    if (has_ext_cond) { *tail = &cr; tail = &cr.pNext; }
    vkGetPhysicalDeviceFeatures2(p, &f2);
    out->has_timeline = has_ext_timeline && tl.timelineSemaphore;
    out->has_cond = has_ext_cond && cr.conditionalRendering;
    out->have.storage16 = s16.storageBuffer16BitAccess;
    out->have.storage8 = out->has_ext_8bit && s8.storageBuffer8BitAccess;
    out->have.fp16 = out->has_ext_float16_int8 && f16.shaderFloat16;
    out->have.int_dot = out->has_ext_int_dot && idot.shaderIntegerDotProduct;
    out->have.size_control = size_control_compute && ssc.subgroupSizeControl && ssc.computeFullSubgroups;

    /* Texel buffers: the kernels need these formats for uniform texel reads, and tensors must
     * fit in views without splitting too finely (the Vulkan minimum is 65536 texels). */
    const VkPhysicalDeviceLimits *lim = &out->props.limits;
    out->have.texel = texel_format_ok(p, VK_FORMAT_R32G32B32A32_SFLOAT) &&
                      texel_format_ok(p, VK_FORMAT_R32G32B32A32_UINT) && texel_format_ok(p, VK_FORMAT_R32_SFLOAT) &&
                      texel_format_ok(p, VK_FORMAT_R32_SINT) && lim->maxTexelBufferElements >= (1u << 20);
    return ES_OK;
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

/* The default choice: first discrete GPU, else integrated, else virtual, else anything. */
static uint32_t default_device(const es__vk_phys *ph, uint32_t n) {
    static const VkPhysicalDeviceType order[] = {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
                                                 VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                                                 VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU};
    for (size_t k = 0; k < ES__ARRAY_LEN(order); k++)
        for (uint32_t i = 0; i < n; i++)
            if (ph[i].props.deviceType == order[k] && ph[i].queue_family != UINT32_MAX) return i;
    for (uint32_t i = 0; i < n; i++)
        if (ph[i].queue_family != UINT32_MAX) return i;
    return 0;
}

static bool icontains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return n == 0;
}

/* Resolves a selector (index, type or name substring) to a device index. */
static es_status select_device(es__vk_dev *d, const es__vk_phys *ph, uint32_t n, const char *sel, uint32_t *out) {
    if (!sel || !*sel) {
        *out = default_device(ph, n);
        return ES_OK;
    }
    char *end = NULL;
    unsigned long idx = strtoul(sel, &end, 10);
    if (isdigit((unsigned char)sel[0]) && end && *end == '\0') {
        ES_RETURN_IF(idx >= n, d->err, ES_ERR_INVALID_ARGUMENT,
                     "vulkan: device index %lu out of range (%u device%s)", idx, n, n == 1 ? "" : "s");
        *out = (uint32_t)idx;
        return ES_OK;
    }
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(sel, type_name(ph[i].props.deviceType)) == 0 || (strcmp(sel, "gpu") == 0 &&
            (ph[i].props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU ||
             ph[i].props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU))) {
            *out = i;
            return ES_OK;
        }
    for (uint32_t i = 0; i < n; i++)
        if (icontains(ph[i].props.deviceName, sel)) {
            *out = i;
            return ES_OK;
        }
    char names[384] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < n && len < sizeof names - 1; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%u: %s (%s)", i ? "; " : "", i,
                                ph[i].props.deviceName, type_name(ph[i].props.deviceType));
    return es__fail(d->err, ES_ERR_INVALID_ARGUMENT,
                    "vulkan: no device matches '%s' (by index, type discrete/integrated/virtual/cpu/gpu, or name); "
                    "devices: %s%s",
                    sel, names, strchr(sel, ',') ? "; a list of devices is for es_backends_create" : "");
}

/* Enumerates into a fresh array (caller frees). */
static es_status enumerate(es__vk_dev *d, es__vk_phys **out, uint32_t *n_out) {
    uint32_t n = 0;
    ES_VK_TRY(d, vkEnumeratePhysicalDevices(d->instance, &n, NULL));
    ES_RETURN_IF(n == 0, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: no physical devices (install a driver; for CPU-only machines Mesa's lavapipe, "
                 "Debian package mesa-vulkan-drivers)");
    VkPhysicalDevice *h = es__calloc(d->alloc, n, sizeof *h);
    es__vk_phys *ph = es__calloc(d->alloc, n, sizeof *ph);
    if (!h || !ph) {
        es__free(d->alloc, h);
        es__free(d->alloc, ph);
        return es__fail(d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory enumerating devices");
    }
    VkResult r = vkEnumeratePhysicalDevices(d->instance, &n, h);
    es_status s = r < 0 ? es__vk_fail(d, r, "vkEnumeratePhysicalDevices") : ES_OK;
    for (uint32_t i = 0; s == ES_OK && i < n; i++) s = phys_query(d, h[i], &ph[i]);
    es__free(d->alloc, h);
    if (s != ES_OK) {
        es__free(d->alloc, ph);
        return s;
    }
    *out = ph;
    *n_out = n;
    return ES_OK;
}

/* ---- logical device */
static es_status device_create(es__vk_dev *d) {
    const es__vk_phys *p = &d->phys;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    q.queueFamilyIndex = p->queue_family;
    q.queueCount = 1;
    q.pQueuePriorities = &prio;

    const char *exts[8];
    uint32_t n_ext = 0;
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDevice8BitStorageFeaturesKHR s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES_KHR};
    VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR};
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT ssc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    void **tail = &s16.pNext;
    s16.storageBuffer16BitAccess = d->use.storage16;
    if (d->use.storage8) {
        exts[n_ext++] = VK_KHR_8BIT_STORAGE_EXTENSION_NAME;
        s8.storageBuffer8BitAccess = VK_TRUE;
        *tail = &s8;
        tail = &s8.pNext;
    }
    if (d->use.fp16 || d->use.storage8) {
        exts[n_ext++] = VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME;
        f16.shaderFloat16 = d->use.fp16;
        f16.shaderInt8 = d->use.storage8; /* int8 types in shaders come with 8-bit loads */
        *tail = &f16;
        tail = &f16.pNext;
    }
    if (d->use.int_dot) {
        exts[n_ext++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
        idot.shaderIntegerDotProduct = VK_TRUE;
        *tail = &idot;
        tail = &idot.pNext;
    }
    if (d->use.size_control) {
        exts[n_ext++] = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
        ssc.subgroupSizeControl = VK_TRUE;
        ssc.computeFullSubgroups = VK_TRUE;
        *tail = &ssc;
        tail = &ssc.pNext;
    }
    /* Host memory imported into two devices is the cheapest window between them, timeline
     * semaphores order their work through a host relay (link.c). */
    if (p->has_ext_host_import) exts[n_ext++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
    d->host_import = p->has_ext_host_import;
    VkPhysicalDeviceTimelineSemaphoreFeaturesKHR tl = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES_KHR};
    if (p->has_timeline) {
        exts[n_ext++] = VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME;
        tl.timelineSemaphore = VK_TRUE;
        *tail = &tl;
        tail = &tl.pNext;
    }
    d->timeline = p->has_timeline;
    /* ALSpec's two-device token gates its dispatches on flags the devices write (alspec_vk.c) */
    VkPhysicalDeviceConditionalRenderingFeaturesEXT cr = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_CONDITIONAL_RENDERING_FEATURES_EXT};
    if (p->has_cond) {
        exts[n_ext++] = VK_EXT_CONDITIONAL_RENDERING_EXTENSION_NAME;
        cr.conditionalRendering = VK_TRUE;
        *tail = &cr;
        tail = &cr.pNext;
    }
    VkPhysicalDeviceFeatures base;
    vkGetPhysicalDeviceFeatures(p->handle, &base);
    memset(&f2.features, 0, sizeof f2.features);
    f2.features.shaderInt16 = base.shaderInt16 && d->use.storage16;

    VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2};
    ci.queueCreateInfoCount = 1;
    ci.pQueueCreateInfos = &q;
    ci.enabledExtensionCount = n_ext;
    ci.ppEnabledExtensionNames = exts;
    ES_VK_TRY(d, vkCreateDevice(p->handle, &ci, NULL, &d->dev));
    vkGetDeviceQueue(d->dev, p->queue_family, 0, &d->queue);
    if (p->has_cond) {
        d->cond_begin = (PFN_vkCmdBeginConditionalRenderingEXT)vkGetDeviceProcAddr(d->dev, "vkCmdBeginConditionalRenderingEXT");
        d->cond_end = (PFN_vkCmdEndConditionalRenderingEXT)vkGetDeviceProcAddr(d->dev, "vkCmdEndConditionalRenderingEXT");
        if (!d->cond_begin || !d->cond_end) d->cond_begin = NULL, d->cond_end = NULL;
    }

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = p->queue_family;
    ES_VK_TRY(d, vkCreateCommandPool(d->dev, &pci, NULL, &d->pool));
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    ES_VK_TRY(d, vkAllocateCommandBuffers(d->dev, &ai, &d->once));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    ES_VK_TRY(d, vkCreateFence(d->dev, &fci, NULL, &d->fence));
    return ES_OK;
}

/* Decides what the kernels use: the device's features minus the forced fallbacks. */
static es_status choose_features(es__vk_dev *d) {
    const es__vk_features *h = &d->phys.have;
    uint32_t f = d->flags;
    ES_RETURN_IF((f & ES_VK_TEXEL_BUFFERS) && (f & ES_VK_STORAGE_BUFFERS), d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan flags: texel-buffers and storage-buffers exclude each other");
    ES_RETURN_IF((f & ES_VK_TEXEL_BUFFERS) && !h->texel, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: texel-buffers forced, but device '%s' lacks the texel formats or has "
                 "maxTexelBufferElements %u < 1048576",
                 d->phys.props.deviceName, d->phys.props.limits.maxTexelBufferElements);
    d->use.storage16 = h->storage16 && !(f & ES_VK_NO_STORAGE16);
    d->use.storage8 = h->storage8 && !(f & ES_VK_NO_STORAGE8);
    d->use.fp16 = h->fp16 && !(f & ES_VK_NO_FP16);
    d->use.subgroup = h->subgroup && !(f & ES_VK_NO_SUBGROUP);
    d->use.int_dot = h->int_dot && !(f & ES_VK_NO_INT_DOT);
    d->use.size_control = h->size_control && d->use.subgroup;
    d->use.texel = h->texel && !(f & ES_VK_STORAGE_BUFFERS);
    /* Without subgroups a team is 8 lanes: it matches lavapipe's SIMD width and is a fine
     * shared-memory reduction width elsewhere. */
    d->subgroup_size = d->use.subgroup ? d->phys.subgroup_size : 8;
    return ES_OK;
}

es_status es__vk_dev_create(es__vk_dev *d, const es_backend_params *p, es_backend *owner) {
    memset(d, 0, sizeof *d);
    const es_allocator *alloc = owner->alloc;
    es__err *err = &owner->err;
    es__log *log = &owner->log;
    d->alloc = alloc;
    d->err = err;
    d->log = log;
    d->stats = &owner->stats;
    d->prof = owner->prof;
    d->n_prof = &owner->n_prof;
    d->profile = p->profile;
    d->flags = p->vk_flags;
    ES_TRY(instance_create(d));

    es__vk_phys *ph = NULL;
    uint32_t n = 0;
    ES_TRY(enumerate(d, &ph, &n));
    uint32_t idx = 0;
    es_status s = select_device(d, ph, n, p->device, &idx);
    if (s == ES_OK) {
        d->phys = ph[idx];
        d->index = idx;
    }
    es__free(alloc, ph);
    ES_TRY(s);
    ES_RETURN_IF(d->phys.queue_family == UINT32_MAX, err, ES_ERR_UNSUPPORTED,
                 "vulkan: device '%s' has no compute queue", d->phys.props.deviceName);
    ES_RETURN_IF(d->phys.props.apiVersion < VK_API_VERSION_1_1, err, ES_ERR_UNSUPPORTED,
                 "vulkan: device '%s' supports Vulkan %u.%u; edgespec needs 1.1", d->phys.props.deviceName,
                 VK_API_VERSION_MAJOR(d->phys.props.apiVersion), VK_API_VERSION_MINOR(d->phys.props.apiVersion));
    ES_TRY(choose_features(d));
    ES_TRY(device_create(d));
    d->policy = es__vk_policy_choose(d->phys.props.deviceType, &p->vk_tuning);
    char fused[32] = "measured per context";
    if (!d->policy.measure_fused) snprintf(fused, sizeof fused, "%u", d->policy.fused_stream_rows);
    es__logf(log, ES_LOG_INFO,
             "vulkan: device %u '%s' (%s); texel=%d subgroup=%d(%u) storage16=%d storage8=%d fp16=%d int_dot=%d; "
             "tuning %s: fused stream rows %s, solo rows < %u elements or %u units per lane, %u rows per team in "
             "one-token calls, attention by %s",
             d->index, d->phys.props.deviceName, type_name(d->phys.props.deviceType), d->use.texel, d->use.subgroup,
             d->subgroup_size, d->use.storage16, d->use.storage8, d->use.fp16, d->use.int_dot, d->policy.profile,
             fused, d->policy.solo_row_elements, d->policy.team_lane_units, d->policy.mv_rows,
             d->policy.attn_team ? "subgroups" : "invocations");
    if (p->pipeline_cache_path && *p->pipeline_cache_path) ES_TRY(es__vk_pcache_load(d, p->pipeline_cache_path));
    return ES_OK;
}

void es__vk_dev_destroy(es__vk_dev *d) {
    if (d->dev) {
        vkDeviceWaitIdle(d->dev);
        es__vk_pcache_save(d);
        es__vk_pipelines_destroy(d);
        if (d->pcache) vkDestroyPipelineCache(d->dev, d->pcache, NULL);
        if (d->fence) vkDestroyFence(d->dev, d->fence, NULL);
        if (d->pool) vkDestroyCommandPool(d->dev, d->pool, NULL);
        vkDestroyDevice(d->dev, NULL);
    }
    es__free(d->alloc, d->pcache_path);
    instance_destroy(d);
    memset(d, 0, sizeof *d);
}

/* ---- public: listing devices */
es_status es_vulkan_devices(es_device_info *out, size_t cap, size_t *n_out) {
    if (!n_out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_vulkan_devices: n is NULL");
    *n_out = 0;
    es__err err = {ES_OK, ""};
    es__log log = {NULL, NULL, ES_LOG_ERROR};
    es__vk_dev d;
    memset(&d, 0, sizeof d);
    d.err = &err;
    d.log = &log;
    es_status s = instance_create(&d);
    es__vk_phys *ph = NULL;
    uint32_t n = 0;
    if (s == ES_OK) s = enumerate(&d, &ph, &n);
    if (s == ES_OK) {
        uint32_t def = default_device(ph, n);
        for (uint32_t i = 0; i < n && i < cap && out; i++) {
            es_device_info *o = &out[i];
            memset(o, 0, sizeof *o);
            o->index = (int32_t)i;
            snprintf(o->name, sizeof o->name, "%s", ph[i].props.deviceName);
            o->type = type_name(ph[i].props.deviceType);
            o->api_version = ph[i].props.apiVersion;
            o->vendor_id = ph[i].props.vendorID;
            o->device_id = ph[i].props.deviceID;
            o->device_local_bytes = ph[i].device_local_bytes;
            o->subgroup_size = ph[i].subgroup_size;
            o->storage16 = ph[i].have.storage16;
            o->storage8 = ph[i].have.storage8;
            o->fp16 = ph[i].have.fp16;
            o->subgroup_arith = ph[i].have.subgroup;
            o->int_dot = ph[i].have.int_dot;
            o->texel_buffers = ph[i].have.texel;
            o->max_storage_buffer_range = ph[i].props.limits.maxStorageBufferRange;
            o->max_texel_buffer_elements = ph[i].props.limits.maxTexelBufferElements;
            o->is_default = i == def;
            o->host_import = ph[i].has_ext_host_import;
        }
        *n_out = n;
        if (out && cap < n) s = es__fail(&err, ES_ERR_BUFFER_TOO_SMALL, "es_vulkan_devices: %u devices, room for %zu", n, cap);
    }
    es__free(NULL, ph);
    instance_destroy(&d);
    if (s != ES_OK) es__fail(NULL, s, "%s", err.msg);
    return s;
}
