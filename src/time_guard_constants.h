/* time_guard_constants.h — constants of the time guard (src/time_guard.h; the model is
 * documented at pw_plan_info in include/pageweaver.h). Refit with ONE command on the
 * device after a kernel change:
 *     build-gpu/pageweaver bench --json bench.json <scaling set + A-hot + captures>
 *     python3 bench/fit_time_guard.py bench.json --write src/time_guard_constants.h
 * (`scripts/gpu-check scaling13` runs the bench on the scaling set and the fit; bench/NOTES.md).
 *
 * Written by bench/fit_time_guard.py on 2026-12-01 (third session) from scaling.json:
 * `PW_BENCH_REPLAYS=30 scripts/gpu-check attnquick scaling13` on the H200 (A-hot +
 * bench/make_scaling_set.py, 30 replays, 200 interleaved; attention v8.1, the V^T pre-pass
 * by the plan's rule; the default kernel group timed in FP8X2, the default arithmetic, and
 * brought back to FP8 terms by the fit).
 * Per capture (measured / predicted, us; Union4 = the default kernel, W128, in the arithmetic its group ran):
 *   sel_A_hot.safetensors: N*Hkv 15272, 504 pages: S 95.7/89.8, C 15.7/15.4, S_net +80.0 -> regroup
 *   scale_n01024_pre48k.safetensors: N*Hkv 1024, 392 pages: S 0.4/1.2, C 14.4/13.8, S_net -14.0 -> identity
 *   scale_n01024_pre8k.safetensors: N*Hkv 1024, 72 pages: S 4.1/1.2, C 14.2/13.8, S_net -10.1 -> identity
 *   scale_n04096_ctx1m.safetensors: N*Hkv 4096, 8192 pages: S 18.8/20.3, C 31.7/31.4, S_net -12.9 -> identity
 *   scale_n04096_ctx256k.safetensors: N*Hkv 4096, 2048 pages: S 20.7/20.3, C 16.0/14.1, S_net +4.7 -> regroup
 *   scale_n04096_ctx64k.safetensors: N*Hkv 4096, 512 pages: S 19.2/20.3, C 14.6/14.1, S_net +4.6 -> regroup
 *   scale_n04096_pre48k.safetensors: N*Hkv 4096, 416 pages: S 15.8/20.3, C 14.7/14.1, S_net +1.1 -> regroup
 *   scale_n16384_pre48k.safetensors: N*Hkv 16384, 512 pages: S 103.1/96.7, C 15.9/15.6, S_net +87.2 -> regroup
 *   scale_n65536_pre48k.safetensors: N*Hkv 65536, 896 pages: S 438.3/402.3, C 18.8/21.3, S_net +419.5 -> regroup
 */
#ifndef PW_TIME_GUARD_CONSTANTS_H
#define PW_TIME_GUARD_CONSTANTS_H

#define PW_TIME_GUARD_FITTED                                                                \
    {                                                                                       \
        /* rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.35977, 5.82023}, {3.53517, 4.7194}}, \
        /* rows0 */ {{2324.42, 2324.42}, {832.176, 832.176}},                       \
        /* fp8x2_factor */ 1.3176,                                              \
        /* fixed_us [W64, W128] */ {6.67493, 13.6421},                                          \
        /* per_window_us */ {0.00232919, 0.0149813},                                            \
        /* hash_factor */ 2.2264,                                                \
        /* direct_max_pages */ {4096, 2048},     \
        /* margin_us */ 2                                                        \
    }

#endif
