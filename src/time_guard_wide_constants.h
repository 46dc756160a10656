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
 *   saving_factor [W64, W128]: the attention time a regroup saved (T_identity - T_regrouped +
 *     the regroup's cost_us above: the regrouped arm's call includes the regroup) over the
 *     K = 16 saving formula for the same rows, window and precision, evaluated with the
 *     saving constants below; the smallest over G 16 / 8 / 4, K 32 / 64 and both precisions,
 *     per window (`bench/shapes.py --copies 3`, arms G<g>id / G<g>greedy (W128) /
 *     G<g>greedy64 (W64) on the same A-hot captures at K 32 / 64; then
 *     `bench/fit_time_guard.py <scaling JSONs> --base <K = 16 header> --wide <shapes JSONs>`,
 *     each document's arms paired within it, the least ratio over all):
 *       W128 0.823: H200, 2026-12-05 forty-second session (docs/shapes-wide-k32k64-h200.json;
 *         K32 FP8X2 G4: 1298.1 - 1257.5 + 21.2 = 61.8 us over 75.1); the same arms on an
 *         H100 in the forty-third session gave 0.833 there (the others 1.05-3.20);
 *       W64 0.465: H100 only, forty-third session (docs/shapes-wide-k32k64-w64-h100.json; K32
 *         FP8X2 G4: 1312.6 - 1295.8 + 13.0 = 29.8 us over the W64 model's 64.1; the others
 *         0.66-2.90). Not yet measured on an H200. At every one of the 12 (K, precision,
 *         G) cases W64's call was 13.6-43.1 us slower than W128's; with these factors the
 *         guard picks W128 at K > 16 where both windows run the same regroup kernel and
 *         W128's windows fit one wave (A-hot's shape), and still W64 where W128 alone
 *         would need the hash-set kernel (page tables of 2,049-4,096 pages) or several
 *         waves (many requests x KV heads): predictions, not measured.
 *     Until the forty-third session one factor, 0.584 (thirteenth session, K32 FP8 G4, against that
 *     session's K = 16 model), served both windows with the twentieth session's saving
 *     constants (0.527 of those, 0.81 of the refit below).
 *     Re-measure after a refit of the K = 16 model and install the factors and the saving
 *     constants below together.
 * wave_windows, hash_wave_windows: windows one wave of CTAs holds on the H200 (132 SMs x
 * the CTAs per SM the kernel's shared memory allows: variant 7 48 / 64 KiB at W64, 96 /
 * 160 KiB at W128 for Kd 32 / 64, i.e. 4 / 3 and 2 / 1 per SM; variant 6 in guarded mode
 * 21 / 42 KiB and 44 / 88 KiB, i.e. 10 / 5 and 5 / 2 per SM). Derived, not measured: A-hot
 * (120 windows at W128, 239 at W64) fits one wave of each kernel, so the measured costs are
 * one wave's; past a wave the cost is taken to grow linearly.
 * Re-measure after a change of the wide-Top-K regroup kernels or the attention kernels:
 *     PW_SHAPES_FILES=".data/workloads_k32/sel_A_hot_k32.safetensors .data/workloads_k64/sel_A_hot_k64.safetensors" \
 *     PW_SHAPES_ARMS=G16id,G16greedy,G16greedy64,G8id,G8greedy,G8greedy64,G4id,G4greedy,G4greedy64 \
 *     PW_SHAPES_COPIES=3 PW_SHAPES_JSON=1 scripts/gpu-check regroupwide shapes
 * then `python3 bench/fit_time_guard.py <scaling JSONs> --base src/time_guard_constants.h --wide
 * shapes.json` prints both factors against the K = 16 model it fits and the saving
 * constants to install with them.
 * saving_rate_ns_per_row, saving_rows0, saving_fp8x2_factor: the K = 16 saving constants
 * the factors multiply: since the forty-third session (2026-12-05) those of
 * src/time_guard_constants.h as refitted and installed in the forty-second (the fit of
 * docs/scaling-h200.json + docs/scaling-w64-h200.json); from 2026-12-03 to then the
 * twentieth session's. They are kept here, not read from that header, so that a later K =
 * 16 refit cannot move the K > 16 choices before the factors are re-measured against it. */
#ifndef PW_TIME_GUARD_WIDE_CONSTANTS_H
#define PW_TIME_GUARD_WIDE_CONSTANTS_H

#define PW_TIME_GUARD_WIDE                                                                  \
    {                                                                                       \
        /* cost_us [K32, K64][W64, W128] */ {{13.02, 21.20}, {19.14, 30.74}},               \
        /* hash_cost_us */ {{49.98, 77.54}, {105.63, 136.20}},                              \
        /* wave_windows [K32, K64][W64, W128] */ {{528.0, 264.0}, {396.0, 132.0}},          \
        /* hash_wave_windows */ {{1320.0, 660.0}, {660.0, 264.0}},                          \
        /* saving_factor [W64, W128] */ {0.465, 0.823},                                     \
        /* saving_rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.47086, 5.96854}, {3.36898, 3.89419}}, \
        /* saving_rows0 */ {{2580.31, 2580.31}, {-234.566, -435.519}},                      \
        /* saving_fp8x2_factor */ 1.22715                                                   \
    }

#endif
