/* time_guard_constants.h — constants of the time guard (src/time_guard.h; the model is
 * documented at pw_plan_info in include/pageweaver.h). Refit with ONE command on the
 * device after a kernel change:
 *     build-gpu/pageweaver bench --json bench.json <scaling set + A-hot + captures>
 *     python3 bench/fit_time_guard.py bench.json --write src/time_guard_constants.h
 * (`scripts/gpu-check regroup13` runs the bench on the scaling set; bench/NOTES.md).
 *
 * Source of these values: issue 13's table (H200, 2026-12-01, `pageweaver bench`, Union8,
 * FP8, guarded W128, synthetic hot selections, one request, one KV head), hand-fitted:
 *   S_exec: 6.7 ns per row above 2,900 rows (16,384 q: 90.0 us -> 90.3 predicted; 4,096 q:
 *     7.9 -> 8.0; 65,536 q: 381 -> 420; 1,024 q: -3.7 -> -12.6);
 *   C_online: 11.3 us + 0.0245 us per window (8 windows: 11.5 -> 11.5; 128: 14.4 -> 14.4;
 *     512: 23.8 -> 23.8; 32: 15.5 -> 12.1); the 1M-token context (hash path, 32
 *     windows): 28.5 us = 2.35 x the direct prediction -> hash_factor 2.4.
 * Not measured yet, first guesses the refit replaces: Union4 (the default kernel) = the
 * Union8 values; W64: rate x 0.74 (W64 cuts 7.42% of A-hot's union visits, W128 10.01%),
 * fixed 7.0 us (the W64 regroup kernel alone is 6.8 us vs 13.1 at W128); FP8X2: x 1.24
 * (FP8X2 / FP8 full-call time 1.21-1.27, README); margin 2 us. */
#ifndef PW_TIME_GUARD_CONSTANTS_H
#define PW_TIME_GUARD_CONSTANTS_H

#define PW_TIME_GUARD_FITTED                                                                \
    {                                                                                       \
        /* rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.96, 6.7}, {4.96, 6.7}},     \
        /* rows0 */ {{2900.0, 2900.0}, {2900.0, 2900.0}},                                   \
        /* fp8x2_factor */ 1.24,                                                            \
        /* fixed_us [W64, W128] */ {7.0, 11.3},                                             \
        /* per_window_us */ {0.0245, 0.0245},                                               \
        /* hash_factor */ 2.4,                                                              \
        /* direct_max_pages */ {4096, 2048},                                                \
        /* margin_us */ 2.0                                                                 \
    }

#endif
