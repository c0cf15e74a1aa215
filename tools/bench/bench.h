/* bench.h: the edgespec benchmark as a function, so the edgespec CLI can offer it as
 * `edgespec bench ...` and tools/bench/main.c as the edgespec-bench program.
 * It uses the public API only (lib/include/edgespec.h). */
#ifndef ES_TOOLS_BENCH_H
#define ES_TOOLS_BENCH_H

/* Runs the benchmark described by argv (argv[0] is the program name; see --help) and prints one
 * JSON object on stdout; messages go to stderr. Returns 0 on success, 1 on a usage error, 2 when
 * the library reports an error. */
int es_bench_main(int argc, char **argv);

#endif /* ES_TOOLS_BENCH_H */
