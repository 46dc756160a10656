/* CPU tests of the time guard behind PW_REGROUP_AUTO (src/time_guard.c) and of
 * pw_plan_info, which shows a plan's choice: the model's formula and thresholds on a
 * hand-made model, each input's effect, the library's constants against the measured
 * table they were fitted to, and the plan's use of the decision.
 *
 * Usage: test_time_guard [--seed N] */
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../src/time_guard.h" /* internal: the pure decision function and its model */
#include "testutil.h"

static uint64_t g_seed;

/* A model with round numbers, so the expected figures can be written down. */
static pw_time_guard_model_t round_model(void)
{
    pw_time_guard_model_t m;
    memset(&m, 0, sizeof m);
    for (int k = 0; k < PW_TG_KERNELS; k++)
        for (int w = 0; w < PW_TG_WINDOWS; w++) {
            m.rate_ns_per_row[k][w] = (k == PW_TG_UNION8 ? 10.0 : 8.0) * (w == PW_TG_W64 ? 0.5 : 1.0);
            m.rows0[k][w] = 1000.0;
        }
    m.fp8x2_factor = 1.5;
    m.fixed_us[PW_TG_W64] = 5.0;
    m.fixed_us[PW_TG_W128] = 10.0;
    m.per_window_us[PW_TG_W64] = 0.5;
    m.per_window_us[PW_TG_W128] = 0.25;
    m.hash_factor = 2.0;
    m.direct_max_pages[PW_TG_W64] = 4096;
    m.direct_max_pages[PW_TG_W128] = 2048;
    m.long_max_pages[PW_TG_W64] = 28672;
    m.long_max_pages[PW_TG_W128] = 14336;
    m.margin_us = 1.0;
    return m;
}

/* The wide model's K = 16 saving constants set to m's (its saving is then factor x
 * pw_time_guard's saving under m). */
static void wide_saving_of(pw_time_guard_wide_model_t *wm, const pw_time_guard_model_t *m)
{
    for (int k = 0; k < PW_TG_KERNELS; k++)
        for (int w = 0; w < PW_TG_WINDOWS; w++) {
            wm->saving_rate_ns_per_row[k][w] = m->rate_ns_per_row[k][w];
            wm->saving_rows0[k][w] = m->rows0[k][w];
        }
    wm->saving_fp8x2_factor = m->fp8x2_factor;
}

static pw_time_guard_inputs_t inputs(int64_t n, int64_t r, int64_t hkv, int64_t v, pw_kernel_t kernel,
                                     pw_precision_t precision, int32_t window)
{
    const pw_time_guard_inputs_t in = {n, r, hkv, v, kernel, precision, window};
    return in;
}

#define assert_close(a, b) assert_true(fabs((a) - (b)) <= 1e-9 * (1.0 + fabs(b)))

/* saving = rate * factor * (N*Hkv - rows0) / 1000; cost = (fixed + per_window * Hkv *
 * (ceil(N/W) + R - 1)) * (hash factor past the long direct bound). */
