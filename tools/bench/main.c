/* main.c: the edgespec-bench program (see bench.h). */
#include "bench.h"

int main(int argc, char **argv) {
    return es_bench_main(argc, argv);
}
