/* time_guard_constants.h — constants of the time guard (src/time_guard.h; the model is
 * documented at pw_plan_info in include/pageweaver.h). Refit with ONE command on the
 * device after a kernel change:
 *     build-gpu/pageweaver bench --json bench.json <scaling set + A-hot + captures>
 *     python3 bench/fit_time_guard.py bench.json --write src/time_guard_constants.h
 * (`scripts/gpu-check scaling13` runs the bench on the scaling set and the fit; bench/NOTES.md).
 * Captures of Top-K > 16 are skipped. The K > 16 form (src/time_guard_wide_constants.h)
 * scales this model's saving: re-measure its factor after a refit.
 *
 * Written by bench/fit_time_guard.py on 2026-12-03 (twentieth session) from scaling.json:
 * `PW_PREBUILT=.data/bin.tar.xz PW_BENCH_REPLAYS=20 scripts/gpu-check scaling13` on the H200
 * (the kernels of commit 6f806a7, the pre-pass beside the regroup under capture; the scaling
 * set with its 2,048- and 3,072-query chunks around the threshold; the default kernel group
 * timed in FP8X2 and brought back to FP8 terms). The saving is fitted over captures of at most
 * 20,000 rows and the cost over calls without the V^T pre-pass (C below is what the call
 * measured, 4-8 us where the pre-pass hides the regroup). Thresholds at one request, one
 * KV head, direct path: Union4 regroups from ~2,520 queries in FP8X2 (measured: 2,048 lost
 * 4.7 us, 3,072 gained 0.8 us) and ~3,070 in FP8 (the fourth session's constants: ~2,300 /
 * ~2,890). The K > 16 form's saving factor was not re-measured: this fit's K = 16 saving
 * is within -2% .. +7% of the previous one's in FP8X2 (+2% .. +11% in FP8) from 1,024 to 15,272 rows.
 * Per capture (measured / predicted, us; Union4 = the default kernel, W128, in the arithmetic its group ran):
 *   sel_A_hot.safetensors: N*Hkv 15272, 504 pages: S 118.2/118.5, C 4.6/15.1, S_net +113.6 -> regroup
 *   scale_n01024_pre48k.safetensors: N*Hkv 1024, 392 pages: S 3.4/5.2, C 14.5/15.1, S_net -11.1 -> identity
 *   scale_n01024_pre8k.safetensors: N*Hkv 1024, 72 pages: S 4.8/5.2, C 14.0/15.1, S_net -9.2 -> identity
 *   scale_n02048_pre48k.safetensors: N*Hkv 2048, 400 pages: S 10.5/13.3, C 15.2/15.1, S_net -4.7 -> identity
 *   scale_n03072_pre48k.safetensors: N*Hkv 3072, 408 pages: S 16.8/21.4, C 15.9/15.1, S_net +0.8 -> regroup
 *   scale_n04096_ctx1m.safetensors: N*Hkv 4096, 8192 pages: S 26.0/29.6, C 32.2/31.8, S_net -6.2 -> identity
 *   scale_n04096_ctx256k.safetensors: N*Hkv 4096, 2048 pages: S 27.2/29.6, C 16.2/15.1, S_net +10.9 -> regroup
 *   scale_n04096_ctx64k.safetensors: N*Hkv 4096, 512 pages: S 38.0/29.6, C 7.4/15.1, S_net +30.6 -> regroup
 *   scale_n04096_pre48k.safetensors: N*Hkv 4096, 416 pages: S 36.8/29.6, C 7.8/15.1, S_net +29.1 -> regroup
 *   scale_n16384_pre48k.safetensors: N*Hkv 16384, 512 pages: S 132.4/127.3, C 3.7/15.1, S_net +128.7 -> regroup
 *   scale_n65536_pre48k.safetensors: N*Hkv 65536, 896 pages: S 497.2/518.3, C 7.1/15.1, S_net +490.1 -> regroup
 *   Thresholds (Union4, W128, one request, one KV head; the fewest queries that regroup, page table within / past the direct bound): FP8X2 ~2,521 / ~4,625, FP8 ~3,071 / ~5,715
 * long_max_pages (added by hand on 2026-12-03, twenty-fourth session, with the regroup's
 * long direct path): the hash factor now applies past 14,336 / 28,672 pages, not 2048 / 4096.
 * The scale_n04096_ctx1m row above is the hash path's; with the long path that chunk
 * measured C 15.9 us (predicted 15.1) and S_net +9.5 us, and regroups. A refit on that run
 * made the same eleven choices and was not installed (bench/NOTES.md, twenty-fourth session).
 */
#ifndef PW_TIME_GUARD_CONSTANTS_H
#define PW_TIME_GUARD_CONSTANTS_H

#define PW_TIME_GUARD_FITTED                                                                \
    {                                                                                       \
        /* rate_ns_per_row [Union8, Union4][W64, W128] */ {{4.38034, 5.84769}, {4.7414, 6.3297}}, \
        /* rows0 */ {{2550.74, 2550.74}, {376.198, 376.198}},                       \
        /* fp8x2_factor */ 1.25661,                                              \
        /* fixed_us [W64, W128] */ {7.33907, 15.056},                                          \
        /* per_window_us */ {0.00221676, 0},                                            \
        /* hash_factor */ 2.11158,                                                \
        /* direct_max_pages */ {4096, 2048},     \
        /* margin_us */ 2,                                                       \
        /* long_max_pages */ {28672, 14336}     \
    }

#endif
