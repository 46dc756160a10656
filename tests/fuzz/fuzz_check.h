/* What both fuzz targets check with (tests/fuzz/README.md): a failed check stops the run
 * with a message (the fuzzer or the replay names the input), and a failed library call must
 * say why. */
#ifndef PW_FUZZ_CHECK_H
#define PW_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pageweaver.h"

/* The library's internal reset of pw_last_error() (src/status.c; these targets link the
 * library's sources): cleared before each call whose failure message is checked, so that a
 * failure without a message of its own cannot pass on an earlier call's message. */
void pw_clear_error(void);
#define FRESH(call) (pw_clear_error(), (call))

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s: check failed at line %d: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, "\n");                                                          \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* A failed call (made through FRESH) must say why, in a bounded message. */
static inline void check_failure_message(pw_status_t st, const char *call)
{
    if (st == PW_SUCCESS) return;
    const char *m = pw_last_error();
    CHECK(m && m[0], "%s returned %s without a message", call, pw_status_string(st));
    CHECK(strlen(m) < 4096, "%s: message of %zu bytes", call, strlen(m));
}

#endif
