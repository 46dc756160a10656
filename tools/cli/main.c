/* pageweaver: command-line tool. A small dispatcher: each subcommand lives in its own
 * file (see cli.h) and handles its own arguments and --help.
 *
 * Exit codes: 0 success, 1 bad input (unreadable or malformed file, failed computation),
 * 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "pageweaver.h"

typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} cli_command_t;

/* One line per subcommand. */
static const cli_command_t k_commands[] = {
    {"stats", "union visits, rho_Q and C_4 of identity / regrouped orders of capture files",
     pw_cli_stats},
    {"bench", "paper measurements (docs/semantics.md section 5): full-call times, floors, union statistics", pw_cli_bench},
};

static const int k_num_commands = (int)(sizeof k_commands / sizeof k_commands[0]);

static void print_usage(FILE *out)
{
    fprintf(out,
            "pageweaver %s: sparse prefill attention with online query regrouping\n"
            "\n"
            "usage: pageweaver [--help] [--version] COMMAND [ARGS]\n"
            "\n"
            "commands:\n",
            pw_version_string());
    for (int i = 0; i < k_num_commands; i++)
        fprintf(out, "  %-12s %s\n", k_commands[i].name, k_commands[i].summary);
    fprintf(out, "  %-12s %s\n", "help", "help COMMAND: the same as COMMAND --help");
    fprintf(out,
            "\n"
            "Run 'pageweaver COMMAND --help' for a command's options.\n"
            "Exit status: 0 success, 1 bad input, 2 usage error.\n");
}

static const cli_command_t *find_command(const char *name)
{
    for (int i = 0; i < k_num_commands; i++)
        if (strcmp(k_commands[i].name, name) == 0) return &k_commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return PW_CLI_USAGE;
    }
    const char *first = argv[1];
    if ((strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0 || strcmp(first, "--version") == 0) &&
        argc > 2) {
        fprintf(stderr, "pageweaver: %s takes no argument (got '%s')\n", first, argv[2]);
        return PW_CLI_USAGE;
    }
    if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
        print_usage(stdout);
        return PW_CLI_OK;
    }
    if (strcmp(first, "--version") == 0) {
        printf("pageweaver %s\n", pw_version_string());
        return PW_CLI_OK;
    }
    if (strcmp(first, "help") == 0) {
        if (argc < 3 || strcmp(argv[2], "help") == 0) { /* `help help`: help's own help is the usage */
            print_usage(stdout);
            return PW_CLI_OK;
        }
        const cli_command_t *cmd = find_command(argv[2]);
        if (!cmd) {
            fprintf(stderr, "pageweaver: unknown command '%s' (try pageweaver --help)\n", argv[2]);
            return PW_CLI_USAGE;
        }
        char *help_argv[3] = {argv[2], (char *)"--help", NULL};
        return cmd->run(2, help_argv);
    }
    const cli_command_t *cmd = find_command(first);
    if (!cmd) {
        fprintf(stderr, "pageweaver: unknown %s '%s' (try pageweaver --help)\n",
                first[0] == '-' ? "option" : "command", first);
        return PW_CLI_USAGE;
    }
    return cmd->run(argc - 1, argv + 1);
}
