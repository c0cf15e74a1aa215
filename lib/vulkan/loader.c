/* loader.c: opens the Vulkan loader library at run time and fills the entry points of loader.h.
 * One process-wide table, filled once: the loader's exports are process-wide themselves, and the
 * core entry points it exports dispatch on their handle, so one table serves every instance.
 * It does not pick drivers or layers: that stays the loader's job. */
#include "loader.h"
#include "platform.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define ES__VK_DEFINE(name) PFN_##name es__##name;
ES__VK_FUNCS(ES__VK_DEFINE)
#undef ES__VK_DEFINE

/* The loader's file name on each platform, most specific first. */
static const char *const loader_names[] = {
#if defined(__ANDROID__)
    "libvulkan.so",
#elif defined(__APPLE__)
    "libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib",
#else
    "libvulkan.so.1", "libvulkan.so",
#endif
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static es_status load_status;
static char load_msg[ES__ERRMSG_SIZE];

static void load(void) {
    void *lib = NULL;
    const char *lib_name = NULL;
    char tried[ES__ERRMSG_SIZE - 64]; /* each name tried with the dynamic linker's reason */
    size_t used = 0;
    tried[0] = '\0';
    for (size_t i = 0; i < sizeof loader_names / sizeof *loader_names && !lib; i++) {
        char why[256];
        lib_name = loader_names[i];
        lib = es__lib_open(lib_name, why, sizeof why);
        if (!lib && used < sizeof tried)
            used += (size_t)snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", why);
    }
    if (!lib) {
        snprintf(load_msg, sizeof load_msg, "vulkan: no Vulkan loader found (%s)", tried);
        load_status = ES_ERR_UNSUPPORTED;
        return;
    }
    /* Every entry point or none: a loader missing one is refused whole, never half used. */
#define ES__VK_LOOKUP(fn)                                                                                  \
    if (load_status == ES_OK) {                                                                            \
        es__##fn = (PFN_##fn)es__lib_sym(lib, #fn);                                                        \
        if (!es__##fn) {                                                                                   \
            snprintf(load_msg, sizeof load_msg, "vulkan: the Vulkan loader %s lacks %s (edgespec needs 1.1)", \
                     lib_name, #fn);                                                                       \
            load_status = ES_ERR_UNSUPPORTED;                                                              \
        }                                                                                                  \
    }
    ES__VK_FUNCS(ES__VK_LOOKUP)
#undef ES__VK_LOOKUP
    if (load_status != ES_OK) {
#define ES__VK_CLEAR(name) es__##name = NULL;
        ES__VK_FUNCS(ES__VK_CLEAR)
#undef ES__VK_CLEAR
        es__lib_close(lib);
    }
}

es_status es__vk_load(es__err *err) {
    pthread_once(&load_once, load);
    if (load_status != ES_OK) return es__fail(err, load_status, "%s", load_msg);
    return ES_OK;
}
