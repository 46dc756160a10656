/* time_guard_constants.h — constants of the time guard (src/time_guard.h; the model is
 * documented at pw_plan_info in include/pageweaver.h). Refit with ONE command on the
 * device after a kernel change:
 *     build-gpu/pageweaver bench --json bench.json <scaling set + A-hot + captures>
 *     python3 bench/fit_time_guard.py bench.json --write src/time_guard_constants.h
 * (`scripts/gpu-check regroup13` runs the bench on the scaling set; bench/NOTES.md).
 *
 * Written by bench/fit_time_guard.py on 2026-12-01 from scaling.json: `scripts/gpu-check
 * scaling13` on the H200 (A-hot + bench/make_scaling_set.py, 30 replays, 200 interleaved;
 * the default kernel group timed in FP8X2, the default arithmetic, and brought back to FP8
 * terms by the fit).
 * Per capture (measured / predicted, us; Union4 = the default kernel, W128, in the arithmetic its group ran):
 *   sel_A_hot.safetensors: N*Hkv 15272, 504 pages: S 99.5/95.6, C 15.0/15.9, S_net +84.5 -> regroup
 *   scale_n01024_pre48k.safetensors: N*Hkv 1024, 392 pages: S -0.0/1.1, C 13.8/14.5, S_net -13.8 -> identity
 *   scale_n04096_ctx1m.safetensors: N*Hkv 4096, 8192 pages: S 19.4/21.5, C 31.7/32.8, S_net -12.3 -> identity
 *   scale_n04096_ctx256k.safetensors: N*Hkv 4096, 2048 pages: S 20.6/21.5, C 15.7/14.8, S_net +5.0 -> regroup
 *   scale_n04096_ctx64k.safetensors: N*Hkv 4096, 512 pages: S 18.4/21.5, C 15.1/14.8, S_net +3.3 -> regroup
 *   scale_n04096_pre48k.safetensors: N*Hkv 4096, 416 pages: S 22.2/21.5, C 14.5/14.8, S_net +7.7 -> regroup
 *   scale_n16384_pre48k.safetensors: N*Hkv 16384, 512 pages: S 108.2/103.0, C 15.2/16.0, S_net +92.9 -> regroup
 *   scale_n65536_pre48k.safetensors: N*Hkv 65536, 896 pages: S 443.5/429.1, C 20.2/21.0, S_net +423.3 -> regroup
 */
#ifndef PW_TIME_GUARD_CONSTANTS_H
#define PW_TIME_GUARD_CONSTANTS_H

#define PW_TIME_GUARD_FITTED                                                                \
    {                                                                                       \
        /* rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.35804, 5.82356}, {3.91607, 5.23296}}, \
        /* rows0 */ {{2751.66, 2751.66}, {858.978, 858.978}},                       \
        /* fp8x2_factor */ 1.2678,                                              \
        /* fixed_us [W64, W128] */ {6.85904, 14.363},                                          \
        /* per_window_us */ {0.00428316, 0.0130219},                                            \
        /* hash_factor */ 2.22088,                                                \
        /* direct_max_pages */ {4096, 2048},     \
        /* margin_us */ 2                                                        \
    }

#endif
