/* The time guard of PW_REGROUP_AUTO (src/time_guard.h; the model is documented at
 * pw_plan_info in pageweaver.h). Pure arithmetic on host-known shapes: no device data, no
 * state, so a plan's choice is the same on every call with the same precision, captured
 * in a CUDA graph or not. */
#include "time_guard.h"

#include "time_guard_constants.h"
#include "time_guard_wide_constants.h"

static const pw_time_guard_model_t g_fitted = PW_TIME_GUARD_FITTED;
static const pw_time_guard_wide_model_t g_wide = PW_TIME_GUARD_WIDE;

const pw_time_guard_model_t *pw_time_guard_model(void)
{
    return &g_fitted;
}

const pw_time_guard_wide_model_t *pw_time_guard_wide_model(void)
{
    return &g_wide;
}

/* The model's table indices for in (kernel, window) and the precision factor; 0 when the
 * guard never regroups for these inputs (per-query, N = 0, another window, bad enums). */
static int guard_indices(const pw_time_guard_inputs_t *in, const pw_time_guard_model_t *m, int *k, int *w,
                         double *factor)
{
    if (!in || !m || in->num_tokens <= 0 || in->num_kv_heads <= 0) return 0;
    if (in->kernel == PW_KERNEL_UNION8) *k = PW_TG_UNION8;
    else if (in->kernel == PW_KERNEL_UNION4) *k = PW_TG_UNION4;
    else return 0; /* per-query: no regroup, no metadata */
    if (in->window == 64) *w = PW_TG_W64;
    else if (in->window == 128) *w = PW_TG_W128;
    else return 0;
    if (in->precision == PW_PRECISION_FP8) *factor = 1.0;
    else if (in->precision == PW_PRECISION_FP8X2) *factor = m->fp8x2_factor;
    else return 0;
    return 1;
}

/* Regroup windows of the call, over every KV head: Hkv (ceil(N / W) + R - 1). */
static double guard_windows(const pw_time_guard_inputs_t *in)
{
    const int64_t per_head = (in->num_tokens + in->window - 1) / in->window +
                             (in->num_requests > 1 ? in->num_requests - 1 : 0);
    return (double)per_head * (double)in->num_kv_heads;
}

int pw_time_guard(const pw_time_guard_inputs_t *in, const pw_time_guard_model_t *m,
                  double *saving_us, double *cost_us)
{
    if (saving_us) *saving_us = 0.0;
    if (cost_us) *cost_us = 0.0;
    int k, w;
    double factor;
    if (!guard_indices(in, m, &k, &w, &factor)) return 0;

    const double rows = (double)in->num_tokens * (double)in->num_kv_heads;
    const double saving = m->rate_ns_per_row[k][w] * factor * (rows - m->rows0[k][w]) / 1000.0;
    double cost = m->fixed_us[w] + m->per_window_us[w] * guard_windows(in);
    if (in->max_pages_per_request > m->long_max_pages[w]) cost *= m->hash_factor;
    if (saving_us) *saving_us = saving;
    if (cost_us) *cost_us = cost;
    return saving > cost + m->margin_us;
}

int pw_time_guard_wide(const pw_time_guard_wide_inputs_t *in, const pw_time_guard_model_t *m,
                       const pw_time_guard_wide_model_t *wide, double *saving_us, double *cost_us)
{
    if (saving_us) *saving_us = 0.0;
    if (cost_us) *cost_us = 0.0;
    if (!in || !m || !wide) return 0;
    int kd;
    if (in->topk == 32) kd = PW_TG_K32;
    else if (in->topk == 64) kd = PW_TG_K64;
    else return 0;
    int k, w;
    double factor;
    if (!guard_indices(&in->base, m, &k, &w, &factor)) return 0; /* as pw_time_guard */
    /* The K = 16 formula with the wide model's own saving constants (time_guard.h). */
    pw_time_guard_model_t base = *m;
    for (int i = 0; i < PW_TG_KERNELS; i++)
        for (int j = 0; j < PW_TG_WINDOWS; j++) {
            base.rate_ns_per_row[i][j] = wide->saving_rate_ns_per_row[i][j];
            base.rows0[i][j] = wide->saving_rows0[i][j];
        }
    base.fp8x2_factor = wide->saving_fp8x2_factor;
    double saving16 = 0.0;
    pw_time_guard(&in->base, &base, &saving16, NULL);
    const double windows = guard_windows(&in->base);
    const int hash = in->base.max_pages_per_request > m->direct_max_pages[w];
    const double per_wave = hash ? wide->hash_wave_windows[kd][w] : wide->wave_windows[kd][w];
    const double waves = per_wave > 0.0 && windows > per_wave ? windows / per_wave : 1.0;
    const double saving = wide->saving_factor[w] * saving16;
    const double cost = (hash ? wide->hash_cost_us[kd][w] : wide->cost_us[kd][w]) * waves;
    if (saving_us) *saving_us = saving;
    if (cost_us) *cost_us = cost;
    return saving > cost + m->margin_us;
}

int32_t pw_time_guard_window(const pw_time_guard_inputs_t *in, int32_t topk, const pw_time_guard_model_t *m,
                             const pw_time_guard_wide_model_t *wide)
{
    if (!in || (topk > 16 && topk != 32 && topk != 64)) return 128;
    static const int32_t windows[2] = {64, 128};
    double net[2] = {0.0, 0.0};
    int can[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        pw_time_guard_inputs_t at = *in;
        at.window = windows[i];
        int k, w;
        double factor, saving = 0.0, cost = 0.0;
        if (!guard_indices(&at, m, &k, &w, &factor)) continue;
        if (topk <= 16) {
            pw_time_guard(&at, m, &saving, &cost);
        } else {
            const pw_time_guard_wide_inputs_t wi = {at, topk};
            if (!wide) continue;
            pw_time_guard_wide(&wi, m, wide, &saving, &cost);
        }
        can[i] = 1;
        net[i] = saving - cost;
    }
    return can[0] && (!can[1] || net[0] > net[1]) ? 64 : 128;
}
