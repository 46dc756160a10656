/* time_guard.h — the time guard of PW_REGROUP_AUTO (internal, not installed): a pure host
 * function that predicts, from what the host knows when it enqueues a call (never device
 * data), whether the in-call regroup saves more attention time than it costs. The model
 * is documented at pw_plan_info in pageweaver.h; its constants live in
 * src/time_guard_constants.h, written by bench/fit_time_guard.py from `pageweaver bench
 * --json` output. */
#ifndef PW_TIME_GUARD_H
#define PW_TIME_GUARD_H

#include <stdint.h>

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Index of a kernel / window in the model's tables. */
enum { PW_TG_UNION8 = 0, PW_TG_UNION4 = 1, PW_TG_KERNELS = 2 };
enum { PW_TG_W64 = 0, PW_TG_W128 = 1, PW_TG_WINDOWS = 2 };

typedef struct pw_time_guard_model {
    /* S_exec = rate_ns_per_row * (rows - rows0) / 1000 us, rows = N * Hkv (FP8) */
    double rate_ns_per_row[PW_TG_KERNELS][PW_TG_WINDOWS];
    double rows0[PW_TG_KERNELS][PW_TG_WINDOWS];
    double fp8x2_factor; /* S_exec of PW_PRECISION_FP8X2 / S_exec of FP8 */
    /* C_online = (fixed_us + per_window_us * windows) us, windows = Hkv (ceil(N/W) + R - 1) */
    double fixed_us[PW_TG_WINDOWS];
    double per_window_us[PW_TG_WINDOWS];
    double hash_factor;       /* C_online multiplier past long_max_pages (K <= 16) */
    int32_t direct_max_pages[PW_TG_WINDOWS]; /* 4096 (W64), 2048 (W128): the 32 KB direct-indexed
                                                bound (src/cuda/regroup.cu); the K > 16 kernels'
                                                hash-set bound (pw_time_guard_wide) */
    double margin_us;         /* regroup iff saving > cost + margin */
    /* K <= 16: the long direct path's bound, 28,672 (W64), 14,336 (W128) pages (regroup.cu,
     * kLong): up to it C_online is the direct path's, past it the hash path's (hash_factor).
     * The launch may still take the hash path there when the long path's CTAs would need
     * more than twice the waves (many windows x KV heads); the model does not see that. */
    int32_t long_max_pages[PW_TG_WINDOWS];
} pw_time_guard_model_t;

/* What the host knows when it enqueues a call. */
typedef struct pw_time_guard_inputs {
    int64_t num_tokens;            /* N */
    int64_t num_requests;          /* R */
    int64_t num_kv_heads;          /* Hkv */
    int64_t max_pages_per_request; /* V */
    pw_kernel_t kernel;
    pw_precision_t precision;
    int32_t window;                /* W: 64 or 128 (anything else: never pays) */
} pw_time_guard_inputs_t;

/* Top-K wider than 16 (the device's Kd = 32 or 64): the wide-Top-K regroup kernels' own
 * cost, measured per call on the fit input, and a factor on the K = 16 saving. */
enum { PW_TG_K32 = 0, PW_TG_K64 = 1, PW_TG_WIDE_KS = 2 };

typedef struct pw_time_guard_wide_model {
    /* C_online = cost_us[Kd][W] * max(1, windows / wave_windows[Kd][W]) us: one wave of
     * CTAs with the direct-indexed masks (dev variant 7); past the direct bound the
     * hash-set kernel's (variant 6) hash_cost_us and hash_wave_windows */
    double cost_us[PW_TG_WIDE_KS][PW_TG_WINDOWS];
    double hash_cost_us[PW_TG_WIDE_KS][PW_TG_WINDOWS];
    double wave_windows[PW_TG_WIDE_KS][PW_TG_WINDOWS];
    double hash_wave_windows[PW_TG_WIDE_KS][PW_TG_WINDOWS];
    /* S_exec = saving_factor[W] * the K = 16 formula (pw_time_guard's saving at window W)
     * evaluated with saving_rate_ns_per_row, saving_rows0 and saving_fp8x2_factor in place
     * of the K = 16 model's rate, rows0 and fp8x2_factor: the K = 16 saving constants the
     * factor is used with, kept here (since 2026-12-05) so that a refit of the K = 16 model
     * (time_guard_constants.h) leaves the K > 16 choices as they are until the factor is
     * re-measured against the new fit (bench/fit_time_guard.py --wide). One factor per
     * window [W64, W128] since the forty-third session: at K > 16 a W64 regroup keeps a
     * smaller share of the K = 16 model's W64 saving than W128 does of W128's. */
    double saving_factor[PW_TG_WINDOWS];
    double saving_rate_ns_per_row[PW_TG_KERNELS][PW_TG_WINDOWS];
    double saving_rows0[PW_TG_KERNELS][PW_TG_WINDOWS];
    double saving_fp8x2_factor;
} pw_time_guard_wide_model_t;

/* What the host knows, plus the device's Kd. */
typedef struct pw_time_guard_wide_inputs {
    pw_time_guard_inputs_t base;
    int32_t topk; /* Kd: 32 or 64 (anything else: never pays) */
} pw_time_guard_wide_inputs_t;

/* The library's constants (src/time_guard_constants.h, src/time_guard_wide_constants.h). */
const pw_time_guard_model_t *pw_time_guard_model(void);
const pw_time_guard_wide_model_t *pw_time_guard_wide_model(void);

/* Predicted saving and cost in microseconds (either pointer may be NULL); returns 1 when
 * regrouping pays (saving > cost + margin), else 0. PER_QUERY, N = 0, a window other than
 * 64 / 128, or a kernel / precision outside the enums: 0 with saving = cost = 0. */
int pw_time_guard(const pw_time_guard_inputs_t *in, const pw_time_guard_model_t *model,
                  double *saving_us, double *cost_us);

/* The same decision for Kd = 32 / 64: saving = wide->saving_factor[W] * pw_time_guard's
 * saving with wide's saving_rate_ns_per_row, saving_rows0 and saving_fp8x2_factor (model's
 * own rate, rows0 and fp8x2_factor are not read), cost = wide->cost_us[Kd][W] * max(1,
 * windows / wave_windows[Kd][W]) (hash_cost_us and hash_wave_windows past model's direct
 * bound); returns 1 iff saving > cost + model's margin.
 * Kd other than 32 / 64, and every input pw_time_guard rejects: 0 with saving = cost = 0. */
int pw_time_guard_wide(const pw_time_guard_wide_inputs_t *in, const pw_time_guard_model_t *model,
                       const pw_time_guard_wide_model_t *wide, double *saving_us, double *cost_us);

/* PW_WINDOW_AUTO's window: of 64 and 128, the one whose predicted net saving (saving -
 * cost, by pw_time_guard at topk <= 16, pw_time_guard_wide at Kd = topk 32 / 64) is the
 * larger for in's kernel and precision; in->window is ignored. 128 on a tie and wherever
 * neither window can regroup (per-query, N = 0, bad enums or Kd). In in's precision a window
 * whose net is larger but that does not pay leaves the plan in identity order rightly (the
 * other window's net is smaller still); the plan asks in FP8X2 and uses that window for its
 * FP8 calls too, where the other window may pay when this one does not (pageweaver.h,
 * pw_plan_info). */
int32_t pw_time_guard_window(const pw_time_guard_inputs_t *in, int32_t topk, const pw_time_guard_model_t *model,
                             const pw_time_guard_wide_model_t *wide);

#ifdef __cplusplus
}
#endif
#endif
