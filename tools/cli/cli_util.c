/* Helpers shared by the subcommands of the pageweaver tool. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"

int pw_cli_parse_long(const char *text, long lo, long hi, long *out)
{
    if (!text || !*text) return 0;
    errno = 0;
    char *end = NULL;
    const long v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* Length of the well-formed UTF-8 sequence at b (2..4), or 0. */
static int utf8_sequence(const unsigned char *b)
{
    int more;
    uint32_t cp, min;
    if (b[0] >= 0xc2 && b[0] <= 0xdf) more = 1, cp = b[0] & 0x1fu, min = 0x80;
    else if (b[0] >= 0xe0 && b[0] <= 0xef) more = 2, cp = b[0] & 0x0fu, min = 0x800;
    else if (b[0] >= 0xf0 && b[0] <= 0xf4) more = 3, cp = b[0] & 0x07u, min = 0x10000;
    else return 0;
    for (int i = 1; i <= more; i++) {
        if ((b[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (b[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    if (cp >= 0x80 && cp <= 0x9f) return 0; /* C1 controls: escaped like C0 */
    return more + 1;
}

void pw_cli_fputs_escaped(const char *s, FILE *out)
{
    const unsigned char *b = (const unsigned char *)s;
    while (*b) {
        if (*b >= 0x20 && *b < 0x7f) {
            fputc(*b++, out);
            continue;
        }
        const int n = *b >= 0x80 ? utf8_sequence(b) : 0;
        if (n > 0) {
            fwrite(b, 1, (size_t)n, out);
            b += n;
        } else {
            fprintf(out, "\\x%02x", *b++);
        }
    }
}

int pw_cli_check_output(const char *cmd, const char *option, const char *path, const char *const *inputs, int n)
{
    if (!path || strcmp(path, "-") == 0) return 0;
    const size_t len = strlen(path), ext = strlen(".safetensors");
    const char *sep = option[0] && option[strlen(option) - 1] == '=' ? "" : " "; /* --json=X, --json X */
    if (len >= ext && strcasecmp(path + len - ext, ".safetensors") == 0) {
        fprintf(stderr,
                "pageweaver %s: %s%s%s: the report would replace a capture (%s takes the report's file "
                "name, e.g. report.json)\n",
                cmd, option, sep, path, option);
        return PW_CLI_USAGE;
    }
    struct stat out;
    if (stat(path, &out) != 0) return 0; /* not there yet: no input can be it */
    for (int i = 0; i < n; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
            fprintf(stderr, "pageweaver %s: %s%s%s is the input %s: the report would overwrite it\n", cmd, option,
                    sep, path, inputs[i]);
            return PW_CLI_USAGE;
        }
    }
    return 0;
}
