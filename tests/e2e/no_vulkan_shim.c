/* no_vulkan_shim.c: an LD_PRELOAD library that takes this process's Vulkan loader away: dlopen of
 * any libvulkan fails as a missing file does (the dynamic linker's own message, from a path that
 * cannot exist), or, with ES_SHIM_VULKAN=PATH in the environment, opens PATH instead (a stand-in
 * loader); every other dlopen goes through unchanged. Used by noloader_test.py and the Python
 * binding's test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *dlopen(const char *file, int mode) {
    void *(*next)(const char *, int);
    void *sym = dlsym(RTLD_NEXT, "dlopen");
    memcpy(&next, &sym, sizeof next);
    if (file && strstr(file, "libvulkan")) {
        const char *stand_in = getenv("ES_SHIM_VULKAN");
        if (stand_in && *stand_in) return next(stand_in, mode);
        const char *base = strrchr(file, '/');
        char missing[512];
        snprintf(missing, sizeof missing, "/nonexistent-no-vulkan-loader/%s", base ? base + 1 : file);
        return next(missing, mode);
    }
    return next(file, mode);
}
