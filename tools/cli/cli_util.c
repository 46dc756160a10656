/* Helpers shared by the subcommands of the pageweaver tool. */
#include <errno.h>
#include <stdlib.h>

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