static void test_formula(void **state)
{
    (void)state;
    const pw_time_guard_model_t m = round_model();
    double s = -1, c = -1;
    pw_time_guard_inputs_t in = inputs(3000, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
    int pays = pw_time_guard(&in, &m, &s, &c);
    assert_close(s, 10.0 * 2000 / 1000);          /* 20 us */
    assert_close(c, 10.0 + 0.25 * 24);            /* ceil(3000/128) = 24 windows: 16 us */
    assert_int_equal(pays, 1);                    /* 20 > 16 + 1 */
    /* Union4, W64, FP8X2, 3 requests, 2 KV heads, a page table past the W64 long bound */
    in = inputs(3000, 3, 2, 28673, PW_KERNEL_UNION4, PW_PRECISION_FP8X2, 64);
    pays = pw_time_guard(&in, &m, &s, &c);
    assert_close(s, 4.0 * 1.5 * (6000 - 1000) / 1000);     /* 30 us */
    assert_close(c, (5.0 + 0.5 * 2 * (47 + 2)) * 2.0);     /* 108 us */
    assert_int_equal(pays, 0);
    /* NULL outputs are allowed */
    in = inputs(3000, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard(&in, &m, NULL, NULL), 1);
}

/* The threshold is strict: saving == cost + margin keeps identity order. */
static void test_threshold(void **state)
{
    (void)state;
    pw_time_guard_model_t m = round_model();
    m.per_window_us[PW_TG_W128] = 0.0; /* cost = 10 us whatever N */
    double s, c;
    /* saving = 10 * (N - 1000) / 1000 = 11 us at N = 2100 */
    pw_time_guard_inputs_t in = inputs(2100, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard(&in, &m, &s, &c), 0);
    assert_close(s, 11.0);
    assert_close(c, 10.0);
    in.num_tokens = 2101;
    assert_int_equal(pw_time_guard(&in, &m, &s, &c), 1);
    in.num_tokens = 2099;
    assert_int_equal(pw_time_guard(&in, &m, &s, &c), 0);
    /* the margin moves the threshold */
    m.margin_us = 0.5;
    in.num_tokens = 2060; /* saving 10.6 > 10.5 */
    assert_int_equal(pw_time_guard(&in, &m, &s, &c), 1);
    m.margin_us = 0.7;
    assert_int_equal(pw_time_guard(&in, &m, &s, &c), 0);
}

/* Each input moves the decision the way the model says. */
static void test_inputs(void **state)
{
    (void)state;
    const pw_time_guard_model_t m = round_model();
    double s, c, s2, c2;
    /* never: per-query kernel, N = 0, a window other than 64 / 128, bad enums */
    const pw_time_guard_inputs_t never[] = {
        inputs(100000, 1, 1, 512, PW_KERNEL_PER_QUERY, PW_PRECISION_FP8, 128),
        inputs(0, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128),
        inputs(100000, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 96),
        inputs(100000, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 0),
        inputs(100000, 1, 1, 512, (pw_kernel_t)7, PW_PRECISION_FP8, 128),
        inputs(100000, 1, 1, 512, PW_KERNEL_UNION8, (pw_precision_t)5, 128),
        inputs(100000, 1, 0, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128),
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        s = c = -1;
        assert_int_equal(pw_time_guard(&never[i], &m, &s, &c), 0);
        assert_true(s == 0.0 && c == 0.0);
    }
    assert_int_equal(pw_time_guard(NULL, &m, &s, &c), 0);
    assert_int_equal(pw_time_guard(&never[0], NULL, &s, &c), 0);

    /* the hash factor applies past the long direct bound only (14,336 pages at W128, 28,672
     * at W64); between the 32 KB direct bound (2048 / 4096) and it, the long direct path
     * costs what the direct path does */
    pw_time_guard_inputs_t in = inputs(5000, 1, 1, 2048, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
    pw_time_guard(&in, &m, &s, &c);
    in.max_pages_per_request = 2049;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(c2, c);
    in.max_pages_per_request = 14336;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(c2, c);
    in.max_pages_per_request = 14337;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(c2, 2.0 * c);
    assert_close(s2, s);
    in.window = 64;
    in.max_pages_per_request = 4097;
    pw_time_guard(&in, &m, &s, &c);
    in.max_pages_per_request = 28672;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(c2, c);
    in.max_pages_per_request = 28673;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(c2, 2.0 * c);

    /* FP8X2 scales the saving, not the cost */
    in = inputs(5000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128);
    pw_time_guard(&in, &m, &s, &c);
    in.precision = PW_PRECISION_FP8X2;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(s2, 1.5 * s);
    assert_close(c2, c);

    /* requests add windows (R - 1 more partial windows per KV head), not rows */
    in = inputs(5000, 1, 1, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
    pw_time_guard(&in, &m, &s, &c);
    in.num_requests = 9;
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(s2, s);
    assert_close(c2 - c, 0.25 * 8);

    /* KV heads multiply rows and windows */
    in = inputs(5000, 1, 3, 512, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
    pw_time_guard(&in, &m, &s2, &c2);
    assert_close(s2, 10.0 * (15000 - 1000) / 1000);
    assert_close(c2, 10.0 + 0.25 * 3 * 40);

    /* monotone in N at fixed shape (random N, printed seed): once it pays, more rows pay */
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    const pw_time_guard_model_t *lib = pw_time_guard_model();
    for (int trial = 0; trial < 200; trial++) {
        const int64_t n = pw_rng_range(&rng, 1, 200000);
        const int64_t hkv = pw_rng_range(&rng, 1, 8), r = pw_rng_range(&rng, 1, 16);
        const int32_t w = pw_rng_range(&rng, 0, 1) ? 64 : 128;
        const pw_kernel_t k = pw_rng_range(&rng, 0, 1) ? PW_KERNEL_UNION8 : PW_KERNEL_UNION4;
        const pw_precision_t prec = pw_rng_range(&rng, 0, 1) ? PW_PRECISION_FP8 : PW_PRECISION_FP8X2;
        pw_time_guard_inputs_t a = inputs(n, r, hkv, 512, k, prec, w), b = a;
        b.num_tokens = n * 2;
        if (pw_time_guard(&a, lib, NULL, NULL)) assert_int_equal(pw_time_guard(&b, lib, NULL, NULL), 1);
        pw_time_guard_inputs_t x2 = a;
        x2.precision = PW_PRECISION_FP8X2;
        if (lib->fp8x2_factor >= 1.0 && pw_time_guard(&a, lib, NULL, NULL))
            assert_int_equal(pw_time_guard(&x2, lib, NULL, NULL), 1);
    }
}

/* The library's constants reproduce the signs of the table they were fitted to (issue 13,
 * H200 2026-12-01, Union8 FP8 guarded W128, one request, one KV head: S_net = T0 -
 * T_online). When a refit with a new attention kernel changes these, update the table
 * from the new bench JSON (bench/fit_time_guard.py prints it). */
static void test_library_constants(void **state)
{
    (void)state;
    const struct {
        int32_t n, context; /* queries, KV length (48K prefix + n, or the stated context) */
        int regroup_paid;   /* measured S_net > 0 */
    } table[] = {
        {15272, 65536, 1},         {16384, 49152 + 16384, 1}, {65536, 49152 + 65536, 1},
        {4096, 49152 + 4096, 0},   {1024, 49152 + 1024, 0},   {4096, 65536, 0},
        {4096, 262144, 0},         {4096, 1048576, 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const int64_t pages = (table[i].context + 127) / 128;
        const pw_time_guard_inputs_t in =
            inputs(table[i].n, 1, 1, pages, PW_KERNEL_UNION8, PW_PRECISION_FP8, 128);
        double s, c;
        const int pays = pw_time_guard(&in, pw_time_guard_model(), &s, &c);
        print_message("N=%d context=%d: saving %.1f us, cost %.1f us -> %s (measured: %s)\n", table[i].n,
                      table[i].context, s, c, pays ? "regroup" : "identity",
                      table[i].regroup_paid ? "regroup paid" : "regroup lost");
        assert_int_equal(pays, table[i].regroup_paid);
    }
    /* The default kernel (Union4, FP8X2) on the scaling set, H200 2026-12-03 (twenty-fourth
     * session, bench/NOTES.md): 4,096 queries at a 1M-token context (8,192 pages, the long
     * direct path) paid +9.5 us, 2,048 at 48K lost 5.5 us. */
    const struct {
        int32_t n, pages, regroup_paid;
    } union4[] = {{4096, 8192, 1}, {2048, 400, 0}};
    for (size_t i = 0; i < sizeof union4 / sizeof union4[0]; i++) {
        const pw_time_guard_inputs_t in =
            inputs(union4[i].n, 1, 1, union4[i].pages, PW_KERNEL_UNION4, PW_PRECISION_FP8X2, 128);
        assert_int_equal(pw_time_guard(&in, pw_time_guard_model(), NULL, NULL), union4[i].regroup_paid);
    }
}

static pw_problem_t problem_of(int32_t n, int32_t r, int32_t hkv, int32_t pages)
{
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = n;
    p.num_requests = r;
    p.num_kv_heads = hkv;
    p.max_pages_per_request = pages;
    p.num_cache_pages = (int64_t)pages * r;
    return p;
}

/* The plan's choice (pw_plan_info) is the guard's, per precision; AUTO is the default. */
static void test_plan_info(void **state)
{
    (void)state;
    const pw_plan_config_t defaults = PW_PLAN_CONFIG_INIT;
    assert_int_equal(defaults.regroup, PW_REGROUP_AUTO);
    pw_plan_t *plan = NULL;
    pw_plan_info_t info = PW_PLAN_INFO_INIT;

    /* A-hot's shape regroups, a 1,024-query chunk does not */
    pw_problem_t p = problem_of(15272, 1, 1, 512);
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    assert_int_equal(info.configured, PW_REGROUP_AUTO);
    assert_int_equal(info.regroup, PW_REGROUP_GUARDED);
    assert_int_equal(info.window, 128);
    assert_int_equal(info.kernel, PW_KERNEL_UNION4);
    const pw_time_guard_inputs_t in = {15272, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128};
    double s, c;
    pw_time_guard(&in, pw_time_guard_model(), &s, &c);
    assert_close(info.saving_us, s);
    assert_close(info.cost_us, c);
    assert_close(info.margin_us, pw_time_guard_model()->margin_us);
    assert_int_equal(info.regroup_group_size, 4); /* Union4 regroups for 4-query unions */
    /* A caller built against the header before regroup_group_size: its fields, not that one. */
    pw_plan_info_t old = PW_PLAN_INFO_INIT;
    old.struct_size = (uint32_t)offsetof(pw_plan_info_t, regroup_group_size);
    old.regroup_group_size = -7;
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &old));
    assert_int_equal(old.regroup, PW_REGROUP_GUARDED);
    assert_int_equal(old.struct_size, offsetof(pw_plan_info_t, regroup_group_size));
    assert_int_equal(old.regroup_group_size, -7);
    /* ... and one built against the header before vt_prepass: regroup_group_size, not the rest. */
    pw_plan_info_t v2 = PW_PLAN_INFO_INIT;
    v2.struct_size = (uint32_t)offsetof(pw_plan_info_t, vt_prepass);
    v2.vt_prepass = v2.dense_tile = -7;
    v2.vt_capacity = -7;
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &v2));
    assert_int_equal(v2.struct_size, offsetof(pw_plan_info_t, vt_prepass));
    assert_int_equal(v2.regroup_group_size, 4);
    assert_int_equal(v2.vt_prepass, -7);
    assert_int_equal(v2.dense_tile, -7);
    assert_int_equal(v2.vt_capacity, -7);
    /* A-hot's shape at G = 16: the pre-pass (the rule), no dense tile, C = min(R x max_pages,
     * N x K / 64, 2048) = 512 tiles. */
    assert_int_equal(info.vt_prepass, 1);
    assert_int_equal(info.dense_tile, 0);
    assert_int_equal(info.vt_capacity, 512);
    old.struct_size = (uint32_t)offsetof(pw_plan_info_t, regroup_group_size) - 1;
    assert_int_equal(pw_plan_info(plan, PW_PRECISION_FP8, &old), PW_ERROR_INVALID_ARGUMENT);
    pw_plan_destroy(plan);
    /* Union8, or the 8-query objective: g = 8 */
    {
        pw_plan_config_t c8 = PW_PLAN_CONFIG_INIT;
        c8.kernel = PW_KERNEL_UNION8;
        assert_pw_ok(pw_plan_create(&p, &c8, &plan));
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
        assert_int_equal(info.regroup, PW_REGROUP_GUARDED);
        assert_int_equal(info.regroup_group_size, 8);
        pw_plan_destroy(plan);
        c8 = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
        c8.flags = PW_PLAN_REGROUP_GROUPS_OF_8;
        assert_pw_ok(pw_plan_create(&p, &c8, &plan));
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
        assert_int_equal(info.regroup_group_size, 8);
        pw_plan_destroy(plan);
    }
    /* G = 8 on the V^T pre-pass (the rule runs it at A-hot's shape): the dense tile walks
     * 8-query unions, so g = 8; without the pre-pass (the padded tile's halves) g = 4. */
    {
        pw_problem_t p8 = p;
        p8.q_heads_per_kv = 8;
        const uint32_t flags[3] = {0u, PW_PLAN_VT_PREPASS, PW_PLAN_NO_VT_PREPASS};
        const int32_t expect[3] = {8, 8, 4};
        for (int k = 0; k < 3; k++) {
            pw_plan_config_t cg = PW_PLAN_CONFIG_INIT;
            cg.regroup = PW_REGROUP_GUARDED; /* regroup whatever the time guard says */
            cg.flags = flags[k];
            assert_pw_ok(pw_plan_create(&p8, &cg, &plan));
            assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
            assert_int_equal(info.regroup, PW_REGROUP_GUARDED);
            assert_int_equal(info.regroup_group_size, expect[k]);
            assert_int_equal(info.vt_prepass, k < 2);
            assert_int_equal(info.dense_tile, k < 2); /* G = 8 on the pre-pass */
            assert_int_equal(info.vt_capacity > 0, k < 2);
            pw_plan_destroy(plan);
        }
        /* G = 4 on the pre-pass: the dense tile of 8-query group pairs, also g = 8; AUTO
         * regroups there as the time guard says (it pays at this shape), as at G = 8. */
        pw_problem_t p4 = p;
        p4.q_heads_per_kv = 4;
        for (int k = 0; k < 3; k++) {
            for (int autom = 0; autom < 2; autom++) {
                pw_plan_config_t cg = PW_PLAN_CONFIG_INIT;
                cg.regroup = autom ? PW_REGROUP_AUTO : PW_REGROUP_GUARDED;
                cg.flags = flags[k];
                assert_pw_ok(pw_plan_create(&p4, &cg, &plan));
                for (int x2 = 0; x2 < 2; x2++) {
                    assert_pw_ok(pw_plan_info(plan, x2 ? PW_PRECISION_FP8X2 : PW_PRECISION_FP8, &info));
                    assert_int_equal(info.regroup, PW_REGROUP_GUARDED);
                    assert_int_equal(info.regroup_group_size, expect[k]);
                    assert_int_equal(info.dense_tile, k < 2);
                }
                pw_plan_destroy(plan);
            }
        }
        pw_plan_config_t cg = PW_PLAN_CONFIG_INIT; /* G = 16 keeps g = 4 with the pre-pass */
        cg.regroup = PW_REGROUP_GUARDED;
        cg.flags = PW_PLAN_VT_PREPASS;
        assert_pw_ok(pw_plan_create(&p, &cg, &plan));
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
        assert_int_equal(info.regroup_group_size, 4);
        pw_plan_destroy(plan);
    }

    p = problem_of(1024, 1, 1, 512);
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);
    assert_int_equal(info.regroup_group_size, 0); /* no regroup in the call */
    assert_int_equal(info.vt_prepass, 0);          /* 1,024 queries: below the rule */
    assert_int_equal(info.vt_capacity, 0);
    assert_true(info.saving_us < info.cost_us + info.margin_us);
    /* Identity order in both precisions: the AUTO plan is the identity plan (window 0, the
     * same group slots and workspace), so its calls are the identity plan's launches. */
    assert_int_equal(info.window, 0);
    {
        pw_plan_info_t x2 = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &x2));
        assert_int_equal(x2.regroup, PW_REGROUP_IDENTITY);
        pw_plan_config_t ci = PW_PLAN_CONFIG_INIT;
        ci.regroup = PW_REGROUP_IDENTITY;
        pw_plan_t *identity = NULL;
        assert_pw_ok(pw_plan_create(&p, &ci, &identity));
        size_t wa = 0, wi = 1;
        assert_pw_ok(pw_plan_workspace_size(plan, &wa));
        assert_pw_ok(pw_plan_workspace_size(identity, &wi));
        assert_int_equal(wa, wi);
        pw_grouping_t ga, gi;
        assert_pw_ok(pw_plan_workspace_views(plan, (void *)(uintptr_t)4096, SIZE_MAX, NULL, NULL, &ga));
        assert_pw_ok(pw_plan_workspace_views(identity, (void *)(uintptr_t)4096, SIZE_MAX, NULL, NULL, &gi));
        assert_int_equal(ga.window, gi.window);
        assert_int_equal(ga.group_size, gi.group_size);
        pw_plan_destroy(identity);
    }
    pw_plan_destroy(plan);

    /* a size where FP8X2 (larger saving) regroups and FP8 does not, found with the
     * library's model, and the plan agrees for both precisions */
    int32_t flip = -1;
    for (int32_t n = 1024; n <= 65536 && flip < 0; n += 64) {
        const pw_time_guard_inputs_t a = {n, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128};
        pw_time_guard_inputs_t b = a;
        b.precision = PW_PRECISION_FP8X2;
        if (!pw_time_guard(&a, pw_time_guard_model(), NULL, NULL) && pw_time_guard(&b, pw_time_guard_model(), NULL, NULL))
            flip = n;
    }
    if (pw_time_guard_model()->fp8x2_factor > 1.0) {
        assert_true(flip > 0);
        p = problem_of(flip, 1, 1, 512);
        pw_plan_config_t w128 = PW_PLAN_CONFIG_INIT; /* the flip was found at W128 */
        w128.window = 128;
        assert_pw_ok(pw_plan_create(&p, &w128, &plan));
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
        assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
        assert_int_equal(info.regroup, PW_REGROUP_GUARDED);
        assert_int_equal(info.window, 128); /* one precision regroups: the plan keeps W */
        pw_plan_destroy(plan);
    }

    /* always / never / no regroup in the call */
    p = problem_of(1024, 1, 1, 512);
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.regroup = PW_REGROUP_GREEDY;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    assert_int_equal(info.regroup, PW_REGROUP_GREEDY); /* always, even where it loses */
    assert_true(info.cost_us > 0);
    pw_plan_destroy(plan);
    p = problem_of(65536, 1, 1, 512);
    cfg.regroup = PW_REGROUP_IDENTITY;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    assert_int_equal(info.regroup, PW_REGROUP_IDENTITY); /* never, even where it would pay */
    assert_int_equal(info.window, 0);
    pw_plan_destroy(plan);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.kernel = PW_KERNEL_PER_QUERY;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);
    assert_true(info.saving_us == 0.0 && info.cost_us == 0.0);
    pw_plan_destroy(plan);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_CALLER_PERM;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);

    /* errors */
    assert_int_equal(pw_plan_info(NULL, PW_PRECISION_FP8, &info), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_plan_info(plan, PW_PRECISION_FP8, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_plan_info(plan, (pw_precision_t)3, &info), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "precision"));
    info.struct_size = 8;
    assert_int_equal(pw_plan_info(plan, PW_PRECISION_FP8, &info), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "struct_size"));
    assert_non_null(strstr(pw_last_error(), "at least")); /* names the oldest size accepted */
    pw_plan_destroy(plan);

    /* AUTO is a plan mode only: the grouping functions reject it */
    pw_grouping_t g = PW_GROUPING_INIT;
    g.mode = PW_REGROUP_AUTO;
    const int32_t cu[2] = {0, 8}, zero[1] = {0}, kv[1] = {8};
    int32_t ids[8 * 16], perm[8];
    for (int i = 0; i < 8 * 16; i++) ids[i] = -1;
    pw_problem_t small = problem_of(8, 1, 1, 1);
    const pw_requests_t rq = {cu, zero, kv, NULL, 0};
    assert_int_equal(pw_ref_regroup(&small, ids, &rq, &g, perm), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "mode"));
}

