/* devices.c: several backends from one device list (es_backends_create): "0,1" is two physical
 * devices, "0,0" two logical devices on one, "0,host" a Vulkan device and the CPU backend. Each
 * entry becomes an ordinary es_backend, so everything a backend does (its own VkInstance and
 * VkDevice, queue, weights upload, statistics, lock) holds per device. Deliberately no
 * scheduling and no transfers here: strategies decide what runs where, and the data moves
 * through es_context_kv_copy (session.c) and the Vulkan link (lib/vulkan/link.c). */
#include "backend.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Splits list into entries; NULL or blank is one entry, the default device of type. */
es_status es__device_list_parse(const char *list, es_backend_type type, es__device_sel *out, size_t cap, size_t *n) {
    *n = 0;
    const char *shown = list ? list : "";
    const char *p = shown;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) {
        ES_RETURN_IF(cap < 1, NULL, ES_ERR_BUFFER_TOO_SMALL, "device list: no room for one entry");
        memset(&out[0], 0, sizeof out[0]);
        out[0].host = type == ES_BACKEND_CPU;
        *n = 1;
        return ES_OK;
    }
    size_t k = 0;
    for (const char *start = shown;; k++) {
        const char *end = strchr(start, ',');
        if (!end) end = start + strlen(start);
        const char *a = start, *b = end;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        ES_RETURN_IF(a == b, NULL, ES_ERR_INVALID_ARGUMENT,
                     "device list '%s': entry %zu (at offset %zu) is empty; entries are Vulkan device indices, "
                     "types or names, or 'host' for the CPU backend, separated by commas",
                     shown, k + 1, (size_t)(start - shown));
        ES_RETURN_IF(k >= ES_MAX_DEVICES, NULL, ES_ERR_INVALID_ARGUMENT,
                     "device list '%s': more than %d entries", shown, ES_MAX_DEVICES);
        ES_RETURN_IF((size_t)(b - a) >= sizeof out[0].sel, NULL, ES_ERR_INVALID_ARGUMENT,
                     "device list '%s': entry %zu is longer than %zu characters", shown, k + 1,
                     sizeof out[0].sel - 1);
        es__device_sel e;
        memset(&e, 0, sizeof e);
        memcpy(e.sel, a, (size_t)(b - a));
        e.host = strcmp(e.sel, "host") == 0;
        ES_RETURN_IF(!e.host && type != ES_BACKEND_VULKAN, NULL, ES_ERR_INVALID_ARGUMENT,
                     "device list '%s': entry %zu '%s' names a Vulkan device, but the backend type is cpu "
                     "('host' is the CPU backend)",
                     shown, k + 1, e.sel);
        if (k < cap) out[k] = e;
        if (!*end) break;
        start = end + 1;
    }
    *n = k + 1;
    ES_RETURN_IF(*n > cap, NULL, ES_ERR_BUFFER_TOO_SMALL, "device list '%s': %zu entries, room for %zu", shown, *n,
                 cap);
    return ES_OK;
}

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

es_status es_backends_create(const es_backend_params *params, es_backend **out, size_t cap, size_t *n) {
    if (!n) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backends_create: n is NULL");
    *n = 0;
    if (!out && cap) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backends_create: out is NULL");
    for (size_t i = 0; i < cap; i++) out[i] = NULL;
    const es_backend_params p = params ? *params : es_backend_default_params();
    const char *list = p.device ? p.device : "";
    if (p.type != ES_BACKEND_CPU && p.type != ES_BACKEND_VULKAN)
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backends_create: unknown backend type %d", (int)p.type);
    es__device_sel sel[ES_MAX_DEVICES];
    size_t count = 0;
    es_status s = es__device_list_parse(p.device, p.type, sel, ES_MAX_DEVICES, &count);
    if (s != ES_OK) return s;
    if (count > cap) {
        *n = count;
        return es__fail(NULL, ES_ERR_BUFFER_TOO_SMALL, "es_backends_create: '%s' lists %zu devices, room for %zu",
                        list, count, cap);
    }
    for (size_t i = 0; i < count; i++) {
        es_backend_params bp = p;
        bp.type = sel[i].host ? ES_BACKEND_CPU : ES_BACKEND_VULKAN;
        bp.device = sel[i].host ? NULL : sel[i].sel;
        s = es_backend_create(&bp, &out[i]);
        if (s == ES_OK) continue;
        char why[ES__ERRMSG_SIZE];
        snprintf(why, sizeof why, "%s", es_last_error());
        for (size_t j = 0; j < i; j++) {
            es_backend_free(out[j]);
            out[j] = NULL;
        }
        return es__fail(NULL, s, "es_backends_create: device list '%s', entry %zu '%s': %s%s", list, i + 1,
                        sel[i].host ? "host" : sel[i].sel, why,
                        all_digits(sel[i].sel) && s == ES_ERR_INVALID_ARGUMENT
                            ? " (the same index twice, e.g. '0,0', gives two logical devices on one physical device)"
                            : "");
    }
    *n = count;
    return ES_OK;
}
