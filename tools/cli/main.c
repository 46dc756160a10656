/* pageweaver: command-line tool (placeholder until the stats/bench commands land). */
#include <stdio.h>
#include <string.h>

#include "pageweaver.h"

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        printf("pageweaver %s\nusage: pageweaver COMMAND [ARGS]\n", pw_version_string());
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "pageweaver: unknown command '%s' (try --help)\n", argv[1]);
    return 2;
}
