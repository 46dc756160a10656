/* time_guard_constants.h — constants of the time guard (src/time_guard.h; the model is
 * documented at pw_plan_info in include/pageweaver.h). Refit with ONE command on the
 * device after a kernel change:
 *     build-gpu/pageweaver bench --json bench.json <scaling set + A-hot + captures>
 *     python3 bench/fit_time_guard.py bench.json --write src/time_guard_constants.h
 * (`scripts/gpu-check scaling13` runs the bench on the scaling set and the fit; bench/NOTES.md).
 * Captures of Top-K > 16 are skipped (the fit script since 2026-12-02). The K > 16 form
 * (src/time_guard_wide_constants.h) scales this model's saving: re-measure its factor
 * after a refit.
 *
 * Written by bench/fit_time_guard.py on 2026-12-01 (fourth session) from scaling.json:
 * `PW_BENCH_REPLAYS=20 scripts/gpu-check scaling13` on the H200 (A-hot +
 * bench/make_scaling_set.py, 20 replays, 200 interleaved; attention v8.1, the V^T pre-pass
 * by the plan's rule, Union4 regrouping for 4-query unions; the default kernel group timed
 * in FP8X2, the default arithmetic, and brought back to FP8 terms by the fit).
 * Per capture (measured / predicted, us; Union4 = the default kernel, W128, in the arithmetic its group ran):
 *   sel_A_hot.safetensors: N*Hkv 15272, 504 pages: S 119.7/110.8, C 14.8/12.6, S_net +104.9 -> regroup
 *   scale_n01024_pre48k.safetensors: N*Hkv 1024, 392 pages: S 2.3/5.2, C 14.7/12.6, S_net -12.4 -> identity
 *   scale_n01024_pre8k.safetensors: N*Hkv 1024, 72 pages: S 4.0/5.2, C 13.9/12.6, S_net -9.9 -> identity
 *   scale_n04096_ctx1m.safetensors: N*Hkv 4096, 8192 pages: S 24.2/28.0, C 31.8/31.3, S_net -7.6 -> identity
 *   scale_n04096_ctx256k.safetensors: N*Hkv 4096, 2048 pages: S 26.5/28.0, C 15.7/12.6, S_net +10.7 -> regroup
 *   scale_n04096_ctx64k.safetensors: N*Hkv 4096, 512 pages: S 27.8/28.0, C 14.2/12.6, S_net +13.6 -> regroup
 *   scale_n04096_pre48k.safetensors: N*Hkv 4096, 416 pages: S 26.1/28.0, C 15.8/12.6, S_net +10.3 -> regroup
 *   scale_n16384_pre48k.safetensors: N*Hkv 16384, 512 pages: S 138.6/119.1, C 15.2/12.6, S_net +123.3 -> regroup
 *   scale_n65536_pre48k.safetensors: N*Hkv 65536, 896 pages: S 534.4/483.4, C 21.3/12.6, S_net +513.1 -> regroup
 */
#ifndef PW_TIME_GUARD_CONSTANTS_H
#define PW_TIME_GUARD_CONSTANTS_H

#define PW_TIME_GUARD_FITTED                                                                \
    {                                                                                       \
        /* rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.25261, 5.67717}, {4.26205, 5.68977}}, \
        /* rows0 */ {{2192.35, 2192.35}, {316.3, 316.3}},                       \
        /* fp8x2_factor */ 1.30264,                                              \
        /* fixed_us [W64, W128] */ {7.84056, 12.646},                                          \
        /* per_window_us */ {0, 0},                                            \
        /* hash_factor */ 2.47731,                                                \
        /* direct_max_pages */ {4096, 2048},     \
        /* margin_us */ 2                                                        \
    }

#endif
