#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t pw_test_seed(int argc, char **argv)
{
    uint64_t seed = 0;
    int have = 0;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0) {
            seed = strtoull(argv[i + 1], NULL, 0);
            have = 1;
        }
    }
    const char *env = getenv("PW_TEST_SEED");
    if (!have && env && *env) {
        seed = strtoull(env, NULL, 0);
        have = 1;
    }
    if (!have) seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    printf("seed: %llu (rerun with --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

void pw_rng_init(pw_rng_t *rng, uint64_t seed) { rng->state = seed ^ 0x9e3779b97f4a7c15ull; }

uint64_t pw_rng_next(pw_rng_t *rng)
{
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t pw_rng_range(pw_rng_t *rng, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1u;
    if (span == 0) return (int64_t)pw_rng_next(rng);
    return lo + (int64_t)(pw_rng_next(rng) % span);
}

double pw_rng_uniform(pw_rng_t *rng) { return (double)(pw_rng_next(rng) >> 11) * 0x1.0p-53; }

double pw_rng_normal(pw_rng_t *rng)
{
    double u1 = pw_rng_uniform(rng), u2 = pw_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}
