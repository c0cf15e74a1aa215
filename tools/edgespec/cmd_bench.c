/* cmd_bench.c: `edgespec bench`: the benchmark of tools/bench (prefill and decode tokens/s,
 * JSON on stdout), offered through the CLI. Its options are the benchmark's own (see
 * `edgespec bench --help`); this file only maps its exit statuses onto the CLI's. */
#include "bench.h"
#include "cli.h"

int cli_cmd_bench(int argc, char **argv) {
    char prog[] = "edgespec bench";
    argv[0] = prog; /* usage lines read "usage: edgespec bench ..." */
    switch (es_bench_main(argc, argv)) {
    case 0: return CLI_EXIT_OK;
    case 1: return CLI_EXIT_USAGE; /* the benchmark's usage error */
    default: return CLI_EXIT_FAIL; /* the library reported an error; the message is on stderr */
    }
}
