/* pageweaver command-line tool: one file per subcommand, main.c dispatches.
 * To add a subcommand: write tools/cli/<name>.c with `int pw_cli_<name>(int argc, char **argv)`
 * (argv[0] is the subcommand name; it handles its own --help), declare it below, and add
 * one line to the command table in main.c. */
#ifndef PW_CLI_H
#define PW_CLI_H

#include <stdio.h>

/* Exit codes shared by every subcommand. */
enum {
    PW_CLI_OK = 0,        /* success */
    PW_CLI_BAD_INPUT = 1, /* a file could not be read, is malformed, or a computation failed */
    PW_CLI_USAGE = 2      /* bad command line */
};

/* Parses a whole decimal integer in [lo, hi]; returns 1 on success. */
int pw_cli_parse_long(const char *text, long lo, long hi, long *out);

/* Writes s to out with every byte that could act on a terminal escaped: control bytes
 * (< 0x20, 0x7f), C1 controls and bytes that are not part of well-formed UTF-8 become
 * \xNN, a backslash stays a backslash; valid UTF-8 text is written as is. For metadata and
 * error messages that quote file contents. */
void pw_cli_fputs_escaped(const char *s, FILE *out);

/* Checks a report's output path before it is opened for writing: refuses (message on stderr
 * naming cmd and option, returns PW_CLI_USAGE) a name ending in ".safetensors" (any case: the
 * report would replace a capture, or read as one) and a path that is the same file as one of
 * the n inputs (same device and inode, through any link or spelling); 0 when it may be
 * written. "-" (stdout) is always allowed. */
int pw_cli_check_output(const char *cmd, const char *option, const char *path, const char *const *inputs, int n);

/* pageweaver stats [--json] [--window W]... [--group-size G] FILE... (tools/cli/stats.c) */
int pw_cli_stats(int argc, char **argv);

/* pageweaver bench [options] CAPTURE... (tools/cli/bench.c, bench_gpu.c) */
int pw_cli_bench(int argc, char **argv);

#endif
