/* main.c: the edgespec command: dispatches to one file per subcommand (cmd_*.c). A new
 * subcommand is a cmd_NAME.c with its option table plus one line in the table below. */
#include "cli.h"

#include <signal.h>
#include <string.h>

typedef struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand commands[] = {
    {"run", cli_cmd_run, "generate text from a prompt"},
    {"chat", cli_cmd_chat, "chat with a model, turn by turn"},
    {"info", cli_cmd_info, "print a model's hyperparameters, tokenizer and tensors"},
    {"tokenize", cli_cmd_tokenize, "print the token ids of a text"},
    {"devices", cli_cmd_devices, "list the Vulkan devices and the features edgespec uses"},
    {"bench", cli_cmd_bench, "measure prefill and decode tokens/s (JSON on stdout)"},
    {"quantize", cli_cmd_quantize, "write a model with its weight matrices in another type (q4_K, ...)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: edgespec COMMAND [options]   (edgespec COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "help", "show this help, or a command's: edgespec help COMMAND");
    fprintf(f, "  %-10s %s\n", "version", "print the version");
}

static const subcommand *find(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    /* A closed stdout (edgespec run ... | head) must end the program with a message and a status,
     * not kill it with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "help") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        if (argc > 2) {
            const subcommand *c = find(argv[2]);
            if (!c) {
                fprintf(stderr, "edgespec: unknown command '%s'\n\n", argv[2]);
                usage(stderr);
                return CLI_EXIT_USAGE;
            }
            char help[] = "--help";
            char *sub[] = {argv[2], help, NULL};
            return c->fn(2, sub);
        }
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "version") == 0 || strcmp(name, "--version") == 0) {
        printf("edgespec %s\n", es_version()); /* the library that runs, which may be newer than the header */
        return CLI_EXIT_OK;
    }
    const subcommand *c = find(name);
    if (!c) {
        fprintf(stderr, "edgespec: unknown command '%s'\n\n", name);
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    return c->fn(argc - 1, argv + 1);
}
