/* cmd_devices.c: `edgespec devices`: the Vulkan devices the loader offers, which one an empty
 * --device picks, and the optional features the kernels use (each has a fallback; --vk-flags
 * forces them, with the ES_VK_* names of edgespec.h). Also the --profile table of the subcommands
 * that run a model. Public API only, like every subcommand. */
#include "cli.h"

#include <stdlib.h>

static const char *yes(bool b) {
    return b ? "yes" : "no";
}

int cli_cmd_devices(int argc, char **argv) {
    const cli_opt opts[] = {{"--help", "-h", CLI_FLAG, NULL, NULL, "show this help", 0, 0, NULL}};
    const cli_command cmd = {"devices", "",
                             "List the Vulkan devices, the default one (*), and the optional features edgespec uses.",
                             opts, 0, 0, 0, NULL};
    const char *pos[1];
    int n_pos;
    cli_parse_result r = cli_parse(&cmd, argc - 1, argv + 1, pos, &n_pos, NULL);
    if (r != CLI_PARSE_OK) return r == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    size_t n = 0;
    es_status s = es_vulkan_devices(NULL, 0, &n);
    /* No Vulkan here (no loader, or a build without it) is an answer to the question, not a
     * failure: the CPU backend still runs. */
    if (s == ES_ERR_UNSUPPORTED) {
        printf("%s\n", es_last_error());
        return CLI_EXIT_OK;
    }
    if (s != ES_OK) return cli_fail_status("devices", s, "cannot list Vulkan devices");
    es_device_info *dev = calloc(n ? n : 1, sizeof *dev);
    if (!dev) return cli_fail("devices", "out of memory");
    s = es_vulkan_devices(dev, n, &n);
    if (s != ES_OK) {
        free(dev);
        return cli_fail_status("devices", s, "cannot list Vulkan devices");
    }
    for (size_t i = 0; i < n; i++) {
        const es_device_info *d = &dev[i];
        printf("%c %d: %s (%s, Vulkan %u.%u.%u, vendor 0x%04x device 0x%04x)\n", d->is_default ? '*' : ' ', d->index,
               d->name, d->type, d->api_version >> 22, (d->api_version >> 12) & 0x3ffu, d->api_version & 0xfffu,
               d->vendor_id, d->device_id);
        printf("    device-local memory %.1f MiB, subgroup size %u, max storage buffer range %.0f MiB, "
               "max texel buffer elements %u\n",
               (double)d->device_local_bytes / 1048576.0, d->subgroup_size,
               (double)d->max_storage_buffer_range / 1048576.0, d->max_texel_buffer_elements);
        printf("    texel buffers %s, subgroup arithmetic %s, 16-bit storage %s, 8-bit storage %s, "
               "shaderFloat16 %s, integer dot product %s\n",
               yes(d->texel_buffers), yes(d->subgroup_arith), yes(d->storage16), yes(d->storage8), yes(d->fp16),
               yes(d->int_dot));
        printf("    host memory import %s\n", yes(d->host_import));
    }
    if (n == 0) printf("no Vulkan devices\n");
    else
        printf("--device takes an index, type or name; multi-device strategies take a list: '0,1' two devices, "
               "'0,0' two logical devices on device 0, '0,host' device 0 and the CPU backend\n");
    free(dev);
    return CLI_EXIT_OK;
}

void cli_print_profile(const char *cmd, const es_backend *backend) {
    es_profile_entry e[64];
    size_t n = 0;
    es_status s = es_backend_profile(backend, e, 64, &n);
    if (s != ES_OK && s != ES_ERR_BUFFER_TOO_SMALL) {
        cli_fail_status(cmd, s, "no profile");
        return;
    }
    if (n > 64) n = 64;
    double total = 0;
    for (size_t i = 0; i < n; i++) total += e[i].ms;
    es_backend_stats st;
    es_backend_get_stats(backend, &st);
    fprintf(stderr, "edgespec %s: profile of %s (%llu forward calls, %.1f dispatches and %.2f submits per call)\n", cmd,
            es_backend_name(backend), (unsigned long long)st.n_forward,
            st.n_forward ? (double)st.n_dispatches / (double)st.n_forward : 0.0,
            st.n_forward ? (double)st.n_forward_submits / (double)st.n_forward : 0.0);
    fprintf(stderr, "  %-20s %8s %12s %7s\n", "op", "calls", "total ms", "share");
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "  %-20s %8llu %12.3f %6.1f%%\n", e[i].op, (unsigned long long)e[i].calls, e[i].ms,
                total > 0 ? 100.0 * e[i].ms / total : 0.0);
    fprintf(stderr, "  %-20s %8s %12.3f\n", "total", "", total);
}
