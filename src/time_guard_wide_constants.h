/* time_guard_wide_constants.h — the time guard's constants for Top-K wider than 16 (the
 * device's Kd = 32 or 64; src/time_guard.h, pw_time_guard_wide). Not written by
 * bench/fit_time_guard.py: H200 measurements of 2026-12-02 (thirteenth session, one device
 * call), on bench/make_workload_captures.py's A-hot at K = 32 / 64 (15,272 queries, one KV
 * head, 504 pages; 120 windows at W128, 239 at W64):
 *   cost_us, hash_cost_us: `scripts/gpu-check regroupwide` (bench_regroup, graph replay of
 *     the regroup alone, guarded mode, median): dev variant 7 (direct-indexed masks, what
 *     pw_regroup runs while max_pages_per_request <= 2048 at W128 / 4096 at W64) and dev
 *     variant 6 (the hash-set kernel it runs past that bound), us:
 *         K32 W64 13.02 (variant 6: 49.98), K32 W128 21.20 (77.54),
 *         K64 W64 19.14 (105.63), K64 W128 30.74 (136.20);
 *   saving_factor: `bench/shapes.py --copies 3` on the same captures, two device calls
 *     (`PW_SHAPES_ARMS=G16id,G16greedy,G8id,G8greedy,G4id,G4greedy`, then
 *     `G16,G16id,G8,G8id,G4,G4id`, the default plan choosing GUARDED): the attention time
 *     regrouping saved (T_identity - T_guarded + the regroup's cost) over the K = 16 model's
 *     S_exec for the same rows (85.1 us FP8, 110.9 us FP8X2), smallest over both calls,
 *     G 16 / 8 / 4, K 32 / 64 and both precisions: 0.584 (G = 4, K = 32, FP8, second call:
 *     1033.9 - 1005.4 + 21.2 = 49.7 us; the first call gave 0.643 there); the others
 *     0.59-2.15 (G = 16: 1.31-2.15). So the K > 16 guard is conservative for G = 16 and 8.
 *     The factor multiplies the K = 16 formula with the saving constants below (not
 *     src/time_guard_constants.h's since 2026-12-05): re-measure it after a refit of the
 *     K = 16 model and install both together.
 * wave_windows, hash_wave_windows: windows one wave of CTAs holds on the H200 (132 SMs x
 * the CTAs per SM the kernel's shared memory allows: variant 7 48 / 64 KiB at W64, 96 /
 * 160 KiB at W128 for Kd 32 / 64, i.e. 4 / 3 and 2 / 1 per SM; variant 6 in guarded mode
 * 21 / 42 KiB and 44 / 88 KiB, i.e. 10 / 5 and 5 / 2 per SM). Derived, not measured: A-hot
 * (120 windows at W128, 239 at W64) fits one wave of each kernel, so the measured costs are
 * one wave's; past a wave the cost is taken to grow linearly.
 * Re-measure after a change of the wide-Top-K regroup kernels or the attention kernels:
 *     PW_SHAPES_FILES=".data/workloads_k32/sel_A_hot_k32.safetensors .data/workloads_k64/sel_A_hot_k64.safetensors" \
 *     PW_SHAPES_ARMS=G16id,G16greedy,G8id,G8greedy,G4id,G4greedy PW_SHAPES_COPIES=3 PW_SHAPES_JSON=1 \
 *     scripts/gpu-check regroupwide shapes
 * then `python3 bench/fit_time_guard.py <scaling JSONs> --base src/time_guard_constants.h --wide
 * shapes.json` prints the factor against the K = 16 model it fits (since 2026-12-05). The
 * thirteenth session's smallest case, 49.7 us, is 0.527 of the saving constants below (the
 * twentieth session's K = 16 model, 94.3 us): this 0.584 was taken against the model of the
 * thirteenth session. Against the K = 16 constants installed on 2026-12-05 it is 0.81; the
 * forty-second session's re-measurement gives 0.823 against them (bench/NOTES.md).
 * (bench/NOTES.md, thirteenth session, has the table).
 * saving_rate_ns_per_row, saving_rows0, saving_fp8x2_factor: the K = 16 saving constants
 * the factor multiplies, copied here on 2026-12-05 (forty-second session) from the
 * twentieth session's src/time_guard_constants.h, the K = 16 model the K > 16 guard has run
 * with since 2026-12-03: until then a refit of the K = 16 model moved the K > 16 saving with
 * it (the forty-first session's refit would have turned 22 K > 16 plans from regrouping to
 * identity order, none measured), and now it cannot before the factor is re-measured.
 * After that measurement, set these three to the K = 16 fit the factor was taken against
 * (bench/fit_time_guard.py --wide prints both). */
#ifndef PW_TIME_GUARD_WIDE_CONSTANTS_H
#define PW_TIME_GUARD_WIDE_CONSTANTS_H

#define PW_TIME_GUARD_WIDE                                                                  \
    {                                                                                       \
        /* cost_us [K32, K64][W64, W128] */ {{13.02, 21.20}, {19.14, 30.74}},               \
        /* hash_cost_us */ {{49.98, 77.54}, {105.63, 136.20}},                              \
        /* wave_windows [K32, K64][W64, W128] */ {{528.0, 264.0}, {396.0, 132.0}},          \
        /* hash_wave_windows */ {{1320.0, 660.0}, {660.0, 264.0}},                          \
        /* saving_factor */ 0.584,                                                          \
        /* saving_rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.38034, 5.84769}, {4.7414, 6.3297}}, \
        /* saving_rows0 */ {{2550.74, 2550.74}, {376.198, 376.198}},                        \
        /* saving_fp8x2_factor */ 1.25661                                                   \
    }

#endif