/* Kd = 32 / 64 (pw_time_guard_wide): saving = factor * the K = 16 saving; cost = the wide
 * kernel's cost for one wave of CTAs (the hash-set kernel's past the direct bound), times
 * windows / wave_windows past one wave; the plan uses it under AUTO. */
static void test_wide_topk(void **state)
{
    (void)state;
    const pw_time_guard_model_t m = round_model();
    pw_time_guard_wide_model_t wm;
    memset(&wm, 0, sizeof wm);
    wm.cost_us[PW_TG_K32][PW_TG_W64] = 4.0;
    wm.cost_us[PW_TG_K32][PW_TG_W128] = 6.0;
    wm.cost_us[PW_TG_K64][PW_TG_W64] = 8.0;
    wm.cost_us[PW_TG_K64][PW_TG_W128] = 12.0;
    wm.hash_cost_us[PW_TG_K32][PW_TG_W128] = 30.0;
    wm.hash_cost_us[PW_TG_K64][PW_TG_W64] = 50.0;
    for (int kd = 0; kd < PW_TG_WIDE_KS; kd++) {
        wm.wave_windows[kd][PW_TG_W64] = 40.0;
        wm.wave_windows[kd][PW_TG_W128] = 20.0;
        wm.hash_wave_windows[kd][PW_TG_W64] = 10.0; /* the hash-set kernel: fewer CTAs per SM */
        wm.hash_wave_windows[kd][PW_TG_W128] = 16.0;
    }
    wm.saving_factor[PW_TG_W64] = wm.saving_factor[PW_TG_W128] = 0.5;
    wide_saving_of(&wm, &m);
    double s, c, s16, c16;
    /* 3000 rows, W128: 24 windows (> 20: 1.2 waves); K = 16 saving 8 * 2000 / 1000 = 16 us */
    pw_time_guard_wide_inputs_t in = {inputs(3000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128), 32};
    assert_int_equal(pw_time_guard_wide(&in, &m, &wm, &s, &c), 0);
    pw_time_guard(&in.base, &m, &s16, &c16);
    assert_close(s, 0.5 * s16);
    assert_close(s, 8.0);
    assert_close(c, 6.0 * 24.0 / 20.0); /* 7.2 us: 8 > 7.2 but not > 7.2 + margin 1 */
    in.base.precision = PW_PRECISION_FP8X2; /* saving x1.5: 12 > 8.2 */
    assert_int_equal(pw_time_guard_wide(&in, &m, &wm, &s, &c), 1);
    assert_close(s, 12.0);
    /* one wave or less: the fit cost itself; K = 64 its own cost */
    in = (pw_time_guard_wide_inputs_t){inputs(2500, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128), 64};
    pw_time_guard_wide(&in, &m, &wm, &s, &c);
    assert_close(c, 12.0); /* 20 windows */
    assert_close(s, 0.5 * 8.0 * 1.5);
    /* past the direct bound: the hash-set kernel's cost and waves */
    in = (pw_time_guard_wide_inputs_t){inputs(2560, 1, 1, 2049, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128), 32};
    pw_time_guard_wide(&in, &m, &wm, &s, &c);
    assert_close(c, 30.0 * 20.0 / 16.0); /* 20 windows, 16 per wave */
    in = (pw_time_guard_wide_inputs_t){inputs(2560, 1, 1, 4097, PW_KERNEL_UNION4, PW_PRECISION_FP8, 64), 64};
    pw_time_guard_wide(&in, &m, &wm, &s, &c);
    assert_close(c, 50.0 * 40.0 / 10.0); /* 40 windows at W64, 10 per wave */
    in.base.max_pages_per_request = 4096;
    pw_time_guard_wide(&in, &m, &wm, &s, &c);
    assert_close(c, 8.0); /* 40 windows: one wave of the masks kernel */
    /* never: Kd other than 32 / 64, and what pw_time_guard rejects */
    const pw_time_guard_wide_inputs_t never[] = {
        {inputs(100000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128), 16},
        {inputs(100000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128), 48},
        {inputs(100000, 1, 1, 512, PW_KERNEL_PER_QUERY, PW_PRECISION_FP8, 128), 32},
        {inputs(100000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 24), 32},
        {inputs(0, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128), 64},
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        s = c = -1;
        assert_int_equal(pw_time_guard_wide(&never[i], &m, &wm, &s, &c), 0);
        assert_true(s == 0.0 && c == 0.0);
    }
    assert_int_equal(pw_time_guard_wide(&never[0], &m, NULL, &s, &c), 0);

    /* The saving reads the wide model's own K = 16 saving constants, not the K = 16
     * model's: a refit of that model (its rate, rows0 and FP8X2 factor) leaves the K > 16
     * saving and choice as they are; the wide model's constants move it. The cost side
     * (the direct bound, the margin) is still the K = 16 model's. */
    in = (pw_time_guard_wide_inputs_t){inputs(3000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8X2, 128), 32};
    double s_before, c_before;
    const int pays_before = pw_time_guard_wide(&in, &m, &wm, &s_before, &c_before);
    pw_time_guard_model_t refit = m;
    for (int k = 0; k < PW_TG_KERNELS; k++)
        for (int w = 0; w < PW_TG_WINDOWS; w++) {
            refit.rate_ns_per_row[k][w] *= 0.25;
            refit.rows0[k][w] = 2900.0;
        }
    refit.fp8x2_factor = 1.0;
    assert_int_equal(pw_time_guard_wide(&in, &refit, &wm, &s, &c), pays_before);
    assert_close(s, s_before);
    assert_close(c, c_before);
    assert_close(s, 12.0);
    pw_time_guard_wide_model_t wm2 = wm;
    wm2.saving_rate_ns_per_row[PW_TG_UNION4][PW_TG_W128] = 4.0; /* half: 6 < 7.2 + 1 */
    assert_int_equal(pw_time_guard_wide(&in, &refit, &wm2, &s, &c), 0);
    assert_close(s, 6.0);
    wm2 = wm;
    wm2.saving_fp8x2_factor = 1.0; /* the FP8X2 factor is the wide model's too: 8 */
    pw_time_guard_wide(&in, &m, &wm2, &s, &c);
    assert_close(s, 8.0);
    wm2 = wm;
    wm2.saving_rows0[PW_TG_UNION4][PW_TG_W128] = 2000.0; /* 0.5 x 8 x 1.5 x 1000 / 1000 = 6 */
    pw_time_guard_wide(&in, &m, &wm2, &s, &c);
    assert_close(s, 6.0);

    /* The library's constants: A-hot's shape (15,272 queries, 504 pages) regroups at
     * K 32 / 64 in both precisions (measured: -3..-7% per call on the H200); a 1,024-query
     * chunk and a 4,096-query one do not (the saving is scaled down for G = 4, the least
     * that was measured); the plan's info shows the same figures. */
    const pw_time_guard_wide_model_t *lib = pw_time_guard_wide_model();
    for (int kd = 32; kd <= 64; kd += 32)
        for (int x2 = 0; x2 < 2; x2++) {
            const pw_precision_t prec = x2 ? PW_PRECISION_FP8X2 : PW_PRECISION_FP8;
            in = (pw_time_guard_wide_inputs_t){inputs(15272, 1, 1, 504, PW_KERNEL_UNION4, prec, 128), kd};
            assert_int_equal(pw_time_guard_wide(&in, pw_time_guard_model(), lib, &s, &c), 1);
            in.base.num_tokens = 1024;
            assert_int_equal(pw_time_guard_wide(&in, pw_time_guard_model(), lib, &s, &c), 0);
            in.base.num_tokens = 4096;
            assert_int_equal(pw_time_guard_wide(&in, pw_time_guard_model(), lib, &s, &c), 0);
            /* a page table sized for 1M-token contexts: the hash-set kernel's cost is assumed,
             * A-hot's rows keep identity order; 65,536 rows regroup at Kd 32 only (Kd 64's
             * cost past one wave exceeds the saving: FP8X2 259.5 < 264.1 us with the
             * forty-third session's constants, where 0.584 x the older saving regrouped) */
            in.base.num_tokens = 15272;
            in.base.max_pages_per_request = 8192;
            assert_int_equal(pw_time_guard_wide(&in, pw_time_guard_model(), lib, &s, &c), 0);
            in.base.num_tokens = 65536;
            assert_int_equal(pw_time_guard_wide(&in, pw_time_guard_model(), lib, &s, &c), kd == 32);
            in.base.max_pages_per_request = 504;
            pw_problem_t p = problem_of(15272, 1, 1, 504);
            p.topk = kd == 32 ? 20 : 64; /* padded to Kd */
            pw_plan_t *plan = NULL;
            assert_pw_ok(pw_plan_create(&p, NULL, &plan));
            pw_plan_info_t info = PW_PLAN_INFO_INIT;
            assert_pw_ok(pw_plan_info(plan, prec, &info));
            assert_int_equal(info.regroup, PW_REGROUP_GUARDED);
            /* at W128: measured faster than W64 at every G, K and precision (13.6-43.1 us per
             * call, H100, forty-third session; the per-window factors follow from that) */
            assert_int_equal(info.window, 128);
            in.base.num_tokens = 15272;
            assert_int_equal(pw_time_guard_window(&in.base, kd, pw_time_guard_model(), lib), 128);
            /* 3,000 pages: past W128's direct bound (2,048; the hash-set kernel's cost) but
             * within W64's (4,096): W64 (a prediction: nothing measured it) */
            in.base.max_pages_per_request = 3000;
            assert_int_equal(pw_time_guard_window(&in.base, kd, pw_time_guard_model(), lib), 64);
            in.base.max_pages_per_request = 504;
            pw_time_guard_wide(&in, pw_time_guard_model(), lib, &s, &c);
            assert_close(info.saving_us, s);
            assert_close(info.cost_us, c);
            pw_plan_destroy(plan);
            p.num_tokens = 2048;
            assert_pw_ok(pw_plan_create(&p, NULL, &plan));
            assert_pw_ok(pw_plan_info(plan, prec, &info));
            assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);
            assert_true(info.cost_us > 0.0 && info.saving_us < info.cost_us);
            pw_plan_destroy(plan);
        }
}

