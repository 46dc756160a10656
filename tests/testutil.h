/* Shared test helpers: seeded random numbers (the seed is printed and can be set with
 * --seed N or PW_TEST_SEED), and the cmocka includes in the order cmocka needs. */
#ifndef PW_TESTUTIL_H
#define PW_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pageweaver.h"

/* Parses --seed N (or the PW_TEST_SEED environment variable; else a time-based seed),
 * prints "seed: N (rerun with --seed N)" and returns it. */
uint64_t pw_test_seed(int argc, char **argv);

/* splitmix64-style generator state; one per test so tests stay independent. */
typedef struct pw_rng { uint64_t state; } pw_rng_t;
void pw_rng_init(pw_rng_t *rng, uint64_t seed);
uint64_t pw_rng_next(pw_rng_t *rng);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t pw_rng_range(pw_rng_t *rng, int64_t lo, int64_t hi);
/* Uniform double in [0, 1). */
double pw_rng_uniform(pw_rng_t *rng);
/* Standard normal (Box-Muller). */
double pw_rng_normal(pw_rng_t *rng);

/* Asserts that a pw_ call succeeded, printing pw_last_error() when it did not. */
#define assert_pw_ok(expr)                                                                  \
    do {                                                                                    \
        pw_status_t st_ = (expr);                                                           \
        if (st_ != PW_SUCCESS)                                                              \
            fail_msg("%s -> %s: %s", #expr, pw_status_string(st_), pw_last_error());       \
    } while (0)

#endif