/* PW_WINDOW_AUTO: pw_time_guard_window takes the window of the larger predicted net
 * saving (ties and nothing to compare: 128), and an AUTO plan with the default config
 * groups in that window, with the guard's figures at it. */
static void test_auto_window(void **state)
{
    (void)state;
    pw_time_guard_model_t m = round_model();
    for (int k = 0; k < PW_TG_KERNELS; k++) {
        m.rate_ns_per_row[k][PW_TG_W64] = 4.0;
        m.rate_ns_per_row[k][PW_TG_W128] = 8.0;
    }
    m.fixed_us[PW_TG_W64] = 2.0; /* net(W64) = 4 x - 2, net(W128) = 8 x - 10, x = (N - 1000) / 1000 */
    m.fixed_us[PW_TG_W128] = 10.0;
    m.per_window_us[PW_TG_W64] = m.per_window_us[PW_TG_W128] = 0.0;
    const struct {
        int64_t n;
        pw_precision_t precision;
        int32_t window;
    } cases[] = {
        {1500, PW_PRECISION_FP8, 64},   /* 0 vs -6: W64 (does not pay: the plan keeps identity) */
        {2500, PW_PRECISION_FP8, 64},   /* 4 vs 2 */
        {3000, PW_PRECISION_FP8, 128},  /* 6 vs 6: a tie keeps 128 */
        {5000, PW_PRECISION_FP8, 128},  /* 14 vs 22 */
        {2000, PW_PRECISION_FP8X2, 64}, /* x1.5: 4 vs 2 */
        {3000, PW_PRECISION_FP8X2, 128} /* 10 vs 14 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pw_time_guard_inputs_t in = inputs(cases[i].n, 1, 1, 512, PW_KERNEL_UNION4, cases[i].precision, 77);
        assert_int_equal(pw_time_guard_window(&in, 16, &m, NULL), cases[i].window);
    }
    /* past the long bound the hash factor doubles both costs: 2500 rows, 6 - 4 vs 12 - 20 */
    pw_time_guard_inputs_t in = inputs(2500, 1, 1, 30000, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard_window(&in, 16, &m, NULL), 64);
    /* nothing to compare: 128 */
    in = inputs(2500, 1, 1, 512, PW_KERNEL_PER_QUERY, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard_window(&in, 16, &m, NULL), 128);
    in = inputs(0, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard_window(&in, 16, &m, NULL), 128);
    in = inputs(2500, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard_window(&in, 48, &m, NULL), 128);
    assert_int_equal(pw_time_guard_window(&in, 32, &m, NULL), 128); /* no wide model */
    assert_int_equal(pw_time_guard_window(NULL, 16, &m, NULL), 128);
    /* Kd 32: the wide model's costs (saving: the K = 16 one x 1): 4 x - 3 vs 8 x - 12 */
    pw_time_guard_wide_model_t wm;
    memset(&wm, 0, sizeof wm);
    wm.cost_us[PW_TG_K32][PW_TG_W64] = 3.0;
    wm.cost_us[PW_TG_K32][PW_TG_W128] = 12.0;
    wm.wave_windows[PW_TG_K32][PW_TG_W64] = wm.wave_windows[PW_TG_K32][PW_TG_W128] = 1e9;
    wm.saving_factor[PW_TG_W64] = wm.saving_factor[PW_TG_W128] = 1.0;
    wide_saving_of(&wm, &m);
    in = inputs(2000, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 128);
    assert_int_equal(pw_time_guard_window(&in, 32, &m, &wm), 64); /* 1 vs -4 */
    in.num_tokens = 5000;
    assert_int_equal(pw_time_guard_window(&in, 32, &m, &wm), 128); /* 13 vs 20 */
    /* Each window's saving takes its own factor: 3000 rows, 8 f64 - 3 against 16 f128 - 12:
     * both 1: 5 vs 4 -> W64; W64's at 0.5: 1 vs 4 -> W128; W128's at 0.5 instead: 5 vs -4
     * -> W64. The saving itself: factor[W] x the K = 16 formula with the wide constants. */
    in.num_tokens = 3000;
    assert_int_equal(pw_time_guard_window(&in, 32, &m, &wm), 64);
    wm.saving_factor[PW_TG_W64] = 0.5;
    assert_int_equal(pw_time_guard_window(&in, 32, &m, &wm), 128);
    wm.saving_factor[PW_TG_W64] = 1.0;
    wm.saving_factor[PW_TG_W128] = 0.5;
    assert_int_equal(pw_time_guard_window(&in, 32, &m, &wm), 64);
    wm.saving_factor[PW_TG_W64] = 0.2;
    {
        double s64, c64, s16w, c16w;
        pw_time_guard_wide_inputs_t at64 = {inputs(2500, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8, 64), 32};
        pw_time_guard_wide(&at64, &m, &wm, &s64, &c64);
        /* wm's saving constants are m's (wide_saving_of above): the K = 16 formula is m's */
        pw_time_guard(&at64.base, &m, &s16w, &c16w);
        assert_close(s64, 0.2 * s16w);
        assert_close(s64, 0.2 * 4.0 * 1.5); /* 2500 rows at W64 */
        assert_close(c64, 3.0);
        at64.base.window = 128;
        pw_time_guard_wide(&at64, &m, &wm, &s64, &c64);
        pw_time_guard(&at64.base, &m, &s16w, &c16w);
        assert_close(s64, 0.5 * s16w);
        assert_close(s64, 6.0); /* 0.5 x 8 x 1.5 */
    }

    /* The plan, with the library's constants: the default config groups in the guard's
     * window (FP8X2, the default arithmetic), reports the guard's figures at it in both
     * precisions, and is the identity plan (window 0) where neither precision regroups.
     * The fitted model picks W64 for some chunk sizes (its W64 regroup costs about half of
     * W128's) and W128 for A-hot's. */
    int seen64 = 0, seen128 = 0;
    for (int32_t n = 1024; n <= 32768; n += 512) {
        const pw_problem_t p = problem_of(n, 1, 1, 512);
        pw_plan_t *plan = NULL;
        assert_pw_ok(pw_plan_create(&p, NULL, &plan));
        const pw_time_guard_inputs_t x2 = inputs(n, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8X2, 128);
        const int32_t w = pw_time_guard_window(&x2, 16, pw_time_guard_model(), pw_time_guard_wide_model());
        int any = 0;
        for (int prec = 0; prec < 2; prec++) {
            pw_plan_info_t info = PW_PLAN_INFO_INIT;
            assert_pw_ok(pw_plan_info(plan, (pw_precision_t)prec, &info));
            const pw_time_guard_inputs_t at = inputs(n, 1, 1, 512, PW_KERNEL_UNION4, (pw_precision_t)prec, w);
            double s, c;
            const int pays = pw_time_guard(&at, pw_time_guard_model(), &s, &c);
            assert_int_equal(info.regroup, pays ? PW_REGROUP_GUARDED : PW_REGROUP_IDENTITY);
            assert_close(info.saving_us, s);
            assert_close(info.cost_us, c);
            any |= pays;
            if (prec == PW_PRECISION_FP8X2 && pays) {
                seen64 |= w == 64;
                seen128 |= w == 128;
            }
        }
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
        assert_int_equal(info.window, any ? w : 0);
        pw_plan_destroy(plan);
    }
    assert_true(seen64);
    assert_true(seen128);
    /* A given window is kept; GREEDY / GUARDED take 128 for PW_WINDOW_AUTO */
    const pw_problem_t p = problem_of(3072, 1, 1, 512);
    const pw_time_guard_inputs_t x2 = inputs(3072, 1, 1, 512, PW_KERNEL_UNION4, PW_PRECISION_FP8X2, 128);
    const int32_t w3072 = pw_time_guard_window(&x2, 16, pw_time_guard_model(), pw_time_guard_wide_model());
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    assert_int_equal(cfg.window, PW_WINDOW_AUTO);
    for (int i = 0; i < 4; i++) {
        cfg.regroup = i < 2 ? PW_REGROUP_AUTO : i == 2 ? PW_REGROUP_GREEDY : PW_REGROUP_GUARDED;
        cfg.window = i == 0 ? (w3072 == 64 ? 128 : 64) : PW_WINDOW_AUTO;
        pw_plan_t *plan = NULL;
        assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
        if (info.regroup != PW_REGROUP_IDENTITY)
            assert_int_equal(info.window, i == 0 ? cfg.window : i == 1 ? w3072 : 128);
        if (i >= 2) assert_int_equal(info.window, 128);
        pw_plan_destroy(plan);
    }
}

/* config.max_query_rows: requests of at most 8 rows keep identity order under AUTO (saving
 * 0, the identity plan); longer ones, 0 (not known), and the modes that always regroup are
 * as before. */
static pw_regroup_mode_t mode_of(const pw_problem_t *p, const pw_plan_config_t *cfg, pw_precision_t prec,
                                 int32_t *window, double *saving)
{
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(p, cfg, &plan));
    pw_plan_info_t info = PW_PLAN_INFO_INIT;
    assert_pw_ok(pw_plan_info(plan, prec, &info));
    if (window) *window = info.window;
    if (saving) *saving = info.saving_us;
    pw_plan_destroy(plan);
    return info.regroup;
}

static void test_max_query_rows(void **state)
{
    (void)state;
    const pw_plan_config_t defaults = PW_PLAN_CONFIG_INIT;
    assert_int_equal(defaults.max_query_rows, 0);
    assert_int_equal(pw_abi_query("init pw_plan_config_t.max_query_rows"), 0);
    assert_int_equal(pw_abi_query("PW_PLAN_SHORT_REQUEST_ROWS"), PW_PLAN_SHORT_REQUEST_ROWS);
    assert_int_equal(PW_PLAN_SHORT_REQUEST_ROWS, 8);
    assert_int_equal(pw_abi_query("offsetof pw_plan_config_t.max_query_rows"),
                     (int64_t)offsetof(pw_plan_config_t, max_query_rows));
    /* A-hot's rows in 1,909 requests of 8 rows (15,272 = 1,909 x 8, so every hint from 8
     * up is consistent with the shape): regroups in both precisions without the hint. */
    const pw_problem_t hot = problem_of(15272, 1909, 1, 512);
    pw_problem_t g8 = hot;
    g8.q_heads_per_kv = 8;
    /* 65,536 rows in 32,768 requests of 2: regroups without the hint too (the guard prices
     * its 33,279 windows, which the saving still pays for at this size). One-row requests
     * keep identity order without it as well (a window per row costs more than a row
     * saves), so the hint's 1-row case cannot tell the rule from the guard. */
    const pw_problem_t two_rows = problem_of(65536, 32768, 1, 512);
    const pw_problem_t one_row = problem_of(16384, 16384, 1, 512);
    /* Up to 8 rows per request: identity order in both precisions, whatever the kernel,
     * flags or G (exact up to each call's group size, measured from there to 8). */
    struct {
        const pw_problem_t *p;
        pw_kernel_t kernel;
        uint32_t flags;
        int32_t rows;
        int regroups;
    } cases[] = {
        {&hot, PW_KERNEL_UNION4, 0u, 0, 1},
        {&one_row, PW_KERNEL_UNION4, 0u, 1, 0},
        {&two_rows, PW_KERNEL_UNION4, 0u, 0, 1},
        {&two_rows, PW_KERNEL_UNION4, 0u, 2, 0},
        {&two_rows, PW_KERNEL_UNION4, 0u, 5, 0},
        {&two_rows, PW_KERNEL_UNION4, 0u, 9, 1},
        {&hot, PW_KERNEL_UNION4, 0u, 8, 0},
        {&hot, PW_KERNEL_UNION4, 0u, 9, 1},
        {&hot, PW_KERNEL_UNION4, 0u, 1 << 30, 1},
        {&hot, PW_KERNEL_UNION4, PW_PLAN_NO_REGROUP_BY_TILE, 8, 0},
        {&hot, PW_KERNEL_UNION4, PW_PLAN_FP8X2_STACKED, 8, 0},
        {&hot, PW_KERNEL_UNION4, PW_PLAN_FP8X2_STACKED, 9, 1},
        {&hot, PW_KERNEL_UNION4, PW_PLAN_REGROUP_GROUPS_OF_8, 8, 0},
        {&hot, PW_KERNEL_UNION8, 0u, 8, 0},
        {&hot, PW_KERNEL_UNION8, 0u, 9, 1},
        {&two_rows, PW_KERNEL_PER_QUERY, 0u, 2, 0},
        {&g8, PW_KERNEL_UNION4, 0u, 8, 0},
        {&g8, PW_KERNEL_UNION4, 0u, 9, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.kernel = cases[i].kernel;
        cfg.flags = cases[i].flags;
        cfg.max_query_rows = cases[i].rows;
        int32_t w8 = -1, w82 = -1;
        double s8 = -1.0, s82 = -1.0;
        const pw_regroup_mode_t m8 = mode_of(cases[i].p, &cfg, PW_PRECISION_FP8, &w8, &s8);
        const pw_regroup_mode_t m82 = mode_of(cases[i].p, &cfg, PW_PRECISION_FP8X2, &w82, &s82);
        if ((m8 != PW_REGROUP_IDENTITY) != cases[i].regroups || (m82 != PW_REGROUP_IDENTITY) != cases[i].regroups)
            fail_msg("case %zu (kernel %d, flags 0x%x, max_query_rows %d): FP8 %d, FP8X2 %d; expected %s", i,
                     (int)cases[i].kernel, cases[i].flags, cases[i].rows, (int)m8, (int)m82,
                     cases[i].regroups ? "a regroup" : "identity");
        if (cases[i].kernel == PW_KERNEL_PER_QUERY) continue;
        if (cases[i].regroups) {
            assert_true(s8 > 0.0 && s82 > 0.0);
            assert_int_equal(w8, w82);
        } else {
            assert_true(s8 == 0.0 && s82 == 0.0); /* nothing to save */
            assert_int_equal(w8, 0);              /* the identity plan */
        }
    }
    /* The identity plan's workspace, launch for launch. */
    {
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.max_query_rows = 8;
        pw_plan_t *a = NULL, *b = NULL;
        size_t wa = 0, wb = 0;
        assert_pw_ok(pw_plan_create(&hot, &cfg, &a));
        cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
        cfg.regroup = PW_REGROUP_IDENTITY;
        assert_pw_ok(pw_plan_create(&hot, &cfg, &b));
        assert_pw_ok(pw_plan_workspace_size(a, &wa));
        assert_pw_ok(pw_plan_workspace_size(b, &wb));
        assert_int_equal(wa, wb);
        pw_plan_destroy(a);
        pw_plan_destroy(b);
    }
    /* Read by AUTO only: GUARDED and GREEDY regroup whatever it says (a regroup plan: the
     * guard's saving reported, a window taken). */
    for (int m = 1; m <= 2; m++) {
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.regroup = m == 1 ? PW_REGROUP_GUARDED : PW_REGROUP_GREEDY;
        cfg.max_query_rows = 2;
        for (int prec = 0; prec < 2; prec++) {
            int32_t w = 0;
            double saving = 0.0;
            assert_int_equal(mode_of(&two_rows, &cfg, (pw_precision_t)prec, &w, &saving), cfg.regroup);
            assert_true(saving > 0.0);
            assert_true(w == 64 || w == 128);
        }
    }
    /* A hint the shape contradicts (N rows in R requests of at most max_query_rows: N <= R x
     * max_query_rows) is refused in every mode, naming the field and the shape; at the
     * bound it is accepted. */
    for (int m = 0; m < 3; m++) {
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.regroup = m == 0 ? PW_REGROUP_AUTO : m == 1 ? PW_REGROUP_GUARDED : PW_REGROUP_IDENTITY;
        pw_plan_t *plan = NULL;
        cfg.max_query_rows = 7; /* 1,909 x 7 = 13,363 < 15,272 */
        assert_int_equal(pw_plan_create(&hot, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
        assert_null(plan);
        assert_non_null(strstr(pw_last_error(), "max_query_rows is 7"));
        assert_non_null(strstr(pw_last_error(), "N = 15272"));
        const pw_problem_t one = problem_of(2, 1, 1, 4); /* 2 rows in one request */
        cfg.max_query_rows = 1;
        assert_int_equal(pw_plan_create(&one, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
        cfg.max_query_rows = 2;
        assert_pw_ok(pw_plan_create(&one, &cfg, &plan));
        pw_plan_destroy(plan);
        plan = NULL;
        const pw_problem_t empty = problem_of(0, 1, 1, 4); /* N = 0: any hint holds */
        cfg.max_query_rows = 1;
        assert_pw_ok(pw_plan_create(&empty, &cfg, &plan));
        pw_plan_destroy(plan);
    }
    /* < 0 is refused, naming the field. */
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    pw_plan_t *plan = NULL;
    cfg.max_query_rows = -1;
    assert_int_equal(pw_plan_create(&hot, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    assert_null(plan);
    assert_non_null(strstr(pw_last_error(), "max_query_rows"));
    /* A config of the size before max_query_rows (callers built against the earlier header)
     * is read with 0: the field past its size is not read. */
    cfg.max_query_rows = 1;
    cfg.struct_size = (uint32_t)offsetof(pw_plan_config_t, max_query_rows);
    assert_int_equal(mode_of(&two_rows, &cfg, PW_PRECISION_FP8, NULL, NULL), PW_REGROUP_GUARDED);
    cfg.max_query_rows = -1;
    assert_int_equal(mode_of(&two_rows, &cfg, PW_PRECISION_FP8X2, NULL, NULL), PW_REGROUP_GUARDED);
    cfg.struct_size -= 2; /* neither size */
    assert_int_equal(pw_plan_create(&hot, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_inputs),
        cmocka_unit_test(test_library_constants),
        cmocka_unit_test(test_plan_info),
        cmocka_unit_test(test_wide_topk),
        cmocka_unit_test(test_auto_window),
        cmocka_unit_test(test_max_query_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
